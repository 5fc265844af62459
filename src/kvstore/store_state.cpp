// KvStore internals: quotas and eviction, the writer pool, directory scans.
#include "kvstore/store_state.hpp"

#include <unistd.h>

#include <cmath>

#include "core/log_internal.hpp"

namespace llamapp {

namespace fs = std::filesystem;
using namespace detail;

void detail::Tier::publish_gauges() const {
    metrics.entries->set(static_cast<double>(entries));
    metrics.bytes->set(static_cast<double>(used));
    metrics.capacity->set(static_cast<double>(capacity));
}

KvStore::Impl::~Impl() {
    {
        std::unique_lock lock(mutex);
        done.wait(lock, [&] { return idle(); });
        stopping = true;
    }
    work.notify_all();
    for (auto& w : writers) w.join();
}

KvEntryInfo KvStore::Impl::info(const StoredEntry& e) const {
    KvEntryInfo i;
    i.id = e.header.id;
    i.tier = e.ram ? "ram" : e.dir >= 0 ? dirs[static_cast<std::size_t>(e.dir)].name : "";
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

double KvStore::Impl::score(const StoredEntry& e) const {
    return static_cast<double>(e.header.last_used_ms) / 1000.0 +
           static_cast<double>(options.hit_weight.count()) *
               std::log2(1.0 + static_cast<double>(e.header.hits));
}

void KvStore::Impl::drop_ram(StoredEntry& e) {
    if (!e.ram) return;
    e.ram.reset();
    ram->used -= e.ram_bytes;
    --ram->entries;
    e.ram_bytes = 0;
    ram->publish_gauges();
}

void KvStore::Impl::drop_dir(Handle h, StoredEntry& e, std::vector<Removal>& out, bool demote) {
    if (e.dir < 0) return;
    Tier& t = dirs[static_cast<std::size_t>(e.dir)];
    Removal r{entry_path(t.directory, e.header.id)};
    if (demote && static_cast<std::size_t>(e.dir) + 1 < dirs.size()) {
        r.demote = h;
        r.to = e.dir + 1;
        e.moving = true;
    }
    t.used -= e.dir_bytes;
    --t.entries;
    t.publish_gauges();
    e.dir = -1;
    e.dir_bytes = 0;
    out.push_back(std::move(r));
}

void KvStore::Impl::add(Handle h, StoredEntry e) {
    indexes[e.header.ns_id].insert(e.header.tokens, h);
    by_id[e.header.id] = h;
    if (!e.header.session.empty()) {
        auto [it, fresh] = sessions.try_emplace({e.header.ns_id, e.header.session}, h);
        if (!fresh && entries.at(it->second).header.created_ms <= e.header.created_ms)
            it->second = h;
    }
    entries.emplace(h, std::move(e));
}

// An entry in no tier and not on its way to one leaves the index.
void KvStore::Impl::forget_if_homeless(Handle h) {
    auto it = entries.find(h);
    if (it == entries.end() || it->second.ram || it->second.dir >= 0 || it->second.moving) return;
    const EntryHeader& hd = it->second.header;
    if (auto idx = indexes.find(hd.ns_id); idx != indexes.end()) {
        idx->second.erase(hd.tokens, h);
        if (idx->second.empty()) indexes.erase(idx);
    }
    by_id.erase(hd.id);
    if (auto s = sessions.find({hd.ns_id, hd.session}); s != sessions.end() && s->second == h)
        sessions.erase(s);
    entries.erase(it);
}

void KvStore::Impl::remove(Handle h, std::vector<Removal>& out) {
    auto it = entries.find(h);
    if (it == entries.end()) return;
    drop_ram(it->second);
    drop_dir(h, it->second, out, false);
    it->second.moving = false;  // a writer that finds the entry gone deletes its file
    forget_if_homeless(h);
}

bool KvStore::Impl::make_room(Tier& tier, int dir, std::uint64_t bytes, std::vector<Removal>& out) {
    if (tier.capacity == 0) return true;
    if (bytes > tier.capacity) return false;
    while (tier.used + bytes > tier.capacity) {
        Handle victim = 0;
        double lowest = 0;
        for (const auto& [h, e] : entries) {
            const bool here = dir < 0 ? e.ram != nullptr : (e.dir == dir && !e.moving);
            if (!here) continue;
            const double s = score(e);
            // Equal scores: the older entry (smaller handle) goes first.
            if (victim == 0 || s < lowest || (s == lowest && h < victim)) {
                victim = h;
                lowest = s;
            }
        }
        if (victim == 0) return false;  // the rest is reserved by saves in flight
        StoredEntry& e = entries.at(victim);
        if (dir < 0) {
            drop_ram(e);
        } else {
            drop_dir(victim, e, out, true);
        }
        tier.metrics.evictions->inc();
        forget_if_homeless(victim);
    }
    return true;
}

std::optional<std::size_t> KvStore::Impl::usable(const StoredEntry& e, std::size_t lcp,
                                                 std::size_t prompt, const KvLookup& lookup) const {
    if (!e.ram && e.dir < 0) return std::nullopt;  // still on its way to a tier
    const std::size_t len = e.header.tokens.size();
    if (lookup.max_entry_tokens > 0 && len > lookup.max_entry_tokens) return std::nullopt;
    std::size_t m = std::min(lcp, prompt - 1);
    if (lookup.match == KvMatch::exact && (lcp != len || len > prompt - 1)) return std::nullopt;
    if (lookup.sliding_window > 0 && m < len &&
        e.header.kept_from >
            std::max<std::int64_t>(0, static_cast<std::int64_t>(m) - lookup.sliding_window))
        return std::nullopt;
    if (m < std::max<std::size_t>(1, lookup.min_tokens)) return std::nullopt;
    return m;
}

std::expected<KvSaveTicket, Drop> KvStore::Impl::reserve(
    const KvNamespace& ns, std::vector<Token> tokens, std::uint64_t bytes, SaveReason reason,
    std::int32_t kept_from, std::string session, std::uint64_t max_entry_bytes) {
    auto s = std::make_unique<KvSaveTicket::State>();
    s->store = this;
    s->key = ns;
    s->ns_id = ns.id();
    s->id = entry_id(s->ns_id, tokens);
    s->tokens = std::move(tokens);
    s->reason = reason;
    s->kept_from = kept_from;
    s->session = std::move(session);
    s->started = SteadyClock::now();
    EntryHeader probe;
    probe.key = ns;
    probe.ns_id = s->ns_id;
    probe.id = s->id;
    probe.session = s->session;
    probe.tokens = s->tokens;
    probe.payload_bytes = bytes;
    const std::uint64_t file_bytes = probe.file_bytes();
    {
        std::lock_guard lock(mutex);
        if (auto dup = by_id.find(s->id); dup != by_id.end()) {
            metrics.duplicates->inc();
            if (!s->session.empty()) sessions[{s->ns_id, s->session}] = dup->second;
            return std::unexpected(Drop::duplicate);
        }
        const std::uint64_t max = max_entry_bytes;
        const bool fits_ram = ram && file_bytes <= ram->capacity;
        const bool fits_dir =
            !dirs.empty() && (dirs[0].capacity == 0 || file_bytes <= dirs[0].capacity);
        if ((max > 0 && bytes > max) || (!fits_ram && !fits_dir)) {
            metrics.dropped_too_large->inc();
            return std::unexpected(Drop::too_large);
        }
        std::vector<Removal> none;
        const bool to_ram = fits_ram && make_room(*ram, -1, file_bytes, none);
        bool to_dir = fits_dir && pending_jobs < options.max_pending_saves &&
                      (to_ram || staged_bytes + bytes <= options.max_pending_bytes);
        if (fits_dir && !to_dir) metrics.dropped_pool_full->inc();  // the directory copy
        if (!to_ram && !to_dir) {
            if (!fits_dir) metrics.dropped_quota->inc();
            return std::unexpected(fits_dir ? Drop::pool_full : Drop::quota);
        }
        if (to_ram) {
            ram->used += file_bytes;
            s->ram_reserved = file_bytes;
        }
        if (to_dir) {
            ++pending_jobs;
            s->write = true;
            if (!to_ram) {
                staged_bytes += bytes;
                s->staged = bytes;
            }
            metrics.pending->set(static_cast<double>(pending_jobs));
        }
    }
    s->buffer = std::make_shared<Bytes>(bytes);  // allocated only once the quota allows it
    return KvSaveTicket(std::move(s));
}

void KvStore::Impl::release(KvSaveTicket::State& s) {
    std::lock_guard lock(mutex);
    if (s.ram_reserved) ram->used -= s.ram_reserved;
    if (s.write) {
        --pending_jobs;
        staged_bytes -= s.staged;
        metrics.pending->set(static_cast<double>(pending_jobs));
        done.notify_all();
    }
    s.ram_reserved = 0;
    s.write = false;
}

void KvStore::Impl::carry_out(std::vector<Removal> removals) {
    for (auto& r : removals) {
        if (r.demote == 0) {
            ::unlink(r.path.c_str());
            continue;
        }
        Bytes payload;
        ParsedHeader parsed = read_entry(r.path, payload);
        ::unlink(r.path.c_str());
        if (parsed.defect != EntryDefect::none) {
            std::lock_guard lock(mutex);
            dirs[static_cast<std::size_t>(r.to - 1)].metrics.corrupt->inc();
            if (auto it = entries.find(r.demote); it != entries.end()) it->second.moving = false;
            forget_if_homeless(r.demote);
            continue;
        }
        {
            std::lock_guard lock(mutex);
            auto it = entries.find(r.demote);
            if (it == entries.end()) continue;
            parsed.header.hits = it->second.header.hits;
            parsed.header.last_used_ms = it->second.header.last_used_ms;
        }
        place(r.demote, std::move(parsed.header), payload, r.to, SteadyClock::now());
    }
}

// Publishes an entry into directory tier `dir`, evicting (and demoting) by score first.
void KvStore::Impl::place(Handle h, EntryHeader header, const Bytes& payload, int dir,
                          SteadyClock::time_point started) {
    Tier& tier = dirs[static_cast<std::size_t>(dir)];
    const std::uint64_t size = header.file_bytes();
    std::vector<Removal> removals;
    {
        std::lock_guard lock(mutex);
        if (!entries.contains(h)) return;
        if (!make_room(tier, dir, size, removals)) {
            metrics.dropped_quota->inc();
            entries.at(h).moving = false;
            forget_if_homeless(h);
            return;
        }
        tier.used += size;
    }
    carry_out(std::move(removals));
    auto published = publish_entry(tier.directory, header, payload);
    std::lock_guard lock(mutex);
    auto it = entries.find(h);
    if (!published || it == entries.end()) {
        tier.used -= size;
        if (!published) {
            log(LogLevel::warning, "kvstore: {}", published.error().describe());
            metrics.dropped_write_failed->inc();
            if (it != entries.end()) {
                it->second.moving = false;
                forget_if_homeless(h);
            }
        } else {
            ::unlink(entry_path(tier.directory, header.id).c_str());  // cleared meanwhile
        }
        return;
    }
    StoredEntry& e = it->second;
    e.moving = false;
    e.dir = dir;
    e.dir_bytes = size;
    ++tier.entries;
    tier.publish_gauges();
    tier.metrics.saves_for(header.reason)->inc();
    tier.metrics.save_seconds->observe(
        std::chrono::duration<double>(SteadyClock::now() - started).count());
}

void KvStore::Impl::writer_loop() {
    for (;;) {
        WriteJob job;
        EntryHeader header;
        fs::path usage_path;
        {
            std::unique_lock lock(mutex);
            work.wait(lock, [&] { return stopping || !jobs.empty(); });
            if (jobs.empty()) return;
            job = std::move(jobs.front());
            jobs.pop_front();
            if (auto it = entries.find(job.handle); it != entries.end()) {
                header = it->second.header;
                const StoredEntry& e = it->second;
                if (!job.payload && e.dir >= 0 && !e.moving)  // a file being moved has it anyway
                    usage_path =
                        entry_path(dirs[static_cast<std::size_t>(e.dir)].directory, e.header.id);
            }
        }
        if (!job.payload) {
            if (!usage_path.empty()) update_usage(usage_path, header.last_used_ms, header.hits);
        } else if (!header.id.empty()) {
            header.payload_checksum = payload_checksum(*job.payload);
            place(job.handle, std::move(header), *job.payload, 0, job.started);
        }
        if (!job.supersedes.empty()) {
            std::vector<Removal> removals;
            {
                std::lock_guard lock(mutex);
                auto it = entries.find(job.handle);
                if (it != entries.end() && it->second.dir >= 0)
                    for (Handle h : job.supersedes) remove(h, removals);
            }
            carry_out(std::move(removals));
        }
        std::lock_guard lock(mutex);
        --(job.payload ? pending_jobs : usage_jobs);
        staged_bytes -= job.staged;
        metrics.pending->set(static_cast<double>(pending_jobs));
        done.notify_all();
    }
}

// Indexes a directory by reading headers only; removes orphaned temporary files, and corrupt
// or duplicate entries. Quotas are enforced once every tier is indexed.
Result<void> KvStore::Impl::scan(int dir) {
    Tier& tier = dirs[static_cast<std::size_t>(dir)];
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& item : fs::directory_iterator(tier.directory, ec)) {
        if (item.is_regular_file(ec)) files.push_back(item.path());
    }
    if (ec)
        return fail(ErrorCode::io_error, "cannot list the cache directory: " + ec.message(),
                    tier.directory.string());
    {
        std::lock_guard lock(mutex);
        for (const auto& path : files) {
            const std::string name = path.filename().string();
            if (name.find(".tmp.") != std::string::npos) {
                if (is_orphaned_temp(path)) {
                    log(LogLevel::info, "kvstore: removing an unfinished write {}", path.string());
                    ::unlink(path.c_str());
                }
                continue;
            }
            if (path.extension() != entry_extension) continue;
            ParsedHeader parsed = read_header(path);
            if (parsed.defect == EntryDefect::io) {  // the disk failed, not the entry: kept
                log(LogLevel::warning, "kvstore: cannot read {} ({}); left in place, not served",
                    path.string(), parsed.detail);
                continue;
            }
            if (parsed.defect != EntryDefect::none) {
                log(LogLevel::warning, "kvstore: removing {}: {} {}", path.string(),
                    to_string(parsed.defect), parsed.detail);
                tier.metrics.corrupt->inc();
                ::unlink(path.c_str());
                continue;
            }
            if (by_id.contains(parsed.header.id)) {  // also in a faster tier
                ::unlink(path.c_str());
                continue;
            }
            StoredEntry e;
            e.dir = dir;
            e.dir_bytes = parsed.header.file_bytes();
            e.header = std::move(parsed.header);
            tier.used += e.dir_bytes;
            ++tier.entries;
            add(next_handle++, std::move(e));
        }
        tier.publish_gauges();
    }
    return {};
}

}  // namespace llamapp
