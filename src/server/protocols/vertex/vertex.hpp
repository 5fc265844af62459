// Internal: Google Vertex AI's prediction protocol (ServerOptions::predict_route): one POST
// carries a list of instances, each a request to one of the other protocols' POST routes.
// Registered last: it dispatches to the routes registered before it.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

class VertexProtocol final : public Protocol {
  public:
    explicit VertexProtocol(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "vertex"; }
    void register_routes(Routes& routes) override;

  private:
    ServerState& state_;
};

}  // namespace llamapp::detail
