// /v1/embeddings: parsing and formatting around the server's Embedder, which computes the vectors
// on a thread of its own (one request at a time: embedding is one decode per batch).
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

json embeddings_json(std::vector<std::vector<float>> vectors, bool base64_encoded) {
    json data = json::array();
    for (std::size_t i = 0; i < vectors.size(); ++i) {
        const std::vector<float>& v = vectors[i];
        json item = {{"object", "embedding"}, {"index", i}};
        if (base64_encoded)
            item["embedding"] =
                base64(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(float));
        else
            item["embedding"] = v;
        data.push_back(std::move(item));
    }
    return data;
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
    auto vectors = m.lease.embedder().embed(std::move(inputs), {.normalize = normalization(body)});
    if (!vectors) throw HttpException{http_error(vectors.error(), "input")};
    out.vectors = std::move(*vectors);
    for (std::vector<float>& v : out.vectors)
        if (format.dimensions < v.size()) truncate_and_normalize(v, format.dimensions);
    return out;
}

void ServerState::embeddings(const httplib::Request& req, httplib::Response& res, bool native) {
    InFlight counted(*this);  // from the start: a drain that begins now waits for this request
    json body = parse_body(req.body);
    // llama-server's native route also reads the inputs from "content".
    if (const json* content = optional_field(body, "content");
        native && content && !body.contains("input"))
        body["input"] = *content;
    const ServedModel m = serve(body, Need::embed);
    ComputedEmbeddings e = compute_embeddings(body, m, false);
    if (native) {  // [{"index": i, "embedding": [vector]}], as llama-server's /embedding answers
        json out = json::array();
        for (std::size_t i = 0; i < e.vectors.size(); ++i)
            out.push_back({{"index", i}, {"embedding", json::array({std::move(e.vectors[i])})}});
        res.set_content(dump(out), "application/json");
        return;
    }
    json out = {{"object", "list"},
                {"data", embeddings_json(std::move(e.vectors), e.base64)},
                {"model", m.lease.id()},
                {"usage", {{"prompt_tokens", e.prompt_tokens}, {"total_tokens", e.prompt_tokens}}}};
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
