#include "engine/engine_core.hpp"

#include <algorithm>

#include "core/internals.hpp"
#include "core/log_internal.hpp"
#include "llamapp/footprint.hpp"

namespace llamapp::detail {

namespace {

// llama.cpp computes a layer's attention where its KV cache is: on the host (no GPU, -ngl 0,
// --no-kv-offload, or most layers left on the CPU), it is the CPU backend's kernel.
bool attention_on_host(Context& context) {
    const Footprint used = memory_in_use(context);
    std::uint64_t cache = 0;
    for (const auto& d : used.devices) cache += d.context;
    return 2 * used.devices.front().context >= cache;
}

SchedulerOptions scheduler_options(const EngineOptions& options, const ReuseModes& modes,
                                   const ContextState& state, const StoreSettings& store,
                                   bool host_attention) {
    SchedulerOptions s;
    s.modes = modes;
    s.prefix_reuse = options.prefix_reuse;
    s.min_prefix_similarity = options.min_prefix_similarity;
    s.min_adopt_tokens = options.min_adopt_tokens;
    s.n_batch = state.n_batch();
    s.n_ctx_seq = state.n_ctx_seq();
    s.n_cells = state.n_ctx();
    s.prefill_chunk = options.prefill_chunk;
    // The rules for llama.cpp's CPU flash attention kernel (EngineOptions::min_prefill_rows,
    // separate_prompt_rows); GPUs and plain attention behave differently.
    const bool cpu_fa = host_attention && options.context.flash_attn != FlashAttention::off;
    s.prefill_rows = cpu_fa ? static_cast<std::size_t>(std::max(0, options.min_prefill_rows)) : 0;
    // A tile sweeps other sequences' cells only where they share one cache.
    s.separate_prompt_rows = cpu_fa && options.separate_prompt_rows && state.sequences.unified();
    s.draft_tokens = options.speculative.enabled() ? options.speculative.n_max : 0;
    // Within one ubatch, so that a lead and its drafts are placed together.
    s.draft_rows = std::min(options.speculative.batch_rows, state.n_ubatch());
    s.lone_draft_rows = state.n_ubatch();
    s.cache_per_slot = !state.sequences.unified();
    s.strategy = options.strategy;
    if (store.store) {
        s.saves = store.policy;
        s.any_prefix_restores =
            store.lookup.match == KvMatch::prefix && store.lookup.sliding_window == 0;
    }
    return s;
}

}  // namespace

EngineCore::EngineCore(Context context, EngineOptions options, EngineMetrics metrics,
                       ReuseModes modes, StoreSettings store, std::unique_ptr<DraftModel> draft)
    : context_(std::move(context)),
      state_(context_state(context_)),
      options_(std::move(options)),
      metrics_(std::move(metrics)),
      modes_(std::move(modes)),
      n_ctx_seq_(state_.n_ctx_seq()),
      n_batch_(state_.n_batch()),
      inbox_(std::make_shared<Inbox>()),
      scheduler_(scheduler_options(options_, modes_, state_, store, attention_on_host(context_))),
      slots_(state_.sequences, state_.n_seq_max()),
      draft_model_(std::move(draft)),
      drafter_(options_.speculative, state_.n_seq_max(), draft_model_.get(), state_.ctx.get()),
      persistence_(std::move(store), slots_, state_.sequences, scheduler_, modes_),
      delivery_(options_.on_lifecycle, metrics_, persistence_, [this] { publish_gauges(); }),
      executor_(state_, scheduler_, slots_, drafter_, persistence_, delivery_, metrics_, modes_),
      actions_(slots_, persistence_) {
    metrics_.kv_capacity->set(static_cast<double>(state_.n_ctx()));
    if (draft_model_) draft_model_->follow(state_.sequences);
}

EngineCore::~EngineCore() {
    shutdown(std::chrono::milliseconds{0});
}

void EngineCore::start() {
    thread_ = std::thread([this] { loop(); });
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
    executor_.interrupt();
    inbox_->wake.notify_one();
    if (thread_.joinable()) thread_.join();
    persistence_.flush();  // shutdown saves are on disk now
}

EngineStats EngineCore::stats() const {
    EngineStats s;
    slots_.stats(s);
    s.n_ctx = n_ctx_seq_;
    s.max_queued_requests = options_.max_queued_requests;
    std::lock_guard lock(inbox_->mutex);
    s.queued_requests = inbox_->queued_requests;
    s.queued_tokens = inbox_->queued_tokens;
    return s;
}

// ---- the loop -------------------------------------------------------------------------------

// The decode thread: take the inbox, expire, run the slot actions, admit, then one step (the
// scheduler plans; the executor decodes, samples and delivers) while anything runs, else wait
// for work. The saves staged on the way in are published after the step, so that the first
// tokens of what was admitted do not wait on them.
void EngineCore::loop() {
    while (take_inbox()) {
        expire();
        actions_.run_ready();
        admit();
        publish_gauges();
        if (slots_.any_running()) {
            executor_.step(queue_.size());
            persistence_.commit_staged();
        } else {
            persistence_.commit_staged();
            wait_for_work();
        }
    }
    end_all_at_shutdown();
}

// Idle: takes the deferred saves once they are due, else sleeps until something arrives, the
// nearest queue deadline passes or the deferred saves fall due.
void EngineCore::wait_for_work() {
    auto until = Clock::time_point::max();
    for (const auto& p : queue_) until = std::min({until, p->queue_deadline, p->deadline});
    if (slots_.any_save_pending()) {
        // One at a time, so that a request arriving meanwhile waits for one copy, not all.
        if (Clock::now() >= persistence_.saves_due()) {
            persistence_.take_deferred_saves(1);
            return;
        }
        until = std::min(until, persistence_.saves_due());
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
    persistence_.commit_staged();
    const Error stopped{ErrorCode::shutting_down, "the engine shut down", {}};
    for (auto& slot : slots_) {
        if (slot.running) delivery_.stop_running(slot, FinishReason::cancelled, stopped);
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
        delivery_.stop_queued(std::move(p), stopped);
    }
    for (auto& c : commands) c();
    actions_.run_ready();  // every slot is idle now
    persistence_.take_deferred_saves();
    persistence_.save_at_shutdown();
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

void EngineCore::expire() {
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
        delivery_.stop_queued(std::move(pending), std::move(expiry.error));
    }
    for (auto& slot : slots_) {
        if (!slot.running) continue;
        const Pending& p = *slot.running->pending;
        Expiry expiry = running_expiry(now, p.channel->cancel.cancelled(), p.deadline);
        if (expiry.ends)
            delivery_.stop_running(slot, FinishReason::cancelled, std::move(expiry.error));
    }
}

void EngineCore::publish_gauges() {
    const int busy = slots_.publish(metrics_);
    metrics_.queue_depth->set(static_cast<double>(queue_.size()));
    metrics_.llama_server.publish(busy, queue_.size());
}

}  // namespace llamapp::detail
