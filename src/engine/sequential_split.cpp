#include "engine/sequential_split.hpp"

#include <algorithm>

namespace llamapp::detail {

int SequentialSplit::passes(std::span<const SequenceRows> call) {
    left_.clear();
    for (const SequenceRows& s : call) left_.push_back(s.rows);
    const std::size_t n = call.size();
    int passes = 0;
    for (std::size_t first = 0;;) {
        while (first < n && left_[first] <= 0) ++first;
        if (first == n) return passes;
        // The run: consecutive ids that still have rows, at most one per row of a ubatch.
        std::size_t end = first + 1;
        while (end < n && call[end].seq == call[end - 1].seq + 1 && left_[end] > 0 &&
               static_cast<int>(end - first) < n_ubatch_)
            ++end;
        const int width = static_cast<int>(end - first);
        int fewest = left_[first];
        for (std::size_t i = first; i < end; ++i) fewest = std::min(fewest, left_[i]);
        const int each = std::min(fewest, std::max(1, n_ubatch_ / width));
        for (std::size_t i = first; i < end; ++i) left_[i] -= each;
        ++passes;
    }
}

std::span<const int> SequentialSplit::padding(std::span<const SequenceRows> call,
                                              const std::function<bool(int)>& can_pad, int room) {
    pads_.clear();
    for (std::size_t i = 1; i < call.size(); ++i) {
        if (call[i].seq <= call[i - 1].seq) return {};  // not grouped in ascending order
        for (int seq = call[i - 1].seq + 1; seq < call[i].seq; ++seq)
            if (can_pad(seq)) pads_.push_back(seq);
    }
    if (pads_.empty() || static_cast<int>(pads_.size()) > room) return {};
    padded_.clear();
    auto pad = pads_.begin();
    for (const SequenceRows& s : call) {
        for (; pad != pads_.end() && *pad < s.seq; ++pad) padded_.push_back({*pad, 1});
        padded_.push_back(s);
    }
    const int with = passes(padded_);
    if (with >= passes(call)) return {};
    return pads_;
}

}  // namespace llamapp::detail
