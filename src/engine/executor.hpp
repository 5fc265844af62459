// Internal: carries out one scheduling step on the decode thread. The Scheduler plans the rows;
// the executor batches them, decodes (shrinking the batch, dropping drafts, evicting idle
// sequences and preempting under KV pressure), samples, accepts drafts and streams the pieces.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "core/context_state.hpp"
#include "engine/delivery.hpp"
#include "engine/drafter.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/kv_persistence.hpp"
#include "engine/scheduler.hpp"
#include "engine/sequential_split.hpp"
#include "engine/slot_table.hpp"

namespace llamapp::detail {

class Executor {
  public:
    using Clock = Reply::Clock;
    // Every reference outlives the executor.
    Executor(ContextState& state, Scheduler& scheduler, SlotTable& slots, Drafter& drafter,
             KvPersistence& persistence, Delivery& delivery, EngineMetrics& metrics,
             const ReuseModes& modes);

    // Decode thread: resumes what preemption paused where it fits again, plans the rows (with
    // `queue_depth` requests waiting) and carries them out.
    void step(std::size_t queue_depth);
    // Any thread: aborts a decode in flight and every later one (shutdown).
    void interrupt() { stop_decoding_.cancel(); }
    // Decode thread: the error every request gets once a device holding part of the model was
    // lost (a dead RPC server); nullopt while none was.
    const std::optional<Error>& lost() const { return lost_; }

  private:
    void run_step(std::size_t queue_depth);
    std::span<const StreamView> stream_views();
    void plan_rows(std::size_t queue_depth);
    void fill_drafts();
    void process_rows(std::size_t begin, std::size_t end);
    std::span<const int> gap_padding(std::size_t begin, std::size_t end);
    void follow_on_draft(std::size_t begin, std::size_t end);
    void commit_rows(std::size_t begin, std::size_t end);
    bool live(const Row& row) const;
    void relieve_pressure(std::size_t begin, std::size_t end);
    void drop_drafts(std::size_t begin, std::size_t end);
    void rollback(std::size_t begin, std::size_t end, const Error& error, bool fail_requests);
    void lose_device(const Error& error);
    // Samples output `batch_index` for the slot's request and streams the piece; true when the
    // reply is finished (the caller completes it).
    bool sample(Slot& slot, int batch_index);
    // Keeps the drafts after rows_[lead] while each is the token just sampled, then drops the KV
    // of the rest; true when the reply is finished.
    bool accept_drafts(Slot& slot, std::size_t lead, bool finished);

    // KV pressure with one token that cannot fit: the request the scheduler picks gives its
    // cells up. It is preempted (Scheduler::resumes_after_preemption), or its reply ends
    // (length), or, before it has one, it fails. Returns that request's slot.
    int preempt_for(int stuck);
    void preempt(Slot& slot);
    void resume_preempted();  // Scheduler::resuming_preempted

    ContextState& state_;
    Scheduler& scheduler_;
    SlotTable& slots_;
    Drafter& drafter_;
    KvPersistence& persistence_;
    Delivery& delivery_;
    EngineMetrics& metrics_;
    const ReuseModes& modes_;
    const std::size_t n_ctx_seq_;
    const bool pad_gaps_;
    SequentialSplit split_;
    std::vector<SequenceRows> call_;
    CancellationToken stop_decoding_;
    std::optional<Error> lost_;

    StepPlan plan_;  // this step's rows
    std::vector<Row>& rows_ = plan_.rows;
    std::vector<StreamView> stream_views_;
    std::vector<int> resuming_;
    std::vector<Drafter::Want> wants_;
    std::vector<Drafter::Proposal> proposals_;
    std::vector<std::size_t> leads_;      // the rows of wants_' streams
    std::vector<DraftKind> draft_kinds_;  // per slot: where its last drafts came from
    std::vector<DecodedRow> decoded_;     // this call's rows, for a draft model
    LlamaBatch batch_;
};

}  // namespace llamapp::detail
