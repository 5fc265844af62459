// Internal: the engine's slots, what runs on them and the sessions pinned to them. The decode
// thread owns the table; stats() is the one call for other threads.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/sequence_memory.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/inbox.hpp"
#include "engine/scheduler.hpp"

namespace llamapp::detail {

// A request that holds a slot.
struct Running {
    std::unique_ptr<Pending> pending;
    std::size_t next_prompt = 0;  // first prompt token not yet in the KV cache
    Token to_decode = no_token;   // sampled, to be fed back in the next decode
    CacheInfo cache;
    Reply::Clock::time_point admitted;
    Reply::Clock::time_point last_token{};
    double queue_ms = 0;
    std::size_t save_at = 0;  // > 0: snapshot the sequence once the prompt is cached up to here
    // Prompt-lookup speculation: drafts decoded and confirmed so far; after a step whose drafts
    // all missed, the sequence waits `draft_wait` steps before drafting again, twice as long
    // after each further miss.
    int draft_tokens = 0;
    int draft_accepted = 0;
    int draft_wait = 0;
    int draft_backoff = 1;
    // Preempted under KV pressure (Executor::preempt): the sequence holds nothing and no rows are
    // planned until there is room again. `resumed` then stands in for the prompt: the prompt,
    // the reply's tokens and the last one sampled, computed again from the start; sampling after
    // its last token carries the reply on.
    bool preempted = false;
    std::vector<Token> resumed;

    // The tokens to compute before the next sample: the prompt, or `resumed` after a preemption.
    const std::vector<Token>& prompt() const {
        return resumed.empty() ? pending->request.prompt : resumed;
    }
    Reply& reply() { return *pending->reply; }
};

// What a slot holds (its tokens) is its sequence's, kept by SequenceMemory: SlotTable::held.
struct Slot {
    int seq = 0;
    std::string session;  // pinned to this session when not empty
    std::string scope;    // cache scope of the request that wrote the cached tokens
    Reply::Clock::time_point last_used{};
    std::unique_ptr<Running> running;  // null while idle
    bool save_pending = false;  // finished; its finish save waits (SavePolicy::finish_save_delay)
};

class SlotTable {
  public:
    // One slot per sequence of `memory`, which outlives the table.
    SlotTable(SequenceMemory& memory, int n_slots);

    int size() const { return static_cast<int>(slots_.size()); }
    Slot& operator[](int index) { return slots_[static_cast<std::size_t>(index)]; }
    const Slot& operator[](int index) const { return slots_[static_cast<std::size_t>(index)]; }
    auto begin() { return slots_.begin(); }
    auto end() { return slots_.end(); }
    auto begin() const { return slots_.begin(); }
    auto end() const { return slots_.end(); }

    // The tokens whose KV the slot's sequence holds, in position order.
    std::span<const Token> held(const Slot& slot) const { return memory_.tokens(slot.seq); }
    // A copy of it, for what outlives this step (a store entry, a snapshot's description).
    std::vector<Token> held_copy(const Slot& slot) const {
        const auto tokens = held(slot);
        return {tokens.begin(), tokens.end()};
    }
    // Empties the slot's sequence; a deferred save of it is moot.
    void clear(Slot& slot);

    bool any_running() const;
    bool any_idle() const;
    bool any_preempted() const;
    bool any_save_pending() const;

    // What the scheduler sees of every slot; valid until the next call.
    std::span<const SlotView> views();

    // Sessions, by cache scope and id.
    Slot* session_slot(const std::string& scope, const std::string& session);
    bool has_session(const std::string& scope, const std::string& session) const;
    // Pins `slot` to `session` in `scope`, unpinning whatever it was pinned to.
    void pin(Slot& slot, const std::string& scope, const std::string& session);
    void unpin(Slot& slot);  // no-op on a slot without a session
    std::vector<SessionInfo> sessions() const;

    // Publishes which slots run and how many cells they hold: the gauges and what stats() reads.
    // Returns the number of running slots.
    int publish(EngineMetrics& metrics);
    // Any thread: what publish() last saw.
    void stats(EngineStats& out) const;
    int busy() const { return busy_.load(std::memory_order_relaxed); }

  private:
    SequenceMemory& memory_;
    std::vector<Slot> slots_;
    using SessionKey = std::pair<std::string, std::string>;  // scope, session id
    std::map<SessionKey, int> sessions_;                     // -> slot index
    std::vector<SlotView> views_;

    std::atomic<int> busy_{0};
    std::atomic<std::int64_t> held_tokens_{0};
    mutable std::mutex running_mutex_;  // running_: written by the decode thread each step
    std::vector<bool> running_;
    std::vector<bool> running_seen_;  // the decode thread's own copy, compared each step
};

}  // namespace llamapp::detail
