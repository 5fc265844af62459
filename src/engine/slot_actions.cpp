#include "engine/slot_actions.hpp"

#include <fmt/core.h>

#include "core/internals.hpp"

namespace llamapp::detail {

void SlotActions::post(int index, std::function<void()> run) {
    waiting_.push_back({index, std::move(run)});
    run_ready();
}

void SlotActions::run_ready() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (slots_[it->slot].running) {
            ++it;
            continue;
        }
        auto run = std::move(it->run);
        it = waiting_.erase(it);
        run();
    }
}

Result<SlotSnapshot> SlotActions::save(Slot& slot) {
    const auto started = Reply::Clock::now();
    if (slots_.held(slot).empty())
        return fail(ErrorCode::invalid_argument, fmt::format("slot {} holds no tokens", slot.seq),
                    "slot");
    auto out = persistence_.put(slot);
    if (out) out->ms = ms_between(started, Reply::Clock::now());
    return out;
}

Result<SlotSnapshot> SlotActions::restore(Slot& slot, const KvHit& hit, const std::string& scope) {
    const auto started = Reply::Clock::now();
    persistence_.save_before_losing(slot, 0);
    slots_.unpin(slot);
    slot.scope = scope;
    slot.last_used = started;
    if (!persistence_.restore(slot, hit))
        return fail(ErrorCode::context_overflow,
                    fmt::format("slot {} cannot take the {} stored tokens: the context has no "
                                "room for them",
                                slot.seq, hit.matched_tokens));
    return SlotSnapshot{.slot = slot.seq,
                        .tokens = slots_.held_copy(slot),
                        .bytes = hit.payload ? hit.payload->size() : 0,
                        .ms = hit.load_ms + ms_between(started, Reply::Clock::now())};
}

std::size_t SlotActions::erase(Slot& slot) {
    const std::size_t tokens = slots_.held(slot).size();
    slots_.unpin(slot);
    slots_.clear(slot);
    return tokens;
}

}  // namespace llamapp::detail
