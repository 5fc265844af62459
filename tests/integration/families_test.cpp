// Every architecture family the generator makes loads, generates, and reuses its cache safely.
#include <gtest/gtest.h>

#include "support/families.hpp"
#include "support/stories.hpp"

using namespace llamapp;

namespace {

class Families : public ::testing::TestWithParam<test::Family> {
  protected:
    Model load() {
        set_log_level(LogLevel::none);
        auto m = Model::load(test::generated_model(GetParam().file));
        EXPECT_TRUE(m) << (m ? "" : m.error().describe());
        return std::move(*m);
    }
};

}  // namespace

TEST_P(Families, ReportsItsFamily) {
    Model m = load();
    EXPECT_EQ(m.info().is_recurrent || m.info().is_hybrid, GetParam().recurrent);
    EXPECT_EQ(m.info().is_hybrid, GetParam().hybrid);
    EXPECT_EQ(m.info().sliding_window > 0, GetParam().sliding_window);
    EXPECT_GT(m.info().n_params, 0u);
}

TEST_P(Families, GreedyIsDeterministicAndPrefixReuseMatchesCold) {
    Model m = load();
    ContextOptions co;
    co.n_ctx = 256;
    auto ctx = Context::create(m, co);
    ASSERT_TRUE(ctx) << ctx.error().describe();
    GenerateOptions o = test::greedy(16);
    o.ignore_eos = true;
    const std::string base = "The quick brown fox jumps over the lazy dog and";
    const std::string extended = base + " keeps running far away";
    auto cold = ctx->generate(extended, o);
    ASSERT_TRUE(cold) << cold.error().describe();
    EXPECT_EQ(cold->usage.completion_tokens, 16);

    EXPECT_TRUE(ctx->clear());
    auto cold_again = ctx->generate(extended, o);
    ASSERT_TRUE(cold_again);
    EXPECT_EQ(cold_again->tokens, cold->tokens);

    // Warm: the cached sequence is the base prompt plus its reply, so the extended prompt
    // shares only a prefix. Attention models trim the tail; recurrent ones must start over.
    EXPECT_TRUE(ctx->clear());
    ASSERT_TRUE(ctx->generate(base, o));
    auto warm = ctx->generate(extended, o);
    ASSERT_TRUE(warm) << warm.error().describe();
    EXPECT_EQ(warm->tokens, cold->tokens);
    if (GetParam().recurrent) {
        EXPECT_EQ(warm->usage.cached_tokens, 0);
    } else {
        EXPECT_GT(warm->usage.cached_tokens, 5);
    }
}

TEST_P(Families, RecurrentStateExtendsOnlyAtExactBoundaries) {
    Model m = load();
    ContextOptions co;
    co.n_ctx = 256;
    auto ctx = Context::create(m, co);
    ASSERT_TRUE(ctx);
    auto tokens = m.tokenizer().encode("one two three four five six seven");
    ASSERT_TRUE(tokens);
    GenerateOptions o = test::greedy(1);
    o.ignore_eos = true;
    auto first = ctx->generate(*tokens, o);
    ASSERT_TRUE(first);
    // Cached now: prompt (the sampled token was not fed back). Extending it is an exact boundary.
    std::vector<Token> longer = *tokens;
    longer.push_back(first->tokens[0]);
    longer.push_back(first->tokens[0]);
    auto second = ctx->generate(longer, test::greedy(4));
    ASSERT_TRUE(second);
    EXPECT_EQ(second->usage.cached_tokens, static_cast<int>(tokens->size()));
}

INSTANTIATE_TEST_SUITE_P(Generated, Families, test::generated_families(), test::family_name);
