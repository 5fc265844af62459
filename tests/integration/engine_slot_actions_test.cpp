// Slots by index, as llama-server's id_slot and /slots actions name them: a request pinned to a
// slot, and a slot's sequence saved to the KV store, restored into another slot, erased.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"
#include "support/stories.hpp"
#include "support/temp_dir.hpp"

using namespace llamapp;
using test::concat;
using test::drain;
using test::encode;
using test::request;

namespace {

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends.";
const std::string kMore = " One day, she saw a big red ball under a tree.";

std::shared_ptr<KvStore> open_store(const std::filesystem::path& dir) {
    KvStoreOptions o;
    o.directories.push_back({"", dir, 0});
    auto s = KvStore::open(o);
    if (!s) throw std::runtime_error(s.error().describe());
    return *s;
}

// Explicit saves only, so that whatever the store holds came from save_slot.
SavePolicy explicit_saves_only() {
    SavePolicy p;
    p.on_finish = p.on_prefill = p.on_evict = p.on_shutdown = false;
    p.min_restore_tokens = 4;
    return p;
}

Engine make_engine(std::shared_ptr<KvStore> store, int slots = 2) {
    EngineOptions o;
    o.context.n_ctx = 512;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;
    o.kv_store = std::move(store);
    if (o.kv_store) o.save_policy = explicit_saves_only();
    return test::create_engine(test::stories_model(), std::move(o));
}

test::Drained run(Engine& e, const std::vector<Token>& prompt, int slot, int max_tokens = 12) {
    EngineRequest r = request(prompt, max_tokens);
    r.slot = slot;
    auto h = e.submit(std::move(r));
    if (!h) throw std::runtime_error(h.error().describe());
    return drain(*h);
}

class EngineSlots : public ::testing::Test {
  protected:
    void SetUp() override { set_log_level(LogLevel::none); }
    const Model& model() { return test::stories_model(); }
    std::vector<Token> continuation(const std::string& text) {
        return test::continuation(model(), text);
    }
    std::string cold(const std::vector<Token>& prompt, int max_tokens = 12) {
        Engine e = make_engine(nullptr);
        return run(e, prompt, -1, max_tokens).text;
    }
    test::TempDir dir;
};

}  // namespace

TEST_F(EngineSlots, ARequestThatNamesASlotWaitsForIt) {
    Engine e = make_engine(nullptr);
    const auto prompt = encode(model(), kStory);
    EngineRequest first = request(prompt, 48);
    first.slot = 0;
    auto long_one = e.submit(std::move(first));
    ASSERT_TRUE(long_one);
    // Slot 1 is free the whole time; the second request still runs on slot 0, after the first.
    auto d = run(e, encode(model(), "The little dog"), 0, 4);
    auto waited_for = drain(*long_one);
    EXPECT_EQ(waited_for.completion.cache.slot, 0);
    EXPECT_EQ(d.completion.cache.slot, 0);
    EXPECT_EQ(waited_for.tokens.size(), 48u);
}

TEST_F(EngineSlots, ASavedSlotRestoresIntoAnotherAndGivesTheColdOutput) {
    Engine e = make_engine(open_store(dir.path()));
    const auto prompt = encode(model(), kStory);
    auto d = run(e, prompt, 1);
    ASSERT_EQ(d.completion.cache.slot, 1);
    auto saved = e.save_slot(1);
    ASSERT_TRUE(saved) << saved.error().describe();
    // The prompt and every reply token but the last, which was sampled and never decoded.
    ASSERT_EQ(saved->tokens.size(), prompt.size() + d.tokens.size() - 1);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), saved->tokens.begin()));
    EXPECT_GT(saved->bytes, 0u);

    auto restored = e.restore_slot(0, saved->tokens);
    ASSERT_TRUE(restored) << restored.error().describe();
    EXPECT_EQ(restored->tokens, saved->tokens);
    auto erased = e.erase_slot(1);
    ASSERT_TRUE(erased);
    EXPECT_EQ(*erased, saved->tokens.size());

    const auto next = concat(saved->tokens, continuation(kMore));
    auto after = run(e, next, 0);
    EXPECT_EQ(after.completion.cache.source, ReuseSource::same_slot);
    EXPECT_EQ(after.completion.cache.reused_tokens, static_cast<int>(saved->tokens.size()));
    EXPECT_EQ(after.text, cold(next));
}

TEST_F(EngineSlots, AnErasedSlotComputesItsPromptAgain) {
    Engine e = make_engine(open_store(dir.path()));
    const auto prompt = encode(model(), kStory);
    run(e, prompt, 1);
    ASSERT_TRUE(e.erase_slot(1));
    auto again = run(e, prompt, 1);
    EXPECT_EQ(again.completion.cache.source, ReuseSource::none);
    EXPECT_EQ(again.completion.cache.reused_tokens, 0);
}

// The save waits for the request on the slot and then holds its whole reply.
TEST_F(EngineSlots, ASaveWaitsForTheRequestOnItsSlot) {
    Engine e = make_engine(open_store(dir.path()));
    const auto prompt = encode(model(), kStory);
    EngineRequest r = request(prompt, 40);
    r.slot = 0;
    auto h = e.submit(std::move(r));
    ASSERT_TRUE(h);
    EngineEvent first;
    ASSERT_TRUE(h->next(first));  // running now
    ASSERT_FALSE(first.final());
    auto saved = e.save_slot(0);
    ASSERT_TRUE(saved) << saved.error().describe();
    EXPECT_EQ(saved->tokens.size(), prompt.size() + 40 - 1);
    drain(*h);
}

TEST_F(EngineSlots, ASavedSlotIsAStoreEntryThatSurvivesARestart) {
    const auto prompt = encode(model(), kStory);
    std::vector<Token> saved_tokens;
    {
        auto store = open_store(dir.path());
        Engine e = make_engine(store);
        run(e, prompt, 0);
        auto saved = e.save_slot(0);
        ASSERT_TRUE(saved);
        saved_tokens = saved->tokens;
        EXPECT_EQ(store->entries().size(), 1u);
        EXPECT_EQ(store->entries().at(0).reason, SaveReason::put);
    }
    Engine e = make_engine(open_store(dir.path()));
    auto restored = e.restore_slot(1, saved_tokens);
    ASSERT_TRUE(restored) << restored.error().describe();
    EXPECT_EQ(restored->tokens, saved_tokens);
    // An entry like any other: a prompt that extends it is served from the store too.
    Engine other = make_engine(open_store(dir.path()));
    const auto next = concat(saved_tokens, continuation(kMore));
    auto d = run(other, next, -1);
    EXPECT_EQ(d.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(saved_tokens.size()));
    EXPECT_EQ(d.text, cold(next));
}

TEST_F(EngineSlots, SlotActionsRefuseWhatTheyCannotDo) {
    Engine e = make_engine(open_store(dir.path()));
    const auto prompt = encode(model(), kStory);
    for (int bad : {-1, 2}) {
        EXPECT_EQ(e.save_slot(bad).error().code, ErrorCode::invalid_argument);
        EXPECT_EQ(e.erase_slot(bad).error().code, ErrorCode::invalid_argument);
    }
    EXPECT_EQ(e.restore_slot(2, prompt).error().code, ErrorCode::not_found);  // looked up first
    EXPECT_EQ(e.save_slot(0).error().code, ErrorCode::invalid_argument);      // empty
    EXPECT_EQ(e.restore_slot(0, prompt).error().code, ErrorCode::not_found);
    EXPECT_EQ(e.restore_slot(0, std::vector<Token>{1, 1 << 30}).error().code,
              ErrorCode::invalid_argument);  // not this model's token ids
    EngineRequest r = request(prompt, 4);
    r.slot = 2;
    EXPECT_EQ(e.submit(r).error().code, ErrorCode::invalid_argument);
    r.slot = 0;
    r.session = "chat";
    EXPECT_EQ(e.submit(r).error().code, ErrorCode::invalid_argument);

    Engine storeless = make_engine(nullptr);
    run(storeless, prompt, 0);
    EXPECT_EQ(storeless.save_slot(0).error().code, ErrorCode::unsupported_operation);
    EXPECT_EQ(storeless.restore_slot(0, prompt).error().code, ErrorCode::unsupported_operation);
    EXPECT_TRUE(storeless.erase_slot(0));
}
