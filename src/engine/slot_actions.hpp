// Internal: llama-server's slot actions on the engine (save a slot's sequence into the KV store,
// restore a stored one into a slot, erase a slot). Each waits until its slot is idle, ahead of
// the requests queued for it, and runs on the decode thread.
#pragma once

#include <deque>
#include <functional>
#include <string>

#include "engine/kv_persistence.hpp"
#include "engine/slot_table.hpp"

namespace llamapp::detail {

class SlotActions {
  public:
    SlotActions(SlotTable& slots, KvPersistence& persistence)
        : slots_(slots), persistence_(persistence) {}

    // Decode thread: queues `run` for when slot `index` is idle, then runs what it can.
    void post(int index, std::function<void()> run);
    // Runs every action whose slot is idle. At shutdown every slot is, so all that wait run.
    void run_ready();

    // On an idle slot. The save reserves and fills a store entry; the caller waits for its write.
    Result<SlotSnapshot> save(Slot& slot);
    Result<SlotSnapshot> restore(Slot& slot, const KvHit& hit, const std::string& scope);
    std::size_t erase(Slot& slot);

  private:
    struct Waiting {
        int slot = 0;
        std::function<void()> run;
    };
    SlotTable& slots_;
    KvPersistence& persistence_;
    std::deque<Waiting> waiting_;
};

}  // namespace llamapp::detail
