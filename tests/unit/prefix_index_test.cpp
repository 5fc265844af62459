#include "kvstore/prefix_index.hpp"

#include <gtest/gtest.h>

#include <random>

namespace llamapp::detail {
namespace {

using Tokens = std::vector<Token>;

std::vector<std::pair<PrefixIndex::EntryHandle, std::size_t>> all_by_prefix(const PrefixIndex& ix,
                                                                            const Tokens& prompt) {
    std::vector<std::pair<PrefixIndex::EntryHandle, std::size_t>> out;
    ix.by_common_prefix(prompt, [&](auto e, std::size_t lcp) {
        out.emplace_back(e, lcp);
        return false;
    });
    return out;
}

TEST(PrefixIndex, LongestCommonPrefixComesFirst) {
    PrefixIndex ix;
    ix.insert(Tokens{1, 2, 3, 4, 5}, 1);  // A+B
    ix.insert(Tokens{1, 2, 9}, 2);
    ix.insert(Tokens{7, 8}, 3);
    auto got = all_by_prefix(ix, {1, 2, 3, 6, 6});  // A+C
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], std::make_pair(PrefixIndex::EntryHandle{1}, std::size_t{3}));
    EXPECT_EQ(got[1], std::make_pair(PrefixIndex::EntryHandle{2}, std::size_t{2}));
    EXPECT_EQ(ix.deepest_match(Tokens{1, 2, 3}), 3u);
    EXPECT_EQ(ix.deepest_match(Tokens{7, 9}), 1u);
    EXPECT_TRUE(all_by_prefix(ix, {5}).empty());
}

TEST(PrefixIndex, BoundariesAreWholeEntriesOnly) {
    PrefixIndex ix;
    ix.insert(Tokens{1, 2}, 1);
    ix.insert(Tokens{1, 2, 3, 4}, 2);
    ix.insert(Tokens{1, 2, 3, 4, 5, 6}, 3);
    std::vector<std::pair<PrefixIndex::EntryHandle, std::size_t>> got;
    ix.by_boundary(Tokens{1, 2, 3, 4, 5, 7}, [&](auto e, std::size_t n) {
        got.emplace_back(e, n);
        return false;
    });
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].first, 2u);
    EXPECT_EQ(got[0].second, 4u);
    EXPECT_EQ(got[1].first, 1u);
}

TEST(PrefixIndex, EraseKeepsTheRestFindable) {
    PrefixIndex ix;
    ix.insert(Tokens{1, 2, 3}, 1);
    ix.insert(Tokens{1, 2, 4}, 2);
    ix.erase(Tokens{1, 2, 3}, 1);
    ix.erase(Tokens{1, 2, 3}, 1);  // twice: no effect
    ix.erase(Tokens{1, 2, 4}, 9);  // wrong handle: no effect
    auto got = all_by_prefix(ix, {1, 2, 3});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].first, 2u);
    EXPECT_EQ(got[0].second, 2u);
    ix.erase(Tokens{1, 2, 4}, 2);
    EXPECT_TRUE(ix.empty());
}

// Against a brute-force LCP over random sequences with shared prefixes.
TEST(PrefixIndex, MatchesBruteForce) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> tok(0, 3), len(1, 12);
    std::vector<Tokens> stored;
    PrefixIndex ix;
    for (int i = 0; i < 200; ++i) {
        Tokens t(static_cast<std::size_t>(len(rng)));
        for (auto& x : t) x = tok(rng);
        stored.push_back(t);
        ix.insert(t, static_cast<PrefixIndex::EntryHandle>(i + 1));
    }
    for (int q = 0; q < 200; ++q) {
        Tokens p(static_cast<std::size_t>(len(rng)));
        for (auto& x : p) x = tok(rng);
        std::size_t best = 0;
        for (const auto& s : stored) {
            std::size_t n = 0;
            while (n < s.size() && n < p.size() && s[n] == p[n]) ++n;
            best = std::max(best, n);
        }
        auto got = all_by_prefix(ix, p);
        const std::size_t first = got.empty() ? 0 : got[0].second;
        EXPECT_EQ(first, best);
        EXPECT_EQ(ix.deepest_match(p), best);
        for (auto [h, lcp] : got) {
            const auto& s = stored[h - 1];
            std::size_t n = 0;
            while (n < s.size() && n < p.size() && s[n] == p[n]) ++n;
            EXPECT_EQ(n, lcp);
        }
    }
}

}  // namespace
}  // namespace llamapp::detail
