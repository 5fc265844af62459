#include "llamapp/chat_stream.hpp"

#include <algorithm>

#include "chat/chat_state.hpp"

namespace llamapp {

namespace {

// The part of `now` after `before`, when `now` extends it; otherwise nothing (the parser changed
// its mind, and what was reported stands).
std::string growth(const std::string& before, const std::string& now) {
    if (now.size() > before.size() && now.starts_with(before)) return now.substr(before.size());
    return {};
}

}  // namespace

ChatStreamParser::ChatStreamParser(const ChatPrompt& prompt, double max_parse_share)
    : state_(prompt.parse_state), max_parse_share_(std::clamp(max_parse_share, 1e-9, 1.0)) {}

ChatDelta ChatStreamParser::push(std::string_view piece) {
    if (piece.empty()) return {};
    raw_.append(piece);
    if (!state_) {
        reported_.content.append(piece);
        return {.content = std::string(piece)};
    }
    using clock = std::chrono::steady_clock;
    const clock::time_point start = clock::now();
    if (start < next_parse_) return {};  // reported with a later piece, or by finish()
    const auto parsed = detail::parse_reply(*state_, raw_, /*partial=*/true);
    const std::chrono::duration<double> spent = clock::now() - start;
    next_parse_ = start + std::chrono::duration_cast<clock::duration>(spent / max_parse_share_);
    if (!parsed) return {};  // not parseable yet; more text may settle it
    return advance(*parsed, false);
}

ChatDelta ChatStreamParser::finish(bool complete) {
    std::optional<ChatMessage> parsed;
    if (state_) parsed = detail::parse_reply(*state_, raw_, /*partial=*/!complete);
    if (!parsed) parsed = ChatMessage{.role = "assistant", .content = raw_};
    return advance(*parsed, true);
}

ChatDelta ChatStreamParser::advance(const ChatMessage& parsed, bool final) {
    ChatDelta delta;
    delta.reasoning_content = growth(reported_.reasoning_content, parsed.reasoning_content);
    reported_.reasoning_content += delta.reasoning_content;
    delta.content = growth(reported_.content, parsed.content);
    reported_.content += delta.content;

    for (std::size_t i = 0; i < parsed.tool_calls.size(); ++i) {
        const ToolCall& now = parsed.tool_calls[i];
        if (i < reported_.tool_calls.size()) {
            ToolCall& known = reported_.tool_calls[i];
            if (now.name != known.name) break;  // a different call than the one reported
            const std::string more = growth(known.arguments, now.arguments);
            if (!more.empty()) {
                known.arguments += more;
                delta.tool_calls.push_back({.index = i, .arguments = more});
            }
            continue;
        }
        // A name is complete once its arguments have begun, or when the reply is over.
        const bool settled = i + 1 < parsed.tool_calls.size() || !now.arguments.empty() || final;
        if (now.name.empty() || !settled) break;
        ToolCall call = now;
        if (call.id.empty()) call.id = detail::new_tool_call_id();
        delta.tool_calls.push_back(
            {.index = i, .id = call.id, .name = call.name, .arguments = call.arguments});
        reported_.tool_calls.push_back(std::move(call));
    }
    return delta;
}

}  // namespace llamapp
