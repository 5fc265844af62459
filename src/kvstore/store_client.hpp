// Internal: the engine's side of the KV store. Everything here needs a namespace, which only an
// engine can fill in (the model's fingerprint, the context's layout), so it stays out of the
// public header: applications open a KvStore, hand it to engines and manage its entries.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/snapshot_bytes.hpp"
#include "llamapp/kv_store.hpp"

namespace llamapp::detail {

// What makes two snapshots interchangeable; engines fill it in, callers never supply the key.
struct KvNamespace {
    std::string model_fingerprint;  // SHA-256 of the GGUF: renaming the file keeps the cache
    std::string layout;             // context parameters that change the state's bytes
    std::string adapters;           // active LoRA set; empty without adapters
    std::string scope;              // tenant: entries are never shared across scopes
    std::string id() const;         // SHA-256 over all of the above
};

enum class KvMatch {
    prefix,  // any prefix of an entry restores (restore, then trim the tail)
    exact,   // only an entry's whole token sequence restores (recurrent, hybrid models)
};

struct KvLookup {
    KvMatch match = KvMatch::prefix;
    std::size_t max_entry_tokens = 0;  // entries longer than this do not fit (0 = any)
    // > 0: a trimmed restore must keep this many cells before its end (sliding-window models)
    int sliding_window = 0;
    std::size_t min_tokens = 1;  // shorter matches are misses
    std::string session;         // prefer this session's last entry when it matches as well
    // false: the caller decides later whether it uses the hit and then calls record_hit (an
    // engine that finds a live sequence serving the prompt better does not count a hit).
    bool count_hit = true;
    // A second look that must not read files (an engine's decode thread, checking whether a
    // save committed since its first lookup serves more): only entries held in RAM are
    // considered, and a miss is not counted again.
    bool ram_only = false;
};

struct KvHit {
    KvEntryInfo entry;
    std::size_t matched_tokens = 0;  // prompt tokens the restored state serves
    std::shared_ptr<const Bytes> payload;
    double load_ms = 0;
};

// A reserved save: the decode thread fills bytes() with the state and commits it. Dropping it
// uncommitted releases the reservation.
class KvSaveTicket {
  public:
    KvSaveTicket(KvSaveTicket&&) noexcept;
    KvSaveTicket& operator=(KvSaveTicket&&) noexcept;
    ~KvSaveTicket();
    std::span<std::uint8_t> bytes();
    struct State;

  private:
    friend class KvStoreClient;
    friend struct KvStore::Impl;
    explicit KvSaveTicket(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

// Thread-safe, as the store is; cheap to copy (it shares the store).
class KvStoreClient {
  public:
    explicit KvStoreClient(std::shared_ptr<KvStore> store);

    // The entry sharing the longest usable prefix with `prompt` (capped at prompt.size() - 1
    // so that fresh logits exist), loaded and verified; a corrupt file is removed and counted.
    // RAM copies are preferred at equal length. Counts a hit or a miss.
    std::optional<KvHit> fetch(const KvNamespace& ns, std::span<const Token> prompt,
                               const KvLookup& lookup) const;
    // Whether the store already serves all of `tokens`, so saving them again adds nothing.
    bool covers(const KvNamespace& ns, std::span<const Token> tokens, KvMatch match) const;

    // Reserves quota for a save of `bytes`, before anything is allocated. Empty (and counted as
    // dropped or duplicate) when the save cannot or need not be taken; never blocks on I/O.
    // With KvMatch::prefix the new entry serves every prefix of itself: stored entries that are
    // its prefixes are dropped once it is published where they are (unless it holds only a
    // sliding window). `max_entry_bytes`: the caller's own policy limit (an engine's SavePolicy;
    // 0 = none); without it the store's policy applies.
    std::optional<KvSaveTicket> reserve(const KvNamespace& ns, std::vector<Token> tokens,
                                        std::uint64_t bytes, SaveReason reason,
                                        std::int32_t kept_from = 0, std::string session = {},
                                        KvMatch match = KvMatch::exact,
                                        std::optional<std::uint64_t> max_entry_bytes = {}) const;
    // Publishes a filled ticket: into the RAM tier at once, to the first directory on a
    // writer thread.
    void commit(KvSaveTicket ticket) const;
    // Synchronous save (tools and tests): published everywhere when it returns.
    [[nodiscard]] Result<void> put(const KvNamespace& ns, std::vector<Token> tokens,
                                   std::vector<std::uint8_t> payload,
                                   SaveReason reason = SaveReason::put, std::int32_t kept_from = 0,
                                   std::string session = {}) const;

    // Counts a hit fetched with count_hit = false and used: hit count and last use persist.
    void record_hit(const KvHit& hit) const;
    // Counts an entry a context refused to restore. The entry stays: its key already rules out
    // a foreign layout, so the context most likely lacked room.
    void report_restore_failure(const KvHit& hit) const;
    // The last entry saved for a session (scope is part of the namespace).
    std::optional<KvEntryInfo> session_entry(const KvNamespace& ns,
                                             const std::string& session) const;

    KvStore& store() const { return *store_; }

  private:
    KvStore::Impl& impl() const;
    std::shared_ptr<KvStore> store_;
};

}  // namespace llamapp::detail
