// KvStore: content-addressed snapshots of sequence state in a RAM tier and directory tiers,
// with longest-common-prefix lookup. Shared by every engine of a process; survives restarts.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/tokenizer.hpp"

namespace llamapp {

enum class SaveReason : std::uint32_t { finish = 1, prefill = 2, evict = 3, shutdown = 4, put = 5 };
std::string_view to_string(SaveReason reason);

// When an engine saves a sequence. Data, not code paths: each engine may carry its own.
struct SavePolicy {
    bool on_finish = true;    // prompt + reply when a request ends (see finish_save_delay)
    bool on_prefill = true;   // a long prompt computed from scratch, at its prefill boundary
    bool on_evict = true;     // an idle sequence whose cells the engine is about to reuse
    bool on_shutdown = true;  // every cached sequence when the engine stops
    // Shorter sequences are not saved: recomputing them costs less than the I/O. From 32 tokens
    // a RAM-tier restore took a fifth of the prefill on a CPU (docs/performance.md).
    int min_tokens = 32;
    // A prompt is saved at its prefill boundary when at least this many of its tokens were
    // computed from scratch; the boundary is `boundary_trim_tokens` before the prompt's end,
    // rounded down to a multiple of `boundary_align_tokens`, so that a re-rendered or extended
    // prompt still lands on the entry on models that restore exact boundaries only. The default
    // trim of 64 also keeps the prompt's last chunk at 64 tokens or more: llama.cpp's CPU flash
    // attention takes its fast tiled path only for 64 query rows or more, and a short tail chunk
    // deep in a long prompt costs as much as hundreds of prompt tokens.
    int prefill_min_tokens = 1024;
    int boundary_trim_tokens = 64;
    int boundary_align_tokens = 64;
    std::uint64_t max_entry_bytes = 0;  // 0 = as large as the quotas allow
    // A stored prefix is restored only when it is at least this long and beats the live cache.
    int min_restore_tokens = 32;
    // The finish save copies the sequence's state on the decode thread (docs/performance.md has
    // its cost), so right after a request ends it would delay the conversation's
    // next turn, which mostly reuses the live sequence anyway. With a delay the save is taken
    // once the engine has been idle that long, or before the slot's tokens are dropped for
    // another request, or at shutdown, whichever comes first. 0 = at once.
    std::chrono::milliseconds finish_save_delay{250};
};
[[nodiscard]] Result<void> validate(const SavePolicy& policy);

struct KvDirectoryTier {
    std::string name;  // metric label; empty = "disk", "disk1", ...
    std::filesystem::path directory;
    std::uint64_t max_bytes = 0;  // 0 = no quota
};

struct KvStoreOptions {
    std::uint64_t ram_bytes = 1024ull << 20;  // RAM tier quota; 0 turns the tier off
    // Directory tiers, fastest first (e.g. tmpfs, then disk). New entries go to the first;
    // an entry evicted from one moves to the next.
    std::vector<KvDirectoryTier> directories;
    SavePolicy policy;                   // engines use it unless they carry their own
    int writer_threads = 1;              // disk writes happen here, never on a decode thread
    std::size_t max_pending_saves = 16;  // queued writes; more are dropped
    std::uint64_t max_pending_bytes = 512ull << 20;  // staged bytes not held by the RAM tier
    // Eviction order: lowest last_used + hit_weight * log2(1 + hits) goes first.
    std::chrono::seconds hit_weight{600};
    std::shared_ptr<MetricsRegistry> metrics;  // a new registry when null
    Labels metric_labels;
};

struct KvEntryInfo {
    std::string id;  // SHA-256 of namespace id + tokens; the file name on disk
    std::string tier;
    std::vector<Token> tokens;
    std::uint64_t payload_bytes = 0;
    std::uint64_t hits = 0;
    SaveReason reason = SaveReason::put;
    std::string session;
    std::int32_t kept_from = 0;      // first position the state holds (sliding window)
    std::uint64_t created_ms = 0;    // Unix time in milliseconds
    std::uint64_t last_used_ms = 0;  // last save or hit; prune() goes by it
};

struct KvTierStats {
    std::string name;
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
    std::uint64_t capacity = 0;  // 0 = no quota
    std::uint64_t hits = 0;
    std::uint64_t saves = 0;
    std::uint64_t evictions = 0;
    std::uint64_t corrupt_files = 0;
};

struct KvStoreStats {
    std::vector<KvTierStats> tiers;  // "ram" first when on, then the directories
    std::uint64_t misses = 0;
    std::uint64_t dropped_saves = 0;
    std::uint64_t duplicate_saves = 0;
    std::uint64_t restore_failures = 0;
    std::size_t pending_saves = 0;
};

namespace detail {
class KvStoreClient;  // the engine's side: src/kvstore/store_client.hpp
}

// Thread-safe. Open one per process and hand it to every engine (EngineOptions::kv_store): the
// engines look entries up and save them; an application lists, prunes and clears them here.
class KvStore {
  public:
    // Creates the directories, removes orphaned temporary files, and indexes what the
    // directories hold by reading headers only (corrupt headers are removed and counted).
    [[nodiscard]] static Result<std::shared_ptr<KvStore>> open(KvStoreOptions options);
    ~KvStore();  // waits for pending writes
    KvStore(const KvStore&) = delete;
    KvStore& operator=(const KvStore&) = delete;

    std::vector<KvEntryInfo> entries() const;  // every entry of every tier, ordered by id

    // Both remove entries from every tier and return how many (a committed save still waiting
    // for its writer counts and is not written; a reserved, uncommitted one is published
    // when it is committed).
    std::size_t clear();
    std::size_t prune(std::chrono::seconds unused_for);  // entries unused for that long
    void flush();                                        // waits until queued writes are done
    // Frees the RAM tier's copies of one model's entries (SHA-256 of its GGUF, as
    // Model::fingerprint gives it); copies in directory tiers stay. How many were freed. A model
    // manager calls it when it unloads the model, so an unloaded model holds no RAM.
    std::size_t release_ram(std::string_view model_fingerprint);

    KvStoreStats stats() const;
    const SavePolicy& policy() const;
    MetricsRegistry& metrics() const;

    struct Impl;

  private:
    friend class detail::KvStoreClient;
    explicit KvStore(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace llamapp
