// Internal: how llama.cpp cuts one llama_decode call into ubatches when every sequence has a
// cache of its own (EngineOptions::kv_layout per slot), and the padding rows that keep a call
// of decoding streams in one ubatch. llama_batch_allocr::split_equal with sequential ids: a
// ubatch takes a run of consecutive sequence ids, starting at the first sequence with rows
// left, and the same number of rows from each. Each ubatch is a pass over the weights, so a
// slot between two decoding streams that decodes nothing this step (finished, or idle) costs
// a pass of its own; one throwaway row for it at its next position (decoded without logits,
// then cut off again) costs a row instead.
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace llamapp::detail {

struct SequenceRows {
    int seq = 0;
    int rows = 0;
};

class SequentialSplit {
  public:
    explicit SequentialSplit(int n_ubatch) : n_ubatch_(n_ubatch) {}

    // The ubatches of a call whose rows come grouped by sequence, ids ascending.
    int passes(std::span<const SequenceRows> call);
    // The sequences between the call's first and last that should get one padding row each
    // (ids ascending), or none where padding saves no pass: only those `can_pad` accepts, at
    // most `room` of them. `call` as for passes().
    std::span<const int> padding(std::span<const SequenceRows> call,
                                 const std::function<bool(int)>& can_pad, int room);

  private:
    int n_ubatch_;
    // Scratch reused every step: no allocation on the decode loop.
    std::vector<int> left_;
    std::vector<int> pads_;
    std::vector<SequenceRows> padded_;
};

}  // namespace llamapp::detail
