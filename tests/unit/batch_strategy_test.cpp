#include <gtest/gtest.h>

#include "llamapp/batch_strategy.hpp"

using namespace llamapp;

namespace {

std::vector<SequenceDemand> demand() {
    const auto t0 = std::chrono::steady_clock::time_point{};
    std::vector<SequenceDemand> d(4);
    d[0] = {0, true, 0, t0};
    d[1] = {1, false, 900, t0 + std::chrono::seconds(2)};  // admitted later
    d[2] = {2, true, 0, t0};
    d[3] = {3, false, 100, t0 + std::chrono::seconds(1)};
    return d;
}

std::vector<int> plan(BatchStrategy& s, int budget, int chunk) {
    auto d = demand();
    std::vector<int> take(d.size(), 0);
    s.plan(d, BatchBudget{budget, chunk, 0}, take);
    return take;
}

}  // namespace

TEST(BatchStrategy, DecodeMaximalServesStreamsFirstThenOldestPrompts) {
    auto s = decode_maximal();
    // About one chunk of prompt per call, the streams' tokens included: 256 - 2 rows.
    EXPECT_EQ(plan(*s, 512, 256), (std::vector<int>{1, 154, 1, 100}));
    EXPECT_EQ(plan(*s, 150, 256), (std::vector<int>{1, 48, 1, 100}));
    EXPECT_EQ(plan(*s, 1, 256), (std::vector<int>{1, 0, 0, 0}));
}

TEST(BatchStrategy, PrefillPriorityServesPromptsFirst) {
    auto s = prefill_priority();
    EXPECT_EQ(plan(*s, 150, 256), (std::vector<int>{0, 50, 0, 100}));
    EXPECT_EQ(plan(*s, 1000, 256), (std::vector<int>{1, 256, 1, 100}));
}

TEST(BatchStrategy, BalancedSplitsAndLendsWhatIsUnused) {
    auto s = balanced();
    EXPECT_EQ(plan(*s, 100, 256), (std::vector<int>{1, 0, 1, 98}));
    EXPECT_EQ(plan(*s, 2, 256), (std::vector<int>{1, 0, 0, 1}));
}

TEST(BatchStrategy, FirstTokenFirstFinishesPromptsOneAtATime) {
    auto s = first_token_first();
    // The oldest prompt (demand 3, 100 tokens) fills a tile: the next one waits.
    EXPECT_EQ(plan(*s, 512, 256), (std::vector<int>{1, 0, 1, 100}));
    // A prompt shorter than a tile lets the next one top the call up.
    const auto t0 = std::chrono::steady_clock::time_point{};
    std::vector<SequenceDemand> d = {{0, false, 900, t0 + std::chrono::seconds(1)},
                                     {1, false, 30, t0},
                                     {2, false, 500, t0 + std::chrono::seconds(2)}};
    std::vector<int> take(d.size(), 0);
    s->plan(d, BatchBudget{512, 256, 0}, take);
    EXPECT_EQ(take, (std::vector<int>{226, 30, 0}));
}

TEST(BatchStrategy, ByName) {
    EXPECT_EQ((*batch_strategy("first_token_first"))->name(), "first_token_first");
    EXPECT_EQ((*batch_strategy("balanced"))->name(), "balanced");
    EXPECT_EQ((*batch_strategy("prefill_priority"))->name(), "prefill_priority");
    EXPECT_EQ((*batch_strategy("decode_maximal"))->name(), "decode_maximal");
    EXPECT_EQ(batch_strategy("fastest").error().code, ErrorCode::invalid_argument);
}
