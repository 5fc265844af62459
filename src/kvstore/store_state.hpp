// Internal: the KV store's shared state. One mutex guards the index and the tier accounting;
// file I/O and payload copies happen outside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "kvstore/entry_file.hpp"
#include "kvstore/prefix_index.hpp"
#include "kvstore/snapshot_bytes.hpp"
#include "kvstore/store_client.hpp"
#include "kvstore/store_metrics.hpp"
#include "llamapp/kv_store.hpp"

namespace llamapp {

using Handle = detail::PrefixIndex::EntryHandle;
using SteadyClock = std::chrono::steady_clock;

namespace detail {

struct StoredEntry {
    EntryHeader header;
    std::shared_ptr<const Bytes> ram;  // the RAM tier's copy
    std::uint64_t ram_bytes = 0;
    int dir = -1;  // directory tier holding the file
    std::uint64_t dir_bytes = 0;
    bool moving = false;  // a writer is publishing or demoting it
};

struct Tier {
    std::string name;
    std::filesystem::path directory;  // empty for the RAM tier
    std::uint64_t capacity = 0;       // 0 = no quota
    std::uint64_t used = 0;           // includes reservations
    std::size_t entries = 0;
    TierMetrics metrics;

    void publish_gauges() const;
};

// A file to delete, or to move one directory tier down, once the lock is released.
struct Removal {
    std::filesystem::path path;
    Handle demote = 0;  // non-zero: move the entry to tier `to`
    int to = -1;
};

struct WriteJob {
    Handle handle = 0;
    std::shared_ptr<const Bytes> payload;  // null: only rewrite the file's usage block
    std::uint64_t staged = 0;
    SteadyClock::time_point started;
    // Stored prefixes of this entry, removed only once its file is published: until then they
    // are what survives a crash or a failed write.
    std::vector<Handle> supersedes;
};

enum class Drop { duplicate, pool_full, quota, too_large };

struct KvSaveTicket::State {
    KvStore::Impl* store = nullptr;  // a ticket never outlives its store
    KvNamespace key;
    std::string ns_id;
    std::string id;
    std::vector<Token> tokens;
    SaveReason reason = SaveReason::put;
    std::int32_t kept_from = 0;
    std::string session;
    std::shared_ptr<Bytes> buffer;
    std::uint64_t ram_reserved = 0;
    std::uint64_t staged = 0;
    bool write = false;
    bool supersede = false;  // drop stored entries that are prefixes of this one
    SteadyClock::time_point started;
};

}  // namespace detail

struct KvStore::Impl {
    KvStoreOptions options;
    detail::StoreMetrics metrics;
    std::optional<detail::Tier> ram;
    std::vector<detail::Tier> dirs;

    mutable std::mutex mutex;
    Handle next_handle = 1;
    std::unordered_map<Handle, detail::StoredEntry> entries;
    std::unordered_map<std::string, Handle> by_id;
    std::unordered_map<std::string, detail::PrefixIndex> indexes;    // by namespace id
    std::map<std::pair<std::string, std::string>, Handle> sessions;  // (namespace, session)

    std::deque<detail::WriteJob> jobs;
    std::size_t pending_jobs = 0;  // saves queued and running
    std::size_t usage_jobs = 0;    // usage-block rewrites queued and running (not bounded)
    bool idle() const { return pending_jobs == 0 && usage_jobs == 0; }
    std::uint64_t staged_bytes = 0;
    bool stopping = false;
    std::condition_variable work;
    std::condition_variable done;
    std::vector<std::thread> writers;

    ~Impl();

    // Lock held.
    KvEntryInfo info(const detail::StoredEntry& e) const;
    double score(const detail::StoredEntry& e) const;
    bool make_room(detail::Tier& tier, int dir, std::uint64_t bytes,
                   std::vector<detail::Removal>& out);
    void drop_ram(detail::StoredEntry& e);
    void drop_dir(Handle h, detail::StoredEntry& e, std::vector<detail::Removal>& out, bool demote);
    void remove(Handle h, std::vector<detail::Removal>& out);
    void forget_if_homeless(Handle h);
    void add(Handle h, detail::StoredEntry e);
    std::optional<std::size_t> usable(const detail::StoredEntry& e, std::size_t lcp,
                                      std::size_t prompt, const detail::KvLookup& lookup) const;
    // The entry that serves `prompt` best and how many of its tokens it matches (0: none).
    std::pair<Handle, std::size_t> best_entry(const std::string& ns_id,
                                              std::span<const Token> prompt,
                                              const detail::KvLookup& lookup) const;
    // A hit on entry `h` for `matched` tokens, counted when the lookup asks; `path` gets its
    // file when it lives in a directory tier.
    detail::KvHit describe_hit(Handle h, std::size_t matched, const detail::KvLookup& lookup,
                               std::filesystem::path& path);

    // Lock not held.
    std::expected<detail::KvSaveTicket, detail::Drop> reserve(
        const detail::KvNamespace& ns, std::vector<Token> tokens, std::uint64_t bytes,
        SaveReason reason, std::int32_t kept_from, std::string session,
        std::uint64_t max_entry_bytes);
    void release(detail::KvSaveTicket::State& s);
    void carry_out(std::vector<detail::Removal> removals);
    void place(Handle h, detail::EntryHeader header, const Bytes& payload, int dir,
               SteadyClock::time_point started);
    void writer_loop();
    Result<void> scan(int dir);
    // Reads entry `h` from directory tier `dir` into `hit` (promoting it into RAM when it fits);
    // false, with the damaged file removed, when it does not verify.
    bool load_payload(Handle h, int dir, const std::filesystem::path& path, detail::KvHit& hit);
};

}  // namespace llamapp
