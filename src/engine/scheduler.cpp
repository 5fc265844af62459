#include "engine/scheduler.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "core/reuse_rules.hpp"

namespace llamapp::detail {

namespace {

// The candidate with the most running neighbours (joining two runs, extending one, or starting
// a new one), the least recently used among equals.
template <typename Pick>
std::optional<int> packed_slot(std::span<const SlotView> slots, Pick pick) {
    auto running = [&](std::size_t i) { return i < slots.size() && slots[i].running; };
    std::optional<int> best;
    int best_neighbours = -1;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!pick(slots[i])) continue;
        const int neighbours = (i > 0 && running(i - 1)) + running(i + 1);
        if (neighbours > best_neighbours ||
            (neighbours == best_neighbours &&
             slots[i].last_used < slots[static_cast<std::size_t>(*best)].last_used)) {
            best = slots[i].seq;
            best_neighbours = neighbours;
        }
    }
    return best;
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {
    if (!options_.strategy) options_.strategy = decode_maximal();
}

// ---- admission ------------------------------------------------------------------------------

// How much of `from`'s cache a prompt can reuse (core/reuse_rules.hpp), within its scope only.
std::size_t Scheduler::usable_prefix(const SlotView& from, const RequestView& request) const {
    if (from.scope != request.scope) return 0;
    return reusable_prefix(from.cached, request.prompt, options_.modes.trim_tail);
}

// A request whose prompt shares a long prefix with a prompt another slot is computing right now
// waits until that part is in the cache and then copies it, instead of computing it again: a
// burst of requests with one system prompt computes it once.
bool Scheduler::worth_waiting_for_donor(std::span<const SlotView> slots,
                                        const RequestView& request) const {
    const ReuseModes& modes = options_.modes;
    if (!options_.prefix_reuse || !request.reuse) return false;
    if (!modes.copy_prefix && !(modes.copy_whole && modes.trim_tail)) return false;
    std::size_t now = request.stored_tokens;
    std::size_t soon = 0;
    for (const SlotView& s : slots) {
        now = std::max(now, usable_prefix(s, request));
        if (!s.running || s.prompt_cached >= s.prompt.size() || s.scope != request.scope) continue;
        const std::size_t n = std::min(
            {common_prefix(s.prompt, request.prompt), request.prompt.size() - 1, s.prompt.size()});
        soon = std::max(soon, n);
    }
    // Once the shared part is long enough to matter, wait for all of it: one more step costs
    // less than computing the rest a second time.
    const auto enough =
        static_cast<std::size_t>(std::max(options_.min_adopt_tokens, min_wait_for_donor_tokens));
    return soon > now && soon >= enough;
}

// The slot the request names, once idle (a session there gives it up); a session's own slot;
// else the idle slot whose cache serves the prompt best, when it covers at least
// min_prefix_similarity of it; else the least recently used idle one. Without an idle unpinned
// slot the least recently used idle session gives its slot up (`reclaims`).
std::optional<int> Scheduler::choose_slot(std::span<const SlotView> slots,
                                          const RequestView& request, bool& reclaims) const {
    reclaims = false;
    if (request.slot >= 0) {
        const SlotView& named = slots[static_cast<std::size_t>(request.slot)];
        if (named.running) return std::nullopt;
        reclaims = !named.session.empty();
        return named.seq;
    }
    if (!request.session.empty()) {
        for (const SlotView& s : slots) {
            if (s.session != request.session || s.scope != request.scope) continue;
            if (s.running) return std::nullopt;  // waits for its own turn to finish
            return s.seq;
        }
    }
    auto free = [](const SlotView& s) { return !s.running && s.session.empty(); };
    std::optional<int> reclaimed;
    if (!std::any_of(slots.begin(), slots.end(), free)) {
        reclaimed = least_recently_used(
            slots, [](const SlotView& s) { return !s.running && !s.session.empty(); });
        if (!reclaimed) return std::nullopt;
        reclaims = true;
    }
    auto candidate = [&](const SlotView& s) { return reclaimed ? s.seq == *reclaimed : free(s); };
    if (options_.prefix_reuse && request.reuse) {
        std::optional<int> best_slot;
        std::size_t best = 0;
        for (const SlotView& s : slots) {
            if (!candidate(s)) continue;
            const std::size_t n = usable_prefix(s, request);
            if (n > best) {
                best = n;
                best_slot = s.seq;
            }
        }
        if (best > 0 && static_cast<double>(best) >= options_.min_prefix_similarity *
                                                         static_cast<double>(request.prompt.size()))
            return best_slot;
    }
    if (options_.cache_per_slot) return packed_slot(slots, candidate);
    return least_recently_used(slots, candidate);
}

// What the chosen slot starts from: its own prefix, a longer one copied from another slot, or a
// stored entry that beats both, each by at least min_adopt_tokens.
void Scheduler::choose_reuse(std::span<const SlotView> slots, const RequestView& request,
                             Admission& admission) const {
    const ReuseModes& modes = options_.modes;
    const bool reuse = options_.prefix_reuse && request.reuse;
    if (!reuse) return;
    const SlotView& slot = slots[static_cast<std::size_t>(admission.slot)];
    const std::size_t own = usable_prefix(slot, request);
    const auto margin = static_cast<std::size_t>(std::max(1, options_.min_adopt_tokens));
    std::optional<int> donor;
    std::size_t donated = 0;
    if (modes.copy_prefix || modes.copy_whole) {
        for (const SlotView& other : slots) {
            if (other.seq == slot.seq || other.cached.empty()) continue;
            std::size_t n = usable_prefix(other, request);
            // Without partial copies a whole sequence is copied, then trimmed where possible.
            if (!modes.copy_prefix && !modes.trim_tail && n != other.cached.size()) n = 0;
            if (n > donated) {
                donated = n;
                donor = other.seq;
            }
        }
        if (donated < own + margin) donor.reset();
    }
    // A stored prefix is restored only when it beats what live sequences offer.
    const std::size_t live = std::max(own, donor ? donated : 0);
    if (request.stored_tokens > 0 && request.stored_tokens >= live + margin) {
        admission.source = ReuseSource::stored;
        admission.reuse_tokens = request.stored_tokens;
    } else if (donor) {
        admission.source = ReuseSource::other_slot;
        admission.donor = *donor;
        admission.reuse_tokens = donated;
    } else if (own > 0) {
        admission.source = ReuseSource::same_slot;
        admission.reuse_tokens = own;
    }
}

std::optional<Admission> Scheduler::admit(std::span<const SlotView> slots,
                                          const RequestView& request) const {
    if (std::none_of(slots.begin(), slots.end(), [](const SlotView& s) { return !s.running; }))
        return std::nullopt;
    if (worth_waiting_for_donor(slots, request)) return std::nullopt;
    Admission admission;
    const auto slot = choose_slot(slots, request, admission.reclaims_session);
    if (!slot) return std::nullopt;
    admission.slot = *slot;
    choose_reuse(slots, request, admission);
    return admission;
}

std::optional<int> Scheduler::eviction_victim(std::span<const SlotView> slots) const {
    for (bool sessions : {false, true}) {
        auto victim = least_recently_used(slots, [&](const SlotView& s) {
            return !s.running && !s.cached.empty() && s.session.empty() != sessions;
        });
        if (victim) return victim;
    }
    return std::nullopt;
}

int Scheduler::preemption_victim(std::span<const SlotView> slots, int stuck) const {
    int longest = stuck;
    std::size_t most = slots[static_cast<std::size_t>(stuck)].cached.size();
    for (const SlotView& s : slots)
        if (s.running && s.cached.size() > most) {
            most = s.cached.size();
            longest = s.seq;
        }
    return longest;
}

bool Scheduler::resumes_after_preemption(std::span<const SlotView> slots, int victim) const {
    const SlotView& y = slots[static_cast<std::size_t>(victim)];
    if (options_.n_cells != options_.n_ctx_seq || y.most_cells == 0 ||
        y.most_cells > static_cast<std::size_t>(options_.n_ctx_seq))
        return false;
    return std::any_of(slots.begin(), slots.end(), [&](const SlotView& other) {
        return other.seq != victim && other.running && !other.preempted;
    });
}

void Scheduler::resuming_preempted(std::span<const SlotView> slots, std::vector<int>& out) const {
    out.clear();
    std::size_t held = 0;
    bool others = false;
    for (const SlotView& s : slots) {
        if (!s.running) continue;
        if (s.preempted)
            out.push_back(s.seq);
        else
            held += s.cached.size();
        others = others || !s.preempted;
    }
    std::sort(out.begin(), out.end(), [&](int a, int b) {
        return slots[static_cast<std::size_t>(a)].admitted <
               slots[static_cast<std::size_t>(b)].admitted;
    });
    std::size_t starting = 0;
    for (int seq : out) {
        const std::size_t need = slots[static_cast<std::size_t>(seq)].cells_to_finish;
        if (others && held + need > static_cast<std::size_t>(options_.n_cells)) break;
        held += need;
        others = true;
        ++starting;
    }
    out.resize(starting);
}

std::optional<int> Scheduler::fork_target(std::span<const SlotView> slots, int source) const {
    for (bool sessions : {false, true}) {
        auto target = least_recently_used(slots, [&](const SlotView& s) {
            return s.seq != source && !s.running && s.session.empty() != sessions;
        });
        if (target) return target;
    }
    return std::nullopt;
}

// ---- steps ----------------------------------------------------------------------------------

// The strategy's split of the batch (demand_ → take_), clamped to what each stream can take and
// to the budget; decode_maximal's when the strategy gives nothing to anybody.
void Scheduler::split_batch(std::span<const StreamView> streams, std::size_t queue_depth) {
    BatchBudget budget;
    budget.n_batch = options_.n_batch;
    budget.prefill_chunk = std::max(1, std::min(options_.prefill_chunk, options_.n_batch));
    budget.queue_depth = queue_depth;
    take_.assign(demand_.size(), 0);
    options_.strategy->plan(demand_, budget, take_);

    int total = 0;
    const int rows = static_cast<int>(options_.prefill_rows);
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        const SequenceDemand& d = demand_[i];
        const StreamView& s = streams[stream_of_[i]];
        int most = d.decoding ? 1 : std::min(d.prefill_left, budget.prefill_chunk);
        // A prefill save needs the cache to hold exactly the boundary: the chunk stops there.
        if (!d.decoding && s.save_at > s.next_prompt)
            most = std::min(most, static_cast<int>(s.save_at - s.next_prompt));
        int& take = take_[i];
        take = std::clamp(take, 0, std::min(most, budget.n_batch - total));
        // Leave a rest of the prompt of at least prefill_rows (or none): a short last chunk
        // would take llama.cpp's slow attention path (EngineOptions::min_prefill_rows).
        if (!d.decoding && rows > 0 && take > 0) {
            const int rest = d.prefill_left - take;
            if (rest > 0 && rest < rows && take - (rows - rest) >= rows) take -= rows - rest;
        }
        total += take;
    }
    if (total == 0) {
        std::fill(take_.begin(), take_.end(), 0);
        fallback_->plan(demand_, budget, take_);
    }
}

// How many drafts may follow a stream's decode row, within `room` rows; nothing while the
// stream still waits after missed drafts (`waits`, and the step uses one of its waits up).
int Scheduler::drafts_allowed(const StreamView& s, int room, bool& waits) const {
    waits = false;
    const ReuseModes& modes = options_.modes;
    const int draft_max = s.draft_max >= 0 ? s.draft_max : options_.draft_tokens;
    if (options_.draft_tokens == 0 || draft_max == 0 || !modes.trim_tail || room <= 0) return 0;
    // A sliding-window cache reuses cells that have slid out of the window of the newest
    // position it holds. Drafts in the same ubatch as their lead only free cells the lead
    // itself no longer sees, so undoing them loses nothing; a call that also carries prompt rows
    // could split a lead from its drafts across ubatches.
    if (modes.sliding_window > 0 && !options_.separate_prompt_rows) return 0;
    if (s.draft_wait > 0) {
        waits = true;
        return 0;
    }
    // Not past the reply's token limit (the decode row itself yields one) or the sequence's end.
    int most = std::min(draft_max, room);
    most = std::min(most, options_.n_ctx_seq - 1 - static_cast<int>(s.cached.size()));
    if (s.max_tokens > 0) most = std::min(most, s.max_tokens - 1 - s.completion_tokens);
    return std::max(0, most);
}

// Appends the decode row of `s` and rows for its drafts (at most `room`).
void Scheduler::add_decode_rows(const StreamView& s, int room, StepPlan& plan) {
    const int lead_pos = static_cast<int>(s.cached.size());
    plan.rows.push_back({.slot = s.slot,
                         .request = s.request,
                         .token = s.to_decode,
                         .pos = lead_pos,
                         .logits = true,
                         .decode = true});
    bool waits = false;
    const int most = drafts_allowed(s, room, waits);
    if (waits) plan.waited.push_back(s.slot);
    if (most <= 0) return;
    plan.rows.back().drafts = most;
    for (int k = 0; k < most; ++k) {
        plan.rows.push_back({.slot = s.slot,
                             .request = s.request,
                             .pos = lead_pos + 1 + k,
                             .logits = true,
                             .decode = true,
                             .draft = true});
    }
}

void Scheduler::plan_step(std::span<const StreamView> streams, std::size_t queue_depth,
                          StepPlan& plan) {
    plan.clear();
    demand_.clear();  // reused every step: no allocation on the decode loop
    stream_of_.clear();
    for (std::size_t i = 0; i < streams.size(); ++i) {
        const StreamView& s = streams[i];
        SequenceDemand d;
        d.slot = s.slot;
        d.admitted = s.admitted;
        d.decoding = s.to_decode != no_token;
        if (!d.decoding) d.prefill_left = static_cast<int>(s.prompt.size() - s.next_prompt);
        if (!d.decoding && d.prefill_left <= 0) continue;
        demand_.push_back(d);
        stream_of_.push_back(i);
    }
    if (demand_.empty()) return;
    split_batch(streams, queue_depth);

    // Drafts only use what the plan left of the batch, up to EngineOptions::draft_batch_rows.
    int room = options_.n_batch;
    int decode_rows = 0;
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        room -= take_[i];
        decode_rows += demand_[i].decoding ? take_[i] : 0;
    }
    // Beside other streams the rows rule bounds them all; a stream decoding alone may take all
    // the drafts it asked for.
    room =
        std::min(room, (decode_rows == 1 ? std::max(options_.draft_rows, options_.lone_draft_rows)
                                         : options_.draft_rows) -
                           decode_rows);
    if (options_.cache_per_slot && decode_rows > 1) room = 0;
    plan.draft_room = std::max(0, room);
    for (std::size_t i = 0; i < demand_.size(); ++i) {
        if (take_[i] == 0) continue;
        const StreamView& s = streams[stream_of_[i]];
        if (demand_[i].decoding) {
            add_decode_rows(s, room, plan);
            continue;
        }
        const std::size_t end = s.next_prompt + static_cast<std::size_t>(take_[i]);
        for (std::size_t k = s.next_prompt; k < end; ++k) {
            plan.rows.push_back({.slot = s.slot,
                                 .request = s.request,
                                 .token = s.prompt[k],
                                 .pos = static_cast<int>(k),
                                 .logits = k + 1 == s.prompt.size()});
        }
    }
}

Scheduler::Relief Scheduler::relieve(const Pressure& pressure) {
    if (pressure.drafts) return Relief::drop_drafts;
    if (pressure.idle_sequence) return Relief::evict_idle;
    if (pressure.live_rows > 1) return Relief::halve_batch;
    return Relief::preempt;
}

Scheduler::DraftBackoff Scheduler::after_drafts(int decoded, int accepted, DraftBackoff now) {
    if (decoded > 0 && accepted == 0)
        return {now.backoff, std::min(now.backoff * 2, max_draft_backoff)};
    if (accepted > 0) return {now.wait, 1};
    return now;
}

// ---- queue ----------------------------------------------------------------------------------

std::optional<std::size_t> Scheduler::widened_reuse(std::size_t prompt_size,
                                                    std::size_t reused) const {
    const std::size_t rows = options_.prefill_rows;
    if (rows == 0 || reused < options_.widen_from_depth || !options_.modes.trim_tail ||
        reused >= prompt_size)
        return std::nullopt;
    const std::size_t left = prompt_size - reused;
    if (left < 2 || left >= rows) return std::nullopt;
    return prompt_size - rows;
}

Result<void> fits_queue(const QueueBounds& bounds, std::size_t queued_requests,
                        std::size_t queued_tokens, std::size_t requests, std::size_t tokens) {
    if (queued_requests + requests > bounds.max_requests) {
        return fail(ErrorCode::queue_full, "too many requests are waiting",
                    fmt::format("max_queued_requests={}", bounds.max_requests));
    }
    if (queued_tokens > 0 && queued_tokens + tokens > bounds.max_prompt_tokens) {
        return fail(ErrorCode::queue_full, "too many prompt tokens are waiting",
                    fmt::format("max_queued_tokens={}", bounds.max_prompt_tokens));
    }
    return {};
}

Expiry queued_expiry(SteadyClock::time_point now, bool cancelled,
                     SteadyClock::time_point queue_deadline, SteadyClock::time_point deadline) {
    if (cancelled) return {true, std::nullopt};
    if (now > queue_deadline) {
        return {true, Error{ErrorCode::timeout, "the request waited in the queue past its deadline",
                            "queue_timeout"}};
    }
    if (now > deadline) {
        return {true, Error{ErrorCode::timeout, "the request passed its deadline in the queue",
                            "timeout"}};
    }
    return {};
}

Expiry running_expiry(SteadyClock::time_point now, bool cancelled,
                      SteadyClock::time_point deadline) {
    if (cancelled) return {true, std::nullopt};
    if (now > deadline) return {true, deadline_passed()};
    return {};
}

Error deadline_passed() {
    return Error{ErrorCode::timeout, "generation deadline passed", "timeout"};
}

// ---- KV store saves ---------------------------------------------------------------------------

// A long cold prompt is saved `boundary_trim_tokens` before its end, aligned down, so that an
// extended or re-rendered prompt still lands on the entry. Where any prefix of an entry
// restores, the whole prompt is saved instead, once its first token is out: the copy then never
// delays the first token.
std::size_t Scheduler::prefill_save_at(std::size_t prompt, std::size_t reused) const {
    if (!options_.saves) return 0;
    const SavePolicy& p = *options_.saves;
    if (!p.on_prefill || prompt < reused ||
        prompt - reused < static_cast<std::size_t>(p.prefill_min_tokens))
        return 0;
    if (options_.any_prefix_restores) return prompt;
    const auto trim = static_cast<std::size_t>(p.boundary_trim_tokens);
    const auto align = static_cast<std::size_t>(p.boundary_align_tokens);
    if (prompt <= trim) return 0;
    const std::size_t at = (prompt - trim) / align * align;
    return at > reused && at >= static_cast<std::size_t>(p.min_tokens) ? at : 0;
}

// Only the tail past `kept` is lost; the rest stays live and is saved with the next request's
// state. A tail shorter than min_tokens costs less to recompute than a copy of the whole
// sequence (a conversation's next turn re-renders the last reply a little differently and lands
// here on every turn).
std::optional<SaveReason> Scheduler::save_before_losing(std::size_t cached, std::size_t kept,
                                                        bool finish_pending) const {
    if (!options_.saves) return std::nullopt;
    const auto tail = static_cast<std::size_t>(options_.saves->min_tokens);
    if (cached <= kept || (kept > 0 && cached - kept < tail)) return std::nullopt;
    if (finish_pending) return SaveReason::finish;
    if (options_.saves->on_evict) return SaveReason::evict;
    return std::nullopt;
}

}  // namespace llamapp::detail
