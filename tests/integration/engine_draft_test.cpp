// Prompt-lookup speculation (EngineOptions::draft_tokens) on the real trained tiny model: drafts
// change how many decodes a reply takes, never the reply.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"
#include "support/prometheus.hpp"

using namespace llamapp;
using test::drain;
using test::encode;
using test::request;

namespace {

Engine engine(int draft_tokens, int slots = 2) {
    EngineOptions o;
    o.context.n_ctx = 1024;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;
    o.draft_tokens = draft_tokens;
    return test::create_engine(test::stories_model(), std::move(o));
}

// Text the model continues by repeating itself, and text it does not.
const std::vector<std::string> kPrompts = {
    "Tom said, \"I like the red ball.\" Sue said, \"I like the red ball.\" Tom said, \"I like",
    "Once upon a time, there was a little girl named Lily. Once upon a time, there was a",
    "The little dog",
    "Tim had a red ball. He liked to",
};

test::Drained run(Engine& e, EngineRequest r) {
    auto handle = e.submit(std::move(r));
    if (!handle) throw std::runtime_error(handle.error().describe());
    return drain(*handle);
}

// An unlabelled counter's value, read from the Prometheus text.
double counter(const Engine& e, const std::string& name) {
    const auto value = test::prometheus_value(e.metrics().prometheus_text(), name);
    if (!value) throw std::runtime_error("no metric " + name);
    return *value;
}

}  // namespace

TEST(EngineDrafts, GreedyRepliesAreTheSameWithFewerDecodes) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    int accepted = 0;
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
        const std::string& p = kPrompts[i];
        auto a = run(plain, request(encode(test::stories_model(), p), 64));
        auto b = run(drafting, request(encode(test::stories_model(), p), 64));
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
    EXPECT_EQ(counter(drafting, "llamapp_draft_tokens_accepted_total"), accepted);
    // Each kept draft is one decode call fewer.
    EXPECT_EQ(counter(plain, "llamapp_decode_calls_total") -
                  counter(drafting, "llamapp_decode_calls_total"),
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
        auto a = run(plain, r);
        auto b = run(drafting, r);
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
        auto b = run(drafting, request(prompt, max_tokens));
        EXPECT_EQ(b.completion.generation.usage.completion_tokens, max_tokens);
        EXPECT_EQ(b.completion.generation.finish_reason, FinishReason::length);
    }
    // A stop string met inside a run of kept drafts ends the reply there.
    auto full = run(plain, request(prompt, 40));
    const std::string stop = full.text.substr(full.text.size() / 2, 6);
    EngineRequest stopped = request(prompt, 40);
    stopped.options.stop = {stop};
    auto a = run(plain, stopped);
    auto b = run(drafting, stopped);
    EXPECT_EQ(b.completion.generation.finish_reason, FinishReason::stop);
    EXPECT_EQ(b.text, a.text);
    // The next request reuses what the slot holds: drafts the sampler turned down must be gone.
    auto follow = prompt;
    follow.insert(follow.end(), full.tokens.begin(), full.tokens.begin() + 20);
    auto c = run(drafting, request(follow, 32));
    EXPECT_GT(c.completion.cache.reused_tokens, 0);
    EXPECT_EQ(c.tokens, run(plain, request(follow, 32)).tokens);
}

TEST(EngineDrafts, GrammarsSeeOnlyKeptTokens) {
    Engine plain = engine(0);
    Engine drafting = engine(3);
    EngineRequest r = request(encode(test::stories_model(), kPrompts[1]), 48);
    r.options.sampling.grammar = R"(root ::= ("Once upon a time, " [a-z ]+ ". ")+)";
    auto a = run(plain, r);
    auto b = run(drafting, r);
    EXPECT_EQ(b.text, a.text);
    EXPECT_GT(b.completion.draft_accepted, 0);
}

TEST(EngineDrafts, BadOptionsAreRejected) {
    EngineOptions o;
    o.draft_tokens = -1;
    auto e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "draft_tokens");
    o.draft_tokens = 3;
    o.draft_match = 0;
    e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "draft_match");
    o.draft_match = 3;
    o.draft_batch_rows = 0;
    e = Engine::create(test::stories_model(), o);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().context, "draft_batch_rows");
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
    EXPECT_GT(
        run(e, request(encode(test::stories_model(), kPrompts[0]), 32)).completion.draft_tokens, 0);
}
