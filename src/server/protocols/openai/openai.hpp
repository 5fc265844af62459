// Internal: OpenAI's API: /v1/completions, /v1/chat/completions and /v1/embeddings (with
// llama-server's unprefixed names), whole or as Server-Sent Events.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

class OpenAiProtocol final : public Protocol {
  public:
    explicit OpenAiProtocol(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "openai"; }
    void register_routes(Routes& routes) override;

  private:
    // /v1/chat/completions when `chat`, else /v1/completions.
    void generate(const httplib::Request& req, httplib::Response& res, bool chat);
    void embeddings(const httplib::Request& req, httplib::Response& res);

    ServerState& state_;
};

}  // namespace llamapp::detail
