// The slot table's view for other threads (EngineStats), before and after the decode thread
// publishes.
#include "engine/slot_table.hpp"

#include <gtest/gtest.h>

#include "llamapp/engine.hpp"

namespace llamapp::detail {
namespace {

// A server asks for /slots as soon as it serves; the decode thread may not have run yet.
TEST(SlotTable, StatsListEverySlotIdleBeforeTheFirstPublish) {
    SequenceMemory memory;
    SlotTable table(memory, 3);
    EngineStats stats;
    table.stats(stats);
    EXPECT_EQ(stats.slots, 3);
    EXPECT_EQ(stats.busy_slots, 0);
    EXPECT_EQ(stats.slot_running, std::vector<bool>(3, false));
}

}  // namespace
}  // namespace llamapp::detail
