// /v1/completions and /v1/chat/completions: one engine request each, answered whole or as
// Server-Sent Events. A client that goes away cancels its request.
#include <fmt/core.h>

#include <chrono>
#include <span>

#include "core/log_internal.hpp"
#include "llamapp/backend.hpp"
#include "server/protocols/native/native_reply.hpp"
#include "server/protocols/openai/openai.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

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

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
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

// The OpenAI wire format of one reply, whole or streamed, for /v1/completions and
// /v1/chat/completions: both shapes come from the same pieces (envelope, message, logprobs).
class OpenAiReply : public StreamFormat {
  public:
    OpenAiReply(std::string id, std::string model, bool chat, const GenerationRequest& g,
                const ChatPrompt& prompt, std::optional<VerboseReply> verbose)
        : id_(std::move(id)),
          model_(std::move(model)),
          created_(unix_now()),
          chat_(chat),
          logprobs_(g.logprobs),
          include_usage_(g.include_usage),
          telemetry_(g.telemetry),
          prompt_(prompt),
          parser_(prompt),
          verbose_(std::move(verbose)),
          choices_(static_cast<std::size_t>(g.choices)) {}

    // The complete response body: one choice per completion (n), the prompt counted once.
    json whole(std::span<const Completion> all) const {
        const Completion& first = all.front();
        json out = envelope(chat_ ? "chat.completion" : "text_completion");
        json choices = json::array();
        Usage usage = first.generation.usage;
        usage.completion_tokens = 0;
        for (std::size_t i = 0; i < all.size(); ++i) {
            choices.push_back(choice(all[i].generation, i));
            usage.completion_tokens += all[i].generation.usage.completion_tokens;
        }
        out["choices"] = std::move(choices);
        out["usage"] = usage_json(usage);
        out["timings"] = timings_json(first);  // llama-server's extension
        if (verbose_)
            out["__verbose"] = native_final_json(first, verbose_->options, verbose_->context);
        return out;
    }

    // Server-sent events for one streamed piece (empty when it shows nothing yet).
    std::string piece(const StreamPiece& piece, const std::optional<Progress>& so_far) override {
        std::string out = start();
        if (piece.text.empty() && !piece.logprobs) return out;
        json lp = nullptr;
        if (logprobs_ && piece.logprobs) lp = logprobs_json({*piece.logprobs});
        json c;
        if (!chat_) {
            c = chunk(piece.text, nullptr, lp);
        } else if (const ChatDelta d = parser_.push(piece.text); !d.empty() || !lp.is_null()) {
            c = chunk(delta_json(d), nullptr, lp);
        } else {
            return out;
        }
        telemetry_.add(c, so_far, false);
        return out + sse_data(c);
    }

    // llama-server's return_progress: a chunk without text (chat: the role's) with the progress.
    std::string prompt_progress(const Progress& so_far) override {
        if (!telemetry_.return_progress) return {};
        started_ = true;
        json c = chat_ ? chunk({{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr)
                       : chunk("", nullptr, nullptr);
        telemetry_.add(c, so_far, true);
        return sse_data(c);
    }

    // The last events of a stream: the rest of the reply, its finish reason, the usage when
    // asked for (or the error), then [DONE].
    std::string last(const Completion& done) override {
        const Generation& gen = done.generation;
        std::string out = start();
        if (gen.error) return out + sse_data(http_error(*gen.error).body()) + "data: [DONE]\n\n";
        bool tool_calls = false;
        if (chat_) {
            const bool complete = gen.finish_reason == FinishReason::stop;
            if (const ChatDelta d = parser_.finish(complete); !d.empty())
                out += sse_data(chunk(delta_json(d), nullptr, nullptr));
            tool_calls = !parser_.message().tool_calls.empty();
        }
        json finish = chunk(chat_ ? json::object() : json(""),
                            finish_name(gen.finish_reason, tool_calls), nullptr);
        if (verbose_)
            finish["__verbose"] = native_final_json(done, verbose_->options, verbose_->context);
        // The last chunk carries llama-server's timings, as its own does.
        if (!include_usage_) finish["timings"] = timings_json(done);
        out += sse_data(finish);
        completion_tokens_ += gen.usage.completion_tokens;
        if (++index_ < choices_) {
            // The next choice's events follow (stream_reply's `more`): it starts afresh.
            parser_ = ChatStreamParser(prompt_);
            started_ = false;
            return out;
        }
        if (include_usage_) {
            json u = envelope(chat_ ? "chat.completion.chunk" : "text_completion");
            u["choices"] = json::array();
            Usage usage = gen.usage;  // the prompt counted once, every choice's tokens
            usage.completion_tokens = completion_tokens_;
            u["usage"] = usage_json(usage);
            u["timings"] = timings_json(done);
            out += sse_data(u);
        }
        return out + "data: [DONE]\n\n";
    }

  private:
    json choice(const Generation& gen, std::size_t index) const {
        json c = {{"index", index}, {"finish_reason", finish_name(gen.finish_reason)}};
        if (chat_) {
            const ChatMessage parsed =
                ChatTemplate::parse(gen.text, prompt_, gen.finish_reason == FinishReason::stop);
            c["finish_reason"] = finish_name(gen.finish_reason, !parsed.tool_calls.empty());
            c["message"] = message_json(parsed);
        } else {
            c["text"] = gen.text;
        }
        c["logprobs"] = logprobs_ ? logprobs_json(gen.logprobs) : json(nullptr);
        return c;
    }
    json envelope(const char* object) const {
        static const std::string fingerprint = llama_build_tag();
        return {{"id", id_},
                {"object", object},
                {"created", created_},
                {"model", model_},
                {"system_fingerprint", fingerprint}};
    }
    json chunk(json delta_or_text, const json& finish, const json& logprobs) const {
        json c = envelope(chat_ ? "chat.completion.chunk" : "text_completion");
        json choice = {{"index", index_}, {"finish_reason", finish}, {"logprobs", logprobs}};
        choice[chat_ ? "delta" : "text"] = std::move(delta_or_text);
        c["choices"] = json::array({choice});
        return c;
    }
    json logprobs_json(const std::vector<TokenLogprobs>& all) const {
        return chat_ ? chat_logprobs(all) : completion_logprobs(all);
    }
    // A chat stream opens with the assistant's role, once (its content null, as llama-server
    // sends it).
    std::string start() {
        if (!chat_ || started_) return {};
        started_ = true;
        return sse_data(chunk({{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr));
    }

    std::string id_;
    std::string model_;
    std::int64_t created_ = 0;
    bool chat_ = false;
    bool logprobs_ = false;
    bool include_usage_ = false;
    StreamTelemetry telemetry_;
    ChatPrompt prompt_;        // chat: how to parse the reply
    ChatStreamParser parser_;  // chat, streamed
    std::optional<VerboseReply> verbose_;
    bool started_ = false;  // of the choice streamed now
    std::size_t choices_ = 1;
    std::size_t index_ = 0;      // the choice streamed now
    int completion_tokens_ = 0;  // of the choices streamed so far
};

// The tokens a text prompt was submitted as, for the verbose object (the engine tokenized it).
std::vector<Token> tokens_of(const Tokenizer& tokenizer, const std::string& text) {
    auto tokens = tokenizer.encode(text);
    return tokens ? std::move(*tokens) : std::vector<Token>{};
}

}  // namespace

void OpenAiProtocol::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    // Counted from the start, so a drain that begins now waits for this request (checked again
    // here: the pre-routing check may have passed just before the drain began).
    InFlight counted(state_);
    state_.refuse_if_draining();
    const json body = parse_body(req.body);
    ServedModel served = state_.serve(body, ServerState::Need::generate);
    const RequestDefaults& defaults = served.lease.defaults();
    GenerationRequest g = chat ? parse_chat(body, served.limits, defaults)
                               : parse_completion(body, served.limits, defaults);
    std::optional<VerboseReply> verbose;
    if (g.verbose.value_or(state_.options.verbose_replies))
        verbose = VerboseReply{
            g.engine.options, {.model = served.lease.id(), .n_ctx = served.lease.engine().n_ctx()}};
    const Tokenizer tokenizer = served.lease.model().tokenizer();
    std::vector<Token> prompt;  // a completion's, for the verbose object
    if (verbose && !chat)
        prompt = g.prompt_text.empty() ? g.engine.prompt : tokens_of(tokenizer, g.prompt_text);
    // n > 1: each further choice is a request of its own (a seed given is moved on per choice,
    // so that the choices differ and stay reproducible), all submitted before any is awaited.
    std::vector<GenerationRequest> others(static_cast<std::size_t>(g.choices - 1), g);
    const std::uint32_t seed = g.engine.options.sampling.seed;
    for (std::size_t i = 0; i < others.size() && seed != random_seed; ++i)
        others[i].engine.options.sampling.seed = seed + static_cast<std::uint32_t>(i + 1);
    ChatSubmission submitted = state_.submit(served, g, chat);
    std::vector<RequestHandle> more;
    for (GenerationRequest& other : others)
        more.push_back(state_.submit(served, other, chat).handle);
    if (verbose) {
        if (chat) prompt = submitted.prompt.tokens;
        verbose->context.prompt_text = detokenized(tokenizer, prompt);
        verbose->context.prompt_tokens = static_cast<int>(prompt.size());
    }
    const std::string id =
        fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", state_.next_id.fetch_add(1) + 1);
    auto reply = std::make_unique<OpenAiReply>(id, served.lease.id(), chat, g, submitted.prompt,
                                               std::move(verbose));
    res.set_header("X-Request-Id", id);
    if (!g.stream) {
        std::vector<Completion> done = {ServerState::await_whole(req, submitted.handle)};
        for (RequestHandle& h : more) done.push_back(ServerState::await_whole(req, h));
        res.set_content(dump(reply->whole(done)), "application/json");
        return;
    }
    state_.stream_reply(req, res, std::move(served.lease), std::move(submitted.handle),
                        std::move(counted), id, std::move(reply), std::move(more));
}

}  // namespace llamapp::detail

namespace llamapp::detail {

void OpenAiProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    on.post("/v1/completions", [this](Req req, Res res) { generate(req, res, false); });
    // llama-server's unprefixed name too (its /completions is the native route).
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
        on.post(path, [this](Req req, Res res) { generate(req, res, true); });
    for (const char* path : {"/v1/embeddings", "/embeddings"})
        on.post(path, [this](Req req, Res res) { embeddings(req, res); });
}

}  // namespace llamapp::detail
