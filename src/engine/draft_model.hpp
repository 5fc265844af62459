// Internal: a draft model (DraftKind::draft_simple) beside the engine's context. Its context is
// owned by the decode thread like the target's, and its cells are kept a prefix of the target's
// sequences: the target's memory cuts them with its own (SequenceMemory::mirror_to), and every
// batch the target decodes is decoded on the draft as well (follow), as llama-server does with
// common_speculative_process. A sequence whose draft cells lag (restored from the KV store,
// preempted, or left out for room) catches up in later steps and drafts with the model once its
// cells hold all the target's. Decode thread only, after create.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/context_state.hpp"
#include "engine/drafter.hpp"
#include "llamapp/engine.hpp"

namespace llamapp::detail {

class DraftModel {
  public:
    // The draft's twin context of `target` (as many positions and sequences, its batch sizes).
    static Result<std::unique_ptr<DraftModel>> create(const Model& target,
                                                      const ContextState& target_state,
                                                      const DraftModelOptions& options);
    ~DraftModel();
    DraftModel(const DraftModel&) = delete;
    DraftModel& operator=(const DraftModel&) = delete;

    // Starts following `target` (whose sequences must be empty), until destroyed.
    void follow(SequenceMemory& target);
    llama_context* context() { return state_.ctx.get(); }

    // The draft's cells hold all `held` positions of `seq`: the model may draft for it.
    bool in_step(int seq, std::size_t held) const { return state_.sequences.size(seq) == held; }
    // The cells a drafting pass wrote past what `seq` holds go.
    void drop_drafts(int seq);
    // Decodes on the draft, through `decode`, the rows the target just decoded (before the
    // target records them), each sequence's lag first, within the draft's n_batch; the rows of a
    // sequence that lags by more wait, and it catches up over the next calls.
    void decoded(std::span<const DecodedRow> rows,
                 const std::function<bool(const llama_batch&)>& decode);

  private:
    explicit DraftModel(Context context);
    void share_threads(const ContextState& target, const DraftModelOptions& options);
    void add_run(std::span<const DecodedRow> run, int room);

    Context context_;
    ContextState& state_;
    SequenceMemory* target_ = nullptr;
    LlamaBatch batch_;
    struct Added {
        int seq;
        std::vector<Token> tokens;
    };
    std::vector<Added> added_;  // this call's rows per sequence, recorded once decoded
};

}  // namespace llamapp::detail
