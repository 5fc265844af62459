// Internal: the one owner of a context's sequence memory: its cells and what they hold. Every
// llama_memory_* and llama_state_seq_* call in llamapp is in sequence_memory.cpp, and each call
// that changes a sequence's cells (trim, copy, restore, remove) changes the record of what it
// holds in the same call; decoded tokens are recorded with append. Nobody else keeps a token
// list of a sequence. The rules for reusing cached tokens (what may be trimmed, copied or
// restored, and when a sliding window is still whole) are written once, for the single-stream
// Context and the engine alike.
//
// A sequence that holds `n` positions holds [0, n); today each position is a token. What the
// next features add to a sequence belongs here too: media chunks (a run of positions with no
// token ids, named by a hash), the adapter set the cells were computed with, and drafts (cells
// written past what the sequence holds, dropped by rewind_to_held or kept by append).
// Not thread-safe: only the thread that decodes on the context calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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
    bool unified() const { return unified_; }

    // The tokens `seq` holds, in position order.
    std::span<const Token> tokens(int seq) const { return held_[index(seq)]; }
    std::size_t size(int seq) const { return held_[index(seq)].size(); }

    void clear();          // every sequence
    void remove(int seq);  // all of one sequence
    // Records tokens a decode just wrote at the next positions of `seq`.
    void append(int seq, Token token) { held_[index(seq)].push_back(token); }
    void append(int seq, std::span<const Token> tokens);
    // Drops positions `keep` and later; false where the model cannot cut a sequence there
    // (recurrent state), in which case the sequence is unchanged.
    [[nodiscard]] bool trim(int seq, std::size_t keep);
    // Drops the cells a decode wrote past what `seq` holds (drafts not kept, the rows of a call
    // that failed); false where the model cannot cut them (the cells are then unknown: remove).
    [[nodiscard]] bool rewind_to_held(int seq);
    // `to` (emptied first) gets the first `n` positions of `from` (ReuseModes::copy_prefix).
    void copy_prefix(int from, int to, std::size_t n);
    // `to` (emptied first) gets all of `from`. Done when it returns, also between separate
    // streams, where llama.cpp itself would copy the cells only at the next decode (a snapshot
    // or restore before it would see the old ones). On failure `to` is empty.
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
    // Replaces `seq` with a snapshot of `stored` and keeps its first `keep` tokens; false (and
    // `seq` empty) when the bytes do not load or the result does not hold exactly positions up
    // to keep - 1.
    [[nodiscard]] bool restore(int seq, std::span<const std::uint8_t> bytes,
                               std::span<const Token> stored, std::size_t keep);

    // Keeps `draft` (a draft model's memory, one cache for all sequences) a prefix of this one:
    // each cut, copy, restore or removal here cuts it as well (a restored sequence's draft cells
    // are dropped and computed again). What the draft model decodes, it records on `draft`
    // itself. Null: none.
    void mirror_to(SequenceMemory* draft) { mirror_ = draft; }

    // What this model's memory can do, tried on a fresh context with three tokens; the memory
    // is cleared afterwards. Partial copies are only tried on a unified cache: between separate
    // streams llama.cpp asserts on them.
    ReuseModes probe(int vocab_size, int sliding_window);

  private:
    std::size_t index(int seq) const { return static_cast<std::size_t>(seq); }
    // The cell operations alone; the public calls keep held_ in step with them.
    void remove_cells(int seq);
    bool trim_cells(int seq, std::size_t keep);

    llama_context* ctx_ = nullptr;
    llama_memory_t memory_ = nullptr;
    bool unified_ = true;
    std::vector<std::vector<Token>> held_;  // per sequence: the tokens its cells hold
    SequenceMemory* mirror_ = nullptr;
};

}  // namespace llamapp::detail
