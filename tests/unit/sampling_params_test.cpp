#include <gtest/gtest.h>

#include <cmath>

#include "llamapp/generation.hpp"
#include "llamapp/sampling.hpp"

using namespace llamapp;

namespace {

ErrorCode code_of(const Result<void>& r) {
    return r ? ErrorCode::internal : r.error().code;
}

}  // namespace

TEST(SamplingParams, DefaultsAndGreedyAreValid) {
    EXPECT_TRUE(SamplingParams{}.validate());
    EXPECT_TRUE(SamplingParams::greedy().validate());
}

TEST(SamplingParams, RejectsOutOfRangeValuesNamingTheOption) {
    struct Case {
        void (*mutate)(SamplingParams&);
        const char* option;
    };
    const Case cases[] = {
        {[](SamplingParams& p) { p.temperature = -1; }, "temperature"},
        {[](SamplingParams& p) { p.temperature = NAN; }, "temperature"},
        {[](SamplingParams& p) { p.top_k = -5; }, "top_k"},
        {[](SamplingParams& p) { p.top_p = 0; }, "top_p"},
        {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p"},
        {[](SamplingParams& p) { p.min_p = 2; }, "min_p"},
        {[](SamplingParams& p) { p.typical_p = 0; }, "typical_p"},
        {[](SamplingParams& p) { p.repeat_penalty = 0; }, "repeat_penalty"},
        {[](SamplingParams& p) { p.frequency_penalty = INFINITY; }, "frequency_penalty"},
        {[](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n"},
        {[](SamplingParams& p) { p.mirostat = 3; }, "mirostat"},
        {[](SamplingParams& p) { p.xtc_probability = 1.5f; }, "xtc_probability"},
        {[](SamplingParams& p) { p.dry_base = 0.5f; }, "dry_base"},
        {[](SamplingParams& p) {
             p.logit_bias = {{1, NAN}};
         },
         "logit_bias"},
    };
    for (const auto& c : cases) {
        SamplingParams p;
        c.mutate(p);
        auto r = p.validate();
        ASSERT_FALSE(r) << c.option;
        EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << c.option;
        EXPECT_EQ(r.error().context, c.option);
    }
}

TEST(SamplingParams, GrammarAndSchemaAreExclusive) {
    SamplingParams p;
    p.grammar = "root ::= \"a\"";
    p.json_schema = "{}";
    EXPECT_EQ(code_of(p.validate()), ErrorCode::invalid_argument);
}

TEST(SamplingParams, NegativeInfinityBiasBansATokenAndIsValid) {
    SamplingParams p;
    p.logit_bias = {{5, -INFINITY}};
    EXPECT_TRUE(p.validate());
}

TEST(GenerateOptions, MaxTokensZeroIsAnError) {
    GenerateOptions o;
    o.max_tokens = 0;
    EXPECT_EQ(code_of(o.validate()), ErrorCode::invalid_argument);
    o.max_tokens = -2;
    EXPECT_EQ(code_of(o.validate()), ErrorCode::invalid_argument);
    o.max_tokens = -1;
    EXPECT_TRUE(o.validate());
}

TEST(GenerateOptions, TopLogprobsAndStopsAreChecked) {
    GenerateOptions o;
    o.top_logprobs = 21;
    EXPECT_EQ(code_of(o.validate()), ErrorCode::invalid_argument);
    o.top_logprobs = 5;
    o.stop = {""};
    EXPECT_EQ(code_of(o.validate()), ErrorCode::invalid_argument);
}
