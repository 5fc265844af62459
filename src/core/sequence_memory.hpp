// Internal: the one owner of a context's sequence memory. Every llama_memory_* and
// llama_state_seq_* call in llamapp is in sequence_memory.cpp, so the rules for reusing cached
// tokens (what may be trimmed, copied or restored, and when a sliding window is still whole)
// are written once, for the single-stream Context and the engine alike.
//
// A sequence that holds `n` tokens holds positions [0, n). Not thread-safe: only the thread
// that decodes on the context calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/reuse_rules.hpp"
#include "llama.h"
#include "llamapp/context.hpp"

namespace llamapp::detail {

class SequenceMemory {
  public:
    SequenceMemory() = default;
    // `unified`: the context was made with one KV cache for all sequences (kv_unified).
    SequenceMemory(llama_context* ctx, bool unified);

    // False for a model without a KV cache or recurrent state (it cannot generate).
    bool exists() const { return memory_ != nullptr; }

    void clear();          // every sequence
    void remove(int seq);  // all of one sequence
    // Drops positions `keep` and later; false where the model cannot cut a sequence there
    // (recurrent state), in which case the sequence is unchanged.
    [[nodiscard]] bool trim(int seq, std::size_t keep);
    // `to` gets the first `n` positions of `from` (ReuseModes::copy_prefix), or all of them.
    void copy_prefix(int from, int to, std::size_t n);
    // Done when it returns, also between separate streams, where llama.cpp itself would copy
    // the cells only at the next decode (a snapshot or restore before it would see the old
    // ones). On failure `to` is empty.
    void copy_whole(int from, int to);

    int pos_min(int seq) const;  // -1 when the sequence holds nothing
    int pos_max(int seq) const;  // -1 when the sequence holds nothing
    // The sliding-window check of window_intact() on what `seq` holds now.
    bool window_intact(int seq, std::size_t reused, int window) const;
    // The first position a snapshot of `seq` surely holds when it holds `held` tokens: a
    // sliding-window cache may have dropped anything older than one window.
    std::size_t kept_from(int seq, std::size_t held, int window) const;

    // A sequence's state as bytes (llama.cpp's format for this build and these KV types).
    std::size_t snapshot_size(int seq) const;
    // Writes the state into `out` (snapshot_size bytes); false if llama.cpp wrote less.
    [[nodiscard]] bool snapshot(int seq, std::span<std::uint8_t> out) const;
    // Replaces `seq` with a snapshot of `stored` tokens and keeps its first `keep` of them;
    // false (and `seq` empty) when the bytes do not load or the result does not hold exactly
    // positions up to keep - 1.
    [[nodiscard]] bool restore(int seq, std::span<const std::uint8_t> bytes, std::size_t stored,
                               std::size_t keep);

    // What this model's memory can do, tried on a fresh context with three tokens; the memory
    // is cleared afterwards. Partial copies are only tried on a unified cache: between separate
    // streams llama.cpp asserts on them.
    ReuseModes probe(int vocab_size, int sliding_window);

  private:
    llama_context* ctx_ = nullptr;
    llama_memory_t memory_ = nullptr;
    bool unified_ = true;
};

}  // namespace llamapp::detail
