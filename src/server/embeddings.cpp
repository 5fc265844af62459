// /v1/embeddings: a second context with embeddings on, created on first use and used by one
// request at a time (embedding is one decode per batch, not worth a scheduler).
#include <fmt/core.h>

#include <cmath>
#include <cstring>

#include "server/server_state.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

std::string base64(const std::uint8_t* data, std::size_t n) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (std::size_t i = 0; i < n; i += 3) {
        const std::uint32_t a = data[i];
        const std::uint32_t b = i + 1 < n ? data[i + 1] : 0;
        const std::uint32_t c = i + 2 < n ? data[i + 2] : 0;
        const std::uint32_t v = (a << 16) | (b << 8) | c;
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        out += i + 2 < n ? alphabet[v & 63] : '=';
    }
    return out;
}

// OpenAI's `dimensions`: keep the first d values and scale back to unit length.
void truncate_and_normalize(std::vector<float>& v, std::size_t d) {
    v.resize(d);
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0)
        for (float& x : v) x = static_cast<float>(x / norm);
}

}  // namespace

void ServerState::embeddings(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(*this);  // from the start: a drain that begins now waits for this request
    const json body = parse_body(req.body);
    if (const json* m = optional_field(body, "model")) {
        const std::string name = string_field(*m, "model");
        if (name != model_id)
            throw HttpException{{404, "invalid_request_error", "model_not_found", "model",
                                 fmt::format("the model '{}' does not exist", name)}};
    }
    const json* input = optional_field(body, "input");
    if (!input)
        throw HttpException{invalid("input", "'input' is required", "missing_required_parameter")};
    std::vector<std::string> texts;
    auto token_text = [&](const json& ids) {
        std::vector<Token> tokens;
        for (const auto& t : ids) {
            if (!t.is_number_integer() || t.get<long long>() < 0 ||
                t.get<long long>() >= limits.vocab_size)
                throw HttpException{invalid("input", "not a token id of this model")};
            tokens.push_back(t.get<Token>());
        }
        auto text = model.tokenizer().decode(tokens);
        if (!text) throw HttpException{http_error(text.error(), "input")};
        return *text;
    };
    if (input->is_string()) {
        texts.push_back(input->get<std::string>());
    } else if (input->is_array() && !input->empty() && (*input)[0].is_number()) {
        texts.push_back(token_text(*input));
    } else if (input->is_array() && !input->empty()) {
        for (const auto& item : *input) {
            if (item.is_string())
                texts.push_back(item.get<std::string>());
            else if (item.is_array() && !item.empty())
                texts.push_back(token_text(item));
            else
                throw HttpException{
                    invalid("input", "each input must be a string or token ids", "invalid_type")};
        }
    } else {
        throw HttpException{
            invalid("input", "'input' must be a non-empty string or array", "invalid_type")};
    }
    if (texts.size() > static_cast<std::size_t>(options.max_embedding_inputs))
        throw HttpException{invalid(
            "input", fmt::format("at most {} inputs per request", options.max_embedding_inputs))};
    for (const auto& t : texts) {
        if (t.empty()) throw HttpException{invalid("input", "inputs must not be empty")};
    }
    bool as_base64 = false;
    if (const json* f = optional_field(body, "encoding_format")) {
        const std::string format = string_field(*f, "encoding_format");
        if (format != "float" && format != "base64")
            throw HttpException{invalid("encoding_format", "must be float or base64")};
        as_base64 = format == "base64";
    }
    const int n_embd = model.info().n_embd_out > 0 ? model.info().n_embd_out : model.info().n_embd;
    std::size_t dims = static_cast<std::size_t>(n_embd);
    if (const json* d = optional_field(body, "dimensions")) {
        if (!d->is_number_integer() || d->get<long long>() < 1 || d->get<long long>() > n_embd)
            throw HttpException{
                invalid("dimensions", fmt::format("'dimensions' must be in [1, {}]", n_embd))};
        dims = static_cast<std::size_t>(d->get<long long>());
    }
    int prompt_tokens = 0;
    for (const auto& t : texts) {
        auto tokens = model.tokenizer().encode(t);
        if (!tokens) throw HttpException{http_error(tokens.error(), "input")};
        if (static_cast<int>(tokens->size()) > max_prompt_tokens)
            throw HttpException{{413, "invalid_request_error", "context_length_exceeded", "input",
                                 fmt::format("an input has {} tokens; at most {} are accepted",
                                             tokens->size(), max_prompt_tokens)}};
        prompt_tokens += static_cast<int>(tokens->size());
    }

    std::vector<std::vector<float>> vectors;
    {
        std::lock_guard lock(embed_mutex);
        if (!embed_context) {
            ContextOptions co;
            co.embeddings = true;
            co.n_ctx = max_prompt_tokens;
            co.n_batch = co.n_ctx;
            co.n_ubatch = co.n_ctx;
            auto ctx = Context::create(model, co);
            if (!ctx) throw HttpException{http_error(ctx.error())};
            embed_context.emplace(std::move(*ctx));
        }
        auto out = embed_context->embed_batch(texts);
        if (!out) throw HttpException{http_error(out.error(), "input")};
        vectors = std::move(*out);
    }
    json data = json::array();
    for (std::size_t i = 0; i < vectors.size(); ++i) {
        std::vector<float>& v = vectors[i];
        if (dims < v.size()) truncate_and_normalize(v, dims);
        json item = {{"object", "embedding"}, {"index", i}};
        if (as_base64)
            item["embedding"] =
                base64(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(float));
        else
            item["embedding"] = v;
        data.push_back(std::move(item));
    }
    json out = {{"object", "list"},
                {"data", std::move(data)},
                {"model", model_id},
                {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
