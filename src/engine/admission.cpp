// Slot choice, prefix reuse (own slot and adoption from another) and sessions.
#include <algorithm>

#include "core/log_internal.hpp"
#include "engine/scheduler.hpp"

namespace llamapp::detail {

namespace {

std::size_t common_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
    const std::size_t n = std::min(a.size(), b.size());
    std::size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

}  // namespace

ReuseModes probe_reuse_modes(ContextState& state, bool unified) {
    ReuseModes modes;
    modes.sliding_window = state.model.info().sliding_window;
    llama_memory_t mem = state.memory();
    const int vocab = state.model.tokenizer().vocab_size();
    if (!mem || vocab < 3) return modes;
    LlamaBatch batch(3);
    for (int i = 0; i < 3; ++i) batch.add(i, i, 0, i == 2);
    if (llama_decode(state.ctx.get(), batch.batch) != 0) {
        llama_memory_clear(mem, true);
        return modes;
    }
    modes.trim_tail = llama_memory_seq_rm(mem, 0, 2, -1) && llama_memory_seq_pos_max(mem, 0) == 1;
    if (llama_n_seq_max(state.ctx.get()) >= 2) {
        const llama_pos last = llama_memory_seq_pos_max(mem, 0);
        llama_memory_seq_cp(mem, 0, 1, -1, -1);
        modes.copy_whole = llama_memory_seq_pos_max(mem, 1) == last;
        llama_memory_seq_rm(mem, 1, -1, -1);
        if (unified) {
            llama_memory_seq_cp(mem, 0, 1, 0, 1);
            // A partial copy must hold exactly position 0; recurrent state copies whole or
            // nothing.
            modes.copy_prefix = modes.trim_tail && llama_memory_seq_pos_max(mem, 1) == 0 &&
                                llama_memory_seq_pos_min(mem, 1) == 0;
        }
    }
    llama_memory_clear(mem, true);
    return modes;
}

void Scheduler::clear_sequence(Slot& slot) {
    llama_memory_seq_rm(state_.memory(), slot.seq, -1, -1);
    slot.cached.clear();
    slot.save_pending = false;
}

// How much of `from`'s cache a prompt can reuse: at most len-1 tokens so that fresh logits
// exist, and on models that cannot trim only the whole cache as an exact prefix.
std::size_t Scheduler::usable_prefix(const Slot& from, const EngineRequest& request) const {
    const std::vector<Token>& prompt = request.prompt;
    if (prompt.empty() || from.scope != request.cache_scope) return 0;
    std::size_t n = std::min(common_prefix(from.cached, prompt), prompt.size() - 1);
    if (!modes_.trim_tail && n != from.cached.size()) n = 0;
    return n;
}

// Sliding-window caches drop cells: reuse is safe only while the window before `reused` is whole.
// (llama.cpp's contexts default to a full-size window cache, swa_full, which drops nothing; this
// guards contexts made without it.)
bool Scheduler::window_intact(const Slot& slot, std::size_t reused) const {
    if (modes_.sliding_window <= 0 || reused == 0) return true;
    const llama_pos pos_min = llama_memory_seq_pos_min(state_.memory(), slot.seq);
    // -1: the window cache holds nothing of the sequence any more (every cell before the cut
    // was overwritten), which is not a whole window either.
    return pos_min >= 0 && pos_min <= std::max<llama_pos>(0, static_cast<llama_pos>(reused) -
                                                                 modes_.sliding_window);
}

Slot* Scheduler::choose_slot(const Pending& pending) {
    const EngineRequest& req = pending.request;
    if (!req.session.empty()) {
        if (auto it = sessions_.find({req.cache_scope, req.session}); it != sessions_.end()) {
            Slot& pinned = slots_[static_cast<std::size_t>(it->second)];
            return pinned.running ? nullptr : &pinned;  // waits for its own turn to finish
        }
    }
    std::vector<Slot*> free;
    for (auto& s : slots_) {
        if (!s.running && s.session.empty()) free.push_back(&s);
    }
    if (free.empty()) {
        // Reclaim the least recently used idle session; its next turn starts cold.
        Slot* oldest = nullptr;
        for (auto& s : slots_) {
            if (!s.running && !s.session.empty() && (!oldest || s.last_used < oldest->last_used))
                oldest = &s;
        }
        if (!oldest) return nullptr;
        log(LogLevel::debug, "engine: reclaiming idle session '{}'", oldest->session);
        sessions_.erase({oldest->scope, oldest->session});
        oldest->session.clear();
        free.push_back(oldest);
    }
    Slot* chosen = nullptr;
    if (options_.prefix_reuse && req.options.reuse_prefix) {
        std::size_t best = 0;
        for (Slot* s : free) {
            const std::size_t n = usable_prefix(*s, req);
            if (n > best) {
                best = n;
                chosen = s;
            }
        }
        if (best == 0 || static_cast<double>(best) < options_.min_prefix_similarity *
                                                         static_cast<double>(req.prompt.size()))
            chosen = nullptr;
    }
    if (!chosen) {
        chosen = *std::min_element(free.begin(), free.end(), [](const Slot* a, const Slot* b) {
            return a->last_used < b->last_used;
        });
    }
    if (!req.session.empty()) {
        if (!chosen->session.empty()) sessions_.erase({chosen->scope, chosen->session});
        chosen->session = req.session;
        sessions_[{req.cache_scope, req.session}] = chosen->seq;
    }
    return chosen;
}

// A request whose prompt shares a long prefix with a prompt another slot is computing right now
// waits until that part is in the cache and then copies it, instead of computing it again: a
// burst of requests with one system prompt computes it once.
bool Scheduler::worth_waiting_for_donor(const Pending& pending) const {
    const EngineRequest& req = pending.request;
    if (!options_.prefix_reuse || !req.options.reuse_prefix) return false;
    if (!modes_.copy_prefix && !(modes_.copy_whole && modes_.trim_tail)) return false;
    std::size_t now = pending.stored ? pending.stored->matched_tokens : 0;
    std::size_t soon = 0;
    for (const auto& s : slots_) {
        now = std::max(now, usable_prefix(s, req));
        if (!s.running || s.running->next_prompt >= s.running->prompt().size() ||
            s.running->pending->request.cache_scope != req.cache_scope)
            continue;
        const auto& theirs = s.running->prompt();
        const std::size_t n =
            std::min({common_prefix(theirs, req.prompt), req.prompt.size() - 1, theirs.size()});
        soon = std::max(soon, n);
    }
    // Once the shared part is long enough to matter, wait for all of it: one more step costs
    // less than computing the rest a second time.
    return soon > now && soon >= static_cast<std::size_t>(std::max(options_.min_adopt_tokens,
                                                                   min_wait_for_donor_tokens));
}

void Scheduler::admit() {
    for (auto it = queue_.begin(); it != queue_.end();) {
        const bool any_idle =
            std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.running; });
        if (!any_idle) break;
        prefetch(**it, /*refresh=*/true);
        if (worth_waiting_for_donor(**it)) {
            ++it;
            continue;
        }
        Slot* slot = choose_slot(**it);
        if (!slot) {
            ++it;
            continue;
        }
        auto pending = std::move(*it);
        it = queue_.erase(it);
        dequeued(*pending);
        start_running(*slot, std::move(pending));
    }
}

// A short prefill after a long reused prefix would run llama.cpp's slow per-row attention (see
// EngineOptions::min_prefill_rows), whose cost grows with the depth of the cache; giving back
// cached tokens buys the tiled kernel. Shallow caches are left alone (the slow path is cheap
// there), and so is a single row, which takes the decode kernel.
void Scheduler::widen_short_prefill(Slot& slot, std::size_t prompt_size, CacheInfo& cache) {
    constexpr std::size_t deep = 512;
    const std::size_t rows = prefill_rows_;
    const std::size_t reused = slot.cached.size();
    if (rows == 0 || reused < deep || !modes_.trim_tail) return;
    const std::size_t left = prompt_size - reused;
    if (left < 2 || left >= rows) return;
    const std::size_t keep = prompt_size - rows;
    if (!llama_memory_seq_rm(state_.memory(), slot.seq, static_cast<llama_pos>(keep), -1)) return;
    slot.cached.resize(keep);
    cache.reused_tokens = static_cast<int>(keep);
}

void Scheduler::start_running(Slot& slot, std::unique_ptr<Pending> pending) {
    const auto now = Clock::now();
    const std::vector<Token>& prompt = pending->request.prompt;
    const bool reuse = options_.prefix_reuse && pending->request.options.reuse_prefix;
    llama_memory_t mem = state_.memory();

    std::size_t own = reuse ? usable_prefix(slot, pending->request) : 0;
    Slot* donor = nullptr;
    std::size_t donated = 0;
    if (reuse && (modes_.copy_prefix || modes_.copy_whole)) {
        for (auto& other : slots_) {
            if (&other == &slot || other.cached.empty()) continue;
            std::size_t n = usable_prefix(other, pending->request);
            // Without partial copies a whole sequence is copied, then trimmed where possible.
            if (!modes_.copy_prefix && !modes_.trim_tail && n != other.cached.size()) n = 0;
            if (n > donated) {
                donated = n;
                donor = &other;
            }
        }
        if (donated < own + static_cast<std::size_t>(std::max(1, options_.min_adopt_tokens)))
            donor = nullptr;
    }

    // A stored prefix is restored only when it beats what live sequences offer.
    std::optional<KvHit> stored = std::move(pending->stored);
    pending->stored.reset();
    const std::size_t live = std::max(own, donor ? donated : 0);
    if (stored && (!reuse || stored->matched_tokens < live + static_cast<std::size_t>(std::max(
                                                                 1, options_.min_adopt_tokens))))
        stored.reset();
    // What this slot held and is about to lose goes to the store first.
    const std::size_t kept = (donor || stored) ? 0 : own;
    save_before_losing(slot, kept);

    CacheInfo cache;
    cache.slot = slot.seq;
    if (stored) {
        if (restore(slot, *stored)) {
            cache.reused_tokens = static_cast<int>(slot.cached.size());
            cache.source = ReuseSource::stored;
            cache.tier = stored->entry.tier;
        }
    } else if (donor) {
        llama_memory_seq_rm(mem, slot.seq, -1, -1);
        bool copied = true;
        if (modes_.copy_prefix) {
            llama_memory_seq_cp(mem, donor->seq, slot.seq, 0, static_cast<llama_pos>(donated));
        } else {
            llama_memory_seq_cp(mem, donor->seq, slot.seq, -1, -1);
            copied = donated == donor->cached.size() ||
                     llama_memory_seq_rm(mem, slot.seq, static_cast<llama_pos>(donated), -1);
        }
        slot.cached.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(donated));
        cache.reused_tokens = copied ? static_cast<int>(donated) : 0;
        cache.source = ReuseSource::other_slot;
    } else if (own > 0) {
        if (own < slot.cached.size() &&
            !llama_memory_seq_rm(mem, slot.seq, static_cast<llama_pos>(own), -1)) {
            own = 0;
        }
        slot.cached.resize(own);
        cache.reused_tokens = static_cast<int>(own);
        cache.source = own > 0 ? ReuseSource::same_slot : ReuseSource::none;
    }
    if (cache.reused_tokens == 0 || !window_intact(slot, slot.cached.size())) {
        clear_sequence(slot);
        cache.reused_tokens = 0;
        cache.source = ReuseSource::none;
    }

    widen_short_prefill(slot, prompt.size(), cache);

    slot.scope = pending->request.cache_scope;
    auto r = std::make_unique<Running>();
    r->pending = std::move(pending);
    r->next_prompt = slot.cached.size();
    r->save_at = prefill_boundary(prompt.size(), slot.cached.size());
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
    slot.running = std::move(r);
}

// ---- sessions (decode thread) -----------------------------------------------------------------

Result<void> Scheduler::fork(const std::string& from, const std::string& to,
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
    Slot* target = nullptr;
    for (auto& s : slots_) {
        if (&s != &source && !s.running && s.session.empty() &&
            (!target || s.last_used < target->last_used))
            target = &s;
    }
    if (!target) {
        for (auto& s : slots_) {
            if (&s != &source && !s.running && !s.session.empty() &&
                (!target || s.last_used < target->last_used))
                target = &s;
        }
        if (!target) return fail(ErrorCode::busy, "no free sequence for the fork", to);
        sessions_.erase({target->scope, target->session});
    }
    save_before_losing(*target, 0);
    llama_memory_t mem = state_.memory();
    llama_memory_seq_rm(mem, target->seq, -1, -1);
    llama_memory_seq_cp(mem, source.seq, target->seq, -1, -1);
    target->cached = source.cached;
    target->session = to;
    target->scope = scope;
    target->last_used = Clock::now();
    sessions_[{scope, to}] = target->seq;
    return {};
}

Result<void> Scheduler::end(const std::string& id, const std::string& scope) {
    auto it = sessions_.find({scope, id});
    if (it == sessions_.end()) return fail(ErrorCode::not_found, "no such session", id);
    Slot& slot = slots_[static_cast<std::size_t>(it->second)];
    if (slot.running) return fail(ErrorCode::busy, "the session has a request running", id);
    clear_sequence(slot);
    slot.session.clear();
    sessions_.erase(it);
    return {};
}

std::vector<SessionInfo> Scheduler::list_sessions() const {
    std::vector<SessionInfo> out;
    const auto now = Clock::now();
    for (const auto& [key, index] : sessions_) {
        const Slot& s = slots_[static_cast<std::size_t>(index)];
        SessionInfo info;
        info.scope = key.first;
        info.id = key.second;
        info.slot = s.seq;
        info.cached_tokens = static_cast<int>(s.cached.size());
        info.busy = s.running != nullptr;
        info.idle_seconds =
            s.running ? 0 : std::chrono::duration<double>(now - s.last_used).count();
        out.push_back(std::move(info));
    }
    return out;  // ordered by scope, then id
}

}  // namespace llamapp::detail

namespace llamapp {

std::string ReuseModes::describe() const {
    std::string out = trim_tail ? "trim" : "exact-extension-only";
    if (copy_prefix) out += ", copy-prefix";
    if (copy_whole) out += ", copy-whole";
    if (sliding_window > 0) out += fmt::format(", sliding-window={}", sliding_window);
    return out;
}

}  // namespace llamapp
