#include "engine/kv_persistence.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <utility>

#include "core/log_internal.hpp"

namespace llamapp::detail {

Result<StoreSettings> make_store_settings(const Model& model, const EngineOptions& options,
                                          const ReuseModes& modes, int n_ctx_seq) {
    StoreSettings p;
    p.prefix_reuse = options.prefix_reuse;
    if (!options.kv_store) return p;
    p.policy = options.save_policy ? *options.save_policy : options.kv_store->policy();
    if (auto ok = validate(p.policy); !ok) return std::unexpected(ok.error());
    auto fingerprint = model.fingerprint();
    if (!fingerprint) return std::unexpected(fingerprint.error());
    p.store.emplace(options.kv_store);
    p.ns.model_fingerprint = std::move(*fingerprint);
    // What changes the bytes of a sequence's state: the llama.cpp build that wrote it, the KV
    // types, and flash attention (it stores V transposed or not). n_ctx only bounds what fits,
    // which the lookup checks per entry.
    const ContextOptions& c = options.context;
    p.ns.layout =
        fmt::format("llama.cpp {}; k={}; v={}; fa={}", LLAMAPP_LLAMA_COMMIT, to_string(c.type_k),
                    to_string(c.type_v), static_cast<int>(c.flash_attn));
    p.ns.adapters = "";  // no LoRA support yet: the set is always empty
    p.lookup.match = modes.trim_tail ? KvMatch::prefix : KvMatch::exact;
    p.lookup.max_entry_tokens = static_cast<std::size_t>(n_ctx_seq);
    p.lookup.sliding_window = modes.sliding_window;
    p.lookup.min_tokens = static_cast<std::size_t>(p.policy.min_restore_tokens);
    p.lookup.count_hit = false;  // counted at admission, when the engine uses it
    return p;
}

KvPersistence::KvPersistence(StoreSettings settings, SlotTable& slots, SequenceMemory& memory,
                             const Scheduler& scheduler, const ReuseModes& modes)
    : settings_(std::move(settings)),
      slots_(slots),
      memory_(memory),
      scheduler_(scheduler),
      modes_(modes) {}

// ---- any thread -----------------------------------------------------------------------------

void KvPersistence::prefetch(Pending& pending, bool refresh) const {
    const EngineRequest& req = pending.request;
    if (!settings_.store || !settings_.prefix_reuse || !req.options.reuse_prefix) return;
    KvLookup lookup = settings_.lookup;
    lookup.session = req.session;
    // The refresh runs on the decode thread when the request is about to be admitted: a save
    // committed while it queued (its conversation's previous turn, typically, saved when that
    // turn finished) may serve more than what the lookup at submit found. RAM only: no file
    // reads on this thread.
    lookup.ram_only = refresh;
    auto hit = settings_.store->fetch(settings_.ns_for(req.cache_scope), req.prompt, lookup);
    if (hit && (!pending.stored || hit->matched_tokens > pending.stored->matched_tokens))
        pending.stored = std::move(hit);
}

std::optional<KvHit> KvPersistence::fetch_whole(std::span<const Token> tokens,
                                                const std::string& scope) const {
    if (tokens.empty()) return std::nullopt;
    // A lookup serves at most all but the prompt's last token, so one token that matches
    // nothing goes after them.
    std::vector<Token> probe(tokens.begin(), tokens.end());
    probe.push_back(no_token);
    KvLookup lookup = settings_.lookup;
    lookup.min_tokens = tokens.size();
    return settings_.store->fetch(settings_.ns_for(scope), probe, lookup);
}

Result<void> KvPersistence::wait_until_stored(std::span<const Token> tokens,
                                              const std::string& scope) const {
    settings_.store->store().flush();
    if (!settings_.store->covers(settings_.ns_for(scope), tokens, settings_.lookup.match))
        return fail(ErrorCode::io_error, "the slot's state could not be written to the KV store");
    return {};
}

void KvPersistence::flush() const {
    if (settings_.store) settings_.store->store().flush();
}

// ---- decode thread --------------------------------------------------------------------------

bool KvPersistence::restore(Slot& slot, const KvHit& hit) {
    slots_.clear(slot);  // empty, so that evicting an idle sequence below never picks it
    const std::size_t matched = hit.matched_tokens;
    auto attempt = [&] {
        return memory_.restore(slot.seq, *hit.payload, hit.entry.tokens, matched);
    };
    // The restore needs free cells; idle sequences give theirs up once before it counts as
    // failed.
    bool ok = attempt() || (evict_idle() && attempt());
    if (ok) ok = memory_.window_intact(slot.seq, matched, modes_.sliding_window);
    if (!ok) {
        slots_.clear(slot);
        settings_.store->report_restore_failure(hit);
        return false;
    }
    settings_.store->record_hit(hit);
    return true;
}

bool KvPersistence::evict_idle() {
    const auto victim = scheduler_.eviction_victim(slots_.views());
    if (!victim) return false;
    Slot& s = slots_[*victim];
    save_before_losing(s, 0);
    slots_.clear(s);
    return true;
}

void KvPersistence::save_before_losing(Slot& slot, std::size_t kept) {
    const bool pending = std::exchange(slot.save_pending, false);
    if (auto reason = scheduler_.save_before_losing(slots_.held(slot).size(), kept, pending))
        save(slot, *reason, When::staged);
}

void KvPersistence::save_prefill_boundaries() {
    for (auto& s : slots_) {
        if (!s.running || s.running->save_at == 0 || slots_.held(s).size() != s.running->save_at)
            continue;
        s.running->save_at = 0;
        save(s, SaveReason::prefill);
    }
}

// After the final event, so that the copy never delays the caller; with a delay, not before the
// engine idles (the next turn of the conversation usually reuses the live sequence).
void KvPersistence::finished(Slot& slot) {
    if (!settings_.store || !settings_.policy.on_finish) return;
    if (settings_.policy.finish_save_delay.count() > 0) {
        slot.save_pending = true;
        saves_due_ = Clock::now() + settings_.policy.finish_save_delay;
    } else {
        save(slot, SaveReason::finish);
    }
}

void KvPersistence::take_deferred_saves(std::size_t most) {
    for (auto& s : slots_) {
        if (most == 0) return;
        if (!std::exchange(s.save_pending, false)) continue;
        save(s, SaveReason::finish);
        --most;
    }
}

void KvPersistence::save_at_shutdown() {
    if (!settings_.policy.on_shutdown) return;
    for (auto& s : slots_) save(s, SaveReason::shutdown);
}

std::int32_t KvPersistence::kept_from(const Slot& slot) const {
    return static_cast<std::int32_t>(
        memory_.kept_from(slot.seq, slots_.held(slot).size(), modes_.sliding_window));
}

void KvPersistence::save(Slot& slot, SaveReason reason, When when) {
    const StoreSettings& p = settings_;
    const auto held = slots_.held(slot);
    if (!p.store || stopped_ || held.size() < static_cast<std::size_t>(p.policy.min_tokens)) return;
    const KvNamespace ns = p.ns_for(slot.scope);
    if (p.store->covers(ns, held, p.lookup.match)) return;
    const std::size_t bytes = memory_.snapshot_size(slot.seq);
    if (when == When::staged && stage(slot, reason, bytes)) return;
    auto ticket = p.store->reserve(ns, slots_.held_copy(slot), bytes, reason, kept_from(slot),
                                   slot.session, p.lookup.match, p.policy.max_entry_bytes);
    if (!ticket) return;
    if (!memory_.snapshot(slot.seq, ticket->bytes())) {
        log(LogLevel::warning, "engine: the state copy of sequence {} came out short ({} bytes)",
            slot.seq, bytes);
        return;  // the ticket's reservation is released
    }
    p.store->commit(std::move(*ticket));
}

// ---- staged saves (decode thread) -------------------------------------------------------------

namespace {

// The most the staged saves and the spare buffers hold together, beside the store's own quota. A
// save on the admission path copies into a buffer that earlier saves already touched (0.2-0.4 ms
// for 2 MB) instead of the store's new memory (1.3-1.6 ms on this project's VM:
// docs/performance.md); beyond the bound states are saved directly.
constexpr std::size_t max_staged_bytes = std::size_t{64} << 20;

std::size_t total_bytes(const std::vector<Bytes>& buffers) {
    std::size_t n = 0;
    for (const auto& b : buffers) n += b.capacity();
    return n;
}

}  // namespace

bool KvPersistence::stage(Slot& slot, SaveReason reason, std::size_t bytes) {
    std::size_t staged = bytes;
    for (const auto& s : staged_) staged += s.bytes.capacity();
    if (staged > max_staged_bytes) return false;
    Bytes buffer = spare_buffer(bytes);
    buffer.resize(bytes);
    if (!memory_.snapshot(slot.seq, buffer)) {
        log(LogLevel::warning, "engine: the state copy of sequence {} came out short ({} bytes)",
            slot.seq, bytes);
        spare_.push_back(std::move(buffer));
        return true;
    }
    staged_.push_back({.scope = slot.scope,
                       .tokens = slots_.held_copy(slot),
                       .reason = reason,
                       .kept_from = kept_from(slot),
                       .session = slot.session,
                       .bytes = std::move(buffer)});
    trim_spare();
    return true;
}

// The smallest spare buffer that holds `bytes`, else a new one.
Bytes KvPersistence::spare_buffer(std::size_t bytes) {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
        if (it->capacity() >= bytes && (best == spare_.end() || it->capacity() < best->capacity()))
            best = it;
    }
    if (best == spare_.end()) {
        Bytes fresh;
        fresh.reserve(bytes);
        return fresh;
    }
    Bytes out = std::move(*best);
    spare_.erase(best);
    return out;
}

void KvPersistence::publish(Staged& staged) {
    const StoreSettings& p = settings_;
    auto ticket = p.store->reserve(
        p.ns_for(staged.scope), std::move(staged.tokens), staged.bytes.size(), staged.reason,
        staged.kept_from, std::move(staged.session), p.lookup.match, p.policy.max_entry_bytes);
    if (ticket) {
        std::copy(staged.bytes.begin(), staged.bytes.end(), ticket->bytes().begin());
        p.store->commit(std::move(*ticket));
    }
    staged.bytes.clear();
    spare_.push_back(std::move(staged.bytes));
}

// The staged saves and the spare buffers together stay within the bound; over it the largest
// spares go first, which frees the bytes with the fewest buffers.
void KvPersistence::trim_spare() {
    std::size_t held = total_bytes(spare_);
    for (const auto& s : staged_) held += s.bytes.capacity();
    std::ranges::sort(spare_, {}, &Bytes::capacity);
    while (!spare_.empty() && held > max_staged_bytes) {
        held -= spare_.back().capacity();
        spare_.pop_back();
    }
}

void KvPersistence::commit_staged() {
    if (staged_.empty()) return;  // called after every step: nothing to trim either
    for (auto& s : staged_) publish(s);
    staged_.clear();
    trim_spare();
}

void KvPersistence::commit_staged_serving(std::span<const Token> prompt) {
    if (staged_.empty()) return;
    const auto min_tokens = settings_.lookup.min_tokens;
    std::erase_if(staged_, [&](Staged& s) {
        const auto shared = std::ranges::mismatch(s.tokens, prompt).in1 - s.tokens.begin();
        if (static_cast<std::size_t>(shared) < min_tokens) return false;
        publish(s);
        return true;
    });
    trim_spare();
}

void KvPersistence::stop_saving() {
    stopped_ = true;
    staged_.clear();
    spare_.clear();
    for (auto& s : slots_) s.save_pending = false;
}

Result<SlotSnapshot> KvPersistence::put(const Slot& slot) {
    const StoreSettings& p = settings_;
    if (stopped_) return fail(ErrorCode::device_lost, "the device holding the KV cache went away");
    SlotSnapshot out{.slot = slot.seq,
                     .tokens = slots_.held_copy(slot),
                     .bytes = memory_.snapshot_size(slot.seq)};
    const KvNamespace ns = p.ns_for(slot.scope);
    // Taken already (a finish save, or the same tokens saved before): nothing to write.
    if (p.store->covers(ns, out.tokens, p.lookup.match)) return out;
    // The store's own limits apply, not the engine's policy: the operator asked for it.
    auto ticket = p.store->reserve(ns, out.tokens, out.bytes, SaveReason::put, kept_from(slot),
                                   slot.session, p.lookup.match, std::uint64_t{0});
    if (!ticket)
        return fail(ErrorCode::out_of_memory,
                    fmt::format("the KV store has no room for slot {}'s {} tokens ({} bytes): "
                                "its quota or its writer queue is full",
                                slot.seq, out.tokens.size(), out.bytes));
    if (!memory_.snapshot(slot.seq, ticket->bytes()))
        return fail(ErrorCode::internal, "llama.cpp wrote less state than it announced");
    p.store->commit(std::move(*ticket));
    return out;
}

}  // namespace llamapp::detail
