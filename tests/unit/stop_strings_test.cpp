#include <gtest/gtest.h>

#include "core/stop_strings.hpp"

using llamapp::detail::StopMatcher;

namespace {

// Feeds pieces; returns everything emitted and whether a stop matched.
std::pair<std::string, bool> run(StopMatcher& m, const std::vector<std::string>& pieces) {
    std::string out;
    for (const auto& p : pieces) {
        auto step = m.feed(p);
        out += step.emit;
        if (step.matched) return {out, true};
    }
    return {out + m.flush(), false};
}

}  // namespace

TEST(StopMatcher, PassesTextThroughWithoutStops) {
    StopMatcher m({});
    EXPECT_EQ(run(m, {"a", "b"}), std::make_pair(std::string("ab"), false));
}

TEST(StopMatcher, CutsAtAStopSplitAcrossPieces) {
    StopMatcher m({"END"});
    auto [text, matched] = run(m, {"hello E", "N", "D tail"});
    EXPECT_TRUE(matched);
    EXPECT_EQ(text, "hello ");
}

TEST(StopMatcher, NeverEmitsAPartialStopString) {
    StopMatcher m({"</s>"});
    auto step = m.feed("abc<");
    EXPECT_EQ(step.emit, "abc");
    step = m.feed("/");
    EXPECT_EQ(step.emit, "");
    step = m.feed("x");  // not a stop after all: held text is released
    EXPECT_EQ(step.emit, "</x");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
    StopMatcher m({"world", "lo"});
    auto step = m.feed("hello world");
    EXPECT_TRUE(step.matched);
    EXPECT_EQ(step.stop, "lo");
    EXPECT_EQ(step.emit, "hel");
}

TEST(StopMatcher, FlushReleasesHeldPrefixAtEnd) {
    StopMatcher m({"STOP"});
    auto [text, matched] = run(m, {"ab", "ST"});
    EXPECT_FALSE(matched);
    EXPECT_EQ(text, "abST");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
    StopMatcher m({""});
    EXPECT_EQ(run(m, {"x"}).first, "x");
}
