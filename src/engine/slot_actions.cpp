// llama-server's slot actions on the engine: save a slot's sequence into the KV store, restore a
// stored one into a slot, erase a slot. They run on the decode thread while the slot is idle.
#include <algorithm>

#include "core/internals.hpp"
#include "engine/engine_core.hpp"

namespace llamapp::detail {

// Each action on a busy slot waits for the slot, ahead of the requests queued for it; at
// shutdown every slot is idle, so all that wait run then.
void EngineCore::run_slot_commands() {
    for (auto it = slot_commands_.begin(); it != slot_commands_.end();) {
        if (slots_[static_cast<std::size_t>(it->slot)].running) {
            ++it;
            continue;
        }
        auto run = std::move(it->run);
        it = slot_commands_.erase(it);
        run();
    }
}

Result<SlotSnapshot> EngineCore::save_slot(Slot& slot) {
    const auto started = Clock::now();
    if (held(slot).empty())
        return fail(ErrorCode::invalid_argument, fmt::format("slot {} holds no tokens", slot.seq),
                    "slot");
    const SequenceMemory& memory = state_.sequences;
    SlotSnapshot out{
        .slot = slot.seq, .tokens = held_copy(slot), .bytes = memory.snapshot_size(slot.seq)};
    const Persistence& p = persistence_;
    const KvNamespace ns = p.ns_for(slot.scope);
    // Taken already (a finish save, or the same tokens saved before): nothing to write.
    if (!p.store->covers(ns, held(slot), p.lookup.match)) {
        const auto kept_from = static_cast<std::int32_t>(
            memory.kept_from(slot.seq, held(slot).size(), modes_.sliding_window));
        // The store's own limits apply, not the engine's policy: the operator asked for it.
        auto ticket = p.store->reserve(ns, held_copy(slot), out.bytes, SaveReason::put, kept_from,
                                       slot.session, p.lookup.match, std::uint64_t{0});
        if (!ticket)
            return fail(ErrorCode::out_of_memory,
                        fmt::format("the KV store has no room for slot {}'s {} tokens ({} bytes): "
                                    "its quota or its writer queue is full",
                                    slot.seq, held(slot).size(), out.bytes));
        if (!memory.snapshot(slot.seq, ticket->bytes()))
            return fail(ErrorCode::internal, "llama.cpp wrote less state than it announced");
        p.store->commit(std::move(*ticket));
    }
    out.ms = ms_between(started, Clock::now());
    return out;
}

Result<void> EngineCore::wait_until_stored(std::span<const Token> tokens,
                                           const std::string& scope) const {
    persistence_.store->store().flush();
    if (!persistence_.store->covers(persistence_.ns_for(scope), tokens, persistence_.lookup.match))
        return fail(ErrorCode::io_error, "the slot's state could not be written to the KV store");
    return {};
}

std::optional<KvHit> EngineCore::fetch_whole(std::span<const Token> tokens,
                                             const std::string& scope) const {
    if (tokens.empty()) return std::nullopt;
    // A lookup serves at most all but the prompt's last token, so one token that matches
    // nothing goes after them.
    std::vector<Token> probe(tokens.begin(), tokens.end());
    probe.push_back(no_token);
    KvLookup lookup = persistence_.lookup;
    lookup.min_tokens = tokens.size();
    return persistence_.store->fetch(persistence_.ns_for(scope), probe, lookup);
}

Result<SlotSnapshot> EngineCore::restore_slot(Slot& slot, const KvHit& hit,
                                              const std::string& scope) {
    const auto started = Clock::now();
    save_before_losing(slot, 0);
    if (!slot.session.empty()) {
        sessions_.erase({slot.scope, slot.session});
        slot.session.clear();
    }
    slot.scope = scope;
    slot.last_used = started;
    if (!restore(slot, hit))
        return fail(ErrorCode::context_overflow,
                    fmt::format("slot {} cannot take the {} stored tokens: the context has no "
                                "room for them",
                                slot.seq, hit.matched_tokens));
    return SlotSnapshot{.slot = slot.seq,
                        .tokens = held_copy(slot),
                        .bytes = hit.payload ? hit.payload->size() : 0,
                        .ms = hit.load_ms + ms_between(started, Clock::now())};
}

std::size_t EngineCore::erase_slot(Slot& slot) {
    const std::size_t tokens = held(slot).size();
    if (!slot.session.empty()) {
        sessions_.erase({slot.scope, slot.session});
        slot.session.clear();
    }
    clear_sequence(slot);
    return tokens;
}

}  // namespace llamapp::detail
