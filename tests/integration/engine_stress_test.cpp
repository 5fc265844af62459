// Hundreds of requests from several threads with random lengths, cancels, drops, deadlines and
// sessions, with a small KV store saving and restoring underneath: nothing crashes, every
// accepted request ends with exactly one final event, and the store's quotas hold.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/core.h>

#include "support/engine_helpers.hpp"
#include "support/temp_dir.hpp"

using namespace llamapp;
using namespace std::chrono_literals;

TEST(EngineStress, RandomLoadEndsEveryRequestExactlyOnce) {
    const Model& m = test::stories_model();
    EngineOptions o;
    o.context.n_ctx = 512;  // small enough for KV pressure now and then
    o.context.n_seq_max = 4;
    o.context.n_threads = 2;
    o.max_queued_requests = 24;
    o.prefill_chunk = 16;
    o.min_adopt_tokens = 2;
    test::TempDir dir;
    KvStoreOptions so;
    so.ram_bytes = 300 << 10;  // a few entries: evictions, drops and directory hits all happen
    so.directories.push_back({"", dir.path(), 600 << 10});
    so.max_pending_saves = 2;
    so.policy.min_tokens = 8;
    so.policy.prefill_min_tokens = 24;
    so.policy.boundary_align_tokens = 4;
    so.policy.min_restore_tokens = 4;
    auto store = KvStore::open(so);
    ASSERT_TRUE(store) << store.error().describe();
    o.kv_store = *store;
    std::mutex mu;
    std::map<std::uint64_t, int> endings;  // request id -> final lifecycle events
    o.on_lifecycle = [&](const LifecycleEvent& e) {
        if (e.stage != LifecycleStage::finished && e.stage != LifecycleStage::cancelled) return;
        std::lock_guard lock(mu);
        ++endings[e.request_id];
    };
    auto created = Engine::create(m, o);
    ASSERT_TRUE(created) << created.error().describe();
    Engine& engine = *created;

    const int vocab = m.tokenizer().vocab_size();
    std::atomic<int> accepted{0}, rejected{0}, drained_finals{0}, bad_finals{0};
    std::vector<std::uint64_t> accepted_ids;
    auto client = [&](unsigned seed, int count) {
        std::mt19937 rng(seed);
        auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        const std::vector<Token> shared = test::encode(m, "Once upon a time there was a little");
        for (int i = 0; i < count; ++i) {
            EngineRequest r;
            // Half the prompts share a prefix, so reuse and adoption happen under load.
            if (pick(0, 1)) r.prompt = shared;
            const int extra = pick(1, 60);
            for (int k = 0; k < extra; ++k) r.prompt.push_back(pick(0, vocab - 1));
            r.options.max_tokens = pick(1, 40);
            r.options.ignore_eos = pick(0, 1) == 1;
            r.options.sampling.temperature = pick(0, 1) ? 0.0f : 0.8f;
            r.options.sampling.seed = static_cast<std::uint32_t>(pick(0, 1000));
            r.options.reuse_prefix = pick(0, 9) != 0;
            if (pick(0, 9) == 0) r.options.stop = {"the"};
            if (pick(0, 9) == 0) r.options.top_logprobs = 2;
            if (pick(0, 9) == 0) r.options.timeout = std::chrono::milliseconds(pick(1, 20));
            if (pick(0, 9) == 0) r.queue_timeout = std::chrono::milliseconds(pick(1, 20));
            if (pick(0, 5) == 0) r.session = fmt::format("s{}", pick(0, 5));
            auto h = engine.submit(std::move(r));
            if (!h) {
                EXPECT_EQ(h.error().code, ErrorCode::queue_full) << h.error().describe();
                ++rejected;
                std::this_thread::sleep_for(1ms);
                continue;
            }
            ++accepted;
            {
                std::lock_guard lock(mu);
                accepted_ids.push_back(h->id());
            }
            const int action = pick(0, 9);
            if (action == 0) continue;  // dropped at once: the destructor cancels
            if (action == 1) h->cancel();
            int pieces = 0;
            const int cancel_after = action == 2 ? pick(1, 5) : -1;
            EngineEvent e;
            int finals = 0;
            while (h->next(e)) {
                if (e.final()) {
                    ++finals;
                    if (!e.completion) ++bad_finals;
                } else if (++pieces == cancel_after) {
                    h->cancel();
                }
            }
            drained_finals += finals;
            if (finals != 1) ++bad_finals;
        }
    };
    auto admin = [&] {
        for (int i = 0; i < 40; ++i) {
            (void)engine.fork_session(fmt::format("s{}", i % 6), fmt::format("f{}", i % 3));
            (void)engine.sessions();
            (void)engine.end_session(fmt::format("f{}", (i + 1) % 3));
            (void)(*store)->stats();
            if (i % 10 == 9) (void)(*store)->prune(std::chrono::seconds{-1});
            std::this_thread::sleep_for(2ms);
        }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; ++t) threads.emplace_back(client, 1234 + t, 75);
    threads.emplace_back(admin);
    for (auto& t : threads) t.join();

    EXPECT_EQ(bad_finals.load(), 0);
    EXPECT_EQ(accepted + rejected, 300);
    EXPECT_GT(accepted.load(), 150);
    ASSERT_TRUE(test::eventually([&] {
        auto s = engine.stats();
        return s.busy_slots == 0 && s.queued_requests == 0;
    }));
    // The engine still answers normally.
    auto after = engine.submit(test::request(test::encode(m, "Once upon a time"), 8));
    ASSERT_TRUE(after);
    EXPECT_EQ(test::drain(*after).completion.generation.usage.completion_tokens, 8);
    (*store)->flush();
    const KvStoreStats stats = (*store)->stats();
    for (const auto& tier : stats.tiers) {
        EXPECT_LE(tier.bytes, tier.capacity) << tier.name;
        EXPECT_GT(tier.saves, 0u) << tier.name;
    }
    std::lock_guard lock(mu);  // after the last request: the callback takes it too
    for (std::uint64_t id : accepted_ids) EXPECT_EQ(endings[id], 1) << "request " << id;
    EXPECT_EQ(endings.size(), accepted_ids.size() + 1);  // and the last one
}
