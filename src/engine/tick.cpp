// One scheduling step: plan the batch, decode it (shrinking it under KV pressure), sample.
#include <algorithm>

#include "core/log_internal.hpp"
#include "engine/ngram_draft.hpp"
#include "engine/scheduler.hpp"

namespace llamapp::detail {

namespace {

double seconds(Reply::Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

}  // namespace

void Scheduler::tick() {
    plan_rows();
    if (rows_.empty()) return;
    if (separate_prompt_rows_) {
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

void Scheduler::plan_rows() {
    rows_.clear();
    demand_.clear();  // reused every step: no allocation on the decode loop
    for (const Slot& s : slots_) {
        if (!s.running) continue;
        SequenceDemand d;
        d.slot = s.seq;  // also the slot's index
        d.admitted = s.running->admitted;
        d.decoding = s.running->to_decode != no_token;
        if (!d.decoding) {
            d.prefill_left = static_cast<int>(s.running->prompt().size() - s.running->next_prompt);
        }
        if (!d.decoding && d.prefill_left <= 0) continue;
        demand_.push_back(d);
    }
    if (demand_.empty()) return;
    BatchBudget budget;
    budget.max_tokens = n_batch_;
    budget.prefill_chunk = std::max(1, std::min(options_.prefill_chunk, n_batch_));
    budget.queue_depth = queue_.size();
    take_.assign(demand_.size(), 0);
    options_.strategy->plan(demand_, budget, take_);

    // Clamp whatever the strategy said to what each sequence can take and to the budget.
    int total = 0;
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        int most =
            demand_[i].decoding ? 1 : std::min(demand_[i].prefill_left, budget.prefill_chunk);
        // A prefill save needs the cache to hold exactly the boundary: the chunk stops there.
        const Running& r = *slots_[static_cast<std::size_t>(demand_[i].slot)].running;
        if (!demand_[i].decoding && r.save_at > r.next_prompt)
            most = std::min(most, static_cast<int>(r.save_at - r.next_prompt));
        int& take = take_[i];
        take = std::clamp(take, 0, std::min(most, budget.max_tokens - total));
        // Leave a rest of the prompt of at least prefill_rows_ (or none): a short last chunk
        // would take llama.cpp's slow attention path (EngineOptions::min_prefill_rows).
        const int rows = static_cast<int>(prefill_rows_);
        if (!demand_[i].decoding && rows > 0 && take > 0) {
            const int rest = demand_[i].prefill_left - take;
            if (rest > 0 && rest < rows && take - (rows - rest) >= rows) take -= rows - rest;
        }
        total += take;
    }
    if (total == 0) {
        std::fill(take_.begin(), take_.end(), 0);
        fallback_strategy_->plan(demand_, budget, take_);
    }

    // Drafts only use what the plan left of the batch, up to EngineOptions::draft_batch_rows.
    int room = n_batch_;
    int decode_rows = 0;
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        room -= take_[i];
        decode_rows += demand_[i].decoding ? take_[i] : 0;
    }
    room = std::min(room, draft_rows_ - decode_rows);
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        if (take_[i] == 0) continue;
        const int slot_index = demand_[i].slot;
        Slot& s = slots_[static_cast<std::size_t>(slot_index)];
        Running& r = *s.running;
        const std::uint64_t id = r.pending->id;
        if (demand_[i].decoding) {
            rows_.push_back(
                {slot_index, id, r.to_decode, static_cast<int>(s.cached.size()), true, true, -1});
            room -= plan_drafts(s, room);
            continue;
        }
        const std::vector<Token>& prompt = r.prompt();
        for (std::size_t k = r.next_prompt; k < r.next_prompt + static_cast<std::size_t>(take_[i]);
             ++k) {
            rows_.push_back({slot_index, id, prompt[k], static_cast<int>(k), k + 1 == prompt.size(),
                             false, -1});
        }
    }
}

int Scheduler::plan_drafts(Slot& s, int room) {
    Running& r = *s.running;
    if (options_.draft_tokens == 0 || !modes_.trim_tail || room <= 0) return 0;
    // A sliding-window cache reuses cells that have slid out of the window of the newest
    // position it holds. Drafts in the same ubatch as their lead only free cells the lead
    // itself no longer sees, so undoing them loses nothing; a call that also carries prompt rows
    // could split a lead from its drafts across ubatches.
    if (modes_.sliding_window > 0 && !separate_prompt_rows_) return 0;
    if (r.draft_wait > 0) {
        --r.draft_wait;
        return 0;
    }
    // Not past the reply's token limit (the decode row itself yields one) or the sequence's end.
    const std::size_t lead_pos = s.cached.size();
    int most = std::min(options_.draft_tokens, room);
    most = std::min(most, n_ctx_seq_ - 1 - static_cast<int>(lead_pos));
    const GenerateOptions& options = r.reply().options();
    if (options.max_tokens > 0)
        most = std::min(most, options.max_tokens - 1 - r.reply().result().usage.completion_tokens);
    if (most <= 0) return 0;
    ngram_draft(s.cached, r.to_decode, static_cast<std::size_t>(options_.draft_match),
                static_cast<std::size_t>(most), draft_);
    rows_.back().drafts = static_cast<int>(draft_.size());
    for (std::size_t k = 0; k < draft_.size(); ++k) {
        Row row{s.seq, r.pending->id, draft_[k], static_cast<int>(lead_pos + 1 + k),
                true,  true,          -1};
        row.draft = true;
        rows_.push_back(row);
    }
    return static_cast<int>(draft_.size());
}

// A row still takes part in the step: it is not a draft dropped for room, and it still belongs
// to the request it was planned for (a failure earlier in this step may have ended that
// request). Halving a batch can leave a dropped draft beside other rows, and its request must
// not be failed or rewound for their sake.
bool Scheduler::live(const Row& row) const {
    const Slot& s = slots_[static_cast<std::size_t>(row.slot)];
    return !row.dropped && s.running && s.running->pending->id == row.request;
}

void Scheduler::process_rows(std::size_t begin, std::size_t end) {
    batch_.clear();
    const Row* first = nullptr;  // the first live row, and whether every live row shares its owner
    bool single_owner = true;
    for (std::size_t i = begin; i < end; ++i) {
        Row& row = rows_[i];
        row.batch_index = -1;
        if (!live(row)) continue;
        if (!first) first = &row;
        single_owner = single_owner && row.request == first->request;
        row.batch_index = batch_.batch.n_tokens;
        batch_.add(row.token, row.pos, slots_[static_cast<std::size_t>(row.slot)].seq, row.logits);
    }
    const int n = batch_.batch.n_tokens;
    if (n == 0) return;
    // Shutdown (and the per-decode budget) interrupts any batch; a batch serving one request
    // alone also that request's cancel or deadline, so one caller cannot abort the others.
    const CancellationToken* owner_token = nullptr;
    Clock::time_point deadline = Clock::time_point::max();
    if (single_owner) {
        const Pending& owner = *slots_[static_cast<std::size_t>(first->slot)].running->pending;
        owner_token = &owner.channel->cancel;
        deadline = owner.deadline;
    }
    auto ok = state_.decode(batch_.batch, owner_token, deadline, &stop_decoding_);
    metrics_.decode_calls->inc();
    if (ok) {
        metrics_.decoded_tokens->inc(n);
        metrics_.batch_size->observe(n);
        commit_rows(begin, end);
        return;
    }
    const ErrorCode code = ok.error().code;
    if (code == ErrorCode::context_overflow) {
        metrics_.kv_pressure->inc();
        if (drop_drafts(begin, end) || free_one_idle_sequence()) return process_rows(begin, end);
        std::size_t live_rows = 0;
        for (std::size_t i = begin; i < end; ++i) live_rows += live(rows_[i]) ? 1 : 0;
        if (live_rows > 1) {
            const std::size_t mid = begin + (end - begin) / 2;
            process_rows(begin, mid);
            process_rows(mid, end);
            return;
        }
        // One token that cannot fit: only its request fails.
        for (std::size_t i = begin; i < end; ++i) {
            if (!live(rows_[i])) continue;
            Slot& s = slots_[static_cast<std::size_t>(rows_[i].slot)];
            clear_sequence(s);
            finish(s, FinishReason::error,
                   Error{ErrorCode::context_overflow,
                         "the KV cache is full: no room for this request's next token",
                         fmt::format("n_ctx={}", llama_n_ctx(state_.ctx.get()))});
        }
        return;
    }
    // Aborted (cancel, shutdown, per-decode budget, the owner's deadline) or failed: undo what
    // the call may have left in the cache. Cancelled requests are finished by the next reap;
    // others fail here.
    const bool owner_late = code == ErrorCode::timeout && Clock::now() >= deadline;
    rollback(begin, end, owner_late ? deadline_passed() : ok.error(), code != ErrorCode::cancelled);
}

void Scheduler::rollback(std::size_t begin, std::size_t end, const Error& error,
                         bool fail_requests) {
    for (std::size_t i = begin; i < end; ++i) {
        if (!live(rows_[i])) continue;
        Slot& s = slots_[static_cast<std::size_t>(rows_[i].slot)];
        if (modes_.trim_tail) {
            llama_memory_seq_rm(state_.memory(), s.seq, static_cast<llama_pos>(s.cached.size()),
                                -1);
        } else {
            // Recurrent state cannot be rewound: the request cannot continue.
            clear_sequence(s);
            fail_requests = true;
        }
        if (fail_requests) {
            if (s.running->pending->channel->cancel.cancelled())
                finish(s, FinishReason::cancelled);
            else if (error.code == ErrorCode::timeout || error.code == ErrorCode::cancelled)
                finish(s, FinishReason::cancelled, error);
            else
                finish(s, FinishReason::error, error);
        }
    }
}

bool Scheduler::drop_drafts(std::size_t begin, std::size_t end) {
    bool any = false;
    for (std::size_t i = begin; i < end; ++i) {
        Row& row = rows_[i];
        if (row.draft && !row.dropped) {
            row.dropped = true;
            row.batch_index = -1;
            any = true;
        }
    }
    return any;
}

bool Scheduler::free_one_idle_sequence() {
    // Plain cached sequences go first, then idle sessions (their next turn starts cold).
    for (bool sessions : {false, true}) {
        Slot* victim = nullptr;
        for (auto& s : slots_) {
            if (s.running || s.cached.empty() || s.session.empty() == sessions) continue;
            if (!victim || s.last_used < victim->last_used) victim = &s;
        }
        if (victim) {
            save_before_losing(*victim, 0);
            clear_sequence(*victim);
            return true;
        }
    }
    return false;
}

void Scheduler::commit_rows(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
        const Row& row = rows_[i];
        if (row.draft || row.batch_index < 0 || !live(row)) continue;  // drafts: see their lead
        Slot& s = slots_[static_cast<std::size_t>(row.slot)];
        Running& r = *s.running;
        s.cached.push_back(row.token);
        if (row.decode)
            r.to_decode = no_token;
        else
            ++r.next_prompt;
        if (!row.logits) continue;
        bool finished = sample(s, row.batch_index);
        if (row.drafts > 0) finished = accept_drafts(s, i, finished);
        if (finished) complete(s);
    }
    save_prefill_boundaries();
}

bool Scheduler::sample(Slot& s, int batch_index) {
    Running& r = *s.running;
    auto step = r.reply().advance(state_.ctx.get(), batch_index, s.cached.size(),
                                  static_cast<std::size_t>(n_ctx_seq_));
    const auto now = Clock::now();
    if (r.last_token == Clock::time_point{}) {
        metrics_.ttft->observe(seconds(now - r.pending->submitted));
        LifecycleEvent e;
        e.request_id = r.pending->id;
        e.stage = LifecycleStage::first_token;
        e.session = r.pending->request.session;
        notify(e);
    } else {
        metrics_.inter_token->observe(seconds(now - r.last_token));
    }
    r.last_token = now;
    s.last_used = now;
    emit(r, std::move(step.piece));
    if (!step.finished) r.to_decode = step.feed_back;
    return step.finished;
}

bool Scheduler::accept_drafts(Slot& s, std::size_t lead, bool finished) {
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
        s.cached.push_back(draft.token);
        r.to_decode = no_token;
        ++accepted;
        finished = sample(s, draft.batch_index);
        keep = !finished;
    }
    if (accepted < decoded)  // the cache must hold exactly `cached`
        llama_memory_seq_rm(state_.memory(), s.seq, static_cast<llama_pos>(s.cached.size()), -1);
    metrics_.draft_tokens->inc(decoded);
    metrics_.draft_accepted->inc(accepted);
    r.draft_tokens += decoded;
    r.draft_accepted += accepted;
    if (decoded > 0 && accepted == 0) {
        r.draft_wait = r.draft_backoff;
        r.draft_backoff = std::min(r.draft_backoff * 2, max_draft_backoff);
    } else if (accepted > 0) {
        r.draft_backoff = 1;
    }
    return finished;
}

}  // namespace llamapp::detail
