// Internal: Anthropic's Messages API (/v1/messages) read into the same engine request as the
// OpenAI routes; its replies are written in anthropic_routes.cpp.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

// A /v1/messages (or count_tokens) body as messages, tools and sampling in llamapp's terms;
// thinking.budget_tokens is the reasoning budget. max_tokens left out takes the server's
// limit, as on the OpenAI routes.
GenerationRequest parse_messages(const nlohmann::json& body, const RequestLimits& limits,
                                 const RequestDefaults& defaults);

class AnthropicProtocol final : public Protocol {
  public:
    explicit AnthropicProtocol(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "anthropic"; }
    // {"type": "error", "error": {"type", "message"}}, with Anthropic's type for the status.
    nlohmann::json error_body(const HttpError& e) const override;
    std::vector<std::string> path_prefixes() const override { return {"/v1/messages/"}; }
    void register_routes(Routes& routes) override;

  private:
    void messages(const httplib::Request& req, httplib::Response& res);
    void count_message_tokens(const httplib::Request& req, httplib::Response& res) const;

    ServerState& state_;
};

}  // namespace llamapp::detail
