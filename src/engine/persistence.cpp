// The engine's side of the KV store: lookups on the submitting thread, restores and saves on
// the decode thread (which only copies state bytes; the store's writers do the I/O).
#include <fmt/core.h>

#include <utility>

#include "core/log_internal.hpp"
#include "engine/engine_core.hpp"
#include "engine/persistence.hpp"

namespace llamapp::detail {

Result<Persistence> make_persistence(const Model& model, const EngineOptions& options,
                                     const ReuseModes& modes, int n_ctx_seq) {
    Persistence p;
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

void EngineCore::prefetch(Pending& pending, bool refresh) const {
    const EngineRequest& req = pending.request;
    if (!persistence_.store || !options_.prefix_reuse || !req.options.reuse_prefix) return;
    KvLookup lookup = persistence_.lookup;
    lookup.session = req.session;
    // The refresh runs on the decode thread when the request is about to be admitted: a save
    // committed while it queued (its conversation's previous turn, typically, saved when that
    // turn finished) may serve more than what the lookup at submit found. RAM only: no file
    // reads on this thread.
    lookup.ram_only = refresh;
    auto hit = persistence_.store->fetch(persistence_.ns_for(req.cache_scope), req.prompt, lookup);
    if (hit && (!pending.stored || hit->matched_tokens > pending.stored->matched_tokens))
        pending.stored = std::move(hit);
}

bool EngineCore::restore(Slot& slot, const KvHit& hit) {
    clear_sequence(slot);  // empty, so that freeing idle sequences below never picks it
    const std::size_t matched = hit.matched_tokens;
    auto attempt = [&] {
        return state_.sequences.restore(slot.seq, *hit.payload, hit.entry.tokens, matched);
    };
    // The restore needs free cells; idle sequences give theirs up once before it counts as
    // failed.
    bool ok = attempt() || (free_one_idle_sequence() && attempt());
    if (ok) ok = window_intact(slot, matched);
    if (!ok) {
        clear_sequence(slot);
        persistence_.store->report_restore_failure(hit);
        return false;
    }
    persistence_.store->record_hit(hit);
    return true;
}

void EngineCore::save_prefill_boundaries() {
    for (auto& s : slots_) {
        if (!s.running || s.running->save_at == 0 || held(s).size() != s.running->save_at) continue;
        s.running->save_at = 0;
        save(s, SaveReason::prefill);
    }
}

void EngineCore::save_before_losing(Slot& slot, std::size_t kept) {
    const bool pending = std::exchange(slot.save_pending, false);
    if (auto reason = scheduler_.save_before_losing(held(slot).size(), kept, pending))
        save(slot, *reason);
}

void EngineCore::take_deferred_saves() {
    for (auto& s : slots_) {
        if (std::exchange(s.save_pending, false)) save(s, SaveReason::finish);
    }
}

void EngineCore::save(Slot& slot, SaveReason reason) {
    const Persistence& p = persistence_;
    if (!p.store || held(slot).size() < static_cast<std::size_t>(p.policy.min_tokens)) return;
    const KvNamespace ns = p.ns_for(slot.scope);
    if (p.store->covers(ns, held(slot), p.lookup.match)) return;
    const SequenceMemory& memory = state_.sequences;
    const std::size_t bytes = memory.snapshot_size(slot.seq);
    const auto kept_from = static_cast<std::int32_t>(
        memory.kept_from(slot.seq, held(slot).size(), modes_.sliding_window));
    auto ticket = p.store->reserve(ns, held_copy(slot), bytes, reason, kept_from, slot.session,
                                   p.lookup.match, p.policy.max_entry_bytes);
    if (!ticket) return;
    if (!memory.snapshot(slot.seq, ticket->bytes())) {
        log(LogLevel::warning, "engine: the state copy of sequence {} came out short ({} bytes)",
            slot.seq, bytes);
        return;  // the ticket's reservation is released
    }
    p.store->commit(std::move(*ticket));
}

}  // namespace llamapp::detail
