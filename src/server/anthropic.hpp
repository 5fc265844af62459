// Internal: Anthropic's Messages API (/v1/messages) read into the same engine request as the
// OpenAI routes, and its replies written in Anthropic's shapes.
#pragma once

#include <memory>

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

// Anthropic's stop_reason for a finished reply.
const char* stop_reason_of(const Generation& g, bool tool_use);

// The whole reply: {"id", "type": "message", "role", "model", "content": [blocks], ...}.
nlohmann::json anthropic_message_json(const std::string& id, const std::string& model,
                                      const Generation& g, const ChatPrompt& prompt);

// The stream's events: message_start and ping first, content blocks as the reply grows,
// message_delta and message_stop at the end (an error event when the generation failed).
std::unique_ptr<StreamFormat> anthropic_stream(std::string id, std::string model,
                                               const ChatPrompt& prompt);

}  // namespace llamapp::detail
