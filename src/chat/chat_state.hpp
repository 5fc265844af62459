// Internal: what a rendered chat prompt keeps for parsing its reply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat.h"
#include "llamapp/chat.hpp"

namespace llamapp::detail {

struct ChatParseState {
    common_chat_parser_params params;
    // Without parallel calls the reply keeps its first call only: some formats' grammars let a
    // model repeat the call block whatever the request said.
    std::size_t max_tool_calls = SIZE_MAX;
};

// The reply parsed per the prompt's format, ids as the format gives them (possibly empty).
// A partial parse reads a reply that is still growing. nullopt when the parser rejects it.
std::optional<ChatMessage> parse_reply(const ChatParseState& state, const std::string& output,
                                       bool partial);

// A fresh id for a tool call the format gave none ("call_" and 24 random characters).
std::string new_tool_call_id();

}  // namespace llamapp::detail
