// Speculation (EngineOptions::speculative: llamapp's prompt lookup and llama.cpp's n-gram kinds)
// on the real trained tiny model: drafts change how many decodes a reply takes, never the reply.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"

using namespace llamapp;
using test::drain;
using test::encode;
using test::request;

namespace {

Engine engine(int draft_tokens, int slots = 2, DraftKinds kinds = {DraftKind::lookup}) {
    EngineOptions o;
    o.context.n_ctx = 1024;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;
    o.speculative.n_max = draft_tokens;
    o.speculative.kinds = kinds;
    // Short keys, so that the tiny model's repeats are found by every kind.
    o.speculative.ngram_simple = {.key_tokens = 3, .draft_tokens = 8, .min_hits = 1};
    o.speculative.ngram_map_k = {.key_tokens = 3, .draft_tokens = 8, .min_hits = 1};
    o.speculative.ngram_map_k4v = {.key_tokens = 3, .draft_tokens = 8, .min_hits = 1};
    o.speculative.ngram_mod = {.match = 3, .n_min = 1, .n_max = 8};
    return test::create_engine(test::stories_model(), std::move(o));
}

// Text the model continues by repeating itself, and text it does not.
const std::vector<std::string> kPrompts = {
    "Tom said, \"I like the red ball.\" Sue said, \"I like the red ball.\" Tom said, \"I like",
    "Once upon a time, there was a little girl named Lily. Once upon a time, there was a",
    "The little dog",
    "Tim had a red ball. He liked to",
};

}  // namespace

TEST(EngineDrafts, GreedyRepliesAreTheSameWithFewerDecodes) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    int accepted = 0;
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
        const std::string& p = kPrompts[i];
        auto a = test::submit_and_drain(plain, request(encode(test::stories_model(), p), 64));
        auto b = test::submit_and_drain(drafting, request(encode(test::stories_model(), p), 64));
        EXPECT_EQ(b.tokens, a.tokens) << p;
        EXPECT_EQ(b.text, a.text) << p;
        EXPECT_EQ(b.completion.generation.usage.completion_tokens, 64);
        EXPECT_EQ(a.completion.draft_tokens, 0);
        EXPECT_LE(b.completion.draft_accepted, b.completion.draft_tokens);
        // Greedy replies to the repeating prompts go on with the passage they repeat, which is
        // exactly what the lookup drafts: a draft there is always kept.
        if (i < 2) {
            EXPECT_GT(b.completion.draft_accepted, 0) << p;
        }
        accepted += b.completion.draft_accepted;
    }
    EXPECT_GT(accepted, 20);
    EXPECT_EQ(test::engine_metric(drafting, "llamapp_draft_tokens_accepted_total{kind=\"lookup\"}"),
              accepted);
    // By position: the kept drafts of a lead are a prefix of its drafts, so each position keeps
    // at most what the one before it kept, and the positions add up.
    double by_position = 0;
    double before = accepted;
    for (int p = 1; p <= 8; ++p) {
        const std::string at = "{position=\"" + std::to_string(p) + "\"}";
        const double kept =
            test::engine_metric(drafting, "llamapp_draft_position_accepted_total" + at);
        EXPECT_LE(kept, before) << p;
        EXPECT_LE(kept, test::engine_metric(drafting, "llamapp_draft_position_decoded_total" + at))
            << p;
        by_position += kept;
        before = kept;
    }
    EXPECT_EQ(by_position, accepted);
    // Each kept draft is one decode call fewer.
    EXPECT_EQ(test::engine_metric(plain, "llamapp_decode_calls_total") -
                  test::engine_metric(drafting, "llamapp_decode_calls_total"),
              accepted);
}

TEST(EngineDrafts, SampledRepliesFollowTheSameSeed) {
    // The sampler draws once per kept token, drafts or not: the same seed gives the same reply.
    Engine plain = engine(0);
    Engine drafting = engine(3);
    int accepted = 0;
    for (const auto& p : kPrompts) {
        EngineRequest r = request(encode(test::stories_model(), p), 48);
        r.options.sampling = SamplingParams{};
        r.options.sampling.temperature = 0.7f;
        r.options.sampling.seed = 1234;
        auto a = test::submit_and_drain(plain, r);
        auto b = test::submit_and_drain(drafting, r);
        EXPECT_EQ(b.tokens, a.tokens) << p;
        accepted += b.completion.draft_accepted;
    }
    // Else sampled requests could skip drafting, or drop every draft, and still match. The
    // seed fixes the replies; at 0.7 they keep repeating the repeated passages, so drafts hit.
    EXPECT_GT(accepted, 0);
}

TEST(EngineDrafts, StopsAndLimitsEndMidDraftAndTheCacheHoldsOnlyKeptTokens) {
    Engine plain = engine(0, 1);
    Engine drafting = engine(3, 1);
    const auto prompt = encode(test::stories_model(), kPrompts[0]);
    for (int max_tokens : {1, 2, 5, 13}) {
        auto b = test::submit_and_drain(drafting, request(prompt, max_tokens));
        EXPECT_EQ(b.completion.generation.usage.completion_tokens, max_tokens);
        EXPECT_EQ(b.completion.generation.finish_reason, FinishReason::length);
    }
    // A stop string met inside a run of kept drafts ends the reply there.
    auto full = test::submit_and_drain(plain, request(prompt, 40));
    const std::string stop = full.text.substr(full.text.size() / 2, 6);
    EngineRequest stopped = request(prompt, 40);
    stopped.options.stop = {stop};
    auto a = test::submit_and_drain(plain, stopped);
    auto b = test::submit_and_drain(drafting, stopped);
    EXPECT_EQ(b.completion.generation.finish_reason, FinishReason::stop);
    EXPECT_EQ(b.text, a.text);
    // The next request reuses what the slot holds: drafts the sampler turned down must be gone.
    auto follow = prompt;
    follow.insert(follow.end(), full.tokens.begin(), full.tokens.begin() + 20);
    auto c = test::submit_and_drain(drafting, request(follow, 32));
    EXPECT_GT(c.completion.cache.reused_tokens, 0);
    EXPECT_EQ(c.tokens, test::submit_and_drain(plain, request(follow, 32)).tokens);
}

TEST(EngineDrafts, GrammarsSeeOnlyKeptTokens) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    EngineRequest r = request(encode(test::stories_model(), kPrompts[1]), 48);
    r.options.sampling.grammar = R"(root ::= ("Once upon a time, " [a-z ]+ ". ")+)";
    auto a = test::submit_and_drain(plain, r);
    auto b = test::submit_and_drain(drafting, r);
    EXPECT_EQ(b.text, a.text);
    EXPECT_GT(b.completion.draft_accepted, 0);
}

TEST(EngineDrafts, BadOptionsAreRejected) {
    EngineOptions o;
    o.speculative.n_max = -1;
    auto e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "speculative n_max");
    o.speculative.n_max = 3;
    o.speculative.lookup_match = 0;
    e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "speculative lookup_match");
    o.speculative.lookup_match = 3;
    o.speculative.batch_rows = 0;
    e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "speculative batch_rows");
}

// llama.cpp's n-gram kinds, each alone: the same greedy replies as without drafts, drafts kept,
// and counted under their kind.
TEST(EngineDrafts, EveryLlamaCppNgramKindKeepsTheGreedyReply) {
    Engine plain = engine(0);
    std::vector<std::vector<Token>> expected;
    for (std::size_t i = 0; i < 2; ++i)
        expected.push_back(
            test::submit_and_drain(plain, request(encode(test::stories_model(), kPrompts[i]), 48))
                .tokens);
    for (DraftKind kind :
         {DraftKind::ngram_simple, DraftKind::ngram_map_k, DraftKind::ngram_map_k4v,
          DraftKind::ngram_mod, DraftKind::ngram_cache}) {
        const std::string name(to_string(kind));
        SCOPED_TRACE(name);
        Engine drafting = engine(3, 2, {kind});
        int accepted = 0;
        for (std::size_t i = 0; i < expected.size(); ++i) {
            auto b = test::submit_and_drain(
                drafting, request(encode(test::stories_model(), kPrompts[i]), 48));
            EXPECT_EQ(b.tokens, expected[i]);
            accepted += b.completion.draft_accepted;
        }
        EXPECT_GT(accepted, 0);
        EXPECT_EQ(test::engine_metric(drafting,
                                      "llamapp_draft_tokens_accepted_total{kind=\"" + name + "\"}"),
                  accepted);
        EXPECT_EQ(test::engine_metric(drafting, "llamapp_draft_tokens_total{kind=\"lookup\"}"), 0);
    }
}

// speculative.n_max / n_min per request: 0 turns drafts off for that request alone; a bound out
// of range is a typed error at submit.
TEST(EngineDrafts, ARequestBoundsItsOwnDrafts) {
    Engine e = engine(3);
    auto r = request(encode(test::stories_model(), kPrompts[0]), 32);
    r.draft_max = 0;
    auto off = test::submit_and_drain(e, r);
    EXPECT_EQ(off.completion.draft_tokens, 0);
    r.draft_max = 1;
    auto one = test::submit_and_drain(e, r);
    EXPECT_EQ(one.tokens, off.tokens);
    EXPECT_GT(one.completion.draft_tokens, 0);
    r.draft_max = 3;
    r.draft_min = 3;
    auto three = test::submit_and_drain(e, r);
    EXPECT_EQ(three.tokens, off.tokens);
    EXPECT_EQ(three.completion.draft_tokens % 3, 0);
    r.draft_max = max_draft_tokens + 1;
    EXPECT_EQ(e.submit(r).error().context, "speculative.n_max");
    r.draft_max = 2;
    r.draft_min = 3;
    EXPECT_EQ(e.submit(r).error().context, "speculative.n_min");
}

TEST(EngineDrafts, DraftsStayWithinTheRowBudgetOfADecode) {
    // Four streams fill a budget of 4 rows: no drafts; one stream alone drafts.
    Engine e = engine(3, 4);
    std::vector<EngineRequest> four;
    for (int i = 0; i < 4; ++i)
        four.push_back(request(encode(test::stories_model(), kPrompts[0]), 32));
    auto handles = e.submit_all(std::move(four));
    ASSERT_TRUE(handles);
    for (auto& h : *handles) EXPECT_EQ(drain(h).completion.draft_tokens, 0);
    EXPECT_GT(test::submit_and_drain(e, request(encode(test::stories_model(), kPrompts[0]), 32))
                  .completion.draft_tokens,
              0);
}
