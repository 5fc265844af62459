// Slot choice, prefix reuse (own slot and adoption from another) and sessions.
#include <algorithm>

#include "core/log_internal.hpp"
#include "engine/engine_core.hpp"

namespace llamapp::detail {

RequestView EngineCore::request_view(const Pending& pending) const {
    const EngineRequest& req = pending.request;
    return {.prompt = req.prompt,
            .session = req.session,
            .scope = req.cache_scope,
            .reuse = req.options.reuse_prefix,
            .stored_tokens = pending.stored ? pending.stored->matched_tokens : 0,
            .slot = req.slot};
}

void EngineCore::admit() {
    if (const auto& lost = executor_.lost()) {  // nothing can run any more: each request says why
        for (auto& pending : queue_) {
            dequeued(*pending);
            delivery_.stop_queued(std::move(pending), *lost);
        }
        queue_.clear();
        return;
    }
    // A request preempted under KV pressure waits for room that new work would take.
    if (slots_.any_preempted()) return;
    for (auto it = queue_.begin(); it != queue_.end();) {
        if (!slots_.any_idle()) break;
        persistence_.commit_staged_serving((*it)->request.prompt);
        persistence_.prefetch(**it, /*refresh=*/true);
        const auto admission = scheduler_.admit(slots_.views(), request_view(**it));
        if (!admission) {
            ++it;
            continue;
        }
        auto pending = std::move(*it);
        it = queue_.erase(it);
        dequeued(*pending);
        start_running(*admission, std::move(pending));
    }
}

void EngineCore::bind_session(Slot& slot, const Admission& admission,
                              const EngineRequest& request) {
    if (admission.reclaims_session) {
        log(LogLevel::debug, "engine: reclaiming idle session '{}'", slot.session);
        slots_.unpin(slot);
    }
    if (!request.session.empty()) slots_.pin(slot, request.cache_scope, request.session);
}

// Gives reused tokens back where the scheduler says a short prefill would be slow
// (Scheduler::widened_reuse).
void EngineCore::widen_short_prefill(Slot& slot, std::size_t prompt_size, CacheInfo& cache) {
    const auto keep = scheduler_.widened_reuse(prompt_size, slots_.held(slot).size());
    if (!keep || !state_.sequences.trim(slot.seq, *keep)) return;
    cache.reused_tokens = static_cast<int>(*keep);
}

// Carries out the admission's reuse; the slot holds what the returned CacheInfo says.
CacheInfo EngineCore::take_reuse(Slot& slot, const Admission& admission,
                                 const std::optional<KvHit>& stored) {
    SequenceMemory& memory = state_.sequences;
    CacheInfo cache;
    cache.slot = slot.seq;
    if (admission.source == ReuseSource::stored && stored) {
        if (persistence_.restore(slot, *stored)) {
            cache.reused_tokens = static_cast<int>(slots_.held(slot).size());
            cache.source = ReuseSource::stored;
            cache.tier = stored->entry.tier;
        }
    } else if (admission.source == ReuseSource::other_slot) {
        const Slot& donor = slots_[admission.donor];
        const std::size_t donated = admission.reuse_tokens;
        bool copied = true;
        if (modes_.copy_prefix) {
            memory.copy_prefix(donor.seq, slot.seq, donated);
        } else {
            memory.copy_whole(donor.seq, slot.seq);
            copied = donated == slots_.held(donor).size() || memory.trim(slot.seq, donated);
        }
        cache.reused_tokens = copied ? static_cast<int>(donated) : 0;
        cache.source = ReuseSource::other_slot;
    } else if (admission.source == ReuseSource::same_slot) {
        std::size_t own = admission.reuse_tokens;
        if (own < slots_.held(slot).size() && !memory.trim(slot.seq, own)) own = 0;
        cache.reused_tokens = static_cast<int>(own);
        cache.source = own > 0 ? ReuseSource::same_slot : ReuseSource::none;
    }
    // Sliding-window caches drop cells: reuse is safe only while the window before what is reused
    // is whole. (llama.cpp's contexts default to a full-size window cache, swa_full, which drops
    // nothing; this guards contexts made without it.)
    if (cache.reused_tokens == 0 ||
        !memory.window_intact(slot.seq, slots_.held(slot).size(), modes_.sliding_window)) {
        slots_.clear(slot);
        cache.reused_tokens = 0;
        cache.source = ReuseSource::none;
    }
    return cache;
}

void EngineCore::start_running(const Admission& admission, std::unique_ptr<Pending> pending) {
    const auto now = Clock::now();
    Slot& slot = slots_[admission.slot];
    bind_session(slot, admission, pending->request);
    const std::optional<KvHit> stored = std::exchange(pending->stored, std::nullopt);
    // What this slot held and is about to lose goes to the store first.
    persistence_.save_before_losing(slot, admission.kept());
    CacheInfo cache = take_reuse(slot, admission, stored);
    const std::vector<Token>& prompt = pending->request.prompt;
    widen_short_prefill(slot, prompt.size(), cache);

    slot.scope = pending->request.cache_scope;
    auto r = std::make_unique<Running>();
    r->pending = std::move(pending);
    r->next_prompt = slots_.held(slot).size();
    r->save_at = scheduler_.prefill_save_at(prompt.size(), r->next_prompt);
    r->cache = cache;
    r->admitted = now;
    r->queue_ms = ms_between(r->pending->submitted, now);
    r->reply().set_prompt(prompt, cache.reused_tokens);
    metrics_.prompt_tokens->inc(static_cast<double>(prompt.size()));
    metrics_.count_reuse(cache.source, cache.reused_tokens);
    metrics_.queue_wait->observe(r->queue_ms / 1000.0);
    slot.last_used = now;
    delivery_.notify(LifecycleStage::admitted, *r->pending);
    delivery_.emit_prompt_progress(*r);  // nothing computed yet: processed == cached
    slot.running = std::move(r);
}

// ---- sessions (decode thread) -----------------------------------------------------------------

Result<void> EngineCore::fork(const std::string& from, const std::string& to,
                              const std::string& scope) {
    Slot* source = slots_.session_slot(scope, from);
    if (!source) return fail(ErrorCode::not_found, "no such session", from);
    if (slots_.has_session(scope, to)) return fail(ErrorCode::already_exists, "session exists", to);
    if (!modes_.copy_whole) {
        return fail(ErrorCode::unsupported_operation, "this model cannot copy a sequence",
                    modes_.describe());
    }
    if (source->running) return fail(ErrorCode::busy, "the session has a request running", from);
    const auto target_index = scheduler_.fork_target(slots_.views(), source->seq);
    if (!target_index) return fail(ErrorCode::busy, "no free sequence for the fork", to);
    Slot& target = slots_[*target_index];
    persistence_.save_before_losing(target, 0);
    state_.sequences.copy_whole(source->seq, target.seq);
    slots_.pin(target, scope, to);
    target.scope = scope;
    target.last_used = Clock::now();
    return {};
}

Result<void> EngineCore::end(const std::string& id, const std::string& scope) {
    Slot* slot = slots_.session_slot(scope, id);
    if (!slot) return fail(ErrorCode::not_found, "no such session", id);
    if (slot->running) return fail(ErrorCode::busy, "the session has a request running", id);
    slots_.clear(*slot);
    slots_.unpin(*slot);
    return {};
}

}  // namespace llamapp::detail
