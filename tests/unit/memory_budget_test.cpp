// Which idle models make room for a load, without a model.
#include <gtest/gtest.h>

#include "manager/memory_budget.hpp"

namespace llamapp::detail {
namespace {

using Clock = std::chrono::steady_clock;

Footprint ram(std::uint64_t bytes, std::uint64_t gpu = 0) {
    Footprint f;
    f.devices.push_back({std::string(host_device), bytes, 0, 0});
    if (gpu > 0) f.devices.push_back({"CUDA0", gpu, 0, 0});
    return f;
}

ResidentModel resident(std::string id, std::uint64_t bytes, bool idle, int used_at) {
    return {std::move(id), ram(bytes), idle, Clock::time_point{} + std::chrono::seconds(used_at)};
}

struct Case {
    const char* name;
    std::vector<ResidentModel> resident;
    std::uint64_t wanted;
    std::uint64_t wanted_gpu;
    std::size_t max_models;
    bool unload_idle;
    bool fits;
    std::vector<std::string> unload;
    std::string short_device;
};

TEST(MemoryBudget, ALoadFitsBesideTheResidentOrUnloadsTheLeastRecentlyUsedIdleOnesFirst) {
    const std::map<std::string, std::uint64_t, std::less<>> budgets{{std::string(host_device), 100},
                                                                    {"CUDA0", 50}};
    const std::vector<Case> cases = {
        {"empty, fits", {}, 100, 0, 0, false, true, {}, ""},
        {"empty, one byte too many", {}, 101, 0, 0, false, false, {}, "RAM"},
        {"beside one", {resident("a", 60, true, 1)}, 40, 0, 0, false, true, {}, ""},
        {"no room, not allowed to unload",
         {resident("a", 60, true, 1)},
         41,
         0,
         0,
         false,
         false,
         {},
         "RAM"},
        {"unloads the one idle", {resident("a", 60, true, 1)}, 41, 0, 0, true, true, {"a"}, ""},
        {"a busy model is never unloaded",
         {resident("a", 60, false, 1)},
         41,
         0,
         0,
         true,
         false,
         {},
         "RAM"},
        {"least recently used first, and no more than needed",
         {resident("new", 30, true, 9), resident("old", 30, true, 1), resident("mid", 30, true, 5)},
         30,
         0,
         0,
         true,
         true,
         {"old"},
         ""},
        {"several when one is not enough",
         {resident("new", 30, true, 9), resident("old", 30, true, 1), resident("mid", 30, true, 5)},
         65,
         0,
         0,
         true,
         true,
         {"old", "mid"},
         ""},
        {"nothing unloaded when even all idle ones are not enough",
         {resident("idle", 30, true, 1), resident("busy", 50, false, 2)},
         60,
         0,
         0,
         true,
         false,
         {},
         "RAM"},
        {"the model count is a limit of its own",
         {resident("a", 10, false, 1)},
         10,
         0,
         1,
         false,
         false,
         {},
         ""},
        {"the count makes room by unloading too",
         {resident("a", 10, true, 1)},
         10,
         0,
         1,
         true,
         true,
         {"a"},
         ""},
        {"a GPU short of room names the GPU", {}, 10, 51, 0, false, false, {}, "CUDA0"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const Footprint wanted = ram(c.wanted, c.wanted_gpu);
        const RoomDecision d =
            make_room({&budgets, &c.resident, &wanted, c.max_models, c.unload_idle});
        EXPECT_EQ(d.fits, c.fits);
        EXPECT_EQ(d.unload, c.unload);
        EXPECT_EQ(d.device, c.short_device);
    }
    Footprint elsewhere = ram(1);
    elsewhere.devices.push_back({"Vulkan0", 1, 0, 0});
    const std::vector<ResidentModel> none;
    EXPECT_EQ(make_room({&budgets, &none, &elsewhere, 0, false}).device, "Vulkan0")
        << "a device without a budget has no room";
}

TEST(MemoryBudget, ARefusalNamesTheDeviceAndTheBytesRequiredAndAvailable) {
    const std::map<std::string, std::uint64_t, std::less<>> budgets{
        {std::string(host_device), 3u << 20}};
    const std::vector<ResidentModel> others{resident("a", 1u << 20, false, 1)};
    const Footprint wanted = ram(5u << 20);
    const RoomDecision d = make_room({&budgets, &others, &wanted, 0, true});
    ASSERT_FALSE(d.fits);
    EXPECT_EQ(d.required, 5u << 20);
    EXPECT_EQ(d.available, 2u << 20);
    const Error e = room_error("big", d, 0);
    EXPECT_EQ(e.code, ErrorCode::insufficient_memory);
    EXPECT_NE(e.message.find("5.0 MiB on RAM"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("2.0 MiB are available"), std::string::npos) << e.message;
    EXPECT_NE(e.context.find("big: RAM requires 5242880 bytes, 2097152 available"),
              std::string::npos)
        << e.context;
    const Footprint small = ram(1);
    const RoomDecision count = make_room({&budgets, &others, &small, 1, false});
    EXPECT_EQ(room_error("x", count, 1).code, ErrorCode::queue_full);
}

TEST(MemoryBudget, FootprintsAddUpDeviceByDevice) {
    Footprint a = ram(10, 5);
    Footprint b;
    b.devices.push_back({std::string(host_device), 0, 3, 2});
    b.devices.push_back({"CUDA1", 7, 0, 0});
    a += b;
    EXPECT_EQ(a.on(host_device), 15u);
    EXPECT_EQ(a.on("CUDA0"), 5u);
    EXPECT_EQ(a.on("CUDA1"), 7u);
    EXPECT_EQ(a.on("Vulkan0"), 0u);
    EXPECT_EQ(a.total(), 27u);
}

}  // namespace
}  // namespace llamapp::detail
