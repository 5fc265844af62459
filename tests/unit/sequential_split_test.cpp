// llama.cpp's split of a call by sequence (a KV cache per slot) and the padding rows that keep a
// call of streams in one ubatch. The expected splits follow llama_batch_allocr::split_equal.
#include "engine/sequential_split.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <vector>

namespace llamapp::detail {
namespace {

// One row for each of `seqs`, `rows` for `wide`.
std::vector<SequenceRows> call(const std::vector<int>& seqs, int wide = -1, int rows = 1) {
    std::vector<SequenceRows> out;
    for (int s : seqs) out.push_back({.seq = s, .rows = s == wide ? rows : 1});
    return out;
}

std::vector<int> range_without(int n, const std::set<int>& missing) {
    std::vector<int> out;
    for (int s = 0; s < n; ++s)
        if (!missing.contains(s)) out.push_back(s);
    return out;
}

const auto anyone = [](int) { return true; };

int passes(SequentialSplit& split, const std::vector<SequenceRows>& c) {
    return split.passes(c);
}

std::vector<int> padding(SequentialSplit& split, const std::vector<SequenceRows>& c, int room = 512,
                         const std::function<bool(int)>& can_pad = anyone) {
    const auto pads = split.padding(c, can_pad, room);
    return {pads.begin(), pads.end()};
}

TEST(SequentialSplit, ConsecutiveStreamsTakeOnePassAndEachGapAnother) {
    SequentialSplit split(512);
    EXPECT_EQ(split.passes(call(range_without(16, {}))), 1);
    EXPECT_EQ(split.passes(call(range_without(16, {5}))), 2);
    EXPECT_EQ(split.passes(call(range_without(16, {1, 3, 5, 7, 9}))), 6);
    // Ids above a gap start where the run below it ends, whatever came first.
    EXPECT_EQ(split.passes(call({4, 5, 6})), 1);
    EXPECT_EQ(split.passes({}), 0);
}

TEST(SequentialSplit, ASequenceWithMoreRowsGetsTheRestInAPassOfItsOwn) {
    SequentialSplit split(512);
    // A prompt chunk (or a lead and its drafts) beside streams: one row each, then the rest.
    EXPECT_EQ(split.passes(call(range_without(16, {}), 7, 130)), 2);
    // Two prompts side by side share the second pass; apart, they do not.
    EXPECT_EQ(passes(split, {{3, 130}, {4, 130}}), 1);
    EXPECT_EQ(passes(split, {{3, 130}, {7, 130}}), 2);
    // A ubatch holds at most n_ubatch rows.
    EXPECT_EQ(passes(split, {{0, 1000}}), 2);
    EXPECT_EQ(passes(split, {{0, 300}, {1, 300}}), 2);
}

TEST(SequentialSplit, PadsTheGapsBetweenStreams) {
    SequentialSplit split(512);
    EXPECT_EQ(padding(split, call(range_without(16, {5}))), (std::vector<int>{5}));
    EXPECT_EQ(padding(split, call(range_without(16, {1, 3, 5, 7, 9}))),
              (std::vector<int>{1, 3, 5, 7, 9}));
    // Below the first and above the last sequence nothing splits.
    EXPECT_TRUE(padding(split, call({4, 5, 6})).empty());
    // Between a prompt and the streams too: its first row joins theirs.
    EXPECT_EQ(padding(split, call(range_without(16, {8}), 7, 130)), (std::vector<int>{8}));
}

TEST(SequentialSplit, DoesNotPadWhereItSavesNoPass) {
    SequentialSplit split(512);
    // Two prompts with slots between them: the padding rows would only add a pass.
    EXPECT_TRUE(padding(split, {{3, 130}, {7, 130}}).empty());
    // A slot that cannot take a row (its cache is full) leaves its gap; padding the rest of
    // that gap saves nothing.
    const auto full = [](int seq) { return seq != 6; };
    EXPECT_TRUE(padding(split, call({4, 7}), 512, full).empty());
    EXPECT_EQ(padding(split, call({0, 2, 4, 7}), 512, full), (std::vector<int>{1, 3, 5}));
    // No room left in the call.
    EXPECT_TRUE(padding(split, call(range_without(16, {5, 9})), 1).empty());
    // Rows not grouped by ascending sequence: no model of the split, no padding.
    EXPECT_TRUE(padding(split, call({5, 3})).empty());
}

}  // namespace
}  // namespace llamapp::detail
