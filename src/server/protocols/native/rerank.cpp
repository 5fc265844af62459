// POST /rerank (and /v1/rerank, /reranking, /v1/reranking), as llama-server answers it: each
// document scored against the query by a reranker's classifier, through the model's Embedder.
// Two request shapes: Jina's and Cohere's ("documents"; results with relevance_score in an
// object) and TEI's ("texts"; a bare array with score, and the text on request).
#include <fmt/core.h>

#include <algorithm>

#include "server/protocols/native/native.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

struct RerankRequest {
    std::string query;
    std::vector<std::string> documents;
    bool tei = false;  // "texts" given: TEI's shape
    std::size_t top_n = 0;
    bool return_text = false;
};

RerankRequest parse_rerank(const json& body, int max_documents) {
    RerankRequest r;
    const json* query = optional_field(body, "query");
    if (!query)
        throw HttpException{invalid("query", "'query' is required", "missing_required_parameter")};
    r.query = string_field(*query, "query");
    const json* docs = optional_field(body, "documents");
    r.tei = !docs && body.contains("texts");
    const char* name = r.tei ? "texts" : "documents";
    if (r.tei) docs = optional_field(body, "texts");
    if (!docs || !docs->is_array() || docs->empty())
        throw HttpException{
            invalid(name, fmt::format("'{}' must be a non-empty array of strings", name))};
    if (docs->size() > static_cast<std::size_t>(max_documents))
        throw HttpException{invalid(name, fmt::format("at most {} documents", max_documents))};
    for (std::size_t i = 0; i < docs->size(); ++i) {
        const json& d = (*docs)[i];
        // Cohere also takes {"text": ...} objects.
        const json& text = d.is_object() && d.contains("text") ? d["text"] : d;
        r.documents.push_back(string_field(text, fmt::format("{}[{}]", name, i)));
    }
    r.top_n = r.documents.size();
    if (const json* v = optional_field(body, "top_n"))
        r.top_n = static_cast<std::size_t>(
            integer_field(*v, "top_n", 1, static_cast<long long>(r.documents.size())));
    if (const json* v = optional_field(body, "return_text"))
        r.return_text = bool_field(*v, "return_text");
    return r;
}

}  // namespace

void NativeProtocol::rerank(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(state_);  // from the start: a drain that begins now waits for this request
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::rerank);
    RerankRequest r = parse_rerank(body, state_.options.max_embedding_inputs);
    const Tokenizer tokenizer = m.lease.model().tokenizer();
    std::vector<std::vector<Token>> inputs;
    int prompt_tokens = 0;
    for (std::size_t i = 0; i < r.documents.size(); ++i) {
        auto tokens = tokenizer.rerank_prompt(r.query, r.documents[i]);
        if (!tokens) throw HttpException{http_error(tokens.error(), "query")};
        if (tokens->size() > static_cast<std::size_t>(m.max_prompt_tokens))
            throw HttpException{http_error(
                Error{ErrorCode::context_overflow,
                      fmt::format("the query and document {} take {} tokens, more than the {} "
                                  "the model takes",
                                  i, tokens->size(), m.max_prompt_tokens),
                      {}},
                r.tei ? "texts" : "documents")};
        prompt_tokens += static_cast<int>(tokens->size());
        inputs.push_back(std::move(*tokens));
    }
    // On the embedder's own thread; this one only waits. The first score is the relevance.
    auto scores = m.embedder->embed(std::move(inputs), {.normalize = Normalization::none});
    if (!scores) throw HttpException{http_error(scores.error(), "documents")};
    const char* score = r.tei ? "score" : "relevance_score";
    json results = json::array();
    for (std::size_t i = 0; i < scores->size(); ++i) {
        json one = {{"index", i}, {score, (*scores)[i].empty() ? 0.0f : (*scores)[i].front()}};
        if (r.tei && r.return_text) one["text"] = r.documents[i];
        results.push_back(std::move(one));
    }
    std::stable_sort(results.begin(), results.end(), [score](const json& a, const json& b) {
        return a[score].get<double>() > b[score].get<double>();
    });
    results.erase(results.begin() + static_cast<std::ptrdiff_t>(r.top_n), results.end());
    if (r.tei) {
        res.set_content(dump(results), "application/json");
        return;
    }
    json out = {{"model", m.lease.id()},
                {"object", "list"},
                {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
                {"results", std::move(results)}};
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
