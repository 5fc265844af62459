#include "llamapp/kv_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <thread>

#include "kvstore/entry_file.hpp"
#include "kvstore/store_client.hpp"
#include "support/temp_dir.hpp"

namespace llamapp {
namespace {

namespace fs = std::filesystem;
using detail::KvHit;
using detail::KvLookup;
using detail::KvMatch;
using detail::KvNamespace;
using detail::KvStoreClient;
using test::TempDir;
using Tokens = std::vector<Token>;

KvNamespace model_a() {
    return {"fingerprint-a", "f16/f16", "", ""};
}

Tokens seq(int from, int n) {
    Tokens t(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = from + i;
    return t;
}

std::vector<std::uint8_t> payload_for(const Tokens& t, std::size_t bytes = 4096) {
    std::vector<std::uint8_t> p(bytes);
    std::mt19937 rng(static_cast<unsigned>(t.size() * 131 + static_cast<std::size_t>(t.back())));
    for (auto& b : p) b = static_cast<std::uint8_t>(rng());
    return p;
}

KvStoreOptions disk_only(const fs::path& dir, std::uint64_t quota = 0) {
    KvStoreOptions o;
    o.ram_bytes = 0;
    o.directories.push_back({"", dir, quota});
    return o;
}

std::uint64_t directory_bytes(const fs::path& dir) {
    std::uint64_t n = 0;
    for (const auto& f : fs::directory_iterator(dir)) n += f.file_size();
    return n;
}

std::vector<fs::path> entry_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& f : fs::directory_iterator(dir))
        if (f.path().extension() == ".kvc") out.push_back(f.path());
    return out;
}

TEST(KvStore, LongestPrefixHitTrimsAnyStoredEntry) {
    auto store = KvStore::open({});
    ASSERT_TRUE(store) << store.error().describe();
    Tokens ab = seq(1, 40);  // A = 1..20, B = 21..40
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), ab, payload_for(ab)));
    Tokens ac = seq(1, 20);
    for (int i = 0; i < 10; ++i) ac.push_back(500 + i);  // A + C
    auto hit = KvStoreClient(*store).fetch(model_a(), ac, {});
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->matched_tokens, 20u);
    EXPECT_EQ(hit->entry.tokens, ab);
    EXPECT_EQ(hit->entry.tier, "ram");
    EXPECT_TRUE(std::ranges::equal(*hit->payload, payload_for(ab)));

    // Exact-boundary models only restore whole entries.
    KvLookup exact{.match = KvMatch::exact};
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), ac, exact));
    Tokens longer = ab;
    longer.push_back(999);
    auto whole = KvStoreClient(*store).fetch(model_a(), longer, exact);
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->matched_tokens, 40u);
    // The same prompt reuses at most len - 1 tokens: fresh logits must exist.
    EXPECT_EQ(KvStoreClient(*store).fetch(model_a(), ab, {})->matched_tokens, 39u);
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), ab, exact));
}

TEST(KvStore, NamespacesNeverShareEntries) {
    auto store = KvStore::open({});
    ASSERT_TRUE(store);
    Tokens t = seq(1, 30);
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t)));
    KvNamespace other_model = model_a();
    other_model.model_fingerprint = "fingerprint-b";
    KvNamespace other_layout = model_a();
    other_layout.layout = "q8_0/q8_0";
    KvNamespace other_scope = model_a();
    other_scope.scope = "tenant-2";
    for (const auto& ns : {other_model, other_layout, other_scope}) {
        EXPECT_FALSE(KvStoreClient(*store).fetch(ns, seq(1, 31), {}));
        EXPECT_FALSE(KvStoreClient(*store).covers(ns, t, KvMatch::prefix));
    }
    EXPECT_TRUE(KvStoreClient(*store).covers(model_a(), seq(1, 10), KvMatch::prefix));
    EXPECT_FALSE(KvStoreClient(*store).covers(model_a(), seq(1, 10), KvMatch::exact));
    EXPECT_EQ((*store)->stats().misses, 3u);
}

TEST(KvStore, LookupRespectsLimitsAndSlidingWindow) {
    auto store = KvStore::open({});
    ASSERT_TRUE(store);
    Tokens t = seq(1, 100);
    ASSERT_TRUE(
        KvStoreClient(*store).put(model_a(), t, payload_for(t), SaveReason::put, /*kept_from=*/60));
    Tokens prompt = seq(1, 90);
    prompt.push_back(7777);
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), prompt, {.max_entry_tokens = 99}));
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), prompt, {.min_tokens = 91}));
    // Window 16: a trim to 90 needs cells from 74 on; the entry kept 60..99.
    EXPECT_TRUE(KvStoreClient(*store).fetch(model_a(), prompt, {.sliding_window = 16}));
    // Window 40: cells from 50 on are needed but the entry starts at 60.
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), prompt, {.sliding_window = 40}));
}

TEST(KvStore, DiskEntriesSurviveReopenWithHitCounts) {
    TempDir dir;
    Tokens t = seq(10, 64);
    {
        auto store = KvStore::open(disk_only(dir.path()));
        ASSERT_TRUE(store);
        ASSERT_TRUE(
            KvStoreClient(*store).put(model_a(), t, payload_for(t), SaveReason::finish, 0, "s1"));
        for (int i = 0; i < 2; ++i)
            ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(10, 70), {}));
        // As an engine counts a hit: later, once it used it (the file is written by a writer).
        auto hit = KvStoreClient(*store).fetch(model_a(), seq(10, 70), {.count_hit = false});
        ASSERT_TRUE(hit);
        KvStoreClient(*store).record_hit(*hit);
    }
    auto store = KvStore::open(disk_only(dir.path()));
    ASSERT_TRUE(store);
    auto entries = (*store)->entries();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].hits, 3u);
    EXPECT_EQ(entries[0].tier, "disk");
    EXPECT_EQ(entries[0].reason, SaveReason::finish);
    auto session = KvStoreClient(*store).session_entry(model_a(), "s1");
    ASSERT_TRUE(session);
    EXPECT_EQ(session->tokens, t);
    auto hit = KvStoreClient(*store).fetch(model_a(), seq(10, 70), {});
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->entry.tier, "disk");
    EXPECT_TRUE(std::ranges::equal(*hit->payload, payload_for(t)));
}

// The decode thread's second look: files are never read, and a miss is not counted twice.
TEST(KvStore, RamOnlyLookupsSkipFilesAndCountNoMiss) {
    TempDir dir;
    KvStoreOptions o = disk_only(dir.path());
    o.ram_bytes = 1 << 20;
    Tokens on_disk = seq(10, 64);
    Tokens in_ram = seq(10, 32);
    {
        auto store = KvStore::open(disk_only(dir.path()));
        ASSERT_TRUE(store);
        ASSERT_TRUE(KvStoreClient(*store).put(model_a(), on_disk, payload_for(on_disk)));
    }
    auto store = KvStore::open(o);  // the file is indexed, its payload not loaded
    ASSERT_TRUE(store);
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), in_ram, payload_for(in_ram)));
    KvLookup ram_only;
    ram_only.ram_only = true;
    auto hit = KvStoreClient(*store).fetch(model_a(), seq(10, 70), ram_only);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->entry.tier, "ram");
    EXPECT_EQ(hit->matched_tokens, in_ram.size());
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), seq(500, 40), ram_only));
    EXPECT_EQ((*store)->stats().misses, 0u);
    // An ordinary lookup reads the longer file.
    auto full = KvStoreClient(*store).fetch(model_a(), seq(10, 70), {});
    ASSERT_TRUE(full);
    EXPECT_EQ(full->matched_tokens, on_disk.size());
}

TEST(KvStore, FileFormatRoundTrip) {
    TempDir dir;
    detail::EntryHeader h;
    h.key = {"fp", "layout", "lora-x", "scope"};
    h.ns_id = h.key.id();
    h.tokens = seq(3, 17);
    h.id = detail::entry_id(h.ns_id, h.tokens);
    h.session = "sess";
    std::vector<std::uint8_t> payload = payload_for(h.tokens, 999);
    h.payload_bytes = payload.size();
    h.payload_checksum = detail::payload_checksum(payload);
    h.kept_from = 5;
    h.reason = SaveReason::evict;
    h.created_ms = 1234;
    h.last_used_ms = 5678;
    h.hits = 9;
    ASSERT_TRUE(detail::publish_entry(dir.path(), h, payload));
    Bytes back;
    auto parsed = detail::read_entry(detail::entry_path(dir.path(), h.id), back);
    ASSERT_EQ(parsed.defect, detail::EntryDefect::none) << parsed.detail;
    const auto& g = parsed.header;
    EXPECT_EQ(g.key.model_fingerprint, "fp");
    EXPECT_EQ(g.key.layout, "layout");
    EXPECT_EQ(g.key.adapters, "lora-x");
    EXPECT_EQ(g.key.scope, "scope");
    EXPECT_EQ(g.session, "sess");
    EXPECT_EQ(g.tokens, h.tokens);
    EXPECT_EQ(g.kept_from, 5);
    EXPECT_EQ(g.reason, SaveReason::evict);
    EXPECT_EQ(g.created_ms, 1234u);
    EXPECT_EQ(g.last_used_ms, 5678u);
    EXPECT_EQ(g.hits, 9u);
    EXPECT_TRUE(std::ranges::equal(back, payload));
    detail::update_usage(detail::entry_path(dir.path(), h.id), 9999, 10);
    parsed = detail::read_entry(detail::entry_path(dir.path(), h.id), back);
    ASSERT_EQ(parsed.defect, detail::EntryDefect::none);
    EXPECT_EQ(parsed.header.hits, 10u);
    EXPECT_EQ(parsed.header.last_used_ms, 9999u);
    // Publishing the same entry again adopts the existing file and leaves no temp file.
    ASSERT_TRUE(detail::publish_entry(dir.path(), h, payload));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 1);
}

// Every damaged file is refused and counted, whether the damage is found at startup (header)
// or on load (payload); it is removed and never restored.
TEST(KvStore, CorruptFilesAreNeverRestored) {
    std::mt19937 rng(2024);
    const Tokens t = seq(1, 48);
    const Tokens prompt = seq(1, 60);
    enum Damage { bit_flip, truncate, magic, version, foreign_name };
    for (int round = 0; round < 150; ++round) {
        TempDir dir;
        {
            auto store = KvStore::open(disk_only(dir.path()));
            ASSERT_TRUE(store);
            ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t, 2000)));
        }
        const fs::path file = entry_files(dir.path()).at(0);
        const auto size = fs::file_size(file);
        std::vector<char> bytes(size);
        std::ifstream(file, std::ios::binary)
            .read(bytes.data(), static_cast<std::streamsize>(size));
        const auto damage = static_cast<Damage>(round < 100 ? 0 : round % 5);
        fs::path target = file;
        switch (damage) {
            case bit_flip: {
                // Not in the usage block (bytes 64..87): see UsageDamageLosesOnlyTheUsage.
                std::size_t at = 0;
                do {
                    at = std::uniform_int_distribution<std::size_t>(0, size - 1)(rng);
                } while (at >= 64 && at < 88);
                bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
                break;
            }
            case truncate:
                bytes.resize(std::uniform_int_distribution<std::size_t>(0, size - 1)(rng));
                break;
            case magic:
                bytes[0] = 'X';
                break;
            case version:
                bytes[8] = 2;
                break;
            case foreign_name:  // a valid entry under another entry's name
                fs::remove(file);
                target = detail::entry_path(dir.path(), detail::entry_id("other", t));
                break;
        }
        std::ofstream(target, std::ios::binary | std::ios::trunc)
            .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        auto store = KvStore::open(disk_only(dir.path()));
        ASSERT_TRUE(store);
        EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), prompt, {})) << "round " << round;
        const auto stats = (*store)->stats();
        EXPECT_EQ(stats.tiers.at(0).corrupt_files, 1u) << "round " << round << " damage " << damage;
        EXPECT_TRUE(entry_files(dir.path()).empty()) << "round " << round;
    }
}

// The usage block (last use, hits) is rewritten in place while other threads may read the
// file, so a torn or damaged one resets the usage and keeps the entry: the key and payload
// are checked on their own.
TEST(KvStore, UsageDamageLosesOnlyTheUsage) {
    const Tokens t = seq(1, 48);
    for (std::size_t at = 64; at < 88; ++at) {
        TempDir dir;
        {
            auto store = KvStore::open(disk_only(dir.path()));
            ASSERT_TRUE(store);
            ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t, 2000)));
            ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(1, 60), {}));  // hits 1
        }
        const fs::path file = entry_files(dir.path()).at(0);
        std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
        f.seekg(static_cast<std::streamoff>(at));
        char c = 0;
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x10);
        f.seekp(static_cast<std::streamoff>(at));
        f.write(&c, 1);
        f.close();
        auto store = KvStore::open(disk_only(dir.path()));
        ASSERT_TRUE(store);
        const auto entries = (*store)->entries();
        ASSERT_EQ(entries.size(), 1u) << "byte " << at;
        EXPECT_EQ(entries[0].hits, 0u) << "byte " << at;
        EXPECT_EQ(entries[0].last_used_ms, entries[0].created_ms) << "byte " << at;
        auto hit = KvStoreClient(*store).fetch(model_a(), seq(1, 60), {});
        ASSERT_TRUE(hit) << "byte " << at;
        EXPECT_TRUE(std::ranges::equal(*hit->payload, payload_for(t, 2000)));
        EXPECT_EQ((*store)->stats().tiers.at(0).corrupt_files, 0u);
    }
}

TEST(KvStore, OptionsAreValidated) {
    TempDir dir;
    KvStoreOptions twice;
    twice.directories = {{"a", dir.path(), 0}, {"b", dir / ".", 0}};
    auto s = KvStore::open(twice);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
    KvStoreOptions bad_policy;
    bad_policy.policy.min_tokens = 0;
    EXPECT_EQ(KvStore::open(bad_policy).error().context, "min_tokens");
    KvStoreOptions no_writers;
    no_writers.writer_threads = 0;
    EXPECT_EQ(KvStore::open(no_writers).error().context, "writer_threads");
    std::ofstream(dir / "file") << "x";
    EXPECT_EQ(KvStore::open(disk_only(dir / "file")).error().code, ErrorCode::io_error);
}

TEST(KvStore, OrphanedTempFilesAreRemovedAtOpen) {
    TempDir dir;
    const fs::path orphan = dir / ".abc.tmp.999999999.0";
    const fs::path ours = dir / (".abc.tmp." + std::to_string(::getpid()) + ".0");
    std::ofstream(orphan) << "partial";
    std::ofstream(ours) << "partial";
    auto store = KvStore::open(disk_only(dir.path()));
    ASSERT_TRUE(store);
    EXPECT_FALSE(fs::exists(orphan));
    EXPECT_TRUE(fs::exists(ours));  // a live writer's file is left alone
}

TEST(KvStore, RamQuotaHoldsAndEvictionFollowsHitsThenRecency) {
    KvStoreOptions o;
    const std::size_t entry = 10000;
    o.ram_bytes = 3 * entry + 3 * 1024;  // three entries with their headers
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    std::vector<Tokens> t;
    for (int i = 0; i < 3; ++i) {
        t.push_back(seq(1000 * (i + 1), 20));
        ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t.back(), payload_for(t.back(), entry)));
    }
    // The first entry is hit often but long ago; the other two once each, later. Plain
    // recency would evict the first; weighted by hits, the least recent of the other two goes.
    for (int i = 0; i < 5; ++i)
        ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(1000, 21), {}));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // last-use times in ms
    ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(2000, 21), {}));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(3000, 21), {}));
    Tokens fourth = seq(5000, 20);
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), fourth, payload_for(fourth, entry)));
    const auto stats = (*store)->stats();
    EXPECT_LE(stats.tiers[0].bytes, o.ram_bytes);
    EXPECT_EQ(stats.tiers[0].evictions, 1u);
    EXPECT_TRUE(KvStoreClient(*store).covers(model_a(), t[0], KvMatch::exact));
    EXPECT_FALSE(KvStoreClient(*store).covers(model_a(), t[1], KvMatch::exact));
    EXPECT_TRUE(KvStoreClient(*store).covers(model_a(), t[2], KvMatch::exact));
    // Larger than the whole quota: dropped and counted, never stored.
    EXPECT_FALSE(
        KvStoreClient(*store).put(model_a(), seq(9000, 5), payload_for(seq(9000, 5), 4 * entry)));
    EXPECT_EQ((*store)->stats().dropped_saves, 1u);
}

TEST(KvStore, DiskQuotaHoldsAndEvictionsDemoteToTheNextTier) {
    TempDir fast, slow;
    KvStoreOptions o;
    o.ram_bytes = 0;
    const std::uint64_t quota = 5 * 5000;
    o.directories = {{"fast", fast.path(), quota}, {"slow", slow.path(), 2 * quota}};
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 20; ++i) {
        Tokens t = seq(100 * (i + 1), 30);
        ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t, 4500)));
        EXPECT_LE(directory_bytes(fast.path()), quota);
        EXPECT_LE(directory_bytes(slow.path()), 2 * quota);
    }
    const auto stats = (*store)->stats();
    EXPECT_GT(stats.tiers[0].evictions, 0u);
    EXPECT_GT(stats.tiers[1].entries, 0u);
    // The first entries went down to the slow tier and then out; the newest is in the fast one.
    auto newest = KvStoreClient(*store).fetch(model_a(), seq(2000, 31), {});
    ASSERT_TRUE(newest);
    EXPECT_EQ(newest->entry.tier, "fast");
    // Reopening with a smaller quota evicts down to it.
    store->reset();
    o.directories[0].max_bytes = 2 * 5000;
    auto smaller = KvStore::open(o);
    ASSERT_TRUE(smaller);
    EXPECT_LE(directory_bytes(fast.path()), 2 * 5000u);
}

TEST(KvStore, ALongerEntryReplacesItsPrefixesOnlyWhereItIsPublished) {
    TempDir dir;
    KvStoreOptions o = disk_only(dir.path());
    o.ram_bytes = 1 << 20;
    o.max_pending_saves = 1;
    const Tokens a = seq(1, 20), ab = seq(1, 40), abc = seq(1, 60);
    const auto save = [](const KvStoreClient& store, const Tokens& t) {
        auto ticket = store.reserve(model_a(), t, 4096, SaveReason::finish, 0, {}, KvMatch::prefix);
        if (!ticket) return false;
        const auto p = payload_for(t);
        std::copy(p.begin(), p.end(), ticket->bytes().begin());
        store.commit(std::move(*ticket));
        return true;
    };
    {
        auto store = KvStore::open(o);
        ASSERT_TRUE(store);
        ASSERT_TRUE(save(KvStoreClient(*store), a));
        (*store)->flush();
        // Published on disk: the longer entry replaces the shorter one there.
        ASSERT_TRUE(save(KvStoreClient(*store), ab));
        (*store)->flush();
        ASSERT_EQ((*store)->entries().size(), 1u);
        EXPECT_EQ((*store)->entries()[0].tokens, ab);
        EXPECT_EQ(entry_files(dir.path()).size(), 1u);
        // The writer queue is full, so the next one lives in RAM alone: the file of its
        // prefix, all a crash would leave, stays.
        auto busy = KvStoreClient(*store).reserve(model_a(), seq(500, 10), 100, SaveReason::finish);
        ASSERT_TRUE(busy);
        ASSERT_TRUE(save(KvStoreClient(*store), abc));
        EXPECT_EQ((*store)->entries().size(), 2u);
    }
    auto reopened = KvStore::open(o);
    ASSERT_TRUE(reopened);
    auto hit = KvStoreClient(*reopened).fetch(model_a(), seq(1, 50), {});
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->matched_tokens, 40u);
}

TEST(KvStore, EntriesOverTheSizeLimitAreDropped) {
    KvStoreOptions o;
    o.policy.max_entry_bytes = 4096;
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    EXPECT_TRUE(KvStoreClient(*store).put(model_a(), seq(1, 10), payload_for(seq(1, 10), 4096)));
    EXPECT_FALSE(KvStoreClient(*store).put(model_a(), seq(2, 10), payload_for(seq(2, 10), 4097)));
    // A caller's own limit (an engine's policy) replaces the store's.
    EXPECT_FALSE(KvStoreClient(*store).reserve(model_a(), seq(3, 10), 2048, SaveReason::finish, 0,
                                               {}, KvMatch::exact, 1024));
    EXPECT_TRUE(KvStoreClient(*store).reserve(model_a(), seq(4, 10), 8192, SaveReason::finish, 0,
                                              {}, KvMatch::exact, 0));
    EXPECT_EQ((*store)->stats().dropped_saves, 2u);
    EXPECT_NE((*store)->metrics().prometheus_text().find(
                  "llamapp_kvstore_dropped_saves_total{reason=\"too_large\"} 2"),
              std::string::npos);
}

TEST(KvStore, ClearAndPrune) {
    TempDir dir;
    KvStoreOptions o = disk_only(dir.path());
    o.ram_bytes = 1 << 20;
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 4; ++i) {
        Tokens t = seq(50 * (i + 1), 10);
        ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t)));
    }
    EXPECT_EQ((*store)->prune(std::chrono::seconds{3600}), 0u);
    EXPECT_EQ((*store)->prune(std::chrono::seconds{0}), 4u);  // unused since just now
    EXPECT_TRUE((*store)->entries().empty());
    EXPECT_TRUE(entry_files(dir.path()).empty());
    Tokens t = seq(7, 10);
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t)));
    EXPECT_EQ((*store)->prune(std::chrono::seconds::max()), 0u);  // clamped, not overflowed
    EXPECT_EQ((*store)->clear(), 1u);
    EXPECT_TRUE((*store)->entries().empty());
    EXPECT_TRUE(entry_files(dir.path()).empty());
    EXPECT_EQ((*store)->stats().tiers[0].bytes, 0u);
}

TEST(KvStore, ReservedSavesWriteOffTheCallingThread) {
    TempDir dir;
    KvStoreOptions o = disk_only(dir.path());
    o.max_pending_saves = 1;
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    Tokens t = seq(1, 10);
    auto ticket = KvStoreClient(*store).reserve(model_a(), t, 100, SaveReason::finish);
    ASSERT_TRUE(ticket);
    // The only writer slot is taken: a second save is dropped, not queued.
    EXPECT_FALSE(KvStoreClient(*store).reserve(model_a(), seq(2, 10), 100, SaveReason::finish));
    std::fill(ticket->bytes().begin(), ticket->bytes().end(), std::uint8_t{7});
    KvStoreClient(*store).commit(std::move(*ticket));
    (*store)->flush();
    EXPECT_EQ(entry_files(dir.path()).size(), 1u);
    EXPECT_EQ((*store)->stats().dropped_saves, 1u);
    // A reservation dropped uncommitted gives its slot back.
    { auto unused = KvStoreClient(*store).reserve(model_a(), seq(3, 10), 100, SaveReason::finish); }
    EXPECT_TRUE(KvStoreClient(*store).reserve(model_a(), seq(4, 10), 100, SaveReason::finish));
    EXPECT_FALSE(
        KvStoreClient(*store).reserve(model_a(), t, 100, SaveReason::finish));  // duplicate
    EXPECT_EQ((*store)->stats().duplicate_saves, 1u);
}

}  // namespace
}  // namespace llamapp

namespace llamapp {
namespace {

TEST(KvStore, MetricsArePerTierInPrometheusText) {
    test::TempDir dir;
    KvStoreOptions o = disk_only(dir.path(), 1 << 20);
    o.ram_bytes = 1 << 20;
    o.metric_labels = {{"model", "m"}};
    auto store = KvStore::open(o);
    ASSERT_TRUE(store);
    Tokens t = seq(1, 20);
    ASSERT_TRUE(KvStoreClient(*store).put(model_a(), t, payload_for(t), SaveReason::finish));
    ASSERT_TRUE(KvStoreClient(*store).fetch(model_a(), seq(1, 25), {}));
    EXPECT_FALSE(KvStoreClient(*store).fetch(model_a(), seq(900, 25), {}));
    const std::string text = (*store)->metrics().prometheus_text();
    for (const char* line : {
             "llamapp_kvstore_entries{model=\"m\",tier=\"ram\"} 1",
             "llamapp_kvstore_entries{model=\"m\",tier=\"disk\"} 1",
             "llamapp_kvstore_capacity_bytes{model=\"m\",tier=\"disk\"} 1048576",
             "llamapp_kvstore_hits_total{model=\"m\",tier=\"ram\"} 1",
             "llamapp_kvstore_misses_total{model=\"m\"} 1",
             "llamapp_kvstore_saves_total{model=\"m\",tier=\"disk\",reason=\"finish\"} 1",
             "llamapp_kvstore_restore_seconds_count{model=\"m\",tier=\"ram\"} 1",
         }) {
        EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
    }
}

}  // namespace
}  // namespace llamapp
