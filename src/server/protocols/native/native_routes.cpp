// llama-server's own routes, as its tools/server answers them: /completion (and /completions),
// /infill, /tokenize, /detokenize, /apply-template, the chat token count, /props and /slots.
// Parsing and formatting only; the work is the engine's, as for the OpenAI routes.
#include <fmt/core.h>

#include "llamapp/backend.hpp"
#include "server/protocols/native/infill.hpp"
#include "server/protocols/native/native.hpp"
#include "server/protocols/native/native_reply.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// One prompt: text, token ids, a mix of both (only a leading text gets the BOS token), or
// {"prompt_string": text}. Text may hold the model's special tokens, as llama-server reads it.
std::vector<Token> prompt_tokens(const json& p, const Tokenizer& tokenizer, int vocab_size) {
    auto encode = [&](const json& text, bool first) {
        auto tokens =
            tokenizer.encode(string_field(text, "prompt"),
                             TokenizeOptions{.add_special = first, .parse_special = true});
        if (!tokens) throw HttpException{http_error(tokens.error(), "prompt")};
        return std::move(*tokens);
    };
    if (p.is_string()) return encode(p, true);
    if (p.is_object()) {
        if (p.contains("multimodal_data"))
            reject_field("prompt", "multimodal input is not supported yet");
        const json* text = optional_field(p, "prompt_string");
        if (!text) reject_field("prompt", "a prompt object needs 'prompt_string'");
        return encode(*text, true);
    }
    if (!p.is_array() || p.empty())
        reject_field("prompt", "a prompt is text, token ids, or a list of both", "invalid_type");
    std::vector<Token> out;
    for (std::size_t i = 0; i < p.size(); ++i) {
        if (p[i].is_string()) {
            const std::vector<Token> part = encode(p[i], i == 0);
            out.insert(out.end(), part.begin(), part.end());
        } else {
            out.push_back(static_cast<Token>(integer_field(p[i], "prompt", 0, vocab_size - 1)));
        }
    }
    return out;
}

// A list without a token id at its top is a list of prompts, each answered on its own.
std::vector<std::vector<Token>> prompts_of(const json& body, const Tokenizer& tokenizer,
                                           int vocab_size) {
    const json* prompt = optional_field(body, "prompt");
    if (!prompt) reject_field("prompt", "'prompt' is required", "missing_required_parameter");
    const bool several = prompt->is_array() && !prompt->empty() &&
                         std::none_of(prompt->begin(), prompt->end(),
                                      [](const json& e) { return e.is_number_integer(); });
    std::vector<std::vector<Token>> out;
    if (!several) {
        out.push_back(prompt_tokens(*prompt, tokenizer, vocab_size));
    } else {
        for (const json& p : *prompt) out.push_back(prompt_tokens(p, tokenizer, vocab_size));
    }
    return out;
}

std::vector<std::string> string_list(const json& body, const char* name) {
    std::vector<std::string> out;
    if (const json* v = optional_field(body, name)) {
        if (!v->is_array()) reject_field(name, fmt::format("'{}' must be a list", name));
        for (const json& s : *v) out.push_back(string_field(s, name));
    }
    return out;
}

// The native options beside the shared ones.
struct NativeRequest {
    GenerationRequest generation;
    bool return_tokens = false;
    std::vector<std::string> response_fields;
};

NativeRequest parse_native(const json& body, const ServedModel& m) {
    NativeRequest r;
    RequestLimits limits = m.limits;
    limits.tokenizer = m.lease.model().tokenizer();  // logit_bias may name text
    r.generation = parse_generation(body, limits, m.lease.defaults());
    if (const json* v = optional_field(body, "return_tokens"))
        r.return_tokens = bool_field(*v, "return_tokens");
    if (const json* v = optional_field(body, "post_sampling_probs"))
        r.generation.engine.options.post_sampling_probs = bool_field(*v, "post_sampling_probs");
    r.response_fields = string_list(body, "response_fields");
    return r;
}

// llama-server's native stream: one object per piece, then the final object; no [DONE].
class NativeStreamFormat : public StreamFormat {
  public:
    NativeStreamFormat(GenerateOptions options, NativeReplyContext context,
                       StreamTelemetry telemetry)
        : options_(std::move(options)), context_(std::move(context)), telemetry_(telemetry) {}

    std::string piece(const StreamPiece& piece, const std::optional<Progress>& so_far) override {
        json chunk = native_chunk_json(piece, ++predicted_, context_);
        telemetry_.add(chunk, so_far, false);
        return sse_data(chunk);
    }
    std::string prompt_progress(const Progress& so_far) override {
        if (!telemetry_.return_progress) return {};
        json chunk = native_chunk_json(StreamPiece{}, 0, context_);
        telemetry_.add(chunk, so_far, true);
        return sse_data(chunk);
    }
    std::string last(const Completion& done) override {
        if (done.generation.error) return sse_data(http_error(*done.generation.error).body());
        return sse_data(native_final_json(done, options_, context_));
    }

  private:
    GenerateOptions options_;
    NativeReplyContext context_;
    StreamTelemetry telemetry_;
    int predicted_ = 0;
};

}  // namespace

void NativeProtocol::completion(const httplib::Request& req, httplib::Response& res, bool infill) {
    InFlight counted(state_);
    state_.refuse_if_draining();
    const json body = parse_body(req.body);
    ServedModel served = state_.serve(body, ServerState::Need::generate);
    const Tokenizer tokenizer = served.lease.model().tokenizer();
    NativeRequest native = parse_native(body, served);
    GenerationRequest& g = native.generation;
    Engine& engine = served.lease.engine();
    const std::vector<std::vector<Token>> prompts =
        infill ? std::vector<std::vector<Token>>{infill_prompt(
                     body, tokenizer,
                     {.n_batch = engine.n_batch(),
                      .n_ctx = engine.n_ctx(),
                      .n_predict = g.engine.options.max_tokens})}
               : prompts_of(body, tokenizer, served.limits.vocab_size);
    if (g.stream && prompts.size() > 1)
        reject_field("prompt", "a streamed request takes one prompt");
    NativeReplyContext context{.model = served.lease.id(),
                               .n_ctx = engine.n_ctx(),
                               .stream = g.stream,
                               .return_tokens = native.return_tokens,
                               .post_sampling_probs = g.engine.options.post_sampling_probs};
    g.engine.options.timeout = state_.options.request_timeout;
    g.engine.max_prompt_tokens = static_cast<std::size_t>(served.max_prompt_tokens);
    const std::string id = fmt::format("cmpl-{}", state_.next_id.fetch_add(1) + 1);
    res.set_header("X-Request-Id", id);
    std::vector<RequestHandle> handles;
    for (const std::vector<Token>& prompt : prompts) {
        EngineRequest request = g.engine;
        request.prompt = prompt;
        auto submitted = engine.submit(std::move(request));
        if (!submitted) throw HttpException{http_error(submitted.error(), "prompt")};
        handles.push_back(std::move(*submitted));
    }
    if (g.stream) {
        context.prompt_text = detokenized(tokenizer, prompts.front());
        context.prompt_tokens = static_cast<int>(prompts.front().size());
        state_.stream_reply(req, res, std::move(served.lease), std::move(handles.front()),
                            std::move(counted), id,
                            std::make_unique<NativeStreamFormat>(g.engine.options,
                                                                 std::move(context), g.telemetry));
        return;
    }
    json replies = json::array();
    for (std::size_t i = 0; i < handles.size(); ++i) {
        const Completion done = ServerState::await_whole(req, handles[i]);
        context.index = i;
        context.prompt_text = detokenized(tokenizer, prompts[i]);
        context.prompt_tokens = static_cast<int>(prompts[i].size());
        json reply = native_final_json(done, g.engine.options, context);
        if (!native.response_fields.empty()) reply = select_fields(reply, native.response_fields);
        replies.push_back(std::move(reply));
    }
    res.set_content(dump(replies.size() == 1 ? replies[0] : replies), "application/json");
}

// content: text or a mix of text and token ids; add_special off and parse_special on unless
// asked, as llama-server has them; with_pieces pairs each id with its text (or its bytes when
// they are not UTF-8 on their own).
void NativeProtocol::tokenize(const httplib::Request& req, httplib::Response& res) const {
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::tokens);
    const Tokenizer tokenizer = m.lease.model().tokenizer();
    TokenizeOptions t{.add_special = false, .parse_special = true};
    if (const json* v = optional_field(body, "add_special"))
        t.add_special = bool_field(*v, "add_special");
    if (const json* v = optional_field(body, "parse_special"))
        t.parse_special = bool_field(*v, "parse_special");
    bool with_pieces = false;
    if (const json* v = optional_field(body, "with_pieces"))
        with_pieces = bool_field(*v, "with_pieces");
    std::vector<Token> tokens;
    if (const json* content = optional_field(body, "content")) {
        auto encoded = tokenizer.encode(string_field(*content, "content"), t);
        if (!encoded) throw HttpException{http_error(encoded.error(), "content")};
        tokens = std::move(*encoded);
    }
    json out = json::array();
    for (Token id : tokens) {
        if (!with_pieces) {
            out.push_back(id);
            continue;
        }
        auto piece = tokenizer.piece(id, /*render_special=*/true);
        const std::string text = piece ? *piece : std::string();
        json bytes = json::array();
        for (unsigned char c : text) bytes.push_back(c);
        out.push_back({{"id", id}, {"piece", utf8_sanitize(text) == text ? json(text) : bytes}});
    }
    res.set_content(dump(json{{"tokens", std::move(out)}}), "application/json");
}

void NativeProtocol::detokenize(const httplib::Request& req, httplib::Response& res) const {
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::tokens);
    std::vector<Token> ids;
    if (const json* tokens = optional_field(body, "tokens")) {
        if (!tokens->is_array())
            reject_field("tokens", "'tokens' must be an array of token ids", "invalid_type");
        for (const json& t : *tokens)
            ids.push_back(
                static_cast<Token>(integer_field(t, "tokens", 0, m.limits.vocab_size - 1)));
    }
    auto text = m.lease.model().tokenizer().decode(ids, /*render_special=*/true);
    if (!text) throw HttpException{http_error(text.error(), "tokens")};
    res.set_content(dump(json{{"content", *text}}), "application/json");
}

namespace {

// A chat request's messages and render options, with its model's template.
struct ChatInput {
    ServedModel model;
    GenerationRequest request;
};

ChatInput chat_input(const ServerState& server, const httplib::Request& req) {
    const json body = parse_body(req.body);
    ServedModel m = server.serve(body, ServerState::Need::generate);
    GenerationRequest g = parse_chat(body, m.limits, m.lease.defaults());
    return {std::move(m), std::move(g)};
}

}  // namespace

// The chat template rendered for `messages` (with tools and template switches), unsent.
void NativeProtocol::apply_template(const httplib::Request& req, httplib::Response& res) const {
    const ChatInput in = chat_input(state_, req);
    auto prompt = chat_template_of(in.model.lease).apply(in.request.messages, in.request.render);
    if (!prompt) throw HttpException{http_error(prompt.error(), "messages")};
    res.set_content(dump(json{{"prompt", *prompt}}), "application/json");
}

// The prompt tokens a chat request would take, without running it ({"input_tokens": n}).
void NativeProtocol::count_chat_tokens(const httplib::Request& req, httplib::Response& res) const {
    const ChatInput in = chat_input(state_, req);
    auto prompt = chat_template_of(in.model.lease).render(in.request.messages, in.request.render);
    if (!prompt) throw HttpException{http_error(prompt.error(), "messages")};
    res.set_content(dump(json{{"input_tokens", prompt->tokens.size()}}), "application/json");
}

// What llama-server says about itself and its model (the default one, or ?model=).
namespace {

// What /props says of a model whether it is loaded or asleep.
json props_json(const ServerOptions& options, const std::string& id,
                const std::filesystem::path& path, int n_ctx, int slots, bool sleeping) {
    return {{"default_generation_settings", {{"n_ctx", n_ctx}}},
            {"total_slots", slots},
            {"model_alias", id},
            {"model_path", path.string()},
            {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
            {"endpoint_slots", options.slots_route},
            {"endpoint_props", false},
            {"endpoint_metrics", true},
            {"ui", false},
            {"build_info", llama_build_tag()},
            {"is_sleeping", sleeping},
            {"devices", devices_json()}};
}

}  // namespace

void NativeProtocol::props(const httplib::Request& req, httplib::Response& res) const {
    if (state_.options.router && !req.has_param("model")) {
        // The server itself, in the shape llama-server's router gives: its fields for one model
        // hold placeholders, and ?model= names one.
        const ModelManagerOptions& manager = state_.models.options();
        res.set_content(
            dump(json{{"role", "router"},
                      {"max_instances", manager.max_models},
                      {"models_autoload", manager.load_on_request},
                      {"model_alias", "llamapp"},
                      {"model_path", "none"},
                      {"default_generation_settings", {{"params", json::object()}, {"n_ctx", 0}}},
                      {"build_info", llama_build_tag()}}),
            "application/json");
        return;
    }
    json body = json::object();
    if (req.has_param("model")) body["model"] = req.get_param_value("model");
    // A model its keep-alive unloaded is asleep, as llama-server's --sleep-idle-seconds has it:
    // /props says so from the listing and does not wake it; a request that needs it does.
    const std::string name = req.has_param("model") ? req.get_param_value("model") : "";
    if (auto listed = state_.models.find(name);
        listed && listed->status == ModelStatus::unloaded && !listed->error) {
        res.set_content(dump(props_json(state_.options, listed->id, listed->path, listed->n_ctx,
                                        listed->slots, true)),
                        "application/json");
        return;
    }
    // A ready model is only read: the reply does not restart its keep-alive.
    std::optional<ModelLease> ready = state_.models.acquire_if_ready(name);
    if (ready && !ready->capabilities().generate) ready.reset();
    const ServedModel m =
        ready ? ServedModel{std::move(*ready)} : state_.serve(body, ServerState::Need::generate);
    Engine& engine = m.lease.engine();
    GenerateOptions defaults;
    defaults.sampling = m.lease.defaults().sampling;
    defaults.max_tokens = -1;  // as llama-server lists it: the request's, else the flag's
    const Tokenizer tokenizer = m.lease.model().tokenizer();
    const SpecialTokens& tokens = m.lease.model().info().special;
    auto special = [&](Token t) {
        auto piece = t == no_token ? Result<std::string>(std::string()) : tokenizer.piece(t, true);
        return piece ? *piece : std::string();
    };
    const ChatTemplate* chat_template = m.lease.chat_template();
    json out = props_json(state_.options, m.lease.id(), m.lease.model().info().path, engine.n_ctx(),
                          engine.stats().slots, false);
    out["default_generation_settings"]["params"] = generation_settings_json(defaults, false);
    const SpeculativeOptions& drafts = engine.speculative();
    json& params = out["default_generation_settings"]["params"];
    params["speculative.types"] = drafts.enabled() ? to_string(drafts.kinds) : "none";
    params["speculative.n_max"] = drafts.n_max;
    params["speculative.n_min"] = drafts.n_min;
    out["chat_template"] = chat_template ? chat_template->source() : std::string();
    out["bos_token"] = special(tokens.bos);
    out["eos_token"] = special(tokens.eos);
    res.set_content(dump(out), "application/json");
}

// One object per slot of the default model (or ?model=).
void NativeProtocol::slots(const httplib::Request& req, httplib::Response& res) const {
    if (!state_.options.slots_route)
        throw HttpException{protocol_error(501, "not_supported_error",
                                           "This server does not support slots endpoint. Start "
                                           "it with `--slots`")};
    json body = json::object();
    if (req.has_param("model")) body["model"] = req.get_param_value("model");
    const ServedModel m = state_.serve(body, ServerState::Need::generate);
    Engine& engine = m.lease.engine();
    const EngineStats stats = engine.stats();
    json out = json::array();
    for (int i = 0; i < static_cast<int>(stats.slot_running.size()); ++i)
        out.push_back({{"id", i},
                       {"n_ctx", engine.n_ctx()},
                       {"speculative", engine.speculative().enabled()},
                       {"is_processing", stats.slot_running.at(static_cast<std::size_t>(i))}});
    res.set_content(dump(out), "application/json");
}

// llama-server's /embedding: the inputs also from "content", answered as
// [{"index": i, "embedding": [vector]}].
void NativeProtocol::embedding(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(state_);  // from the start: a drain that begins now waits for this request
    json body = parse_body(req.body);
    if (const json* content = optional_field(body, "content"); content && !body.contains("input"))
        body["input"] = *content;
    const ServedModel m = state_.serve(body, ServerState::Need::embed);
    ComputedEmbeddings e = state_.compute_embeddings(body, m, false);
    json out = json::array();
    for (std::size_t i = 0; i < e.vectors.size(); ++i)
        out.push_back({{"index", i}, {"embedding", json::array({std::move(e.vectors[i])})}});
    res.set_content(dump(out), "application/json");
}

void NativeProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    for (const char* path : {"/completion", "/completions"})
        on.post(path, [this](Req req, Res res) { completion(req, res, false); });
    on.post("/infill", [this](Req req, Res res) { completion(req, res, true); });
    on.post("/tokenize", [this](Req req, Res res) { tokenize(req, res); });
    on.post("/detokenize", [this](Req req, Res res) { detokenize(req, res); });
    on.post("/apply-template", [this](Req req, Res res) { apply_template(req, res); });
    for (const char* path : {"/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"})
        on.post(path, [this](Req req, Res res) { count_chat_tokens(req, res); });
    on.get("/props", [this](Req req, Res res) { props(req, res); });
    on.get("/slots", [this](Req req, Res res) { slots(req, res); });
    on.post("/slots/:id_slot", [this](Req req, Res res) { slot_action(req, res); });
    on.post("/embedding", [this](Req req, Res res) { embedding(req, res); });
    for (const char* path : {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"})
        on.post(path, [this](Req req, Res res) { rerank(req, res); });
}

}  // namespace llamapp::detail
