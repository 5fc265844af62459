// The engine's side of the KV store: lookups, save reservations and hit accounting.
#include "kvstore/store_client.hpp"

#include <algorithm>

#include "core/log_internal.hpp"
#include "kvstore/store_state.hpp"

namespace llamapp {

namespace fs = std::filesystem;
using namespace detail;

// The store side of a lookup, lock held.

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
    KvHit hit{.entry = info(e), .matched_tokens = matched, .payload = e.ram};
    if (e.dir >= 0) path = entry_path(dirs[static_cast<std::size_t>(e.dir)].directory, e.header.id);
    return hit;
}

bool KvStore::Impl::load_payload(Handle h, int dir, const fs::path& path, KvHit& hit) {
    auto payload = std::make_shared<Bytes>();
    ParsedHeader parsed = read_entry(path, *payload);
    std::vector<Removal> removals;
    std::lock_guard lock(mutex);
    auto it = entries.find(h);
    if (parsed.defect == EntryDefect::io) {  // the disk failed, not the entry: a miss this time
        log(LogLevel::warning, "kvstore: cannot read {} ({}); computing instead", path.string(),
            parsed.detail);
        metrics.misses->inc();
        return false;
    }
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

}  // namespace llamapp

namespace llamapp::detail {

namespace fs = std::filesystem;

KvStoreClient::KvStoreClient(std::shared_ptr<KvStore> store) : store_(std::move(store)) {}

KvStore::Impl& KvStoreClient::impl() const {
    return *store_->impl_;
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

// ---- lookup ---------------------------------------------------------------------------------

std::optional<KvHit> KvStoreClient::fetch(const KvNamespace& ns, std::span<const Token> prompt,
                                          const KvLookup& lookup) const {
    KvStore::Impl& s = impl();
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
void KvStoreClient::record_hit(const KvHit& hit) const {
    KvStore::Impl& s = impl();
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

bool KvStoreClient::covers(const KvNamespace& ns, std::span<const Token> tokens,
                           KvMatch match) const {
    const std::string ns_id = ns.id();
    const std::string id = match == KvMatch::exact ? entry_id(ns_id, tokens) : std::string{};
    std::lock_guard lock(impl().mutex);
    if (match == KvMatch::exact) return impl().by_id.contains(id);
    auto idx = impl().indexes.find(ns_id);
    return idx != impl().indexes.end() && !tokens.empty() &&
           idx->second.deepest_match(tokens) == tokens.size();
}

// ---- saves ----------------------------------------------------------------------------------

std::optional<KvSaveTicket> KvStoreClient::reserve(
    const KvNamespace& ns, std::vector<Token> tokens, std::uint64_t bytes, SaveReason reason,
    std::int32_t kept_from, std::string session, KvMatch match,
    std::optional<std::uint64_t> max_entry_bytes) const {
    if (tokens.empty() || bytes == 0) return std::nullopt;
    auto t = impl().reserve(ns, std::move(tokens), bytes, reason, kept_from, std::move(session),
                            max_entry_bytes.value_or(impl().options.policy.max_entry_bytes));
    if (!t) return std::nullopt;
    t->state_->supersede = match == KvMatch::prefix && kept_from <= 0;
    return std::move(*t);
}

void KvStoreClient::commit(KvSaveTicket ticket) const {
    KvStore::Impl& s = impl();
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

Result<void> KvStoreClient::put(const KvNamespace& ns, std::vector<Token> tokens,
                                std::vector<std::uint8_t> payload, SaveReason reason,
                                std::int32_t kept_from, std::string session) const {
    if (tokens.empty() || payload.empty())
        return fail(ErrorCode::invalid_argument, "an entry needs tokens and a payload");
    const std::string id = entry_id(ns.id(), tokens);
    auto t = impl().reserve(ns, std::move(tokens), payload.size(), reason, kept_from,
                            std::move(session), impl().options.policy.max_entry_bytes);
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
    store_->flush();
    std::lock_guard lock(impl().mutex);
    auto it = impl().by_id.find(id);
    const bool stored =
        it != impl().by_id.end() && (impl().dirs.empty() || impl().entries.at(it->second).dir >= 0);
    if (!stored) return fail(ErrorCode::io_error, "the entry could not be written", id);
    return {};
}

// ---- management -----------------------------------------------------------------------------

void KvStoreClient::report_restore_failure(const KvHit& hit) const {
    log(LogLevel::warning, "kvstore: a context could not restore entry {} ({} tokens)",
        hit.entry.id, hit.entry.tokens.size());
    impl().metrics.restore_failures->inc();
}

std::optional<KvEntryInfo> KvStoreClient::session_entry(const KvNamespace& ns,
                                                        const std::string& session) const {
    const std::string ns_id = ns.id();
    std::lock_guard lock(impl().mutex);
    auto it = impl().sessions.find({ns_id, session});
    if (it == impl().sessions.end()) return std::nullopt;
    return impl().info(impl().entries.at(it->second));
}

}  // namespace llamapp::detail
