// POST /v1/messages and /v1/messages/count_tokens: Anthropic's shapes over the same chat
// submission as /v1/chat/completions; its errors in Anthropic's shape (error_body).
#include <fmt/core.h>

#include "llamapp/chat_stream.hpp"
#include "server/protocols/anthropic/anthropic.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// Anthropic's error types are few: one per status, as its API documents them.
json error_json(const HttpError& e) {
    const char* t = "api_error";
    switch (e.status) {
        case 400:
            t = "invalid_request_error";
            break;
        case 401:
            t = "authentication_error";
            break;
        case 403:
            t = "permission_error";
            break;
        case 404:
            t = "not_found_error";
            break;
        case 413:
            t = "request_too_large";
            break;
        case 429:
            t = "rate_limit_error";
            break;
        case 503:
            t = "overloaded_error";
            break;
        default:
            t = e.status >= 400 && e.status < 500 ? "invalid_request_error" : "api_error";
    }
    return {{"type", "error"}, {"error", {{"type", t}, {"message", e.message}}}};
}

// Input is what the prefix cache did not hold, as Anthropic counts it; the rest was read from it.
json usage_json(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens}};
}

// A tool call's arguments as Anthropic's input object; a call cut short by max_tokens has
// arguments that do not parse yet, and an object is all the protocol allows.
json tool_input(const std::string& arguments) {
    json input = json::parse(arguments, nullptr, false);
    return input.is_object() ? input : json::object();
}

json stop_sequence_json(const Generation& g) {
    return g.stop_sequence.empty() ? json(nullptr) : json(g.stop_sequence);
}

std::string event(const char* name, const json& data) {
    return fmt::format("event: {}\ndata: {}\n\n", name, dump(data));
}

const char* stop_reason_of(const Generation& g, bool tool_use) {
    if (g.finish_reason == FinishReason::length) return "max_tokens";
    if (tool_use) return "tool_use";
    return g.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

// Content blocks open one at a time, in order: thinking, then text, then tool calls.
class AnthropicStream : public StreamFormat {
  public:
    AnthropicStream(std::string id, std::string model, const ChatPrompt& prompt)
        : id_(std::move(id)),
          model_(std::move(model)),
          prompt_tokens_(static_cast<int>(prompt.tokens.size())),
          parser_(prompt) {}

    std::string piece(const StreamPiece& piece, const std::optional<Progress>&) override {
        std::string out = start();
        if (!piece.text.empty()) out += blocks(parser_.push(piece.text));
        return out;
    }

    std::string last(const Completion& done) override {
        const Generation& g = done.generation;
        std::string out = start();
        if (g.error) return out + event("error", error_json(http_error(*g.error)));
        out += blocks(parser_.finish(g.finish_reason == FinishReason::stop));
        if (next_index_ == 0) out += open("text", {{"type", "text"}, {"text", ""}});
        out += close();
        const bool tool_use = !parser_.message().tool_calls.empty();
        out += event("message_delta", {{"type", "message_delta"},
                                       {"delta",
                                        {{"stop_reason", stop_reason_of(g, tool_use)},
                                         {"stop_sequence", stop_sequence_json(g)}}},
                                       {"usage", usage_json(g.usage)}});
        return out + event("message_stop", {{"type", "message_stop"}});
    }

  private:
    std::string start() {
        if (started_) return {};
        started_ = true;
        json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", usage_json({.prompt_tokens = prompt_tokens_})}};
        return event("message_start", {{"type", "message_start"}, {"message", message}}) +
               event("ping", {{"type", "ping"}});
    }

    std::string blocks(const ChatDelta& d) {
        std::string out;
        if (!d.reasoning_content.empty()) {
            if (open_ != "thinking")
                out += open("thinking", {{"type", "thinking"}, {"thinking", ""}});
            out += delta({{"type", "thinking_delta"}, {"thinking", d.reasoning_content}});
        }
        if (!d.content.empty()) {
            if (open_ != "text") out += open("text", {{"type", "text"}, {"text", ""}});
            out += delta({{"type", "text_delta"}, {"text", d.content}});
        }
        for (const ChatDelta::ToolCallDelta& call : d.tool_calls) {
            if (!call.name.empty())
                out += open("tool_use", {{"type", "tool_use"},
                                         {"id", call.id},
                                         {"name", call.name},
                                         {"input", json::object()}});
            if (!call.arguments.empty())
                out += delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}});
        }
        return out;
    }

    std::string open(const char* kind, const json& block) {
        std::string out = close();
        open_ = kind;
        out += event(
            "content_block_start",
            {{"type", "content_block_start"}, {"index", next_index_}, {"content_block", block}});
        ++next_index_;
        return out;
    }

    // A thinking block ends with its signature; there is none to give (nothing signs a local
    // model's reasoning), and clients pass the empty one back unchanged.
    std::string close() {
        if (open_.empty()) return {};
        std::string out;
        if (open_ == "thinking") out += delta({{"type", "signature_delta"}, {"signature", ""}});
        open_.clear();
        return out + event("content_block_stop",
                           {{"type", "content_block_stop"}, {"index", next_index_ - 1}});
    }

    std::string delta(const json& d) const {
        return event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", next_index_ - 1}, {"delta", d}});
    }

    std::string id_, model_;
    int prompt_tokens_ = 0;
    ChatStreamParser parser_;
    bool started_ = false;
    std::string open_;  // the kind of the open block, empty when none is
    int next_index_ = 0;
};

json anthropic_message_json(const std::string& id, const std::string& model, const Generation& g,
                            const ChatPrompt& prompt) {
    const ChatMessage m =
        ChatTemplate::parse(g.text, prompt, g.finish_reason == FinishReason::stop);
    json content = json::array();
    if (!m.reasoning_content.empty())
        content.push_back(
            {{"type", "thinking"}, {"thinking", m.reasoning_content}, {"signature", ""}});
    if (!m.content.empty() || m.tool_calls.empty())
        content.push_back({{"type", "text"}, {"text", m.content}});
    for (const ToolCall& call : m.tool_calls)
        content.push_back({{"type", "tool_use"},
                           {"id", call.id},
                           {"name", call.name},
                           {"input", tool_input(call.arguments)}});
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", std::move(content)},
            {"stop_reason", stop_reason_of(g, !m.tool_calls.empty())},
            {"stop_sequence", stop_sequence_json(g)},
            {"usage", usage_json(g.usage)}};
}

}  // namespace

void AnthropicProtocol::messages(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(state_);
    state_.refuse_if_draining();
    const json body = parse_body(req.body);
    ServedModel served = state_.serve(body, ServerState::Need::generate);
    GenerationRequest g = parse_messages(body, served.limits, served.lease.defaults());
    ChatSubmission submitted = state_.submit(served, g, true);
    const std::string id = fmt::format("msg_{:024}", state_.next_id.fetch_add(1) + 1);
    res.set_header("X-Request-Id", id);
    if (!g.stream) {
        const Completion done = ServerState::await_whole(req, submitted.handle);
        res.set_content(
            dump(anthropic_message_json(id, served.lease.id(), done.generation, submitted.prompt)),
            "application/json");
        return;
    }
    auto format = std::make_unique<AnthropicStream>(id, served.lease.id(), submitted.prompt);
    state_.stream_reply(req, res, std::move(served.lease), std::move(submitted.handle),
                        std::move(counted), id, std::move(format));
}

// {"input_tokens": n}: the prompt the same body would take, rendered and tokenized, not run.
void AnthropicProtocol::count_message_tokens(const httplib::Request& req,
                                             httplib::Response& res) const {
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::generate);
    const GenerationRequest g = parse_messages(body, m.limits, m.lease.defaults());
    auto prompt = chat_template_of(m.lease).render(g.messages, g.render);
    if (!prompt) throw HttpException{http_error(prompt.error(), "messages")};
    res.set_content(dump(json{{"input_tokens", prompt->tokens.size()}}), "application/json");
}

void AnthropicProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    on.post("/v1/messages", [this](Req req, Res res) { messages(req, res); });
    on.post("/v1/messages/count_tokens",
            [this](Req req, Res res) { count_message_tokens(req, res); });
}

nlohmann::json AnthropicProtocol::error_body(const HttpError& e) const {
    return error_json(e);
}

}  // namespace llamapp::detail
