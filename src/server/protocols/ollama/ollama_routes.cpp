// POST /api/chat, /api/generate, /api/embed and /api/embeddings: Ollama's shapes over the same
// engine submissions as the OpenAI routes. Streams are NDJSON (one object per line), the last
// with done: true and the timings in nanoseconds; an error mid-stream is a line {"error"}.
#include <fmt/core.h>

#include <chrono>

#include "llamapp/chat_stream.hpp"
#include "server/protocols/ollama/ollama.hpp"

namespace llamapp::detail {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t nanoseconds(double ms) {
    return static_cast<std::int64_t>(ms * 1e6);
}
std::int64_t nanoseconds_since(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

std::string ndjson(const json& line) {
    return dump(line) + "\n";
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
    json out = json::array();
    for (std::size_t i = 0; i < calls.size(); ++i) {
        json arguments = json::parse(calls[i].arguments, nullptr, false);
        if (!arguments.is_object()) arguments = json::object();  // cut short by num_predict
        out.push_back(
            {{"id", calls[i].id},
             {"function", {{"index", i}, {"name", calls[i].name}, {"arguments", arguments}}}});
    }
    return out;
}

// Where a reply's text goes: chat's message or generate's response (its reasoning beside it).
class OllamaReply : public StreamFormat {
  public:
    // `chat_shape`: /api/chat's message rather than /api/generate's response. `parsed`: the reply
    // comes from a chat template (reasoning and tool calls split out), not a raw prompt.
    OllamaReply(std::string model, bool chat_shape, bool parsed, const ChatPrompt& prompt,
                Clock::time_point began, std::int64_t load_ns)
        : model_(std::move(model)),
          chat_shape_(chat_shape),
          parsed_(parsed),
          prompt_(prompt),
          parser_(prompt),
          began_(began),
          load_ns_(load_ns) {}

    const char* content_type() const override { return "application/x-ndjson"; }

    std::string piece(const StreamPiece& piece, const std::optional<Progress>&) override {
        if (piece.text.empty()) return {};
        if (!parsed_) return ndjson(line(piece.text, {}, {}));
        const ChatDelta d = parser_.push(piece.text);
        if (d.content.empty() && d.reasoning_content.empty()) return {};
        return ndjson(line(d.content, d.reasoning_content, {}));
    }

    std::string last(const Completion& done) override {
        const Generation& g = done.generation;
        if (g.error) return ndjson({{"error", http_error(*g.error).message}});
        std::string out;
        if (parsed_) {
            const ChatDelta d = parser_.finish(g.finish_reason == FinishReason::stop);
            const auto& calls = parser_.message().tool_calls;
            if (!d.content.empty() || !d.reasoning_content.empty() || !calls.empty())
                out += ndjson(line(d.content, d.reasoning_content, calls));
        }
        return out + ndjson(final_line(done, "", "", {}));
    }

    json whole(const Completion& done) const {
        const Generation& g = done.generation;
        if (!parsed_) return final_line(done, g.text, "", {});
        const ChatMessage m =
            ChatTemplate::parse(g.text, prompt_, g.finish_reason == FinishReason::stop);
        return final_line(done, m.content, m.reasoning_content, m.tool_calls);
    }

  private:
    json line(const std::string& text, const std::string& thinking,
              const std::vector<ToolCall>& calls) const {
        json out = {{"model", model_}, {"created_at", rfc3339()}};
        if (chat_shape_) {
            json message = {{"role", "assistant"}, {"content", text}};
            if (!thinking.empty()) message["thinking"] = thinking;
            if (!calls.empty()) message["tool_calls"] = tool_calls_json(calls);
            out["message"] = std::move(message);
        } else {
            out["response"] = text;
            if (!thinking.empty()) out["thinking"] = thinking;
        }
        out["done"] = false;
        return out;
    }

    json final_line(const Completion& done, const std::string& text, const std::string& thinking,
                    const std::vector<ToolCall>& calls) const {
        const Generation& g = done.generation;
        json out = line(text, thinking, calls);
        out["done"] = true;
        out["done_reason"] = g.finish_reason == FinishReason::length ? "length" : "stop";
        out["total_duration"] = nanoseconds_since(began_);
        out["load_duration"] = load_ns_;
        // Only what was computed: a prefix the cache held is not evaluated again.
        out["prompt_eval_count"] = g.usage.prompt_tokens - g.usage.cached_tokens;
        out["prompt_eval_duration"] = nanoseconds(g.timings.prefill_ms);
        out["eval_count"] = g.usage.completion_tokens;
        out["eval_duration"] = nanoseconds(g.timings.decode_ms);
        return out;
    }

    std::string model_;
    bool chat_shape_ = true;
    bool parsed_ = true;
    ChatPrompt prompt_;
    ChatStreamParser parser_;
    Clock::time_point began_;
    std::int64_t load_ns_ = 0;
};

// {"model", "created_at", "done": true, "done_reason"} for a request that only loads or unloads.
json lifecycle_reply(const std::string& model, bool chat, const char* reason) {
    json out = {{"model", model}, {"created_at", rfc3339()}};
    if (chat)
        out["message"] = {{"role", "assistant"}, {"content", ""}};
    else
        out["response"] = "";
    out["done"] = true;
    out["done_reason"] = reason;
    return out;
}

bool empty_request(const json& body, bool chat) {
    const json* v = optional_field(body, chat ? "messages" : "prompt");
    if (!v || v->is_null()) return true;
    if (chat) return v->is_array() && v->empty();
    return v->is_string() && v->get<std::string>().empty() && !optional_field(body, "suffix");
}

}  // namespace

std::string rfc3339(std::chrono::system_clock::time_point t) {
    const auto seconds = std::chrono::floor<std::chrono::seconds>(t);
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(t - seconds).count();
    const std::time_t whole = std::chrono::system_clock::to_time_t(seconds);
    std::tm utc{};
    gmtime_r(&whole, &utc);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", utc.tm_year + 1900,
                       utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, nanos);
}

json OllamaProtocol::body_of(const httplib::Request& req) const {
    json body = parse_body(req.body);
    if (!body.is_object()) throw HttpException{invalid("", "the body must be a JSON object")};
    const json* model = optional_field(body, "model");
    if (!model) model = optional_field(body, "name");  // the older spelling
    if (!model)
        throw HttpException{invalid("model", "'model' is required", "missing_required_parameter")};
    const std::string asked = string_field(*model, "model");
    // An empty name would mean the default model to the manager; Ollama requires a name.
    if (asked.empty())
        throw HttpException{invalid("model", "'model' must name a model", "invalid_value")};
    // Under "model" whichever spelling came; the manager takes Ollama's forms (hf.co/...,
    // :latest) itself.
    body["model"] = asked;
    body["name"] = asked;  // replies echo the name the client used
    return body;
}

void OllamaProtocol::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    InFlight counted(state_);
    state_.refuse_if_draining();
    const Clock::time_point began = Clock::now();
    const json body = body_of(req);
    const auto keep_alive = ollama_keep_alive(body);
    const std::string name = body["model"].get<std::string>();
    const std::string model = body["name"].get<std::string>();
    const bool empty = empty_request(body, chat);
    if (empty && keep_alive && keep_alive->count() == 0) {
        // Ollama's way to unload: nothing to generate and keep_alive 0. A loaded model gets an
        // idle time of 0, so it goes once its running requests (other clients') are done.
        auto found = state_.models.find(name);
        if (!found) throw HttpException{model_error(found.error())};
        if (found->status == ModelStatus::ready)
            (void)state_.models.acquire(name, Clock::now(), std::chrono::milliseconds(0));
        res.set_content(dump(lifecycle_reply(model, chat, "unload")), "application/json");
        return;
    }
    ServedModel served =
        state_.serve(body, ServerState::Need::generate, ServerState::Naming::exact, keep_alive);
    const std::int64_t load_ns = nanoseconds_since(began);
    if (empty) {
        res.set_content(dump(lifecycle_reply(model, chat, "load")), "application/json");
        return;
    }
    const int n_ctx = served.lease.engine().n_ctx();
    OllamaRequest r =
        chat ? parse_ollama_chat(body, served, n_ctx) : parse_ollama_generate(body, served, n_ctx);
    ChatSubmission submitted = state_.submit(served, r.g, r.chat);
    const std::string id = fmt::format("ollama-{}", state_.next_id.fetch_add(1) + 1);
    res.set_header("X-Request-Id", id);
    auto reply =
        std::make_unique<OllamaReply>(model, chat, r.chat, submitted.prompt, began, load_ns);
    if (!r.g.stream) {
        const Completion done = ServerState::await_whole(req, submitted.handle);
        res.set_content(dump(reply->whole(done)), "application/json");
        return;
    }
    state_.stream_reply(req, res, std::move(served.lease), std::move(submitted.handle),
                        std::move(counted), id, std::move(reply));
}

// /api/embed: {"embeddings": [[...]]}, each normalized; truncate (default true) cuts an input to
// the context instead of refusing it. /api/embeddings (older): one prompt, {"embedding": [...]}
// as computed.
void OllamaProtocol::embed(const httplib::Request& req, httplib::Response& res, bool older) {
    InFlight counted(state_);
    const Clock::time_point began = Clock::now();
    json body = body_of(req);
    if (older) {
        const json* prompt = optional_field(body, "prompt");
        if (!prompt)
            throw HttpException{
                invalid("prompt", "'prompt' is required", "missing_required_parameter")};
        body["input"] = string_field(*prompt, "prompt");
        body["embd_normalize"] = -1;
    }
    bool truncate = true;
    if (const json* v = optional_field(body, "truncate")) truncate = bool_field(*v, "truncate");
    const ServedModel m = state_.serve(body, ServerState::Need::embed, ServerState::Naming::exact,
                                       ollama_keep_alive(body));
    const std::int64_t load_ns = nanoseconds_since(began);
    ComputedEmbeddings e = state_.compute_embeddings(body, m, truncate);
    if (older) {
        res.set_content(dump(json{{"embedding", std::move(e.vectors.front())}}),
                        "application/json");
        return;
    }
    const json out = {{"model", body["name"]},
                      {"embeddings", std::move(e.vectors)},
                      {"total_duration", nanoseconds_since(began)},
                      {"load_duration", load_ns},
                      {"prompt_eval_count", e.prompt_tokens}};
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
