// Internal: OpenAI's Responses API (/v1/responses) read into the same engine request as the
// chat routes; its replies are written in responses_routes.cpp.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"
#include "server/protocols/responses/response_store.hpp"

namespace llamapp::detail {

struct ResponsesRequest {
    GenerationRequest generation;  // messages: instructions, the previous turns, this input
    // What the response keeps for the next turn: previous turns and this input, without the
    // instructions (a continuation brings its own, as OpenAI's API has it).
    std::vector<ChatMessage> conversation;
    std::string previous_response_id;
    bool store = true;
    // The request's settings a response repeats (instructions, tools, tool_choice, text, ...).
    nlohmann::json echo;
    // This request's input as items (text input as one user message), for
    // GET /v1/responses/{id}/input_items.
    nlohmann::json input_items = nlohmann::json::array();
};

// A /v1/responses (or input_tokens) body; previous_response_id is looked up in `stored`.
ResponsesRequest parse_responses(const nlohmann::json& body, const RequestLimits& limits,
                                 const RequestDefaults& defaults, ResponseStore& stored);

class ResponsesProtocol final : public Protocol {
  public:
    explicit ResponsesProtocol(ServerState& state)
        : state_(state),
          stored_({.max_responses = state.options.max_stored_responses,
                   .max_bytes = state.options.max_stored_response_bytes,
                   .max_age = state.options.stored_response_ttl}) {}
    std::string_view name() const override { return "responses"; }
    void register_routes(Routes& routes) override;

  private:
    void responses(const httplib::Request& req, httplib::Response& res);
    void count_response_tokens(const httplib::Request& req, httplib::Response& res);

    ServerState& state_;
    ResponseStore stored_;  // responses created with store: true
};

}  // namespace llamapp::detail
