// BatchStrategy: how the engine splits one decode call between running streams and prompts.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "llamapp/error.hpp"

namespace llamapp {

// One sequence that wants tokens in the next decode call.
struct SequenceDemand {
    int slot = 0;
    bool decoding = false;  // has exactly one generated token to feed back
    int prefill_left = 0;   // prompt tokens still to compute (0 while decoding)
    std::chrono::steady_clock::time_point admitted;
};

struct BatchBudget {
    int n_batch = 0;              // tokens one decode call may hold
    int prefill_chunk = 0;        // most prompt tokens one sequence gets per call
    std::size_t queue_depth = 0;  // requests waiting for a slot, for adaptive strategies
};

// Called on the engine's decode thread only. plan() writes, for each demand, how many tokens it
// gets this call: 0 or 1 for a decoding sequence, 0..min(prefill_left, prefill_chunk) for a
// prefilling one. The engine clamps the plan to the budget, and if a plan gives nothing to
// anybody it falls back to decode_maximal so that the engine always makes progress.
class BatchStrategy {
  public:
    virtual ~BatchStrategy() = default;
    virtual std::string_view name() const = 0;
    virtual void plan(std::span<const SequenceDemand> demand, const BatchBudget& budget,
                      std::span<int> take) = 0;
};

// Default: every running stream gets its token first, then about one prefill chunk of prompt
// (the streams' tokens included), oldest prompt first. Calls stay one ubatch long, so streams
// never wait long behind prompts, and a burst of prompts gets its first tokens one after
// another rather than all at the end (docs/performance.md has the time-to-first-token figures).
std::shared_ptr<BatchStrategy> decode_maximal();
// Prompts first (best throughput for batch jobs), streams fill what is left.
std::shared_ptr<BatchStrategy> prefill_priority();
// Half the budget each; what one side leaves unused flows to the other.
std::shared_ptr<BatchStrategy> balanced();
// Like decode_maximal, but prompts are finished one at a time: a call takes further prompts
// only until they fill 64 rows (one tile of the CPU's attention kernel). A burst of short
// prompts gets its first tokens sooner at some throughput (streams start staggered, so decode
// calls run emptier); docs/performance.md has the figures.
std::shared_ptr<BatchStrategy> first_token_first();

// "decode_maximal", "prefill_priority", "balanced" or "first_token_first".
[[nodiscard]] Result<std::shared_ptr<BatchStrategy>> batch_strategy(std::string_view name);

}  // namespace llamapp
