// Internal: llamapp's own routes for operators and probes: the root, health, metrics, the models
// (list, load, unload, pull, delete) and the KV store (/cache). Not a client protocol: their errors
// take OpenAI's shape, which llama-server's clients read too.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

class OperatorRoutes final : public Protocol {
  public:
    explicit OperatorRoutes(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "llamapp"; }
    void register_routes(Routes& routes) override;

  private:
    void add_model_routes(Routes& routes);
    void add_cache_routes(Routes& routes);
    // Ready while not draining and no loaded model's queue is full; the models say which are
    // ready.
    void health(httplib::Response& res) const;
    // "/": Ollama's probe, or a page for a browser.
    void home(const httplib::Request& req, httplib::Response& res) const;
    void list_models(httplib::Response& res) const;
    void load_model(const httplib::Request& req, httplib::Response& res);
    void delete_model(const httplib::Request& req, httplib::Response& res);
    void pull_model(const httplib::Request& req, httplib::Response& res);
    void pull_events(httplib::Response& res);

    ServerState& state_;
};

}  // namespace llamapp::detail
