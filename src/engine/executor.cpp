#include "engine/executor.hpp"

#include <algorithm>

#include "core/log_internal.hpp"

namespace llamapp::detail {

namespace {

double seconds(Reply::Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

}  // namespace

Executor::Executor(ContextState& state, Scheduler& scheduler, SlotTable& slots, Drafter& drafter,
                   KvPersistence& persistence, Delivery& delivery, EngineMetrics& metrics,
                   const ReuseModes& modes)
    : state_(state),
      scheduler_(scheduler),
      slots_(slots),
      drafter_(drafter),
      persistence_(persistence),
      delivery_(delivery),
      metrics_(metrics),
      modes_(modes),
      n_ctx_seq_(static_cast<std::size_t>(state.n_ctx_seq())),
      // Where llama.cpp splits a call by sequence (sequential_split.hpp), and the padding rows
      // can be cut off again.
      pad_gaps_(!state.sequences.unified() && modes.trim_tail && modes.sliding_window == 0),
      split_(state.n_ubatch()),
      draft_kinds_(static_cast<std::size_t>(slots.size())),
      batch_(state.n_batch()) {}

void Executor::step(std::size_t queue_depth) {
    const auto start = Clock::now();
    run_step(queue_depth);
    metrics_.step_seconds->inc(seconds(Clock::now() - start));
}

void Executor::run_step(std::size_t queue_depth) {
    resume_preempted();
    plan_rows(queue_depth);
    if (rows_.empty()) return;
    if (scheduler_.separates_prompt_rows(rows_.size())) {
        // Streams' tokens first, in a call of their own (EngineOptions::separate_prompt_rows).
        const auto prompts = std::stable_partition(rows_.begin(), rows_.end(),
                                                   [](const Row& row) { return row.decode; });
        const auto split = static_cast<std::size_t>(prompts - rows_.begin());
        if (split > 0 && split < rows_.size()) {
            process_rows(0, split);
            process_rows(split, rows_.size());
            return;
        }
    }
    process_rows(0, rows_.size());
}

std::span<const StreamView> Executor::stream_views() {
    stream_views_.clear();  // reused every step: no allocation on the decode loop
    for (const Slot& s : slots_) {
        if (!s.running || s.running->preempted) continue;
        const Running& r = *s.running;
        const GenerateOptions& options = r.pending->reply->options();
        stream_views_.push_back(
            {.slot = s.seq,
             .request = r.pending->id,
             .admitted = r.admitted,
             .cached = slots_.held(s),
             .prompt = r.prompt(),
             .next_prompt = r.next_prompt,
             .to_decode = r.to_decode,
             .save_at = r.save_at,
             .draft_wait = r.draft_wait,
             .draft_max = r.pending->request.draft_max,
             .max_tokens = options.max_tokens,
             .completion_tokens = r.pending->reply->result().usage.completion_tokens});
    }
    return stream_views_;
}

void Executor::plan_rows(std::size_t queue_depth) {
    scheduler_.plan_step(stream_views(), queue_depth, plan_);
    for (int slot : plan_.waited) --slots_[slot].running->draft_wait;
    if (plan_.draft_room == 0) return;
    const auto start = Clock::now();
    fill_drafts();
    metrics_.draft_seconds->inc(seconds(Clock::now() - start));
}

// The drafter's proposals into the rows the plan left for them, in stream order while the
// step's draft room lasts; the rows nothing was proposed for leave the step.
void Executor::fill_drafts() {
    wants_.clear();
    leads_.clear();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
        const Row& row = rows_[i];
        if (row.drafts == 0) continue;
        const Slot& s = slots_[row.slot];
        wants_.push_back({.seq = s.seq,
                          .request = row.request,
                          .history = slots_.held(s),
                          .next = row.token,
                          .n_max = row.drafts,
                          .n_min = s.running->pending->request.draft_min});
        leads_.push_back(i);
    }
    if (wants_.empty()) return;
    if (proposals_.size() < wants_.size()) proposals_.resize(wants_.size());
    drafter_.propose(wants_, proposals_);
    int room = plan_.draft_room;
    std::size_t out = 0;
    std::size_t lead = 0;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
        if (lead == leads_.size() || leads_[lead] != i) {
            rows_[out++] = rows_[i];
            continue;
        }
        const Drafter::Proposal& proposal = proposals_[lead];
        const int planned = rows_[i].drafts;
        int kept = std::min(static_cast<int>(proposal.tokens.size()), room);
        if (kept < drafter_.least(wants_[lead])) kept = 0;  // cut below its n_min
        ++lead;
        room -= kept;
        rows_[i].drafts = kept;
        draft_kinds_[static_cast<std::size_t>(rows_[i].slot)] = proposal.kind;
        rows_[out++] = rows_[i];
        for (int k = 0; k < kept; ++k) {
            Row& draft = rows_[i + 1 + static_cast<std::size_t>(k)];
            draft.token = proposal.tokens[static_cast<std::size_t>(k)];
            rows_[out++] = draft;
        }
        i += static_cast<std::size_t>(planned);
    }
    rows_.resize(out);
}

// A row still takes part in the step: it is not a draft dropped for room, and it still belongs
// to the request it was planned for (a failure earlier in this step may have ended that
// request), which has not been preempted since. Halving a batch can leave a dropped draft beside
// other rows, and its request must not be failed or rewound for their sake.
bool Executor::live(const Row& row) const {
    const Slot& s = slots_[row.slot];
    return !row.dropped && s.running && !s.running->preempted &&
           s.running->pending->id == row.request;
}

// The slots between the call's sequences that get a padding row (sequential_split.hpp).
std::span<const int> Executor::gap_padding(std::size_t begin, std::size_t end) {
    if (!pad_gaps_) return {};
    call_.clear();
    int live_rows = 0;
    for (std::size_t i = begin; i < end; ++i) {
        if (!live(rows_[i])) continue;
        ++live_rows;
        const int seq = slots_[rows_[i].slot].seq;
        if (!call_.empty() && call_.back().seq == seq)
            ++call_.back().rows;
        else
            call_.push_back({.seq = seq, .rows = 1});
    }
    const SequenceMemory& memory = state_.sequences;
    return split_.padding(
        call_, [&](int seq) { return memory.size(seq) + 1 < n_ctx_seq_; },
        state_.n_batch() - live_rows);
}

void Executor::process_rows(std::size_t begin, std::size_t end) {
    batch_.clear();
    const std::span<const int> pads = gap_padding(begin, end);
    auto pad = pads.begin();
    const Row* first = nullptr;  // the first live row, and whether every live row shares its owner
    bool single_owner = true;
    bool drafts = false;
    for (std::size_t i = begin; i < end; ++i) {
        Row& row = rows_[i];
        row.batch_index = -1;
        if (!live(row)) continue;
        if (!first) first = &row;
        single_owner = single_owner && row.request == first->request;
        const int seq = slots_[row.slot].seq;
        // A padding row's token is never looked at: its cell is cut off after the call.
        for (; pad != pads.end() && *pad < seq; ++pad)
            batch_.add(0, static_cast<int>(state_.sequences.size(*pad)), *pad, false);
        row.batch_index = batch_.batch.n_tokens;
        batch_.add(row.token, row.pos, seq, row.logits);
        drafts = drafts || row.draft;
    }
    const int n = batch_.batch.n_tokens;
    if (n == 0) return;
    // Shutdown (and the per-decode budget) interrupts any batch; a batch serving one request
    // alone also that request's cancel or deadline, so one caller cannot abort the others.
    const CancellationToken* owner_token = nullptr;
    Clock::time_point deadline = Clock::time_point::max();
    if (single_owner) {
        const Pending& owner = *slots_[first->slot].running->pending;
        owner_token = &owner.channel->cancel;
        deadline = owner.deadline;
    }
    const auto start = Clock::now();
    auto ok = state_.decode(batch_.batch, owner_token, deadline, &stop_decoding_);
    metrics_.decode_seconds->inc(seconds(Clock::now() - start));
    if (drafts) metrics_.verify_seconds->inc(seconds(Clock::now() - start));
    metrics_.decode_calls->inc();
    metrics_.llama_server.count_decode(slots_.busy());
    // Padding trims wherever it is added (pad_gaps_), whatever the call did.
    for (int seq : pads) static_cast<void>(state_.sequences.rewind_to_held(seq));
    if (ok) {
        const auto padding = static_cast<double>(pads.size());
        metrics_.padding_rows->inc(padding);
        metrics_.decoded_tokens->inc(n - padding);
        metrics_.batch_size->observe(n - padding);
        follow_on_draft(begin, end);
        commit_rows(begin, end);
        return;
    }
    const ErrorCode code = ok.error().code;
    if (code == ErrorCode::device_lost) return lose_device(ok.error());
    if (code == ErrorCode::context_overflow) {
        metrics_.kv_pressure->inc();
        return relieve_pressure(begin, end);
    }
    // Aborted (cancel, shutdown, per-decode budget, the owner's deadline) or failed: undo what
    // the call may have left in the cache. Cancelled requests are finished by the next reap;
    // others fail here.
    const bool owner_late = code == ErrorCode::timeout && Clock::now() >= deadline;
    rollback(begin, end, owner_late ? deadline_passed() : ok.error(), code != ErrorCode::cancelled);
}

// Gives room the way the scheduler says (Scheduler::relieve) and decodes the rows again.
void Executor::relieve_pressure(std::size_t begin, std::size_t end) {
    Scheduler::Pressure pressure;
    for (std::size_t i = begin; i < end; ++i) {
        pressure.drafts = pressure.drafts || (rows_[i].draft && !rows_[i].dropped);
        pressure.live_rows += live(rows_[i]) ? 1 : 0;
    }
    pressure.idle_sequence = scheduler_.eviction_victim(slots_.views()).has_value();
    switch (Scheduler::relieve(pressure)) {
        case Scheduler::Relief::drop_drafts:
            drop_drafts(begin, end);
            return process_rows(begin, end);
        case Scheduler::Relief::evict_idle:
            persistence_.evict_idle();
            return process_rows(begin, end);
        case Scheduler::Relief::halve_batch: {
            const std::size_t mid = begin + (end - begin) / 2;
            process_rows(begin, mid);
            process_rows(mid, end);
            return;
        }
        case Scheduler::Relief::preempt:
            for (std::size_t i = begin; i < end; ++i) {
                if (!live(rows_[i])) continue;
                const int stuck = rows_[i].slot;
                if (preempt_for(stuck) != stuck) return process_rows(begin, end);
            }
            return;
    }
}

void Executor::rollback(std::size_t begin, std::size_t end, const Error& error,
                        bool fail_requests) {
    for (std::size_t i = begin; i < end; ++i) {
        if (!live(rows_[i])) continue;
        Slot& s = slots_[rows_[i].slot];
        if (!modes_.trim_tail || !state_.sequences.rewind_to_held(s.seq)) {
            // Recurrent state cannot be rewound: the request cannot continue.
            slots_.clear(s);
            fail_requests = true;
        }
        if (fail_requests) {
            if (s.running->pending->channel->cancel.cancelled())
                delivery_.stop_running(s, FinishReason::cancelled);
            else if (error.code == ErrorCode::timeout || error.code == ErrorCode::cancelled)
                delivery_.stop_running(s, FinishReason::cancelled, error);
            else
                delivery_.stop_running(s, FinishReason::error, error);
        }
    }
}

// Every request fails with the error and every slot forgets what it held: the cache on the lost
// device reads back as zeros, so nothing of it is saved or reused.
void Executor::lose_device(const Error& error) {
    lost_ = error;
    persistence_.stop_saving();
    for (auto& s : slots_) {
        if (s.running) delivery_.stop_running(s, FinishReason::error, error);
        slots_.clear(s);
    }
}

int Executor::preempt_for(int stuck) {
    const auto views = slots_.views();
    const int victim = scheduler_.preemption_victim(views, stuck);
    Slot& s = slots_[victim];
    if (scheduler_.resumes_after_preemption(views, victim)) {
        preempt(s);
    } else if (s.running->reply().result().usage.completion_tokens > 0) {
        delivery_.stop_running(s, FinishReason::length);  // as if its context were full
        persistence_.save_before_losing(s, 0);
        slots_.clear(s);
    } else {
        slots_.clear(s);
        delivery_.stop_running(s, FinishReason::error,
                               Error{ErrorCode::context_overflow,
                                     "the KV cache is full: no room for this request's prompt",
                                     fmt::format("n_ctx={}", state_.n_ctx())});
    }
    return victim;
}

void Executor::preempt(Slot& slot) {
    Running& r = *slot.running;
    if (r.to_decode != no_token) {  // a reply: all the sequence held, and the token to feed back
        r.resumed = slots_.held_copy(slot);
        r.resumed.push_back(std::exchange(r.to_decode, no_token));
    }  // else still computing its prompt (or what it resumed with): it starts that again
    persistence_.save_before_losing(slot, 0);
    slots_.clear(slot);
    r.next_prompt = 0;
    r.save_at = 0;
    r.preempted = true;
    metrics_.preempted->inc();
    log(LogLevel::debug,
        "engine: request {} preempted under KV pressure ({} tokens to compute again)",
        r.pending->id, r.prompt().size());
}

void Executor::resume_preempted() {
    if (!slots_.any_preempted()) return;
    scheduler_.resuming_preempted(slots_.views(), resuming_);
    for (int seq : resuming_) slots_[seq].running->preempted = false;
}

void Executor::drop_drafts(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
        Row& row = rows_[i];
        if (row.draft && !row.dropped) {
            row.dropped = true;
            row.batch_index = -1;
        }
    }
}

// A draft model decodes what the target just did, while the target's cells still end where the
// rows begin (DraftModel::decoded). Not for a request that drafts nothing, nor while one backs
// off after misses: it would pay a draft decode every step for nothing; it catches up in one
// batch when it drafts again.
void Executor::follow_on_draft(std::size_t begin, std::size_t end) {
    if (!drafter_.follows_decodes()) return;
    const auto start = Clock::now();
    decoded_.clear();
    for (std::size_t i = begin; i < end; ++i) {
        const Row& row = rows_[i];
        if (row.batch_index < 0 || !live(row)) continue;
        const Running& r = *slots_[row.slot].running;
        if (r.draft_wait > 0 || r.pending->request.draft_max == 0) continue;
        decoded_.push_back({.seq = slots_[row.slot].seq, .pos = row.pos, .token = row.token});
    }
    drafter_.decoded(decoded_);
    metrics_.draft_seconds->inc(seconds(Clock::now() - start));
}

void Executor::commit_rows(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
        const Row& row = rows_[i];
        if (row.draft || row.batch_index < 0 || !live(row)) continue;  // drafts: see their lead
        Slot& s = slots_[row.slot];
        Running& r = *s.running;
        state_.sequences.append(s.seq, row.token);
        if (row.decode) {
            r.to_decode = no_token;
        } else {
            ++r.next_prompt;
            // At the end of this step's chunk of the prompt (the last prompt token has logits);
            // nothing is looked at for a request that did not ask for progress.
            if (r.pending->request.report_progress && r.resumed.empty() &&
                (row.logits || i + 1 == end || rows_[i + 1].slot != row.slot ||
                 rows_[i + 1].decode))
                delivery_.emit_prompt_progress(r);
        }
        if (!row.logits) continue;
        bool finished = sample(s, row.batch_index);
        if (row.drafts > 0) finished = accept_drafts(s, i, finished);
        if (finished) delivery_.conclude_running(s);
    }
    persistence_.save_prefill_boundaries();
}

bool Executor::sample(Slot& s, int batch_index) {
    Running& r = *s.running;
    auto step = r.reply().advance(state_.ctx.get(), batch_index, slots_.held(s).size(), n_ctx_seq_);
    const auto now = Clock::now();
    if (r.last_token == Clock::time_point{}) {
        metrics_.ttft->observe(seconds(now - r.pending->submitted));
        delivery_.notify(LifecycleStage::first_token, *r.pending);
    } else {
        metrics_.inter_token->observe(seconds(now - r.last_token));
    }
    r.last_token = now;
    s.last_used = now;
    delivery_.emit(r, std::move(step.piece));
    if (!step.finished) r.to_decode = step.feed_back;
    return step.finished;
}

bool Executor::accept_drafts(Slot& s, std::size_t lead, bool finished) {
    Running& r = *s.running;
    int decoded = 0;
    int accepted = 0;
    bool keep = !finished;  // until the first draft the sampler did not pick
    for (int k = 1; k <= rows_[lead].drafts; ++k) {
        const Row& draft = rows_[lead + static_cast<std::size_t>(k)];
        if (draft.batch_index < 0) break;
        ++decoded;
        keep = keep && draft.token == r.to_decode;
        if (!keep) continue;
        // The sampler picked the drafted token: its KV and logits are already computed.
        state_.sequences.append(s.seq, draft.token);
        r.to_decode = no_token;
        ++accepted;
        finished = sample(s, draft.batch_index);
        keep = !finished;
    }
    if (accepted < decoded)  // the cells past what the sequence holds are drafts not taken
        // Drafts only run where the model trims (Scheduler::plan_step), so this cannot fail.
        static_cast<void>(state_.sequences.rewind_to_held(s.seq));
    drafter_.accepted(s.seq, accepted);
    metrics_.count_drafts(draft_kinds_[static_cast<std::size_t>(s.seq)], decoded, accepted);
    r.draft_tokens += decoded;
    r.draft_accepted += accepted;
    const auto next = Scheduler::after_drafts(decoded, accepted, {r.draft_wait, r.draft_backoff});
    r.draft_wait = next.wait;
    r.draft_backoff = next.backoff;
    return finished;
}

}  // namespace llamapp::detail
