// Slot choice, prefix reuse (own slot and adoption from another) and sessions.
#include <algorithm>

#include "core/log_internal.hpp"
#include "engine/engine_core.hpp"

namespace llamapp::detail {

void EngineCore::clear_sequence(Slot& slot) {
    state_.sequences.remove(slot.seq);
    slot.save_pending = false;
}

// Sliding-window caches drop cells: reuse is safe only while the window before `reused` is whole.
// (llama.cpp's contexts default to a full-size window cache, swa_full, which drops nothing; this
// guards contexts made without it.)
bool EngineCore::window_intact(const Slot& slot, std::size_t reused) const {
    return state_.sequences.window_intact(slot.seq, reused, modes_.sliding_window);
}

std::span<const SlotView> EngineCore::slot_views() {
    slot_views_.resize(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        SlotView& v = slot_views_[i];
        v.seq = s.seq;
        v.cached = held(s);
        v.session = s.session;
        v.scope = s.scope;
        v.last_used = s.last_used;
        v.running = s.running != nullptr;
        v.prompt =
            s.running ? std::span<const Token>(s.running->prompt()) : std::span<const Token>{};
        v.prompt_cached = s.running ? s.running->next_prompt : 0;
        v.preempted = s.running && s.running->preempted;
        v.most_cells = 0;
        v.cells_to_finish = 0;
        if (!s.running) continue;
        const Running& r = *s.running;
        v.admitted = r.admitted;
        const int max_tokens = r.pending->reply->options().max_tokens;
        if (max_tokens <= 0) continue;
        const int generated = r.pending->reply->result().usage.completion_tokens;
        v.most_cells = r.pending->request.prompt.size() + static_cast<std::size_t>(max_tokens);
        v.cells_to_finish =
            r.prompt().size() + static_cast<std::size_t>(std::max(max_tokens - generated, 0));
    }
    return slot_views_;
}

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
    // A request preempted under KV pressure waits for room that new work would take.
    if (any_preempted()) return;
    for (auto it = queue_.begin(); it != queue_.end();) {
        const bool any_idle =
            std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.running; });
        if (!any_idle) break;
        prefetch(**it, /*refresh=*/true);
        const auto admission = scheduler_.admit(slot_views(), request_view(**it));
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
        sessions_.erase({slot.scope, slot.session});
        slot.session.clear();
    }
    if (request.session.empty()) return;
    if (!slot.session.empty()) sessions_.erase({slot.scope, slot.session});
    slot.session = request.session;
    sessions_[{request.cache_scope, request.session}] = slot.seq;
}

// Gives reused tokens back where the scheduler says a short prefill would be slow
// (Scheduler::widened_reuse).
void EngineCore::widen_short_prefill(Slot& slot, std::size_t prompt_size, CacheInfo& cache) {
    const auto keep = scheduler_.widened_reuse(prompt_size, held(slot).size());
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
        if (restore(slot, *stored)) {
            cache.reused_tokens = static_cast<int>(held(slot).size());
            cache.source = ReuseSource::stored;
            cache.tier = stored->entry.tier;
        }
    } else if (admission.source == ReuseSource::other_slot) {
        const Slot& donor = slots_[static_cast<std::size_t>(admission.donor)];
        const std::size_t donated = admission.reuse_tokens;
        bool copied = true;
        if (modes_.copy_prefix) {
            memory.copy_prefix(donor.seq, slot.seq, donated);
        } else {
            memory.copy_whole(donor.seq, slot.seq);
            copied = donated == held(donor).size() || memory.trim(slot.seq, donated);
        }
        cache.reused_tokens = copied ? static_cast<int>(donated) : 0;
        cache.source = ReuseSource::other_slot;
    } else if (admission.source == ReuseSource::same_slot) {
        std::size_t own = admission.reuse_tokens;
        if (own < held(slot).size() && !memory.trim(slot.seq, own)) own = 0;
        cache.reused_tokens = static_cast<int>(own);
        cache.source = own > 0 ? ReuseSource::same_slot : ReuseSource::none;
    }
    if (cache.reused_tokens == 0 || !window_intact(slot, held(slot).size())) {
        clear_sequence(slot);
        cache.reused_tokens = 0;
        cache.source = ReuseSource::none;
    }
    return cache;
}

void EngineCore::start_running(const Admission& admission, std::unique_ptr<Pending> pending) {
    const auto now = Clock::now();
    Slot& slot = slots_[static_cast<std::size_t>(admission.slot)];
    bind_session(slot, admission, pending->request);
    const std::optional<KvHit> stored = std::exchange(pending->stored, std::nullopt);
    // What this slot held and is about to lose goes to the store first.
    save_before_losing(slot, admission.kept());
    CacheInfo cache = take_reuse(slot, admission, stored);
    const std::vector<Token>& prompt = pending->request.prompt;
    widen_short_prefill(slot, prompt.size(), cache);

    slot.scope = pending->request.cache_scope;
    auto r = std::make_unique<Running>();
    r->pending = std::move(pending);
    r->next_prompt = held(slot).size();
    r->save_at = scheduler_.prefill_save_at(prompt.size(), held(slot).size());
    r->cache = cache;
    r->admitted = now;
    r->queue_ms = ms_between(r->pending->submitted, now);
    r->reply().set_prompt(prompt, cache.reused_tokens);
    metrics_.prompt_tokens->inc(static_cast<double>(prompt.size()));
    metrics_.count_reuse(cache.source, cache.reused_tokens);
    metrics_.queue_wait->observe(r->queue_ms / 1000.0);
    slot.last_used = now;
    LifecycleEvent e;
    e.request_id = r->pending->id;
    e.stage = LifecycleStage::admitted;
    e.session = r->pending->request.session;
    notify(e);
    emit_prompt_progress(*r);  // nothing computed yet: processed == cached
    slot.running = std::move(r);
}

// ---- sessions (decode thread) -----------------------------------------------------------------

Result<void> EngineCore::fork(const std::string& from, const std::string& to,
                              const std::string& scope) {
    auto it = sessions_.find({scope, from});
    if (it == sessions_.end()) return fail(ErrorCode::not_found, "no such session", from);
    if (sessions_.contains({scope, to}))
        return fail(ErrorCode::already_exists, "session exists", to);
    if (!modes_.copy_whole) {
        return fail(ErrorCode::unsupported_operation, "this model cannot copy a sequence",
                    modes_.describe());
    }
    Slot& source = slots_[static_cast<std::size_t>(it->second)];
    if (source.running) return fail(ErrorCode::busy, "the session has a request running", from);
    const auto target_index = scheduler_.fork_target(slot_views(), source.seq);
    if (!target_index) return fail(ErrorCode::busy, "no free sequence for the fork", to);
    Slot* target = &slots_[static_cast<std::size_t>(*target_index)];
    if (!target->session.empty()) sessions_.erase({target->scope, target->session});
    save_before_losing(*target, 0);
    state_.sequences.copy_whole(source.seq, target->seq);
    target->session = to;
    target->scope = scope;
    target->last_used = Clock::now();
    sessions_[{scope, to}] = target->seq;
    return {};
}

Result<void> EngineCore::end(const std::string& id, const std::string& scope) {
    auto it = sessions_.find({scope, id});
    if (it == sessions_.end()) return fail(ErrorCode::not_found, "no such session", id);
    Slot& slot = slots_[static_cast<std::size_t>(it->second)];
    if (slot.running) return fail(ErrorCode::busy, "the session has a request running", id);
    clear_sequence(slot);
    slot.session.clear();
    sessions_.erase(it);
    return {};
}

std::vector<SessionInfo> EngineCore::list_sessions() const {
    std::vector<SessionInfo> out;
    const auto now = Clock::now();
    for (const auto& [key, index] : sessions_) {
        const Slot& s = slots_[static_cast<std::size_t>(index)];
        SessionInfo info;
        info.scope = key.first;
        info.id = key.second;
        info.slot = s.seq;
        info.cached_tokens = static_cast<int>(held(s).size());
        info.busy = s.running != nullptr;
        info.idle_seconds =
            s.running ? 0 : std::chrono::duration<double>(now - s.last_used).count();
        out.push_back(std::move(info));
    }
    return out;  // ordered by scope, then id
}

}  // namespace llamapp::detail
