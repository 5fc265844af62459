#include "engine/engine_core.hpp"

#include <algorithm>

#include "core/internals.hpp"
#include "core/log_internal.hpp"
#include "llamapp/backend.hpp"

namespace llamapp::detail {

namespace {

// The rules for llama.cpp's CPU flash attention kernel (EngineOptions::min_prefill_rows,
// separate_prompt_rows); GPUs and plain attention behave differently.
bool cpu_flash_attention(const EngineOptions& options) {
    return options.context.flash_attn != FlashAttention::off && offload_device_count() == 0;
}

SchedulerOptions scheduler_options(const EngineOptions& options, const ReuseModes& modes,
                                   const ContextState& state, const Persistence& persistence) {
    SchedulerOptions s;
    s.modes = modes;
    s.prefix_reuse = options.prefix_reuse;
    s.min_prefix_similarity = options.min_prefix_similarity;
    s.min_adopt_tokens = options.min_adopt_tokens;
    s.n_batch = state.n_batch();
    s.n_ctx_seq = state.n_ctx_seq();
    s.n_cells = state.n_ctx();
    s.prefill_chunk = options.prefill_chunk;
    // The slow path is the CPU backend's flash attention; GPUs and plain attention differ.
    const bool cpu_fa = cpu_flash_attention(options);
    s.prefill_rows = cpu_fa ? static_cast<std::size_t>(std::max(0, options.min_prefill_rows)) : 0;
    s.separate_prompt_rows = cpu_fa && options.separate_prompt_rows;
    s.draft_tokens = options.draft_tokens;
    s.draft_match = options.draft_match;
    // Within one ubatch, so that a lead and its drafts are placed together.
    s.draft_rows = std::min(options.draft_batch_rows, state.n_ubatch());
    s.strategy = options.strategy;
    if (persistence.store) {
        s.saves = persistence.policy;
        s.any_prefix_restores =
            persistence.lookup.match == KvMatch::prefix && persistence.lookup.sliding_window == 0;
    }
    return s;
}

}  // namespace

EngineCore::EngineCore(Context context, EngineOptions options, EngineMetrics metrics,
                       ReuseModes modes, Persistence persistence)
    : context_(std::move(context)),
      state_(context_state(context_)),
      options_(std::move(options)),
      metrics_(std::move(metrics)),
      modes_(std::move(modes)),
      persistence_(std::move(persistence)),
      n_ctx_seq_(state_.n_ctx_seq()),
      n_batch_(state_.n_batch()),
      inbox_(std::make_shared<Inbox>()),
      scheduler_(scheduler_options(options_, modes_, state_, persistence_)),
      batch_(n_batch_) {
    const int n_slots = state_.n_seq_max();
    slots_.resize(static_cast<std::size_t>(n_slots));
    for (int i = 0; i < n_slots; ++i) slots_[static_cast<std::size_t>(i)].seq = i;
    metrics_.kv_capacity->set(static_cast<double>(state_.n_ctx()));
}

EngineCore::~EngineCore() {
    shutdown(std::chrono::milliseconds{0});
}

void EngineCore::start() {
    thread_ = std::thread([this] { loop(); });
}

void EngineCore::notify(const LifecycleEvent& event) const {
    if (!options_.on_lifecycle) return;
    try {
        options_.on_lifecycle(event);
    } catch (...) {
        log(LogLevel::warning, "engine: a lifecycle callback threw; ignored");
    }
}

Result<void> EngineCore::enqueue(std::vector<std::unique_ptr<Pending>> pending) {
    std::size_t tokens = 0;
    for (const auto& p : pending) tokens += p->request.prompt.size();
    {
        std::lock_guard lock(inbox_->mutex);
        if (!inbox_->accepting) {
            return fail(ErrorCode::shutting_down, "the engine is shutting down");
        }
        const QueueBounds bounds{options_.max_queued_requests, options_.max_queued_tokens};
        if (auto fits = fits_queue(bounds, inbox_->queued_requests, inbox_->queued_tokens,
                                   pending.size(), tokens);
            !fits)
            return fits;
        inbox_->queued_requests += pending.size();
        inbox_->queued_tokens += tokens;
        for (auto& p : pending) inbox_->submitted.push_back(std::move(p));
        inbox_->dirty = true;
        // Under the inbox lock, so the decode thread cannot finish this work before it is marked.
        std::lock_guard idle_lock(idle_mutex_);
        is_idle_ = false;
    }
    inbox_->wake.notify_one();
    return {};
}

void EngineCore::shutdown(std::chrono::milliseconds grace) {
    {
        std::lock_guard lock(inbox_->mutex);
        inbox_->accepting = false;
    }
    if (grace.count() > 0) {
        std::unique_lock lock(idle_mutex_);
        idle_.wait_for(lock, grace, [&] { return is_idle_; });
    }
    {
        std::lock_guard lock(inbox_->mutex);
        inbox_->stop = true;
        inbox_->dirty = true;
    }
    stop_decoding_.cancel();
    inbox_->wake.notify_one();
    if (thread_.joinable()) thread_.join();
    if (persistence_.store) persistence_.store->store().flush();  // shutdown saves are on disk now
}

EngineStats EngineCore::stats() const {
    EngineStats s;
    s.slots = static_cast<int>(slots_.size());
    s.busy_slots = busy_slots_.load(std::memory_order_relaxed);
    {
        std::lock_guard running(running_mutex_);
        s.slot_running = slot_running_;
    }
    s.kv_tokens = kv_tokens_.load(std::memory_order_relaxed);
    s.n_ctx = n_ctx_seq_;
    s.max_queued_requests = options_.max_queued_requests;
    std::lock_guard lock(inbox_->mutex);
    s.queued_requests = inbox_->queued_requests;
    s.queued_tokens = inbox_->queued_tokens;
    return s;
}

// ---- the loop -------------------------------------------------------------------------------

// The decode thread: take the inbox, expire, run the slot actions, admit, then one step (plan,
// decode, sample, emit) while anything runs, else wait for work.
void EngineCore::loop() {
    while (take_inbox()) {
        reap();
        run_slot_commands();
        admit();
        publish_gauges();
        const bool running = std::any_of(slots_.begin(), slots_.end(),
                                         [](const Slot& s) { return s.running != nullptr; });
        if (running)
            tick();
        else
            wait_for_work();
    }
    end_all_at_shutdown();
}

// Idle: takes the deferred saves once they are due, else sleeps until something arrives, the
// nearest queue deadline passes or the deferred saves fall due.
void EngineCore::wait_for_work() {
    auto until = Clock::time_point::max();
    for (const auto& p : queue_) until = std::min({until, p->queue_deadline, p->deadline});
    if (std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.save_pending; })) {
        if (Clock::now() >= saves_due_) {
            take_deferred_saves();
            return;
        }
        until = std::min(until, saves_due_);
    }
    std::unique_lock lock(inbox_->mutex);
    // Idle only if nothing arrived since take_inbox(): a submit in between has already marked
    // the engine busy, and a stale "idle" would let a graceful shutdown cancel that request.
    if (queue_.empty() && inbox_->submitted.empty()) {
        std::lock_guard idle_lock(idle_mutex_);
        is_idle_ = true;
        idle_.notify_all();
    }
    auto woken = [&] { return inbox_->dirty || inbox_->stop; };
    if (until == Clock::time_point::max())
        inbox_->wake.wait(lock, woken);
    else
        inbox_->wake.wait_until(lock, until, woken);
}

void EngineCore::end_all_at_shutdown() {
    const Error stopped{ErrorCode::shutting_down, "the engine shut down", {}};
    for (auto& slot : slots_) {
        if (slot.running) stop_running(slot, FinishReason::cancelled, stopped);
    }
    std::deque<std::function<void()>> commands;
    {
        std::lock_guard lock(inbox_->mutex);
        for (auto& p : inbox_->submitted) queue_.push_back(std::move(p));
        inbox_->submitted.clear();
        commands.swap(inbox_->commands);
    }
    while (!queue_.empty()) {
        auto p = std::move(queue_.front());
        queue_.pop_front();
        dequeued(*p);
        stop_queued(std::move(p), stopped);
    }
    for (auto& c : commands) c();
    run_slot_commands();  // every slot is idle now
    take_deferred_saves();
    if (persistence_.policy.on_shutdown) {
        for (auto& slot : slots_) save(slot, SaveReason::shutdown);
    }
    publish_gauges();
    std::lock_guard lock(idle_mutex_);
    is_idle_ = true;
    idle_.notify_all();
}

bool EngineCore::take_inbox() {
    std::deque<std::function<void()>> commands;
    {
        std::lock_guard lock(inbox_->mutex);
        if (inbox_->stop) return false;
        for (auto& p : inbox_->submitted) queue_.push_back(std::move(p));
        inbox_->submitted.clear();
        commands.swap(inbox_->commands);
        inbox_->dirty = false;
    }
    for (auto& c : commands) c();
    return true;
}

void EngineCore::dequeued(const Pending& pending) {
    std::lock_guard lock(inbox_->mutex);
    --inbox_->queued_requests;
    inbox_->queued_tokens -= pending.request.prompt.size();
}

void EngineCore::reap() {
    const auto now = Clock::now();
    for (auto it = queue_.begin(); it != queue_.end();) {
        const Pending& p = **it;
        Expiry expiry =
            queued_expiry(now, p.channel->cancel.cancelled(), p.queue_deadline, p.deadline);
        if (!expiry.ends) {
            ++it;
            continue;
        }
        auto pending = std::move(*it);
        it = queue_.erase(it);
        dequeued(*pending);
        stop_queued(std::move(pending), std::move(expiry.error));
    }
    for (auto& slot : slots_) {
        if (!slot.running) continue;
        const Pending& p = *slot.running->pending;
        Expiry expiry = running_expiry(now, p.channel->cancel.cancelled(), p.deadline);
        if (expiry.ends) stop_running(slot, FinishReason::cancelled, std::move(expiry.error));
    }
}

void EngineCore::publish_gauges() {
    int busy = 0;
    std::int64_t kv = 0;
    bool changed = slot_running_seen_.size() != slots_.size();
    slot_running_seen_.resize(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        const bool running = slots_[i].running != nullptr;
        busy += running ? 1 : 0;
        changed = changed || slot_running_seen_[i] != running;
        slot_running_seen_[i] = running;
        kv += static_cast<std::int64_t>(held(slots_[i]).size());
    }
    // Published only when a slot starts or stops: this runs every decode step.
    if (changed) {
        std::lock_guard lock(running_mutex_);
        slot_running_ = slot_running_seen_;
    }
    busy_slots_.store(busy, std::memory_order_relaxed);
    kv_tokens_.store(kv, std::memory_order_relaxed);
    metrics_.busy_slots->set(busy);
    metrics_.kv_tokens->set(static_cast<double>(kv));
    metrics_.queue_depth->set(static_cast<double>(queue_.size()));
    metrics_.llama_server.publish(busy, queue_.size());
}

// ---- events ---------------------------------------------------------------------------------

void EngineCore::emit(Running& running, StreamPiece piece) {
    EngineEvent event;
    event.piece = std::move(piece);
    if (running.pending->request.report_progress) event.progress = progress_of(running);
    running.pending->channel->push(std::move(event));
}

void EngineCore::emit_prompt_progress(Running& running) {
    if (!running.pending->request.report_progress) return;
    EngineEvent event;
    event.progress = progress_of(running);
    running.pending->channel->push(std::move(event));
}

Progress EngineCore::progress_of(Running& r) const {
    const Generation& g = r.reply().result();
    Progress p;
    p.prompt_tokens = static_cast<int>(r.pending->request.prompt.size());
    p.cached_tokens = r.cache.reused_tokens;
    p.processed_tokens = r.resumed.empty() ? static_cast<int>(r.next_prompt) : p.prompt_tokens;
    p.completion_tokens = g.usage.completion_tokens;
    const auto first = r.reply().first_token_at();
    const auto now = Clock::now();
    if (first != Clock::time_point{}) {
        p.prompt_ms = ms_between(r.admitted, first);
        p.decode_ms = ms_between(first, now);
    } else if (p.processed_tokens > p.cached_tokens) {
        p.prompt_ms = ms_between(r.admitted, now);
    }
    return p;
}

void EngineCore::stop_running(Slot& slot, FinishReason reason, std::optional<Error> error) {
    Running& r = *slot.running;
    std::string trailing = r.reply().finish(reason, std::move(error));
    if (!trailing.empty()) {
        StreamPiece piece;
        piece.text = std::move(trailing);
        emit(r, std::move(piece));
    }
    conclude_running(slot);
}

void EngineCore::conclude_running(Slot& slot) {
    std::unique_ptr<Running> r = std::move(slot.running);
    slot.last_used = Clock::now();
    // Before the final event: a caller who got its reply and then reads stats sees this slot idle.
    publish_gauges();
    Completion c;
    c.request_id = r->pending->id;
    c.generation = std::move(r->reply().result());
    c.cache = r->cache;
    c.queue_ms = r->queue_ms;
    c.draft_tokens = r->draft_tokens;
    c.draft_accepted = r->draft_accepted;
    Timings& t = c.generation.timings;
    const auto first = r->reply().first_token_at();
    if (first != Clock::time_point{}) {
        t.prefill_ms = ms_between(r->admitted, first);
        const int computed = c.generation.usage.prompt_tokens - c.generation.usage.cached_tokens;
        t.prefill_tokens_per_s = t.prefill_ms > 0 ? computed * 1000.0 / t.prefill_ms : 0;
    }
    metrics_.llama_server.count_finished(c.generation);
    send_final(std::move(c), *r->pending);
    // After the final event, so that the copy never delays the caller; with a delay, not before
    // the engine idles (the next turn of the conversation usually reuses the live sequence).
    if (persistence_.store && persistence_.policy.on_finish) {
        if (persistence_.policy.finish_save_delay.count() > 0) {
            slot.save_pending = true;
            saves_due_ = Clock::now() + persistence_.policy.finish_save_delay;
        } else {
            save(slot, SaveReason::finish);
        }
    }
}

// The one way a request ends: outcome metrics, the lifecycle hook, then its final event.
void EngineCore::send_final(Completion c, const Pending& pending) {
    metrics_.count_outcome(c.generation);
    metrics_.end_to_end->observe(c.generation.timings.total_ms / 1000.0);
    LifecycleEvent e;
    e.request_id = c.request_id;
    e.stage = c.generation.finish_reason == FinishReason::cancelled ? LifecycleStage::cancelled
                                                                    : LifecycleStage::finished;
    e.session = pending.request.session;
    e.completion = &c;
    notify(e);
    pending.channel->push_final(std::move(c));
}

void EngineCore::stop_queued(std::unique_ptr<Pending> pending, std::optional<Error> error) {
    Reply& reply = *pending->reply;
    // Never admitted: the prompt was not fed to the sampler and nothing of it was computed.
    reply.result().usage.prompt_tokens = static_cast<int>(pending->request.prompt.size());
    reply.finish(FinishReason::cancelled, std::move(error));
    Completion c;
    c.request_id = pending->id;
    c.generation = std::move(reply.result());
    c.queue_ms = ms_between(pending->submitted, Clock::now());
    send_final(std::move(c), *pending);
}

}  // namespace llamapp::detail
