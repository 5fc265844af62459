// Internal: Anthropic's Messages API (/v1/messages) read into the same engine request as the
// OpenAI routes; its replies are written in anthropic_routes.cpp.
#pragma once

#include "server/server_state.hpp"

namespace llamapp::detail {

// A /v1/messages (or count_tokens) body as messages, tools and sampling in llamapp's terms;
// thinking.budget_tokens is the reasoning budget. max_tokens left out takes the server's
// limit, as on the OpenAI routes.
GenerationRequest parse_messages(const nlohmann::json& body, const RequestLimits& limits,
                                 const RequestDefaults& defaults);

}  // namespace llamapp::detail
