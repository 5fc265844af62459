// Routing a request by its "model": the lease, what its requests may ask for, and forgetting a
// model pulled from the hub.
#include <fmt/core.h>

#include "llamapp/hub.hpp"
#include "server/common/server_state.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

HttpError model_error(const Error& e) {
    if (e.code == ErrorCode::not_found) return http_error(e, "model", "model_not_found");
    return http_error(e, "model");
}

void ServerState::forget_pulled(const ModelListing& m) const {
    if (auto ok = models.remove(m.id); !ok) throw HttpException{model_error(ok.error())};
    // A model never pulled has no files: forgetting it is the whole deletion.
    if (auto gone = hub_remove(*m.hub); !gone && gone.error().code != ErrorCode::not_found)
        throw HttpException{http_error(gone.error(), "model")};
}

ServedModel ServerState::serve(const json& body, Need need, Naming naming,
                               std::optional<std::chrono::milliseconds> keep_alive) const {
    std::string name;
    if (const json* v = optional_field(body, "model")) name = string_field(*v, "model");
    const auto deadline = std::chrono::steady_clock::now() + options.request_timeout;
    auto lease = models.acquire(name, deadline, keep_alive);
    if (!lease && lease.error().code == ErrorCode::not_found && naming != Naming::exact &&
        options.accept_any_model && !options.router && models.list().size() == 1)
        lease = models.acquire("", deadline, keep_alive);
    if (!lease) throw HttpException{model_error(lease.error())};
    const ModelCapabilities& can = lease->capabilities();
    const bool able = need == Need::generate ? can.generate
                      : need == Need::embed  ? can.embed && !can.rerank
                      : need == Need::rerank ? can.rerank
                                             : true;
    if (!able) {
        const char* what = need == Need::generate ? "generate text"
                           : need == Need::embed  ? "compute embeddings"
                                                  : "rank documents (it is not a reranker)";
        // Only --no-embeddings keeps a generative model from embedding.
        const char* why = need == Need::embed && can.generate ? ": the server refuses embeddings "
                                                                "from generative models "
                                                                "(--no-embeddings)"
                                                              : "";
        throw HttpException{
            invalid("model", fmt::format("the model '{}' does not {}{}", lease->id(), what, why),
                    "model_not_capable")};
    }
    ServedModel m{std::move(*lease)};
    m.limits.vocab_size = m.lease.model().tokenizer().vocab_size();
    m.limits.max_stop_strings = options.max_stop_strings;
    int n_ctx = 0;
    if (need == Need::generate) n_ctx = m.lease.engine().n_ctx();
    if (need == Need::embed || need == Need::rerank) {
        auto embedder = m.lease.embedder();  // a generative model's is made now, the first time
        if (!embedder) throw HttpException{http_error(embedder.error(), "model")};
        m.embedder = *embedder;
        n_ctx = static_cast<int>(m.embedder->max_input_tokens());
    }
    auto bounded = [n_ctx](int limit) { return limit > 0 ? std::min(limit, n_ctx) : n_ctx; };
    m.max_prompt_tokens = bounded(options.max_prompt_tokens);
    m.limits.max_tokens = bounded(options.max_tokens);
    return m;
}

}  // namespace llamapp::detail
