#include "server/protocols/native/infill.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "server/common/generation_request.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

void append(std::vector<Token>& to, const std::vector<Token>& tokens) {
    to.insert(to.end(), tokens.begin(), tokens.end());
}

class InfillParts {
  public:
    explicit InfillParts(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

    std::vector<Token> text(const std::string& text, bool parse_special = false) const {
        auto tokens =
            tokenizer_.encode(text, {.add_special = false, .parse_special = parse_special});
        if (!tokens) throw HttpException{http_error(tokens.error())};
        return std::move(*tokens);
    }

    // Text, or a list of text and token ids.
    std::vector<Token> mixed(const json& body, const char* name) const {
        const json* v = optional_field(body, name);
        if (!v)
            reject_field(name, fmt::format("'{}' is required", name), "missing_required_parameter");
        if (v->is_string()) return text(v->get<std::string>());
        if (!v->is_array())
            reject_field(name, "text, or a list of text and token ids", "invalid_type");
        std::vector<Token> out;
        for (const json& e : *v) {
            if (e.is_string())
                append(out, text(e.get<std::string>()));
            else
                out.push_back(
                    static_cast<Token>(integer_field(e, name, 0, tokenizer_.vocab_size() - 1)));
        }
        return out;
    }

    // The project's other files, each after the separator and its name (or a plain-text
    // snippet marker where the model has no separator).
    std::vector<Token> extra(const json& body, const InfillTokens& fim) const {
        std::vector<Token> out;
        if (fim.repository != no_token) {
            out.push_back(fim.repository);
            append(out, text("myproject\n"));
        }
        const json* chunks = optional_field(body, "input_extra");
        if (chunks && !chunks->is_array())
            reject_field("input_extra", "a list of {\"filename\": ..., \"text\": ...}",
                         "invalid_type");
        for (std::size_t i = 0; chunks && i < chunks->size(); ++i) {
            const json& chunk = (*chunks)[i];
            const std::string where = fmt::format("input_extra[{}]", i);
            if (!chunk.is_object()) reject_field(where, "must be an object", "invalid_type");
            const std::string content = required_string(chunk, "text", where);
            const json* name = optional_field(chunk, "filename");
            const std::string filename = name ? string_field(*name, where + ".filename") : "tmp";
            if (fim.separator != no_token) {
                out.push_back(fim.separator);
                append(out, text(filename + "\n"));
            } else {
                append(out, text("\n\n--- snippet ---\n\n"));
            }
            append(out, text(content));
        }
        if (fim.separator != no_token) {
            out.push_back(fim.separator);
            append(out, text("filename\n"));
        }
        return out;
    }

  private:
    const Tokenizer& tokenizer_;
};

}  // namespace

std::vector<Token> infill_prompt(const json& body, const Tokenizer& tokenizer,
                                 const InfillSizes& sizes) {
    const InfillTokens fim = tokenizer.infill_tokens();
    if (!fim.available())
        throw HttpException{protocol_error(
            501, "not_supported_error",
            "infill is not supported by this model: it has no fill-in-the-middle tokens")};
    const InfillParts parts(tokenizer);
    std::vector<Token> prefix = parts.mixed(body, "input_prefix");
    std::vector<Token> suffix = parts.mixed(body, "input_suffix");
    std::vector<Token> prompt;
    if (const json* p = optional_field(body, "prompt"))
        prompt = parts.text(string_field(*p, "prompt"), true);
    const std::vector<Token> extra = parts.extra(body, fim);
    // The code around the gap fits one decode call, three parts before it to one after; the
    // extra files take what the context leaves beside it and the reply, their ends first.
    const auto quarter = static_cast<std::size_t>(std::max(0, sizes.n_batch / 4));
    const std::size_t keep_prefix = std::min(prefix.size(), 3 * quarter);
    const std::size_t keep_suffix =
        std::min(suffix.size(), quarter > 2 + prompt.size() ? quarter - 2 - prompt.size() : 0);
    const std::size_t keep_extra = std::min<std::size_t>(
        extra.size(), std::max(0, sizes.n_ctx - sizes.n_batch - 2 * sizes.n_predict));
    std::vector<Token> out;
    if (const Token bos = tokenizer.added_bos(); bos != no_token) out.push_back(bos);
    out.insert(out.end(), extra.end() - static_cast<std::ptrdiff_t>(keep_extra), extra.end());
    out.push_back(fim.prefix);
    out.insert(out.end(), prefix.end() - static_cast<std::ptrdiff_t>(keep_prefix), prefix.end());
    append(out, prompt);
    out.push_back(fim.suffix);
    out.insert(out.end(), suffix.begin(),
               suffix.begin() + static_cast<std::ptrdiff_t>(keep_suffix));
    out.push_back(fim.middle);
    return out;
}

}  // namespace llamapp::detail
