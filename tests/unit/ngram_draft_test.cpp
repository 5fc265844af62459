#include "engine/ngram_draft.hpp"

#include <gtest/gtest.h>

namespace llamapp::detail {
namespace {

std::vector<Token> draft(const std::vector<Token>& history, Token next, std::size_t match,
                         std::size_t max_draft) {
    std::vector<Token> out{99, 99};  // cleared by the call
    ngram_draft(history, next, match, max_draft, out);
    return out;
}

TEST(NgramDraft, ProposesWhatFollowedTheLatestOccurrence) {
    // "1 2 3 4 5 ... 1 2 3 9 8 7 ... 1 2" + next 3: the later "1 2 3" was followed by 9 8 7.
    const std::vector<Token> history{1, 2, 3, 4, 5, 6, 1, 2, 3, 9, 8, 7, 0, 1, 2};
    EXPECT_EQ(draft(history, 3, 3, 3), (std::vector<Token>{9, 8, 7}));
    EXPECT_EQ(draft(history, 3, 3, 2), (std::vector<Token>{9, 8}));
}

TEST(NgramDraft, RunsOnThroughTheKeyAsALoop) {
    // The only earlier "5 6" is followed by 7 and then the key itself: a period-3 loop.
    const std::vector<Token> history{5, 6, 7, 5};
    EXPECT_EQ(draft(history, 6, 2, 4), (std::vector<Token>{7, 5, 6, 7}));
}

TEST(NgramDraft, ContinuesALoopPeriodically) {
    const std::vector<Token> history{4, 8, 8, 8};
    EXPECT_EQ(draft(history, 8, 3, 3), (std::vector<Token>{8, 8, 8}));
    const std::vector<Token> pair{1, 2, 1, 2, 1};
    EXPECT_EQ(draft(pair, 2, 2, 5), (std::vector<Token>{1, 2, 1, 2, 1}));
}

TEST(NgramDraft, ProposesNothingWithoutAMatch) {
    EXPECT_TRUE(draft({1, 2, 3, 4}, 5, 2, 3).empty());
    EXPECT_TRUE(draft({1, 2}, 3, 3, 3).empty());  // shorter than the key
    EXPECT_TRUE(draft({}, 3, 1, 3).empty());
    EXPECT_TRUE(draft({1, 1, 1}, 1, 0, 3).empty());  // no key length
    EXPECT_TRUE(draft({1, 1, 1}, 1, 2, 0).empty());  // nothing asked for
    // The key matches only itself: nothing after it is known.
    EXPECT_TRUE(draft({7, 1, 2}, 3, 3, 3).empty());
}

}  // namespace
}  // namespace llamapp::detail
