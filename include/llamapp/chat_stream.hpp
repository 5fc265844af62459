// ChatStreamParser: a chat reply split into answer, reasoning and tool calls while it streams.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/chat.hpp"

namespace llamapp {

// What a reply gained since the previous step; the shape of an OpenAI streaming delta.
struct ChatDelta {
    struct ToolCallDelta {
        std::size_t index = 0;
        std::string id;         // set on the first delta of a call only
        std::string name;       // likewise
        std::string arguments;  // the next fragment of the JSON arguments
    };
    std::string content;
    std::string reasoning_content;
    std::vector<ToolCallDelta> tool_calls;

    bool empty() const {
        return content.empty() && reasoning_content.empty() && tool_calls.empty();
    }
};

// Parses the growing output with llama.cpp's partial chat parser and reports only what is new.
// What was reported is never taken back: when a later parse disagrees with an earlier one, the
// part reported stands and only consistent growth is reported from then on. A tool call is
// reported once its name is complete (its arguments have begun, or the reply ended).
//
// Each parse reads the whole reply, so parsing after every piece would cost time quadratic in
// the reply's length. Instead parsing takes at most `max_parse_share` of the wall time: after a
// parse that took t, pieces are only collected until t / max_parse_share has passed. Short
// replies are parsed after every piece; a long one reports in larger steps. Not thread-safe;
// one per reply.
class ChatStreamParser {
  public:
    explicit ChatStreamParser(const ChatPrompt& prompt, double max_parse_share = 0.05);

    ChatDelta push(std::string_view piece);
    // The reply is over: parses it as a whole and reports the rest. `complete` as for
    // ChatTemplate::parse (false when max_tokens or the context cut the reply short).
    ChatDelta finish(bool complete = true);

    // Everything reported so far (the whole reply after finish()).
    const ChatMessage& message() const { return reported_; }

  private:
    ChatDelta advance(const ChatMessage& parsed, bool final);

    std::shared_ptr<const detail::ChatParseState> state_;
    double max_parse_share_;
    std::chrono::steady_clock::time_point next_parse_{};
    std::string raw_;
    ChatMessage reported_{.role = "assistant"};
};

}  // namespace llamapp
