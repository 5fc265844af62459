// The engine with a KV store: what it saves and when, and that a restored prefix gives the
// same greedy output as a cold run.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"
#include "support/families.hpp"
#include "support/temp_dir.hpp"

using namespace llamapp;
using test::concat;
using test::drain;
using test::encode;
using test::request;

namespace {

const std::string kStoryA =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends.";
const std::string kStoryB = " One day, she saw a big red ball under a tree.";
const std::string kStoryC = " Her mom said it was time to go home and eat dinner.";

// Small thresholds so that the tiny model's short prompts are worth saving.
SavePolicy small_policy() {
    SavePolicy p;
    p.min_tokens = 8;
    p.prefill_min_tokens = 16;
    p.boundary_trim_tokens = 4;
    p.boundary_align_tokens = 4;
    p.min_restore_tokens = 4;
    p.finish_save_delay = std::chrono::milliseconds(0);  // saved when the request ends
    return p;
}

std::shared_ptr<KvStore> open_store(const std::filesystem::path& dir = {}) {
    KvStoreOptions o;
    if (!dir.empty()) {
        o.ram_bytes = 0;
        o.directories.push_back({"", dir, 0});
    }
    auto s = KvStore::open(o);
    if (!s) throw std::runtime_error(s.error().describe());
    return *s;
}

Engine make_engine(const Model& model, std::shared_ptr<KvStore> store,
                   SavePolicy policy = small_policy(), int slots = 1) {
    EngineOptions o;
    o.context.n_ctx = 512;
    o.context.n_seq_max = slots;
    o.context.n_threads = 2;
    o.kv_store = std::move(store);
    o.save_policy = policy;
    return test::create_engine(model, std::move(o));
}

test::Drained run(Engine& e, const std::vector<Token>& prompt, int max_tokens = 16,
                  std::string session = {}) {
    EngineRequest r = request(prompt, max_tokens);
    r.session = std::move(session);
    auto h = e.submit(std::move(r));
    if (!h) throw std::runtime_error(h.error().describe());
    return drain(*h);
}

std::size_t count_reason(const KvStore& store, SaveReason reason) {
    std::size_t n = 0;
    for (const auto& e : store.entries()) n += e.reason == reason ? 1 : 0;
    return n;
}

class EngineKvStore : public ::testing::Test {
  protected:
    void SetUp() override { set_log_level(LogLevel::none); }
    const Model& model() { return test::stories_model(); }
    std::vector<Token> continuation(const std::string& text) {
        return test::continuation(model(), text);
    }
    std::string cold(const std::vector<Token>& prompt, int max_tokens = 16) {
        Engine e = make_engine(model(), nullptr);
        return run(e, prompt, max_tokens).text;
    }
};

TEST_F(EngineKvStore, RestoredPromptGivesTheColdOutput) {
    auto store = open_store();
    const auto prompt = encode(model(), kStoryA + kStoryB);
    {
        Engine first = make_engine(model(), store);
        auto d = run(first, prompt);
        EXPECT_EQ(d.completion.cache.source, ReuseSource::none);
    }
    EXPECT_GE(count_reason(*store, SaveReason::finish), 1u);
    Engine second = make_engine(model(), store);
    auto d = run(second, prompt);
    EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(d.completion.cache.tier, "ram");
    EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(prompt.size()) - 1);
    EXPECT_EQ(d.completion.generation.usage.cached_tokens, static_cast<int>(prompt.size()) - 1);
    EXPECT_EQ(d.text, cold(prompt));
    EXPECT_GE(store->stats().tiers.at(0).hits, 1u);
}

TEST_F(EngineKvStore, AnyPrefixOfAStoredEntryIsAHit) {
    auto store = open_store();
    const auto a = encode(model(), kStoryA);
    const auto ab = concat(a, continuation(kStoryB));
    const auto ac = concat(a, continuation(kStoryC));
    std::size_t shared = 0;
    while (ab[shared] == ac[shared]) ++shared;
    ASSERT_LT(shared, a.size() + 2);
    {
        Engine first = make_engine(model(), store);
        run(first, ab);
    }
    Engine second = make_engine(model(), store);
    auto d = run(second, ac);
    EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(shared));
    EXPECT_EQ(d.text, cold(ac));
}

TEST_F(EngineKvStore, LiveSequencesComeBeforeTheStore) {
    auto store = open_store();
    const auto prompt = encode(model(), kStoryA + kStoryB);
    Engine e = make_engine(model(), store);
    run(e, prompt);
    auto d = run(e, prompt);  // the slot still holds it
    EXPECT_EQ(d.completion.cache.source, ReuseSource::same_slot);
    EXPECT_EQ(store->stats().tiers.at(0).hits, 0u);
    // One entry: the finish save replaced the prefill save it extends, and the second run's
    // finish save found its tokens stored already.
    EXPECT_EQ(store->entries().size(), 1u);
}

// A request that queued while the entry it needs was still being computed: the lookup at
// submit found nothing, the one at admission finds the save committed meanwhile.
TEST_F(EngineKvStore, AQueuedRequestFindsWhatWasSavedWhileItWaited) {
    auto store = open_store();
    SavePolicy p = small_policy();
    p.on_prefill = false;  // only the finish save can serve the prompt
    Engine e = make_engine(model(), store, p);
    const auto first = encode(model(), kStoryA + kStoryB);
    const auto other = encode(model(), kStoryC + kStoryC);
    const auto extended = concat(first, continuation(kStoryC));
    auto a = e.submit(request(first, 200));  // long enough for both submits below to queue
    auto b = e.submit(request(other, 8));    // takes the slot after a
    auto c = e.submit(request(extended, 8));
    ASSERT_TRUE(a && b && c);
    drain(*a);
    drain(*b);
    const auto d = drain(*c);
    EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(first.size()));
    EXPECT_EQ(d.text, cold(extended, 8));
}

// A finish save waits for the engine to idle, for the slot to be needed, or for shutdown.
TEST_F(EngineKvStore, FinishSavesWaitUntilIdleOrUntilTheSlotIsNeeded) {
    const auto a = encode(model(), kStoryA + kStoryB);
    const auto other = encode(model(), kStoryC + kStoryC);
    SavePolicy p = small_policy();
    p.finish_save_delay = std::chrono::hours(1);
    auto store = open_store();
    {
        Engine e = make_engine(model(), store, p);
        run(e, a);
        EXPECT_EQ(count_reason(*store, SaveReason::finish), 0u);
        run(e, other);  // takes the only slot: a's state is saved before it goes
        EXPECT_EQ(count_reason(*store, SaveReason::finish), 1u);
        EXPECT_EQ(count_reason(*store, SaveReason::evict), 0u);
    }  // shutdown saves the other one
    EXPECT_EQ(count_reason(*store, SaveReason::finish), 2u);

    p.finish_save_delay = std::chrono::milliseconds(20);
    auto idle_store = open_store();
    Engine e = make_engine(model(), idle_store, p);
    run(e, a);
    EXPECT_TRUE(
        test::eventually([&] { return count_reason(*idle_store, SaveReason::finish) == 1; }));
}

// A slot's state saved on the way to another request is published after that request's first
// step, unless a request admitted beside it could restore it: then before that one looks.
TEST_F(EngineKvStore, ASaveStagedAtAdmissionServesARequestAdmittedBesideIt) {
    const auto a = encode(model(), kStoryA + kStoryB);
    const auto b = encode(model(), kStoryB + kStoryC);
    const auto other = encode(model(), kStoryC + kStoryC);
    const auto extended = concat(a, continuation(kStoryC));
    SavePolicy p = small_policy();
    p.on_prefill = false;
    p.finish_save_delay = std::chrono::hours(1);  // a's finish save waits until its slot goes
    auto store = open_store();
    Engine e = make_engine(model(), store, p, /*slots=*/2);
    const auto first = run(e, a);
    ASSERT_NE(run(e, b).completion.cache.slot, first.completion.cache.slot);
    EXPECT_TRUE(store->entries().empty());
    // `other` takes the least recently used slot, a's; `extended` comes in the same admission.
    auto both = e.submit_all({request(other, 4), request(extended, 8)});
    ASSERT_TRUE(both);
    EXPECT_EQ(drain(both->at(0)).completion.cache.slot, first.completion.cache.slot);
    const auto x = drain(both->at(1));
    EXPECT_EQ(x.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(x.completion.cache.reused_tokens, static_cast<int>(a.size()));
    EXPECT_EQ(x.text, cold(extended, 8));
    // b's state, staged when `extended` took its slot, is published too.
    EXPECT_TRUE(test::eventually([&] { return count_reason(*store, SaveReason::finish) == 2; }));
}

TEST_F(EngineKvStore, EachSaveReasonFollowsThePolicy) {
    auto store = open_store();
    const auto a = encode(model(), kStoryA + kStoryB);  // longer than prefill_min_tokens
    const auto other = encode(model(), kStoryC + kStoryC);
    SavePolicy p = small_policy();
    p.on_finish = false;
    {
        Engine e = make_engine(model(), store, p);
        run(e, a);
        // Saved once the prompt was computed: all of it, as any prefix of an entry restores on
        // this model (models that restore exact boundaries only save a trimmed, aligned one).
        ASSERT_EQ(count_reason(*store, SaveReason::prefill), 1u);
        const auto entry = store->entries().at(0);
        EXPECT_EQ(entry.tokens.size(), a.size());
        EXPECT_TRUE(std::equal(entry.tokens.begin(), entry.tokens.end(), a.begin()));
        // An unrelated prompt takes the only slot: what it held is saved first.
        run(e, other);
        EXPECT_EQ(count_reason(*store, SaveReason::evict), 1u);
    }
    // Shutdown saved the last sequence.
    EXPECT_EQ(count_reason(*store, SaveReason::shutdown), 1u);

    SavePolicy none = p;
    none.on_prefill = none.on_evict = none.on_shutdown = false;
    auto empty = open_store();
    {
        Engine e = make_engine(model(), empty, none);
        run(e, a);
        run(e, other);
    }
    EXPECT_TRUE(empty->entries().empty());
}

TEST_F(EngineKvStore, AnEnginesOwnSizeLimitHolds) {
    auto store = open_store();
    SavePolicy p = small_policy();
    p.max_entry_bytes = 1024;  // smaller than any state of this model; the store has no limit
    {
        Engine e = make_engine(model(), store, p);
        run(e, encode(model(), kStoryA + kStoryB));
    }
    EXPECT_TRUE(store->entries().empty());
    EXPECT_GT(store->stats().dropped_saves, 0u);
}

TEST_F(EngineKvStore, SessionsSurviveARestart) {
    test::TempDir dir;
    const auto prompt = encode(model(), kStoryA);
    std::vector<Token> turn2;
    {
        auto store = open_store(dir.path());
        Engine e = make_engine(model(), store);
        auto d = run(e, prompt, 12, "alice");
        turn2 = concat(prompt, d.tokens);
    }
    turn2 = concat(turn2, continuation(kStoryC));
    auto store = open_store(dir.path());  // a new store reads the directory: a restart
    bool found = false;
    for (const auto& entry : store->entries()) found = found || entry.session == "alice";
    EXPECT_TRUE(found);
    Engine e = make_engine(model(), store);
    auto d = run(e, turn2, 8, "alice");
    EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(d.completion.cache.tier, "disk");
    EXPECT_GE(d.completion.cache.reused_tokens, static_cast<int>(prompt.size()));
    EXPECT_EQ(d.text, cold(turn2, 8));
}

// Every family: attention models restore any prefix; recurrent ones exact boundaries only.
class EngineKvStoreFamilies : public ::testing::TestWithParam<test::Family> {};

TEST_P(EngineKvStoreFamilies, LongestPrefixOrExactBoundary) {
    set_log_level(LogLevel::none);
    auto m = Model::load(test::generated_model(GetParam().file));
    ASSERT_TRUE(m) << m.error().describe();
    auto store = open_store();
    std::vector<Token> a, b, c;
    for (int i = 0; i < 24; ++i) a.push_back(3 + (i * 7) % 90);
    for (int i = 0; i < 12; ++i) b.push_back(10 + i);
    for (int i = 0; i < 12; ++i) c.push_back(40 + i);
    std::vector<Token> stored_tokens;
    {
        Engine e = make_engine(*m, store);
        auto d = run(e, concat(a, b), 4);
        // The finish entry holds the prompt and every reply token but the last (never decoded).
        stored_tokens = concat(concat(a, b), {d.tokens.begin(), d.tokens.end() - 1});
    }
    Engine e = make_engine(*m, store);
    auto d = run(e, concat(a, c), 4);
    if (GetParam().recurrent) {
        EXPECT_EQ(d.completion.cache.source, ReuseSource::none);
        EXPECT_EQ(d.completion.cache.reused_tokens, 0);
        // A prompt that extends a whole entry restores all of it.
        auto extended = run(e, concat(stored_tokens, c), 4);
        EXPECT_EQ(extended.completion.cache.source, ReuseSource::stored);
        EXPECT_EQ(extended.completion.cache.reused_tokens, static_cast<int>(stored_tokens.size()));
    } else {
        EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
        EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(a.size()));
    }
    EXPECT_EQ(store->stats().restore_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Generated, EngineKvStoreFamilies, test::generated_families(),
                         test::family_name);

}  // namespace
