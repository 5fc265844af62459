// Internal: Anthropic's Messages API (/v1/messages) read into the same engine request as the
// OpenAI routes; its replies are written in anthropic_routes.cpp.
#pragma once

#include "server/server_state.hpp"

namespace llamapp::detail {

struct MessagesRequest {
    GenerationRequest generation;  // messages, tools and sampling in llamapp's terms
    int thinking_budget = -1;      // thinking.budget_tokens, when thinking is enabled
};

// A /v1/messages (or count_tokens) body. max_tokens left out takes the server's limit, as on
// the OpenAI routes.
MessagesRequest parse_messages(const nlohmann::json& body, const RequestLimits& limits,
                               const RequestDefaults& defaults);

}  // namespace llamapp::detail
