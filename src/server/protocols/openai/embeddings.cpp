// /v1/embeddings: the vectors the shared embedding path computed (common/embeddings.cpp), in
// OpenAI's shape, as floats or base64.
#include "server/protocols/openai/openai.hpp"

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

}  // namespace

void OpenAiProtocol::embeddings(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(state_);  // from the start: a drain that begins now waits for this request
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::embed);
    ComputedEmbeddings e = state_.compute_embeddings(body, m, false);
    json out = {{"object", "list"},
                {"data", embeddings_json(std::move(e.vectors), e.base64)},
                {"model", m.lease.id()},
                {"usage", {{"prompt_tokens", e.prompt_tokens}, {"total_tokens", e.prompt_tokens}}}};
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
