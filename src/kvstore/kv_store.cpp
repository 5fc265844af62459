// KvStore: opening a store and the operations an application manages it with.
#include "llamapp/kv_store.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "core/log_internal.hpp"
#include "kvstore/store_state.hpp"

namespace llamapp {

namespace fs = std::filesystem;
using namespace detail;

std::string_view to_string(SaveReason reason) {
    switch (reason) {
        case SaveReason::finish:
            return "finish";
        case SaveReason::prefill:
            return "prefill";
        case SaveReason::evict:
            return "evict";
        case SaveReason::shutdown:
            return "shutdown";
        case SaveReason::put:
            return "put";
    }
    return "put";
}

Result<void> validate(const SavePolicy& p) {
    if (p.min_tokens < 1) return fail(ErrorCode::invalid_argument, "must be >= 1", "min_tokens");
    if (p.prefill_min_tokens < p.min_tokens)
        return fail(ErrorCode::invalid_argument, "must be >= min_tokens", "prefill_min_tokens");
    if (p.boundary_trim_tokens < 0)
        return fail(ErrorCode::invalid_argument, "must be >= 0", "boundary_trim_tokens");
    if (p.boundary_align_tokens < 1)
        return fail(ErrorCode::invalid_argument, "must be >= 1", "boundary_align_tokens");
    if (p.min_restore_tokens < 1)
        return fail(ErrorCode::invalid_argument, "must be >= 1", "min_restore_tokens");
    return {};
}

// ---- open -----------------------------------------------------------------------------------

KvStore::KvStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvStore::~KvStore() = default;

Result<std::shared_ptr<KvStore>> KvStore::open(KvStoreOptions options) {
    if (auto ok = validate(options.policy); !ok) return std::unexpected(ok.error());
    if (options.writer_threads < 1 || options.writer_threads > 64)
        return fail(ErrorCode::invalid_argument, "must be in [1, 64]", "writer_threads");
    if (options.max_pending_saves < 1)
        return fail(ErrorCode::invalid_argument, "must be >= 1", "max_pending_saves");
    if (options.hit_weight.count() < 0)
        return fail(ErrorCode::invalid_argument, "must be >= 0", "hit_weight");
    if (!options.metrics) options.metrics = std::make_shared<MetricsRegistry>();
    auto metrics = StoreMetrics::create(options.metrics, options.metric_labels);
    if (!metrics) return std::unexpected(metrics.error());

    auto impl = std::make_unique<Impl>();
    impl->metrics = std::move(*metrics);
    auto make_tier = [&](std::string name, fs::path dir, std::uint64_t cap) -> Result<Tier> {
        Tier t{std::move(name), std::move(dir), cap};
        auto m = impl->metrics.tier(t.name);
        if (!m) return std::unexpected(m.error());
        t.metrics = *m;
        t.publish_gauges();
        return t;
    };
    if (options.ram_bytes > 0) {
        auto t = make_tier("ram", {}, options.ram_bytes);
        if (!t) return std::unexpected(t.error());
        impl->ram = std::move(*t);
    }
    for (std::size_t i = 0; i < options.directories.size(); ++i) {
        const KvDirectoryTier& d = options.directories[i];
        if (d.directory.empty())
            return fail(ErrorCode::invalid_argument, "a directory tier needs a directory",
                        "directories");
        std::error_code ec;
        fs::create_directories(d.directory, ec);
        if (ec || !fs::is_directory(d.directory))
            return fail(ErrorCode::io_error, "cannot create the cache directory",
                        d.directory.string());
        for (std::size_t j = 0; j < i; ++j) {
            // One directory in two tiers would see each entry twice and delete it as a duplicate.
            if (fs::equivalent(options.directories[j].directory, d.directory, ec))
                return fail(ErrorCode::invalid_argument, "a directory may back only one tier",
                            d.directory.string());
        }
        std::string name = d.name.empty() ? (i == 0 ? "disk" : fmt::format("disk{}", i)) : d.name;
        auto t = make_tier(std::move(name), d.directory, d.max_bytes);
        if (!t) return std::unexpected(t.error());
        impl->dirs.push_back(std::move(*t));
    }
    impl->options = std::move(options);
    for (std::size_t i = 0; i < impl->dirs.size(); ++i) {
        if (auto ok = impl->scan(static_cast<int>(i)); !ok) return std::unexpected(ok.error());
    }
    // A smaller quota than last time: evict (and demote) down to it.
    for (std::size_t i = 0; i < impl->dirs.size(); ++i) {
        std::vector<Removal> removals;
        {
            std::lock_guard lock(impl->mutex);
            impl->make_room(impl->dirs[i], static_cast<int>(i), 0, removals);
        }
        impl->carry_out(std::move(removals));
    }
    for (int i = 0; i < impl->options.writer_threads; ++i) {
        Impl* raw = impl.get();
        impl->writers.emplace_back([raw] { raw->writer_loop(); });
    }
    return std::shared_ptr<KvStore>(new KvStore(std::move(impl)));
}

// ---- management -----------------------------------------------------------------------------

std::vector<KvEntryInfo> KvStore::entries() const {
    std::lock_guard lock(impl_->mutex);
    std::vector<KvEntryInfo> out;
    for (const auto& [h, e] : impl_->entries) out.push_back(impl_->info(e));
    std::sort(out.begin(), out.end(),
              [](const KvEntryInfo& a, const KvEntryInfo& b) { return a.id < b.id; });
    return out;
}

namespace {

// Removes the entries `doomed` picks from every tier; returns how many.
template <typename Predicate>
std::size_t remove_where(KvStore::Impl& s, Predicate doomed) {
    std::vector<Removal> removals;
    std::vector<Handle> picked;
    {
        std::lock_guard lock(s.mutex);
        for (const auto& [h, e] : s.entries) {
            if (doomed(e)) picked.push_back(h);
        }
        for (Handle h : picked) s.remove(h, removals);
    }
    s.carry_out(std::move(removals));
    return picked.size();
}

}  // namespace

std::size_t KvStore::clear() {
    return remove_where(*impl_, [](const StoredEntry&) { return true; });
}

std::size_t KvStore::prune(std::chrono::seconds unused_for) {
    // Clamped so that absurd durations prune nothing instead of overflowing.
    const auto cutoff =
        static_cast<std::int64_t>(unix_ms_now()) -
        std::clamp<std::int64_t>(unused_for.count(), 0, std::int64_t{1} << 40) * 1000;
    return remove_where(*impl_, [cutoff](const StoredEntry& e) {
        return static_cast<std::int64_t>(e.header.last_used_ms) <= cutoff;
    });
}

std::size_t KvStore::release_ram(std::string_view model_fingerprint) {
    Impl& s = *impl_;
    std::lock_guard lock(s.mutex);
    std::vector<Handle> picked;
    for (const auto& [h, e] : s.entries)
        if (e.ram && e.header.key.model_fingerprint == model_fingerprint) picked.push_back(h);
    for (Handle h : picked) {
        s.drop_ram(s.entries.at(h));
        s.forget_if_homeless(h);
    }
    return picked.size();
}

void KvStore::flush() {
    std::unique_lock lock(impl_->mutex);
    impl_->done.wait(lock, [&] { return impl_->idle(); });
}

KvStoreStats KvStore::stats() const {
    const Impl& s = *impl_;
    KvStoreStats out;
    std::lock_guard lock(s.mutex);
    auto add_tier = [&](const Tier& t) {
        KvTierStats ts;
        ts.name = t.name;
        ts.entries = t.entries;
        ts.bytes = t.used;
        ts.capacity = t.capacity;
        ts.hits = static_cast<std::uint64_t>(t.metrics.hits->value());
        ts.saves = static_cast<std::uint64_t>(t.metrics.total_saves());
        ts.evictions = static_cast<std::uint64_t>(t.metrics.evictions->value());
        ts.corrupt_files = static_cast<std::uint64_t>(t.metrics.corrupt->value());
        out.tiers.push_back(std::move(ts));
    };
    if (s.ram) add_tier(*s.ram);
    for (const auto& d : s.dirs) add_tier(d);
    out.misses = static_cast<std::uint64_t>(s.metrics.misses->value());
    out.dropped_saves = static_cast<std::uint64_t>(s.metrics.dropped());
    out.duplicate_saves = static_cast<std::uint64_t>(s.metrics.duplicates->value());
    out.restore_failures = static_cast<std::uint64_t>(s.metrics.restore_failures->value());
    out.pending_saves = s.pending_jobs;
    return out;
}

const SavePolicy& KvStore::policy() const {
    return impl_->options.policy;
}

MetricsRegistry& KvStore::metrics() const {
    return *impl_->options.metrics;
}

}  // namespace llamapp
