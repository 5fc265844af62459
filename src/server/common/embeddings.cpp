// Embeddings for every protocol: the inputs, dimensions and normalization a body asks for, computed
// by the model's Embedder on a thread of its own (one request at a time: one decode per batch).
#include <fmt/core.h>

#include <cmath>
#include <cstring>

#include "server/common/server_state.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// OpenAI's `dimensions`: keep the first d values and scale back to unit length.
void truncate_and_normalize(std::vector<float>& v, std::size_t d) {
    v.resize(d);
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0)
        for (float& x : v) x = static_cast<float>(x / norm);
}

// The inputs as token lists: text tokenized here, token ids kept as they are (the model's
// embedder validates them); each within the prompt limit.
std::vector<std::vector<Token>> embedding_inputs(const json& body, const Tokenizer& tokenizer,
                                                 const RequestLimits& limits, int max_inputs,
                                                 int max_tokens, bool truncate) {
    const json* input = optional_field(body, "input");
    if (!input)
        throw HttpException{invalid("input", "'input' is required", "missing_required_parameter")};
    auto ids = [&](const json& list) {
        std::vector<Token> tokens;
        for (const auto& t : list) {
            if (!t.is_number_integer() || t.get<long long>() < 0 ||
                t.get<long long>() >= limits.vocab_size)
                throw HttpException{invalid("input", "not a token id of this model")};
            tokens.push_back(t.get<Token>());
        }
        return tokens;
    };
    auto text = [&](const json& item) {
        const std::string t = item.get<std::string>();
        if (t.empty()) throw HttpException{invalid("input", "inputs must not be empty")};
        auto tokens = tokenizer.encode(t);
        if (!tokens) throw HttpException{http_error(tokens.error(), "input")};
        return std::move(*tokens);
    };
    std::vector<std::vector<Token>> inputs;
    if (input->is_string()) {
        inputs.push_back(text(*input));
    } else if (input->is_array() && !input->empty() && (*input)[0].is_number()) {
        inputs.push_back(ids(*input));
    } else if (input->is_array() && !input->empty()) {
        for (const auto& item : *input) {
            if (item.is_string())
                inputs.push_back(text(item));
            else if (item.is_array() && !item.empty())
                inputs.push_back(ids(item));
            else
                throw HttpException{
                    invalid("input", "each input must be a string or token ids", "invalid_type")};
        }
    } else {
        throw HttpException{
            invalid("input", "'input' must be a non-empty string or array", "invalid_type")};
    }
    if (inputs.size() > static_cast<std::size_t>(max_inputs))
        throw HttpException{
            invalid("input", fmt::format("at most {} inputs per request", max_inputs))};
    for (auto& tokens : inputs) {
        if (truncate && static_cast<int>(tokens.size()) > max_tokens)
            tokens.resize(static_cast<std::size_t>(max_tokens));
        if (static_cast<int>(tokens.size()) > max_tokens) {
            throw HttpException{
                http_error(Error{ErrorCode::context_overflow,
                                 fmt::format("an input has {} tokens; at most {} are accepted",
                                             tokens.size(), max_tokens)},
                           "input")};
        }
    }
    return inputs;
}

struct EmbeddingFormat {
    bool base64 = false;
    std::size_t dimensions = 0;
};

EmbeddingFormat embedding_format(const json& body, int n_embd) {
    EmbeddingFormat f;
    f.dimensions = static_cast<std::size_t>(n_embd);
    if (const json* e = optional_field(body, "encoding_format")) {
        const std::string format = string_field(*e, "encoding_format");
        if (format != "float" && format != "base64")
            throw HttpException{invalid("encoding_format", "must be float or base64")};
        f.base64 = format == "base64";
    }
    if (const json* d = optional_field(body, "dimensions")) {
        if (!d->is_number_integer() || d->get<long long>() < 1 || d->get<long long>() > n_embd)
            throw HttpException{
                invalid("dimensions", fmt::format("'dimensions' must be in [1, {}]", n_embd))};
        f.dimensions = static_cast<std::size_t>(d->get<long long>());
    }
    return f;
}

// llama-server's embd_normalize: -1 none, 2 Euclidean (its default); the others are refused.
Normalization normalization(const json& body) {
    const json* v = optional_field(body, "embd_normalize");
    if (!v) return Normalization::l2;
    const long long n = integer_field(*v, "embd_normalize", -1, 2);
    if (n == 0 || n == 1)
        throw HttpException{invalid("embd_normalize", "only -1 (none) and 2 (Euclidean)")};
    return n == -1 ? Normalization::none : Normalization::l2;
}

}  // namespace

ComputedEmbeddings ServerState::compute_embeddings(const json& body, const ServedModel& m,
                                                   bool truncate) const {
    const ModelInfo& info = m.lease.model().info();
    const int n_embd = info.n_embd_out > 0 ? info.n_embd_out : info.n_embd;
    const EmbeddingFormat format = embedding_format(body, n_embd);
    auto inputs = embedding_inputs(body, m.lease.model().tokenizer(), m.limits,
                                   options.max_embedding_inputs, m.max_prompt_tokens, truncate);
    ComputedEmbeddings out;
    out.base64 = format.base64;
    for (const auto& tokens : inputs) out.prompt_tokens += static_cast<int>(tokens.size());
    // On the embedder's own thread; this one only waits.
    auto vectors = m.embedder->embed(std::move(inputs), {.normalize = normalization(body)});
    if (!vectors) throw HttpException{http_error(vectors.error(), "input")};
    out.vectors = std::move(*vectors);
    for (std::vector<float>& v : out.vectors)
        if (format.dimensions < v.size()) truncate_and_normalize(v, format.dimensions);
    return out;
}

}  // namespace llamapp::detail
