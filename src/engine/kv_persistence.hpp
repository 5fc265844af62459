// Internal: the engine's side of the KV store. Lookups run on the submitting thread (they may
// read files); restores and saves on the decode thread, which only copies state bytes (the
// store's writers do the I/O).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/sequence_memory.hpp"
#include "engine/scheduler.hpp"
#include "engine/slot_table.hpp"
#include "kvstore/store_client.hpp"

namespace llamapp::detail {

// Which namespace the engine's snapshots live in, how to look them up and when to save.
struct StoreSettings {
    std::optional<KvStoreClient> store;  // empty: no store
    KvNamespace ns;                      // scope left empty; set per request
    SavePolicy policy;
    KvLookup lookup;
    bool prefix_reuse = true;  // EngineOptions::prefix_reuse: off, nothing is looked up

    KvNamespace ns_for(const std::string& scope) const {
        KvNamespace n = ns;
        n.scope = scope;
        return n;
    }
};

// The model's fingerprint is computed here (once per file, then cached).
Result<StoreSettings> make_store_settings(const Model& model, const EngineOptions& options,
                                          const ReuseModes& modes, int n_ctx_seq);

class KvPersistence {
  public:
    using Clock = Reply::Clock;
    // The table, the memory and the scheduler outlive this object.
    KvPersistence(StoreSettings settings, SlotTable& slots, SequenceMemory& memory,
                  const Scheduler& scheduler, const ReuseModes& modes);

    bool stores() const { return settings_.store.has_value(); }

    // Any thread.
    // Looks the prompt up and loads the best entry into `pending`; `refresh` (the decode thread,
    // at admission) looks in RAM only.
    void prefetch(Pending& pending, bool refresh = false) const;
    // The stored entry holding all of `tokens`, loaded (file reads happen here).
    std::optional<KvHit> fetch_whole(std::span<const Token> tokens, const std::string& scope) const;
    // Whether the store serves all of `tokens`, written where its tiers are.
    Result<void> wait_until_stored(std::span<const Token> tokens, const std::string& scope) const;
    void flush() const;

    // Decode thread.
    // Restores a prefetched entry into `slot`; false leaves the slot empty.
    bool restore(Slot& slot, const KvHit& hit);
    // An idle sequence the scheduler picks gives its cells up (saved first where the policy
    // asks); false when there is none.
    bool evict_idle();
    // What `slot` holds beyond its first `kept` tokens is about to go: takes the save the
    // scheduler asks for (Scheduler::save_before_losing).
    void save_before_losing(Slot& slot, std::size_t kept);
    // Saves the running sequences whose prompt reached their save boundary.
    void save_prefill_boundaries();
    // A request on `slot` just finished: its finish save, now or deferred.
    void finished(Slot& slot);
    // When the deferred finish saves are due (only meaningful while one is pending).
    Clock::time_point saves_due() const { return saves_due_; }
    // Takes up to `most` of the deferred finish saves.
    void take_deferred_saves(std::size_t most = SIZE_MAX);
    void save_at_shutdown();
    // Engine::save_slot: the slot's sequence as a store entry, within the store's own limits.
    Result<SlotSnapshot> put(const Slot& slot);
    // What save_before_losing staged, published into the store. The engine calls it after the
    // step that follows an admission (so that the new requests' first tokens do not wait on the
    // store's new memory) and before it idles or stops.
    void commit_staged();
    // Publishes the staged saves a lookup for `prompt` could use, before that lookup.
    void commit_staged_serving(std::span<const Token> prompt);
    // The device holding the cache is gone (ErrorCode::device_lost): what it held reads back as
    // zeros, so nothing is saved from now on and the saves staged before are dropped.
    void stop_saving();

  private:
    // A sequence's state copied into a reused buffer, its store entry not yet reserved.
    struct Staged {
        std::string scope;
        std::vector<Token> tokens;
        SaveReason reason = SaveReason::evict;
        std::int32_t kept_from = 0;
        std::string session;
        Bytes bytes;
    };
    enum class When { now, staged };
    void save(Slot& slot, SaveReason reason, When when = When::now);
    bool stage(Slot& slot, SaveReason reason, std::size_t bytes);
    void publish(Staged& staged);
    void trim_spare();
    Bytes spare_buffer(std::size_t bytes);
    std::int32_t kept_from(const Slot& slot) const;

    const StoreSettings settings_;
    SlotTable& slots_;
    SequenceMemory& memory_;
    const Scheduler& scheduler_;
    const ReuseModes& modes_;
    Clock::time_point saves_due_{};
    std::vector<Staged> staged_;
    std::vector<Bytes> spare_;  // the buffers of published staged saves, for the next ones
    bool stopped_ = false;      // stop_saving()
};

}  // namespace llamapp::detail
