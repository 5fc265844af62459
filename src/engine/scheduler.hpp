// Internal: the engine's decisions, as plain data in and plain data out. The scheduler does no
// I/O, calls no llama.cpp and keeps no state between calls (only scratch buffers, so the decode
// loop does not allocate): the engine core describes its slots and the request at hand, carries
// out what comes back, and describes the outcome the next time. Decisions are asked for one at a
// time because carrying one out can change the next (a restore that fails leaves its slot empty,
// so it is no donor for the next admission).
//
// Called on the decode thread only, except the free functions, which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "llamapp/batch_strategy.hpp"
#include "llamapp/context.hpp"
#include "llamapp/error.hpp"
#include "llamapp/kv_store.hpp"
#include "llamapp/request_handle.hpp"

namespace llamapp::detail {

using SteadyClock = std::chrono::steady_clock;

// What the scheduler sees of one slot (one sequence of the shared context).
struct SlotView {
    int seq = 0;                    // also the slot's index
    std::span<const Token> cached;  // tokens whose KV the sequence holds
    std::string_view session;       // pinned to this session when not empty
    std::string_view scope;         // cache scope of what it holds, and of its session
    SteadyClock::time_point last_used{};
    bool running = false;
    // While running: the request's prompt and how much of it is cached.
    std::span<const Token> prompt;
    std::size_t prompt_cached = 0;
    // While running: when it was admitted; the cells it holds at most, once its reply reaches
    // max_tokens (0: no max_tokens); what it needs to finish from here, its `prompt` (the tokens
    // to compute again, after a preemption) and the tokens it may still generate; and whether it
    // waits for room, preempted under KV pressure.
    SteadyClock::time_point admitted{};
    std::size_t most_cells = 0;
    std::size_t cells_to_finish = 0;
    bool preempted = false;
};

// A queued request, as admission sees it.
struct RequestView {
    std::span<const Token> prompt;
    std::string_view session;
    std::string_view scope;
    bool reuse = true;              // the request allows prefix reuse (GenerateOptions)
    std::size_t stored_tokens = 0;  // what the KV store's best entry matches (0: none)
    int slot = -1;                  // runs on this slot only (EngineRequest::slot)
};

// Where a request runs, and what its KV cache starts from.
struct Admission {
    int slot = -1;
    // The slot was pinned to another, idle session: that session ends, its next turn starts cold.
    bool reclaims_session = false;
    ReuseSource source = ReuseSource::none;  // same_slot, other_slot, stored or none
    int donor = -1;                          // other_slot: the slot copied from
    // Tokens kept (same_slot), copied (other_slot) or restored (stored).
    std::size_t reuse_tokens = 0;
    // What the slot keeps of its own cache; the rest is lost (and saved first, per the policy).
    std::size_t kept() const { return source == ReuseSource::same_slot ? reuse_tokens : 0; }
};

// One row of a decode call: a token of a sequence at a position.
struct Row {
    int slot = 0;
    std::uint64_t request = 0;
    Token token = no_token;
    int pos = 0;
    bool logits = false;
    bool decode = false;   // feeds back a generated token (else a prompt token)
    int batch_index = -1;  // where it sits in the batch of the current decode, -1 if not in it
    int drafts = 0;        // a fed-back token: how many draft rows follow it
    // A drafted token, checked against what its lead row samples. The plan leaves its token
    // unset (no_token): the engine's drafter fills it, or takes the row out.
    bool draft = false;
    bool dropped = false;  // a draft taken out of the step (no room in the KV cache)
};

// A running request, as the step planner sees it.
struct StreamView {
    int slot = 0;
    std::uint64_t request = 0;
    SteadyClock::time_point admitted;
    std::span<const Token> cached;
    std::span<const Token> prompt;
    std::size_t next_prompt = 0;  // first prompt token not yet cached
    Token to_decode = no_token;   // a sampled token to feed back; no_token while prefilling
    std::size_t save_at = 0;      // > next_prompt: the prefill stops there for a save
    int draft_wait = 0;           // steps left before this stream drafts again
    int draft_max = -1;           // the request's most drafts per step (-1: the engine's)
    int max_tokens = -1;          // the reply's limit (-1: none)
    int completion_tokens = 0;    // generated so far
};

// The rows of one step, and the streams whose draft wait the step used up (one step each).
// Each stream that may draft is followed by as many draft rows as it may take alone; the drafts
// the drafter proposes fill them in stream order, `draft_room` of them in all.
struct StepPlan {
    std::vector<Row> rows;
    std::vector<int> waited;  // slots
    int draft_room = 0;
    void clear() {
        rows.clear();
        waited.clear();
        draft_room = 0;
    }
};

struct SchedulerOptions {
    ReuseModes modes;
    bool prefix_reuse = true;
    double min_prefix_similarity = 0.1;
    int min_adopt_tokens = 16;
    int n_batch = 0;
    int n_ctx_seq = 0;
    int n_cells = 0;  // the context's cells over all sequences (= n_ctx_seq where they share)
    int prefill_chunk = 512;
    std::size_t prefill_rows = 0;  // EngineOptions::min_prefill_rows where it applies, else 0
    // A reused prefix at least this deep gives tokens back rather than leave a short prefill
    // (widened_reuse): below it the slow attention path is cheap.
    std::size_t widen_from_depth = 512;
    // EngineOptions::separate_prompt_rows, for calls of at least tile_rows rows: llama.cpp's CPU
    // flash attention sweeps the cells of every sequence in a tile of that many rows; a smaller
    // call takes its per-row path, where a prompt's last token after a restore costs what a
    // stream's does and rides along with them.
    bool separate_prompt_rows = false;
    std::size_t tile_rows = 64;
    int draft_tokens = 0;  // SpeculativeOptions::n_max; 0: the engine does not draft
    int draft_rows = 0;    // SpeculativeOptions::batch_rows within one ubatch
    // A stream decoding alone: its own n_max, within one ubatch (n_ubatch).
    int lone_draft_rows = 0;
    // Each slot has a KV cache of its own (EngineOptions::kv_layout). llama.cpp then builds a
    // ubatch from consecutive sequence ids only, each with the same number of tokens, and every
    // extra ubatch is a pass over the weights. So a request with no prefix to reuse takes the free
    // slot beside the most running ones (least recently used among equals), and only a stream
    // decoding alone drafts (a lead with drafts beside other streams would need a ubatch of its
    // own).
    bool cache_per_slot = false;
    std::shared_ptr<BatchStrategy> strategy;  // null: decode_maximal()
    // Saves to the KV store: the engine's policy, or empty without a store.
    std::optional<SavePolicy> saves;
    bool any_prefix_restores = false;  // any prefix of an entry restores (no sliding window)
};

class Scheduler {
  public:
    // Waiting for another slot's prefill pays off only for a shared prefix at least this long.
    static constexpr int min_wait_for_donor_tokens = 64;
    static constexpr int max_draft_backoff = 64;  // steps without drafts after repeated misses

    explicit Scheduler(SchedulerOptions options);

    const SchedulerOptions& options() const { return options_; }
    // Whether a step of `rows` rows decodes the streams' tokens and the prompt chunks in two
    // calls (SchedulerOptions::separate_prompt_rows).
    bool separates_prompt_rows(std::size_t rows) const {
        return options_.separate_prompt_rows && rows >= options_.tile_rows;
    }

    // Where a queued request runs, or nothing while it must wait: no idle slot, its session's
    // slot is busy, or another slot is computing a long prefix it shares.
    std::optional<Admission> admit(std::span<const SlotView> slots,
                                   const RequestView& request) const;
    // KV pressure: the idle slot whose cache goes first (plain cached sequences, least recently
    // used first, then idle sessions), or nothing.
    std::optional<int> eviction_victim(std::span<const SlotView> slots) const;
    // KV pressure with no idle cells left, when `stuck`'s next token cannot fit: the running
    // request that gives its cells up, the one holding the most (`stuck` on a tie). One long
    // reply must not starve the short ones beside it.
    int preemption_victim(std::span<const SlotView> slots, int stuck) const;
    // Whether that request is preempted (waits for room, then computes its cells again) rather
    // than ending. Only where the slots share the cells (a slot's own cells are nobody else's
    // room), for a request with an end that fits the context alone (one without max_tokens would
    // take all of it again), and while another running request will give cells back.
    bool resumes_after_preemption(std::span<const SlotView> slots, int victim) const;
    // The preempted requests that start again now, oldest first, while what each needs to finish
    // fits beside what the running ones hold; the oldest always when nothing else runs.
    void resuming_preempted(std::span<const SlotView> slots, std::vector<int>& out) const;
    // A short prefill after a long reused prefix would run llama.cpp's slow per-row attention
    // (EngineOptions::min_prefill_rows), whose cost grows with the depth of the cache: how many
    // of the `reused` tokens to keep so that at least prefill_rows are computed, or nothing to
    // keep them all. Only where the cache trims, for a prefix at least widen_from_depth deep, and
    // not for a single row (it takes the decode kernel).
    std::optional<std::size_t> widened_reuse(std::size_t prompt_size, std::size_t reused) const;
    // KV pressure: a decode found no cells for its rows. What gives room, cheapest loss first:
    // the step's drafts (guesses), an idle sequence's cells (nobody waits on them), half of the
    // batch (the other half is decoded after), and only then a running request's cells.
    struct Pressure {
        bool drafts = false;         // the rows still hold drafts
        bool idle_sequence = false;  // eviction_victim names one
        std::size_t live_rows = 0;   // rows still taking part
    };
    enum class Relief { drop_drafts, evict_idle, halve_batch, preempt };
    static Relief relieve(const Pressure& pressure);
    // Where a fork of `source` goes: an idle unpinned slot, least recently used, else an idle
    // session's (which ends).
    std::optional<int> fork_target(std::span<const SlotView> slots, int source) const;

    // The rows of the next decode step for the running streams: the strategy's split of the
    // batch, clamped, then room for drafts in what is left (StepPlan::draft_room).
    void plan_step(std::span<const StreamView> streams, std::size_t queue_depth, StepPlan& plan);
    // After a step with drafts: the stream's next wait and backoff.
    struct DraftBackoff {
        int wait = 0;
        int backoff = 1;
    };
    static DraftBackoff after_drafts(int decoded, int accepted, DraftBackoff now);

    // KV store saves, which the engine core takes. Where the prefill of a prompt with `reused`
    // tokens already cached stops for a save (0: none).
    std::size_t prefill_save_at(std::size_t prompt, std::size_t reused) const;
    // What to save of a slot whose `cached` tokens past `kept` are about to be dropped: the
    // finish save still pending for them, an eviction save, or nothing.
    std::optional<SaveReason> save_before_losing(std::size_t cached, std::size_t kept,
                                                 bool finish_pending) const;

  private:
    std::size_t usable_prefix(const SlotView& from, const RequestView& request) const;
    bool worth_waiting_for_donor(std::span<const SlotView> slots, const RequestView& request) const;
    std::optional<int> choose_slot(std::span<const SlotView> slots, const RequestView& request,
                                   bool& reclaims) const;
    void choose_reuse(std::span<const SlotView> slots, const RequestView& request,
                      Admission& admission) const;
    void split_batch(std::span<const StreamView> streams, std::size_t queue_depth);
    int drafts_allowed(const StreamView& stream, int room, bool& waits) const;
    void add_decode_rows(const StreamView& stream, int room, StepPlan& plan);

    SchedulerOptions options_;
    const std::shared_ptr<BatchStrategy> fallback_ = decode_maximal();
    std::vector<SequenceDemand> demand_;
    std::vector<int> take_;
    std::vector<std::size_t> stream_of_;  // demand_[i] is streams[stream_of_[i]]
};

// The least recently used slot that `pick` accepts, or nothing.
template <typename Pick>
std::optional<int> least_recently_used(std::span<const SlotView> slots, Pick pick) {
    std::optional<int> best;
    for (const SlotView& s : slots) {
        if (!pick(s)) continue;
        if (!best || s.last_used < slots[static_cast<std::size_t>(*best)].last_used) best = s.seq;
    }
    return best;
}

// Any thread. Whether `requests` more requests with `tokens` prompt tokens fit the queue bounds
// beside what waits already; fails with queue_full. A request alone may exceed the token bound,
// or a long prompt could never run.
struct QueueBounds {
    std::size_t max_requests = 0;
    std::size_t max_prompt_tokens = 0;
};
Result<void> fits_queue(const QueueBounds& bounds, std::size_t queued_requests,
                        std::size_t queued_tokens, std::size_t requests, std::size_t tokens);

// Why a request ends before its next step, if it does: cancelled (no error), or past its queue
// deadline (while queued) or its total deadline. Nothing while it may go on.
struct Expiry {
    bool ends = false;
    std::optional<Error> error;
};
Expiry queued_expiry(SteadyClock::time_point now, bool cancelled,
                     SteadyClock::time_point queue_deadline, SteadyClock::time_point deadline);
Expiry running_expiry(SteadyClock::time_point now, bool cancelled,
                      SteadyClock::time_point deadline);

// How a running request that outlived GenerateOptions::timeout ends: the same error whether the
// step between decodes or the abort callback inside one noticed it.
Error deadline_passed();

}  // namespace llamapp::detail
