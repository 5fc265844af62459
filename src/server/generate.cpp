// /v1/completions and /v1/chat/completions: one engine request each, answered whole or as
// Server-Sent Events. A client that goes away cancels its request.
#include <fmt/core.h>

#include <chrono>

#include "core/log_internal.hpp"
#include "server/server_state.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// A reply cut short by the token limit says so even when it began a tool call.
const char* finish_name(FinishReason r, bool tool_calls = false) {
    if (r == FinishReason::length) return "length";
    return tool_calls ? "tool_calls" : "stop";
}

json tool_call_json(std::size_t index, const ToolCall& call) {
    return {{"index", index},
            {"id", call.id},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// The assistant message of a whole reply; content is null when the reply is only tool calls.
json message_json(const ChatMessage& m) {
    json message = {
        {"role", "assistant"},
        {"content", m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content)}};
    if (!m.reasoning_content.empty()) message["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.empty()) {
        json calls = json::array();
        for (std::size_t i = 0; i < m.tool_calls.size(); ++i) {
            json call = tool_call_json(i, m.tool_calls[i]);
            call.erase("index");
            calls.push_back(std::move(call));
        }
        message["tool_calls"] = std::move(calls);
    }
    return message;
}

json delta_json(const ChatDelta& d) {
    json delta = json::object();
    if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& c : d.tool_calls) {
            if (c.name.empty()) {  // a further fragment of a call already announced
                calls.push_back({{"index", c.index}, {"function", {{"arguments", c.arguments}}}});
            } else {
                calls.push_back(tool_call_json(c.index, {c.id, c.name, c.arguments}));
            }
        }
        delta["tool_calls"] = std::move(calls);
    }
    return delta;
}

json usage_json(const Generation& g) {
    return {{"prompt_tokens", g.usage.prompt_tokens},
            {"completion_tokens", g.usage.completion_tokens},
            {"total_tokens", g.usage.prompt_tokens + g.usage.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", g.usage.cached_tokens}}}};
}

json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
}

// Chat shape: {"content": [{token, logprob, bytes, top_logprobs}]}.
json chat_logprobs(const std::vector<TokenLogprobs>& all) {
    json content = json::array();
    for (const auto& t : all) {
        json top = json::array();
        for (const auto& alt : t.top)
            top.push_back(
                {{"token", alt.piece}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt.piece)}});
        content.push_back({{"token", t.chosen.piece},
                           {"logprob", t.chosen.logprob},
                           {"bytes", bytes_of(t.chosen.piece)},
                           {"top_logprobs", top}});
    }
    return {{"content", content}};
}

// Legacy completions shape.
json completion_logprobs(const std::vector<TokenLogprobs>& all) {
    json tokens = json::array(), logprobs = json::array(), top = json::array(),
         offsets = json::array();
    std::size_t offset = 0;
    for (const auto& t : all) {
        tokens.push_back(t.chosen.piece);
        logprobs.push_back(t.chosen.logprob);
        json alts = json::object();
        for (const auto& alt : t.top) alts[alt.piece] = alt.logprob;
        top.push_back(alts);
        offsets.push_back(offset);
        offset += t.chosen.piece.size();
    }
    return {{"tokens", tokens},
            {"token_logprobs", logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
}

struct Reply {
    std::string id;
    std::string model;
    std::int64_t created = 0;
    bool chat = false;

    json envelope(const char* object) const {
        return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
    }
    json chunk(json delta_or_text, const json& finish, const json& logprobs) const {
        json c = envelope(chat ? "chat.completion.chunk" : "text_completion");
        json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", logprobs}};
        if (chat)
            choice["delta"] = std::move(delta_or_text);
        else
            choice["text"] = std::move(delta_or_text);
        c["choices"] = json::array({choice});
        return c;
    }
};

// A finished generation's part of its access-log line.
std::string log_fields(const Completion& c) {
    const Generation& g = c.generation;
    return fmt::format(
        "finish={} prompt_tokens={} cached_tokens={} completion_tokens={} draft_tokens={} "
        "draft_accepted={} queue_ms={:.1f} ttft_ms={:.1f} total_ms={:.1f}{}",
        to_string(g.finish_reason), g.usage.prompt_tokens, g.usage.cached_tokens,
        g.usage.completion_tokens, c.draft_tokens, c.draft_accepted, c.queue_ms, g.timings.ttft_ms,
        g.timings.total_ms, g.error ? " error=" + std::string(to_string(g.error->code)) : "");
}

std::string sse(const json& data) {
    return "data: " + dump(data) + "\n\n";
}

}  // namespace

void ServerState::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    // Counted from the start, so a drain that begins now waits for this request (checked again
    // here: the pre-routing check may have passed just before the drain began).
    InFlight counted(*this);
    if (draining)
        throw HttpException{{503, "server_error", "draining", "", "the server is shutting down"}};
    const json body = parse_body(req.body);
    GenerationRequest g = chat ? parse_chat(body, limits) : parse_completion(body, limits);
    if (!g.model.empty() && g.model != model_id)
        throw HttpException{{404, "invalid_request_error", "model_not_found", "model",
                             fmt::format("the model '{}' does not exist", g.model)}};
    g.engine.options.timeout = options.request_timeout;

    ChatPrompt rendered;
    if (chat) {
        if (!chat_template)
            throw HttpException{{400, "invalid_request_error", "no_chat_template", "messages",
                                 chat_template_error}};
        auto prompt = chat_template->render(g.messages, g.render);
        if (!prompt) {
            // Name the field when the error does (messages[2].role, tools[0].name), else messages.
            const std::string& where = prompt.error().context;
            const bool field = where.starts_with("messages") || where.starts_with("tool");
            throw HttpException{http_error(prompt.error(), field ? where : "messages")};
        }
        rendered = std::move(*prompt);
        g.engine.prompt = rendered.tokens;
        if (auto ok = rendered.constrain(g.engine.options); !ok)
            throw HttpException{http_error(ok.error(), "tools")};
    } else if (!g.prompt_text.empty()) {
        auto tokens = model.tokenizer().encode(g.prompt_text, g.engine.options.tokenize);
        if (!tokens) throw HttpException{http_error(tokens.error(), "prompt")};
        g.engine.prompt = std::move(*tokens);
    }
    if (static_cast<int>(g.engine.prompt.size()) > max_prompt_tokens)
        throw HttpException{{413, "invalid_request_error", "context_length_exceeded",
                             chat ? "messages" : "prompt",
                             fmt::format("the prompt has {} tokens; at most {} are accepted",
                                         g.engine.prompt.size(), max_prompt_tokens)}};
    auto submitted = engine.submit(std::move(g.engine));
    if (!submitted) throw HttpException{http_error(submitted.error())};

    Reply reply;
    reply.chat = chat;
    reply.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id.fetch_add(1) + 1);
    reply.model = model_id;
    reply.created = unix_now();
    res.set_header("X-Request-Id", reply.id);

    if (!g.stream) {
        RequestHandle& handle = *submitted;
        EngineEvent event;
        std::optional<Completion> done;
        // Tokens keep arriving while nobody may be left to read the answer: look at the socket
        // between them too, not only when the engine is quiet.
        constexpr auto look_every = std::chrono::milliseconds(50);
        auto next_look = std::chrono::steady_clock::now() + look_every;
        for (;;) {
            const auto got = handle.next_for(event, look_every);
            if (got == RequestHandle::Wait::closed) break;
            if (got == RequestHandle::Wait::event && event.final)
                done = std::move(event.completion);
            if (const auto now = std::chrono::steady_clock::now(); now >= next_look) {
                if (!done && req.is_connection_closed()) handle.cancel();
                next_look = now + look_every;
            }
        }
        const Generation& gen = done->generation;
        pending_log_fields() = log_fields(*done);
        if (gen.error) throw HttpException{http_error(*gen.error)};
        json out = reply.envelope(chat ? "chat.completion" : "text_completion");
        json choice = {{"index", 0}, {"finish_reason", finish_name(gen.finish_reason)}};
        if (chat) {
            const ChatMessage parsed =
                ChatTemplate::parse(gen.text, rendered, gen.finish_reason == FinishReason::stop);
            choice["finish_reason"] = finish_name(gen.finish_reason, !parsed.tool_calls.empty());
            choice["message"] = message_json(parsed);
            choice["logprobs"] = g.logprobs ? chat_logprobs(gen.logprobs) : json(nullptr);
        } else {
            choice["text"] = gen.text;
            choice["logprobs"] = g.logprobs ? completion_logprobs(gen.logprobs) : json(nullptr);
        }
        out["choices"] = json::array({choice});
        out["usage"] = usage_json(gen);
        res.set_content(dump(out), "application/json");
        return;
    }

    // Streaming: the provider runs on this connection's thread until the final event.
    struct Stream {
        Stream(RequestHandle h, Reply r, InFlight c, ChatStreamParser p)
            : handle(std::move(h)),
              reply(std::move(r)),
              counted(std::move(c)),
              parser(std::move(p)) {}
        Stream(const Stream&) = delete;
        Stream& operator=(const Stream&) = delete;

        RequestHandle handle;
        Reply reply;
        bool include_usage = false;
        bool logprobs = false;
        bool started = false;
        InFlight counted;
        ChatStreamParser parser;  // chat only
        // The access-log line, written when the stream ends however it ends.
        const ServerState* server = nullptr;
        std::string method, path;
        std::size_t bytes = 0;
        std::string fields = "finish=disconnected";

        ~Stream() {
            if (server) server->access_log(method, path, 200, bytes, reply.id, fields);
        }
    };
    auto stream = std::make_shared<Stream>(std::move(*submitted), reply, std::move(counted),
                                           ChatStreamParser(rendered));
    stream->include_usage = g.include_usage;
    stream->logprobs = g.logprobs;
    stream->method = req.method;
    stream->path = req.path;
    stream->server = this;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [stream, chat](std::size_t,
                                                                         httplib::DataSink& sink) {
        Stream& s = *stream;
        EngineEvent event;
        for (;;) {
            const auto got = s.handle.next_for(event, std::chrono::milliseconds(100));
            if (got == RequestHandle::Wait::closed) {
                sink.done();
                return true;
            }
            if (got == RequestHandle::Wait::timeout) {
                if (!sink.is_writable()) {
                    s.handle.cancel();
                    return false;
                }
                continue;
            }
            break;
        }
        std::string out;
        if (chat && !s.started) {
            out += sse(s.reply.chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
            s.started = true;
        }
        if (!event.final) {
            if (!event.piece.text.empty() || event.piece.logprobs) {
                json lp = nullptr;
                if (s.logprobs && event.piece.logprobs) {
                    lp = chat ? chat_logprobs({*event.piece.logprobs})
                              : completion_logprobs({*event.piece.logprobs});
                }
                if (!chat) {
                    out += sse(s.reply.chunk(event.piece.text, nullptr, lp));
                } else if (const ChatDelta d = s.parser.push(event.piece.text);
                           !d.empty() || !lp.is_null()) {
                    out += sse(s.reply.chunk(delta_json(d), nullptr, lp));
                }
            }
        } else {
            const Generation& gen = event.completion->generation;
            s.fields = log_fields(*event.completion);
            if (gen.error) {
                out += sse(http_error(*gen.error).body());
            } else {
                bool tool_calls = false;
                if (chat) {
                    const bool complete = gen.finish_reason == FinishReason::stop;
                    if (const ChatDelta d = s.parser.finish(complete); !d.empty())
                        out += sse(s.reply.chunk(delta_json(d), nullptr, nullptr));
                    tool_calls = !s.parser.message().tool_calls.empty();
                }
                out += sse(s.reply.chunk(chat ? json::object() : json(""),
                                         finish_name(gen.finish_reason, tool_calls), nullptr));
                if (s.include_usage) {
                    json u = s.reply.envelope(chat ? "chat.completion.chunk" : "text_completion");
                    u["choices"] = json::array();
                    u["usage"] = usage_json(gen);
                    out += sse(u);
                }
            }
            out += "data: [DONE]\n\n";
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
            s.handle.cancel();  // the client went away
            return false;
        }
        s.bytes += out.size();
        return true;
    });
}

}  // namespace llamapp::detail
