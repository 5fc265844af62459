// Engine facade: validation and tokenization on the caller's thread, then the engine core.
#include "llamapp/engine.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "core/internals.hpp"
#include "core/model_state.hpp"
#include "engine/engine_core.hpp"
#include "engine/kv_persistence.hpp"

namespace llamapp {

std::string_view to_string(LifecycleStage stage) {
    switch (stage) {
        case LifecycleStage::admitted:
            return "admitted";
        case LifecycleStage::first_token:
            return "first_token";
        case LifecycleStage::finished:
            return "finished";
        case LifecycleStage::cancelled:
            return "cancelled";
        case LifecycleStage::rejected:
            return "rejected";
    }
    return "rejected";
}

namespace {

Result<void> validate(const EngineOptions& o) {
    if (o.max_queued_requests < 1)
        return fail(ErrorCode::invalid_argument, "max_queued_requests must be >= 1",
                    "max_queued_requests");
    if (o.max_queued_tokens < 1)
        return fail(ErrorCode::invalid_argument, "max_queued_tokens must be >= 1",
                    "max_queued_tokens");
    if (o.prefill_chunk < 1)
        return fail(ErrorCode::invalid_argument, "prefill_chunk must be >= 1", "prefill_chunk");
    if (!(o.min_prefix_similarity >= 0 && o.min_prefix_similarity <= 1))
        return fail(ErrorCode::invalid_argument, "min_prefix_similarity must be in [0, 1]",
                    "min_prefix_similarity");
    if (auto ok = o.speculative.validate(); !ok) return ok;
    if (o.min_prefill_rows < 0)
        return fail(ErrorCode::invalid_argument, "min_prefill_rows must be >= 0",
                    "min_prefill_rows");
    if (o.min_adopt_tokens < 0)
        return fail(ErrorCode::invalid_argument, "min_adopt_tokens must be >= 0",
                    "min_adopt_tokens");
    if (o.queue_timeout.count() < 0)
        return fail(ErrorCode::invalid_argument, "queue_timeout must be >= 0", "queue_timeout");
    if (o.context.embeddings)
        return fail(ErrorCode::invalid_argument, "an engine generates text; embeddings is set",
                    "embeddings");
    return {};
}

}  // namespace

Engine::Engine(std::unique_ptr<detail::EngineCore> core) : core_(std::move(core)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Result<Engine> Engine::create(const Model& model, EngineOptions options) {
    if (auto ok = validate(options); !ok) return std::unexpected(ok.error());
    if (options.deterministic) {
        options.context.n_seq_max = options.slots();
        options.prefix_reuse = false;
        options.speculative.n_max = 0;
    }
    options.context.kv_unified = options.unified_kv();
    auto context = Context::create(model, options.context);
    if (!context) return std::unexpected(context.error());
    if (!detail::context_state(*context).sequences.exists()) {
        return fail(ErrorCode::unsupported_operation,
                    "this model has no KV cache and cannot generate text",
                    model.info().architecture);
    }
    if (!options.metrics) options.metrics = std::make_shared<MetricsRegistry>();
    auto metrics = detail::EngineMetrics::create(options.metrics, options.metric_labels);
    if (!metrics) return std::unexpected(metrics.error());
    ReuseModes modes = detail::context_state(*context).sequences.probe(
        model.tokenizer().vocab_size(), model.info().sliding_window);
    // A draft not taken is cut off the cache's tail, which a recurrent state cannot do.
    if (!modes.trim_tail) options.speculative.n_max = 0;
    const int n_ctx_seq = detail::context_state(*context).n_ctx_seq();
    auto persistence = detail::make_store_settings(model, options, modes, n_ctx_seq);
    if (!persistence) return std::unexpected(persistence.error());
    std::unique_ptr<detail::DraftModel> draft;
    if (options.speculative.uses(DraftKind::draft_simple)) {
        auto made = detail::DraftModel::create(model, detail::context_state(*context),
                                               options.speculative.draft);
        if (!made) return std::unexpected(made.error());
        draft = std::move(*made);
    }
    auto core = std::make_unique<detail::EngineCore>(std::move(*context), std::move(options),
                                                     std::move(*metrics), std::move(modes),
                                                     std::move(*persistence), std::move(draft));
    core->start();
    return Engine(std::move(core));
}

namespace {

// Validates one request on the caller's thread and builds what the engine core needs.
Result<std::unique_ptr<detail::Pending>> prepare(detail::EngineCore& s, EngineRequest request) {
    const auto submitted = detail::Reply::Clock::now();
    const GenerateOptions& o = request.options;
    if (auto ok = o.validate(); !ok) return std::unexpected(ok.error());
    if (auto ok = detail::validate_prompt(s.model(), request.prompt); !ok)
        return std::unexpected(ok.error());
    if (static_cast<std::int64_t>(request.prompt.size()) >= s.n_ctx_seq()) {
        // llama-server's wording, which its clients look for.
        return fail(ErrorCode::context_overflow,
                    fmt::format("request ({} tokens) exceeds the available context size ({} "
                                "tokens), try increasing it",
                                request.prompt.size(), s.n_ctx_seq()));
    }
    if (request.max_prompt_tokens > 0 && request.prompt.size() > request.max_prompt_tokens) {
        return fail(ErrorCode::context_overflow,
                    fmt::format("the prompt has {} tokens; at most {} are accepted",
                                request.prompt.size(), request.max_prompt_tokens));
    }
    if (request.queue_timeout.count() < -1) {
        return fail(ErrorCode::invalid_argument, "queue_timeout must be >= -1", "queue_timeout");
    }
    for (const auto& [value, field] : {std::pair{request.draft_max, "speculative.n_max"},
                                       std::pair{request.draft_min, "speculative.n_min"}})
        if (value < -1 || value > max_draft_tokens)
            return fail(
                ErrorCode::invalid_argument,
                fmt::format("{} must be in [0, {}], got {}", field, max_draft_tokens, value),
                field);
    if (request.draft_max >= 0 && request.draft_min > request.draft_max)
        return fail(ErrorCode::invalid_argument,
                    fmt::format("speculative.n_min ({}) exceeds speculative.n_max ({})",
                                request.draft_min, request.draft_max),
                    "speculative.n_min");
    if (request.slot != -1)
        if (auto ok = s.check_slot(request.slot); !ok) return std::unexpected(ok.error());
    if (request.slot >= 0 && !request.session.empty())
        return fail(ErrorCode::invalid_argument,
                    "a request names a slot or a session, not both: a session has its own slot",
                    "slot");
    auto sampler = detail::Sampler::create(detail::model_state(s.model()), o.sampling, o.ignore_eos,
                                           s.n_ctx_seq());
    if (!sampler) return std::unexpected(sampler.error());

    auto pending = std::make_unique<detail::Pending>();
    pending->id = s.next_id();
    pending->submitted = submitted;
    pending->reply = std::make_unique<detail::Reply>(s.model(), o, std::move(*sampler), submitted);
    const auto queue_timeout =
        request.queue_timeout.count() < 0 ? s.options().queue_timeout : request.queue_timeout;
    if (queue_timeout.count() > 0) pending->queue_deadline = submitted + queue_timeout;
    if (o.timeout.count() > 0) pending->deadline = submitted + o.timeout;
    // A token of the request's own: the caller's token still cancels it, but cancelling this
    // handle does not reach other requests submitted with copies of the same options.
    pending->channel =
        std::make_shared<detail::RequestChannel>(pending->id, o.cancel.child(), s.inbox());
    pending->request = std::move(request);
    s.persistence().prefetch(*pending);  // disk reads happen here, not on the decode thread
    return pending;
}

// Counts and reports a request that never reached the queue.
Error rejected(detail::EngineCore& s, Error error, std::string_view session) {
    s.metrics().count_rejected();
    LifecycleEvent e;
    e.stage = LifecycleStage::rejected;
    e.session = session;
    e.error = &error;
    s.notify(e);
    return error;
}

}  // namespace

Result<RequestHandle> Engine::submit(EngineRequest request) {
    std::vector<EngineRequest> one;
    one.push_back(std::move(request));
    auto handles = submit_all(std::move(one));
    if (!handles) return std::unexpected(handles.error());
    return std::move(handles->front());
}

Result<std::vector<RequestHandle>> Engine::submit_all(std::vector<EngineRequest> requests) {
    detail::EngineCore& s = *core_;
    if (requests.empty()) return std::vector<RequestHandle>{};
    std::vector<std::unique_ptr<detail::Pending>> pending;
    std::vector<std::string> sessions;
    for (auto& r : requests) {
        sessions.push_back(r.session);
        auto p = prepare(s, std::move(r));
        if (!p) {
            for (const auto& id : sessions) rejected(s, p.error(), id);
            return std::unexpected(p.error());
        }
        pending.push_back(std::move(*p));
    }
    std::vector<std::shared_ptr<detail::RequestChannel>> channels;
    for (const auto& p : pending) channels.push_back(p->channel);
    if (auto ok = s.enqueue(std::move(pending)); !ok) {
        for (const auto& id : sessions) rejected(s, ok.error(), id);
        return std::unexpected(ok.error());
    }
    std::vector<RequestHandle> handles;
    for (auto& c : channels) handles.emplace_back(std::move(c));
    return handles;
}

Result<RequestHandle> Engine::submit(std::string_view prompt, EngineRequest request) {
    detail::EngineCore& s = *core_;
    if (prompt.empty())
        return std::unexpected(rejected(
            s, Error{ErrorCode::invalid_argument, "prompt is empty", "prompt"}, request.session));
    auto tokens = model().tokenizer().encode(prompt, request.options.tokenize);
    if (!tokens) return std::unexpected(rejected(s, tokens.error(), request.session));
    request.prompt = std::move(*tokens);
    return submit(std::move(request));
}

Result<ChatSubmission> Engine::submit_chat(const ChatTemplate& chat_template,
                                           const std::vector<ChatMessage>& messages,
                                           EngineRequest request, const ChatRenderOptions& render) {
    detail::EngineCore& s = *core_;
    auto prompt = chat_template.render_for(messages, render, request.options);
    if (!prompt) return std::unexpected(rejected(s, prompt.error(), request.session));
    request.prompt = prompt->tokens;
    auto handle = submit(std::move(request));
    if (!handle) return std::unexpected(handle.error());
    return ChatSubmission{std::move(*handle), std::move(*prompt)};
}

Result<void> Engine::fork_session(const std::string& from, const std::string& to,
                                  const std::string& scope) {
    if (from.empty() || to.empty())
        return fail(ErrorCode::invalid_argument, "session ids must not be empty", "session");
    return core_->on_decode_thread<void>([&] { return core_->fork(from, to, scope); });
}

Result<void> Engine::end_session(const std::string& id, const std::string& scope) {
    return core_->on_decode_thread<void>([&] { return core_->end(id, scope); });
}

std::vector<SessionInfo> Engine::sessions() const {
    auto list = core_->on_decode_thread<std::vector<SessionInfo>>(
        [&]() -> Result<std::vector<SessionInfo>> { return core_->list_sessions(); });
    return list ? std::move(*list) : std::vector<SessionInfo>{};
}

Result<SlotSnapshot> Engine::save_slot(int slot, const std::string& scope) {
    detail::EngineCore& s = *core_;
    if (!s.persistence().stores())
        return fail(ErrorCode::unsupported_operation, "this engine has no KV store to save into");
    auto saved = s.on_idle_slot<SlotSnapshot>(slot, [&](detail::Slot& sl) -> Result<SlotSnapshot> {
        // Another scope's tokens are not this caller's to read: they look like an empty slot.
        if (sl.scope != scope && !s.slots().held(sl).empty())
            return fail(ErrorCode::invalid_argument, fmt::format("slot {} holds no tokens", sl.seq),
                        "slot");
        return s.slot_actions().save(sl);
    });
    if (!saved) return saved;
    // The write happens on the store's writer thread; the caller waits for it, not the engine.
    const auto started = detail::Reply::Clock::now();
    if (auto ok = s.persistence().wait_until_stored(saved->tokens, scope); !ok)
        return std::unexpected(ok.error());
    saved->ms += detail::ms_between(started, detail::Reply::Clock::now());
    return saved;
}

Result<SlotSnapshot> Engine::restore_slot(int slot, std::span<const Token> tokens,
                                          const std::string& scope) {
    detail::EngineCore& s = *core_;
    if (!s.persistence().stores())
        return fail(ErrorCode::unsupported_operation,
                    "this engine has no KV store to restore from");
    if (auto ok = detail::validate_prompt(s.model(), tokens); !ok)
        return std::unexpected(ok.error());
    if (tokens.size() >= static_cast<std::size_t>(s.n_ctx_seq()))
        return fail(ErrorCode::context_overflow,
                    fmt::format("{} tokens do not fit a slot's {}", tokens.size(), s.n_ctx_seq()));
    // The file is read here, on the caller's thread.
    const std::optional<detail::KvHit> hit = s.persistence().fetch_whole(tokens, scope);
    if (!hit)
        return fail(ErrorCode::not_found,
                    fmt::format("the KV store holds no state of these {} tokens for this model",
                                tokens.size()));
    return s.on_idle_slot<SlotSnapshot>(
        slot, [&](detail::Slot& sl) { return s.slot_actions().restore(sl, *hit, scope); });
}

Result<std::size_t> Engine::erase_slot(int slot) {
    detail::EngineCore& s = *core_;
    return s.on_idle_slot<std::size_t>(
        slot, [&](detail::Slot& sl) -> Result<std::size_t> { return s.slot_actions().erase(sl); });
}

void Engine::shutdown(std::chrono::milliseconds grace) {
    core_->shutdown(grace);
}

const Model& Engine::model() const {
    return core_->model();
}
const ReuseModes& Engine::reuse_modes() const {
    return core_->modes();
}
EngineStats Engine::stats() const {
    return core_->stats();
}
MetricsRegistry& Engine::metrics() const {
    return *core_->metrics().registry;
}
int Engine::n_ctx() const {
    return core_->n_ctx_seq();
}

const SpeculativeOptions& Engine::speculative() const {
    return core_->options().speculative;
}

int Engine::n_batch() const {
    return core_->n_batch();
}

}  // namespace llamapp
