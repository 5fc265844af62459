// KvStore: the public operations over the shared state.
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

// ---- tickets --------------------------------------------------------------------------------

KvSaveTicket::KvSaveTicket(std::unique_ptr<State> state) : state_(std::move(state)) {}
KvSaveTicket::KvSaveTicket(KvSaveTicket&&) noexcept = default;
KvSaveTicket& KvSaveTicket::operator=(KvSaveTicket&& other) noexcept {
    if (this != &other) {
        if (state_) state_->store->release(*state_);
        state_ = std::move(other.state_);
    }
    return *this;
}
KvSaveTicket::~KvSaveTicket() {
    if (state_) state_->store->release(*state_);
}
std::span<std::uint8_t> KvSaveTicket::bytes() {
    return state_ ? std::span<std::uint8_t>(*state_->buffer) : std::span<std::uint8_t>{};
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

// ---- lookup ---------------------------------------------------------------------------------

std::pair<Handle, std::size_t> KvStore::Impl::best_entry(const std::string& ns_id,
                                                         std::span<const Token> prompt,
                                                         const KvLookup& lookup) const {
    Handle best = 0;
    std::size_t best_m = 0;
    auto idx = prompt.size() < 2 ? indexes.end() : indexes.find(ns_id);
    if (idx == indexes.end()) return {0, 0};
    auto consider = [&](Handle h, std::size_t lcp) {
        const StoredEntry& e = entries.at(h);
        if (lookup.ram_only && !e.ram) return;
        auto m = usable(e, lcp, prompt.size(), lookup);
        if (!m) return;
        // Longer wins; at equal length a RAM copy beats a file.
        if (best == 0 || *m > best_m || (*m == best_m && e.ram && !entries.at(best).ram)) {
            best = h;
            best_m = *m;
        }
    };
    int visits = 0;
    auto visit = [&](Handle h, std::size_t lcp) {
        if (best != 0 && std::min(lcp, prompt.size() - 1) < best_m) return true;
        consider(h, lcp);
        return (best != 0 && entries.at(best).ram) || ++visits > 256;
    };
    if (lookup.match == KvMatch::exact) {
        idx->second.by_boundary(prompt, visit);
    } else {
        idx->second.by_common_prefix(prompt, visit);
    }
    if (lookup.session.empty()) return {best, best_m};
    // The session's own last entry, when it serves at least as much.
    auto it = sessions.find({ns_id, lookup.session});
    if (it == sessions.end()) return {best, best_m};
    const auto& tokens = entries.at(it->second).header.tokens;
    const auto lcp = static_cast<std::size_t>(
        std::mismatch(tokens.begin(), tokens.end(), prompt.begin(), prompt.end()).first -
        tokens.begin());
    const Handle before = best;
    const std::size_t before_m = best_m;
    best = 0;
    consider(it->second, lcp);
    if (best == 0 || (before != 0 && best_m < before_m)) return {before, before_m};
    return {best, best_m};
}

KvHit KvStore::Impl::describe_hit(Handle h, std::size_t matched, const KvLookup& lookup,
                                  fs::path& path) {
    StoredEntry& e = entries.at(h);
    if (lookup.count_hit) {
        e.header.hits += 1;
        e.header.last_used_ms = unix_ms_now();
    }
    KvHit hit;
    hit.matched_tokens = matched;
    hit.payload = e.ram;
    hit.entry.id = e.header.id;
    hit.entry.tokens = e.header.tokens;
    hit.entry.payload_bytes = e.header.payload_bytes;
    hit.entry.hits = e.header.hits;
    hit.entry.reason = e.header.reason;
    hit.entry.session = e.header.session;
    hit.entry.kept_from = e.header.kept_from;
    if (e.dir >= 0) path = entry_path(dirs[static_cast<std::size_t>(e.dir)].directory, e.header.id);
    hit.entry.tier = e.ram ? "ram" : dirs[static_cast<std::size_t>(e.dir)].name;
    return hit;
}

bool KvStore::Impl::load_payload(Handle h, int dir, const fs::path& path, KvHit& hit) {
    auto payload = std::make_shared<Bytes>();
    ParsedHeader parsed = read_entry(path, *payload);
    std::vector<Removal> removals;
    std::lock_guard lock(mutex);
    auto it = entries.find(h);
    if (parsed.defect != EntryDefect::none || parsed.header.id != hit.entry.id) {
        log(LogLevel::warning, "kvstore: removing {}: {} {}", path.string(),
            to_string(parsed.defect), parsed.detail);
        dirs[static_cast<std::size_t>(dir)].metrics.corrupt->inc();
        metrics.misses->inc();
        if (it != entries.end()) remove(h, removals);
        for (auto& r : removals) ::unlink(r.path.c_str());
        return false;
    }
    // Promote into RAM when it fits, so the next hit skips the read.
    if (it != entries.end() && ram && !it->second.ram) {
        const std::uint64_t size = parsed.header.file_bytes();
        if (size <= ram->capacity && make_room(*ram, -1, size, removals)) {
            it->second.ram = payload;
            it->second.ram_bytes = size;
            ram->used += size;
            ++ram->entries;
            ram->publish_gauges();
        }
    }
    hit.payload = std::move(payload);
    return true;
}

std::optional<KvHit> KvStore::fetch(const KvNamespace& ns, std::span<const Token> prompt,
                                    const KvLookup& lookup) {
    Impl& s = *impl_;
    const auto started = SteadyClock::now();
    KvHit hit;
    int dir = -1;
    fs::path path;
    Handle best = 0;
    {
        std::lock_guard lock(s.mutex);
        const auto [h, matched] = s.best_entry(ns.id(), prompt, lookup);
        if (h == 0) {
            if (!lookup.ram_only) s.metrics.misses->inc();
            return std::nullopt;
        }
        best = h;
        hit = s.describe_hit(h, matched, lookup, path);
        dir = s.entries.at(h).dir;
    }
    const auto usage_ms = unix_ms_now();
    if (!hit.payload && !s.load_payload(best, dir, path, hit)) return std::nullopt;
    hit.load_ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - started).count();
    {
        std::lock_guard lock(s.mutex);
        const Tier& served =
            hit.entry.tier == "ram" ? *s.ram : s.dirs[static_cast<std::size_t>(dir)];
        if (!lookup.ram_only) served.metrics.restore_seconds->observe(hit.load_ms / 1000.0);
        if (lookup.count_hit) served.metrics.hits->inc();
    }
    if (lookup.count_hit && dir >= 0) update_usage(path, usage_ms, hit.entry.hits);
    return hit;
}

// Called on an engine's decode thread: the file's usage block is rewritten by a writer thread.
void KvStore::record_hit(const KvHit& hit) {
    Impl& s = *impl_;
    std::lock_guard lock(s.mutex);
    auto it = s.by_id.find(hit.entry.id);
    if (it == s.by_id.end()) return;
    StoredEntry& e = s.entries.at(it->second);
    e.header.last_used_ms = unix_ms_now();
    ++e.header.hits;
    const Tier* served = hit.entry.tier == "ram" && s.ram ? &*s.ram : nullptr;
    for (const auto& d : s.dirs) {
        if (d.name == hit.entry.tier) served = &d;
    }
    if (served) served->metrics.hits->inc();
    if (e.dir < 0 || s.stopping) return;
    // Not bounded by max_pending_saves: one small job per restore, and a restore is rare next
    // to the tokens it saves.
    ++s.usage_jobs;
    s.jobs.push_back(WriteJob{.handle = it->second});
    s.work.notify_one();
}

bool KvStore::covers(const KvNamespace& ns, std::span<const Token> tokens, KvMatch match) const {
    const std::string ns_id = ns.id();
    const std::string id = match == KvMatch::exact ? entry_id(ns_id, tokens) : std::string{};
    std::lock_guard lock(impl_->mutex);
    if (match == KvMatch::exact) return impl_->by_id.contains(id);
    auto idx = impl_->indexes.find(ns_id);
    return idx != impl_->indexes.end() && !tokens.empty() &&
           idx->second.deepest_match(tokens) == tokens.size();
}

// ---- saves ----------------------------------------------------------------------------------

std::optional<KvSaveTicket> KvStore::reserve(const KvNamespace& ns, std::vector<Token> tokens,
                                             std::uint64_t bytes, SaveReason reason,
                                             std::int32_t kept_from, std::string session,
                                             KvMatch match,
                                             std::optional<std::uint64_t> max_entry_bytes) {
    if (tokens.empty() || bytes == 0) return std::nullopt;
    auto t = impl_->reserve(ns, std::move(tokens), bytes, reason, kept_from, std::move(session),
                            max_entry_bytes.value_or(impl_->options.policy.max_entry_bytes));
    if (!t) return std::nullopt;
    t->state_->supersede = match == KvMatch::prefix && kept_from <= 0;
    return std::move(*t);
}

void KvStore::commit(KvSaveTicket ticket) {
    Impl& s = *impl_;
    std::unique_ptr<KvSaveTicket::State> st = std::move(ticket.state_);
    if (!st) return;
    std::vector<Removal> removals;
    {
        std::lock_guard lock(s.mutex);
        if (s.by_id.contains(st->id)) {
            s.metrics.duplicates->inc();  // another engine saved the same tokens meanwhile
        } else {
            std::vector<Handle> prefixes;
            if (st->supersede) {
                if (auto idx = s.indexes.find(st->ns_id); idx != s.indexes.end()) {
                    idx->second.by_boundary(st->tokens, [&](Handle other, std::size_t) {
                        prefixes.push_back(other);
                        return false;
                    });
                }
                // Without a file of its own the new entry replaces only what has no file either:
                // a published prefix is not deleted for a copy that lives in RAM alone.
                if (!st->write) {
                    for (Handle other : prefixes)
                        if (const auto& o = s.entries.at(other); o.dir < 0 && !o.moving)
                            s.remove(other, removals);
                    prefixes.clear();
                }
            }
            StoredEntry e;
            EntryHeader& h = e.header;
            h.key = std::move(st->key);
            h.ns_id = std::move(st->ns_id);
            h.id = st->id;
            h.session = std::move(st->session);
            h.tokens = std::move(st->tokens);
            h.payload_bytes = st->buffer->size();
            h.kept_from = st->kept_from;
            h.reason = st->reason;
            h.created_ms = h.last_used_ms = unix_ms_now();
            const Handle handle = s.next_handle++;
            if (st->ram_reserved) {
                e.ram = st->buffer;
                e.ram_bytes = st->ram_reserved;
                ++s.ram->entries;
                s.ram->publish_gauges();
                s.ram->metrics.saves_for(h.reason)->inc();
                s.ram->metrics.save_seconds->observe(
                    std::chrono::duration<double>(SteadyClock::now() - st->started).count());
            }
            if (st->write) {
                e.moving = true;
                s.jobs.push_back(
                    WriteJob{handle, st->buffer, st->staged, st->started, std::move(prefixes)});
                s.work.notify_one();
            }
            s.add(handle, std::move(e));
            st.reset();  // the entry owns the reservations now
        }
    }
    if (st) s.release(*st);
    s.carry_out(std::move(removals));
}

Result<void> KvStore::put(const KvNamespace& ns, std::vector<Token> tokens,
                          std::vector<std::uint8_t> payload, SaveReason reason,
                          std::int32_t kept_from, std::string session) {
    if (tokens.empty() || payload.empty())
        return fail(ErrorCode::invalid_argument, "an entry needs tokens and a payload");
    const std::string id = entry_id(ns.id(), tokens);
    auto t = impl_->reserve(ns, std::move(tokens), payload.size(), reason, kept_from,
                            std::move(session), impl_->options.policy.max_entry_bytes);
    if (!t) {
        switch (t.error()) {
            case Drop::duplicate:
                return {};
            case Drop::pool_full:
                return fail(ErrorCode::busy, "the writer queue is full");
            case Drop::quota:
            case Drop::too_large:
                return fail(ErrorCode::out_of_memory, "the entry does not fit the quotas");
        }
    }
    std::copy(payload.begin(), payload.end(), t->bytes().begin());
    commit(std::move(*t));
    flush();
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->by_id.find(id);
    const bool stored =
        it != impl_->by_id.end() && (impl_->dirs.empty() || impl_->entries.at(it->second).dir >= 0);
    if (!stored) return fail(ErrorCode::io_error, "the entry could not be written", id);
    return {};
}

// ---- management -----------------------------------------------------------------------------

void KvStore::report_restore_failure(const KvHit& hit) {
    log(LogLevel::warning, "kvstore: a context could not restore entry {} ({} tokens)",
        hit.entry.id, hit.entry.tokens.size());
    impl_->metrics.restore_failures->inc();
}

namespace {

KvEntryInfo info_of(const KvStore::Impl& s, const StoredEntry& e) {
    KvEntryInfo i;
    i.id = e.header.id;
    i.tier = e.ram ? "ram" : e.dir >= 0 ? s.dirs[static_cast<std::size_t>(e.dir)].name : "";
    i.tokens = e.header.tokens;
    i.payload_bytes = e.header.payload_bytes;
    i.hits = e.header.hits;
    i.reason = e.header.reason;
    i.session = e.header.session;
    i.kept_from = e.header.kept_from;
    i.created_ms = e.header.created_ms;
    i.last_used_ms = e.header.last_used_ms;
    return i;
}

}  // namespace

std::optional<KvEntryInfo> KvStore::session_entry(const KvNamespace& ns,
                                                  const std::string& session) const {
    const std::string ns_id = ns.id();
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->sessions.find({ns_id, session});
    if (it == impl_->sessions.end()) return std::nullopt;
    return info_of(*impl_, impl_->entries.at(it->second));
}

std::vector<KvEntryInfo> KvStore::entries() const {
    std::lock_guard lock(impl_->mutex);
    std::vector<KvEntryInfo> out;
    for (const auto& [h, e] : impl_->entries) out.push_back(info_of(*impl_, e));
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
