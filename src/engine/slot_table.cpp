#include "engine/slot_table.hpp"

#include <algorithm>
#include <chrono>

namespace llamapp::detail {

SlotTable::SlotTable(SequenceMemory& memory, int n_slots) : memory_(memory) {
    slots_.resize(static_cast<std::size_t>(n_slots));
    for (int i = 0; i < n_slots; ++i) slots_[static_cast<std::size_t>(i)].seq = i;
    // Every slot idle from the start: stats() (a server's /slots) may come before the decode
    // thread's first publish.
    running_.assign(slots_.size(), false);
    running_seen_ = running_;
}

void SlotTable::clear(Slot& slot) {
    memory_.remove(slot.seq);
    slot.save_pending = false;
}

bool SlotTable::any_running() const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [](const Slot& s) { return s.running != nullptr; });
}

bool SlotTable::any_idle() const {
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.running; });
}

bool SlotTable::any_preempted() const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [](const Slot& s) { return s.running && s.running->preempted; });
}

bool SlotTable::any_save_pending() const {
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.save_pending; });
}

std::span<const SlotView> SlotTable::views() {
    views_.resize(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        SlotView& v = views_[i];
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
    return views_;
}

Slot* SlotTable::session_slot(const std::string& scope, const std::string& session) {
    auto it = sessions_.find({scope, session});
    return it == sessions_.end() ? nullptr : &slots_[static_cast<std::size_t>(it->second)];
}

bool SlotTable::has_session(const std::string& scope, const std::string& session) const {
    return sessions_.contains({scope, session});
}

void SlotTable::pin(Slot& slot, const std::string& scope, const std::string& session) {
    unpin(slot);
    slot.session = session;
    sessions_[{scope, session}] = slot.seq;
}

void SlotTable::unpin(Slot& slot) {
    if (slot.session.empty()) return;
    sessions_.erase({slot.scope, slot.session});
    slot.session.clear();
}

std::vector<SessionInfo> SlotTable::sessions() const {
    std::vector<SessionInfo> out;
    const auto now = Reply::Clock::now();
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

int SlotTable::publish(EngineMetrics& metrics) {
    int busy = 0;
    std::int64_t held_tokens = 0;
    bool changed = running_seen_.size() != slots_.size();
    running_seen_.resize(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        const bool running = slots_[i].running != nullptr;
        busy += running ? 1 : 0;
        changed = changed || running_seen_[i] != running;
        running_seen_[i] = running;
        held_tokens += static_cast<std::int64_t>(held(slots_[i]).size());
    }
    // Copied for stats() only when a slot starts or stops: this runs every decode step.
    if (changed) {
        std::lock_guard lock(running_mutex_);
        running_ = running_seen_;
    }
    busy_.store(busy, std::memory_order_relaxed);
    held_tokens_.store(held_tokens, std::memory_order_relaxed);
    metrics.busy_slots->set(busy);
    metrics.kv_tokens->set(static_cast<double>(held_tokens));
    return busy;
}

void SlotTable::stats(EngineStats& out) const {
    out.slots = size();
    out.busy_slots = busy_.load(std::memory_order_relaxed);
    {
        std::lock_guard lock(running_mutex_);
        out.slot_running = running_;
    }
    out.kv_tokens = held_tokens_.load(std::memory_order_relaxed);
}

}  // namespace llamapp::detail
