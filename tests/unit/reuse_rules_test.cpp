// The reuse rules the single-stream Context and the engine share (core/reuse_rules.hpp).
#include "core/reuse_rules.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace llamapp::detail {
namespace {

TEST(ReuseRules, CommonPrefixStopsAtTheFirstDifferenceOrTheShorterList) {
    const std::vector<Token> a{1, 2, 3, 4};
    EXPECT_EQ(common_prefix(a, std::vector<Token>{1, 2, 9}), 2u);
    EXPECT_EQ(common_prefix(a, std::vector<Token>{1, 2}), 2u);
    EXPECT_EQ(common_prefix(a, a), 4u);
    EXPECT_EQ(common_prefix(a, std::vector<Token>{}), 0u);
    EXPECT_EQ(common_prefix(std::vector<Token>{}, a), 0u);
}

TEST(ReuseRules, ReusableLeavesOnePromptTokenForFreshLogits) {
    const std::vector<Token> cached{1, 2, 3, 4};
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 3, 4}, true), 3u);
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 3, 4, 5}, true), 4u);
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1}, true), 0u);
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{}, true), 0u);
}

TEST(ReuseRules, WithoutTrimOnlyAWholeCacheIsReused) {
    const std::vector<Token> cached{1, 2, 3};
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 3, 7}, false), 3u);
    // A partial match would need the tail cut off, which recurrent state cannot do.
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 9, 9}, false), 0u);
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 9, 9}, true), 2u);
    // The whole cache equal to the prompt: one token must be recomputed, so nothing is reusable.
    EXPECT_EQ(reusable_prefix(cached, std::vector<Token>{1, 2, 3}, false), 0u);
}

struct WindowCase {
    int pos_min;
    std::size_t reused;
    int window;
    bool intact;
};

TEST(ReuseRules, SlidingWindowIsWholeOnlyWhileItsOldestCellIsKept) {
    const WindowCase cases[] = {
        {-1, 10, 0, true},  // no window: nothing is ever dropped
        {5, 0, 4, true},    // nothing reused
        {0, 10, 4, true},   // every cell still held
        {6, 10, 4, true},   // exactly the window before position 10
        {7, 10, 4, false},  // position 6 was dropped, and position 10 attends to it
        {0, 3, 4, true},    // shorter than one window
        {1, 3, 4, false},
        // The case generation.cpp once accepted: the window cache holds nothing of the
        // sequence (every cell was overwritten), which is not a whole window either.
        {-1, 10, 4, false},
        {-1, 1, 4, false},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(window_intact(c.pos_min, c.reused, c.window), c.intact)
            << "pos_min=" << c.pos_min << " reused=" << c.reused << " window=" << c.window;
    }
}

}  // namespace
}  // namespace llamapp::detail
