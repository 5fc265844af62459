#include "manager/memory_budget.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace llamapp::detail {

namespace {

struct Ledger {
    std::map<std::string, std::uint64_t, std::less<>> used;
    std::size_t count = 0;

    std::uint64_t free_on(const RoomRequest& r, const std::string& device) const {
        auto b = r.budgets->find(device);
        const std::uint64_t budget = b == r.budgets->end() ? 0 : b->second;
        auto u = used.find(device);
        const std::uint64_t taken = u == used.end() ? 0 : u->second;
        return taken >= budget ? 0 : budget - taken;
    }

    void add(const Footprint& f, int sign) {
        for (const auto& d : f.devices) {
            std::uint64_t& u = used[d.device];
            u = sign > 0 ? u + d.total() : (u >= d.total() ? u - d.total() : 0);
        }
        count = sign > 0 ? count + 1 : count - 1;
    }

    // The first device without room for `wanted`, or "" when every device has room.
    const DeviceFootprint* short_device(const RoomRequest& r) const {
        for (const auto& d : r.wanted->devices)
            if (d.total() > free_on(r, d.device)) return &d;
        return nullptr;
    }

    bool fits(const RoomRequest& r) const {
        return short_device(r) == nullptr && (r.max_models == 0 || count < r.max_models);
    }
};

}  // namespace

RoomDecision make_room(const RoomRequest& r) {
    Ledger ledger;
    for (const auto& m : *r.resident) ledger.add(m.footprint, +1);
    RoomDecision d;
    if (const DeviceFootprint* shortage = ledger.short_device(r)) {
        d.device = shortage->device;
        d.required = shortage->total();
        d.available = ledger.free_on(r, shortage->device);
    }
    if (ledger.fits(r)) {
        d = {};
        d.fits = true;
        return d;
    }
    if (!r.unload_idle) return d;
    std::vector<const ResidentModel*> idle;
    for (const auto& m : *r.resident)
        if (m.idle) idle.push_back(&m);
    std::sort(idle.begin(), idle.end(), [](const ResidentModel* a, const ResidentModel* b) {
        return a->last_used < b->last_used;
    });
    std::vector<std::string> unload;
    for (const ResidentModel* m : idle) {
        ledger.add(m->footprint, -1);
        unload.push_back(m->id);
        if (!ledger.fits(r)) continue;
        RoomDecision ok;
        ok.fits = true;
        ok.unload = std::move(unload);
        return ok;
    }
    return d;  // even with every idle model gone it would not fit: unload nothing
}

Error room_error(const std::string& model, const RoomDecision& d, std::size_t max_models) {
    if (d.device.empty()) {
        return Error{
            ErrorCode::queue_full,
            fmt::format("{} models are resident, the most allowed, and none is idle", max_models),
            model};
    }
    constexpr double mib = 1 << 20;
    return Error{ErrorCode::insufficient_memory,
                 fmt::format("the model needs {:.1f} MiB on {}, {:.1f} MiB are available",
                             d.required / mib, d.device, d.available / mib),
                 fmt::format("{}: {} requires {} bytes, {} available", model, d.device, d.required,
                             d.available)};
}

}  // namespace llamapp::detail
