// A draft model (DraftKind::draft_simple, llama.cpp common's draft-simple) beside the engine:
// the trained tiny model drafted by its own Q4_0 copy. Replies are the target's; the draft's
// cells follow the target's through reuse, restores and rejected drafts.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"

using namespace llamapp;
using test::drain;
using test::encode;
using test::request;

namespace {

const Model& stories_draft() {
    static Model model = test::load_test_model(test::generated_model("stories260K-q4_0.gguf"));
    return model;
}

EngineOptions options(int n_max, int slots = 2) {
    EngineOptions o;
    o.context.n_ctx = 1024;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;
    o.speculative.n_max = n_max;
    o.speculative.batch_rows = 4 * slots;
    if (n_max > 0) {
        o.speculative.kinds = {DraftKind::draft_simple};
        o.speculative.draft.model = stories_draft();
    }
    return o;
}

Engine engine(int n_max, int slots = 2) {
    return test::create_engine(test::stories_model(), options(n_max, slots));
}

const std::vector<std::string> kPrompts = {
    "The little dog",
    "Tim had a red ball. He liked to",
    "Once upon a time, there was a little girl named Lily.",
};

}  // namespace

TEST(EngineDraftModel, RepliesAreTheTargetsAndMostDraftsAreKept) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    int decoded = 0;
    int accepted = 0;
    for (const std::string& p : kPrompts) {
        const auto prompt = encode(test::stories_model(), p);
        auto a = test::submit_and_drain(plain, request(prompt, 48));
        auto b = test::submit_and_drain(drafting, request(prompt, 48));
        EXPECT_EQ(b.tokens, a.tokens) << p;
        EXPECT_GT(b.completion.draft_tokens, 0) << p;
        decoded += b.completion.draft_tokens;
        accepted += b.completion.draft_accepted;
        // Asked again: the slot's cells are reused, and the draft's with them.
        auto c = test::submit_and_drain(drafting, request(prompt, 48));
        EXPECT_EQ(c.tokens, a.tokens) << p;
        EXPECT_GT(c.completion.cache.reused_tokens, 0) << p;
        EXPECT_GT(c.completion.draft_accepted, 0) << p;
        decoded += c.completion.draft_tokens;
        accepted += c.completion.draft_accepted;
    }
    // A Q4_0 copy of the same weights picks the target's token most of the time.
    EXPECT_GT(accepted * 2, decoded);
    EXPECT_EQ(test::engine_metric(drafting, "llamapp_draft_tokens_total{kind=\"draft-simple\"}"),
              decoded);
    EXPECT_EQ(
        test::engine_metric(drafting, "llamapp_draft_tokens_accepted_total{kind=\"draft-simple\"}"),
        accepted);
}

TEST(EngineDraftModel, ConcurrentStreamsDraftInOneBatch) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    std::vector<EngineRequest> both;
    std::vector<std::vector<Token>> expected;
    for (std::size_t i = 0; i < 2; ++i) {
        const auto prompt = encode(test::stories_model(), kPrompts[i]);
        expected.push_back(test::submit_and_drain(plain, request(prompt, 40)).tokens);
        both.push_back(request(prompt, 40));
    }
    auto handles = drafting.submit_all(std::move(both));
    ASSERT_TRUE(handles);
    for (std::size_t i = 0; i < 2; ++i) {
        auto d = drain((*handles)[i]);
        EXPECT_EQ(d.tokens, expected[i]) << i;
        EXPECT_GT(d.completion.draft_accepted, 0) << i;
    }
}

// A prefix restored from the KV store holds no draft cells: the draft model computes them over
// the next decodes, and drafts again once it has.
TEST(EngineDraftModel, APrefixRestoredFromTheStoreCatchesUpOnTheDraft) {
    auto store = KvStore::open(KvStoreOptions{});
    ASSERT_TRUE(store);
    auto with_store = [&] {
        EngineOptions o = options(3, 1);
        o.kv_store = *store;
        SavePolicy policy;
        policy.min_tokens = 8;
        policy.prefill_min_tokens = 16;
        policy.boundary_trim_tokens = 4;
        policy.boundary_align_tokens = 4;
        policy.min_restore_tokens = 4;
        policy.finish_save_delay = std::chrono::milliseconds(0);  // saved when the request ends
        o.save_policy = policy;
        return test::create_engine(test::stories_model(), std::move(o));
    };
    const auto prompt = encode(test::stories_model(), kPrompts[2] + " She loved to play");
    Engine plain = engine(0, 1);
    const auto expected = test::submit_and_drain(plain, request(prompt, 48)).tokens;
    {
        Engine first = with_store();
        EXPECT_EQ(test::submit_and_drain(first, request(prompt, 48)).tokens, expected);
    }
    Engine second = with_store();
    auto b = test::submit_and_drain(second, request(prompt, 48));
    EXPECT_EQ(b.completion.cache.source, ReuseSource::stored);
    EXPECT_EQ(b.tokens, expected);
    EXPECT_GT(b.completion.draft_accepted, 0);
}

TEST(EngineDraftModel, ADraftThatCannotServeIsATypedErrorAtCreate) {
    const Model llama = test::load_test_model(test::generated_model("llama-tiny.gguf"));
    EngineOptions o = options(3);
    o.speculative.draft.model = test::qwen3_model();  // a Qwen2 tokenizer beside SentencePiece
    auto e = Engine::create(llama, o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(e.error().message.find("vocabulary"), std::string::npos) << e.error().message;

    o.speculative.draft.model = test::load_test_model(test::generated_model("mamba-tiny.gguf"));
    e = Engine::create(llama, o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().code, ErrorCode::unsupported_operation) << e.error().describe();

    o.speculative.draft.model.reset();
    e = Engine::create(llama, o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "speculative.draft");
}
