// Internal: whether a model fits beside the resident ones, and which idle ones to unload first.
// Pure: no llama.cpp, no clock, so each rule is table-tested without a model.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/footprint.hpp"

namespace llamapp::detail {

struct ResidentModel {
    std::string id;
    Footprint footprint;
    bool idle = false;  // ready and no lease held: may be unloaded to make room
    std::chrono::steady_clock::time_point last_used;
};

struct RoomRequest {
    const std::map<std::string, std::uint64_t, std::less<>>* budgets = nullptr;
    const std::vector<ResidentModel>* resident = nullptr;  // loading, ready and unloading
    const Footprint* wanted = nullptr;
    std::size_t max_models = 0;  // 0 = no cap
    bool unload_idle = false;
};

struct RoomDecision {
    bool fits = false;
    std::vector<std::string> unload;  // least recently used first; empty unless it then fits
    // When it does not fit: the first device short of room (empty: the model count is the
    // limit), with what the model needs there and what is free there now.
    std::string device;
    std::uint64_t required = 0;
    std::uint64_t available = 0;
};

RoomDecision make_room(const RoomRequest& request);

// The insufficient_memory (or, for the count, queue_full) error a refused decision stands for.
Error room_error(const std::string& model, const RoomDecision& decision, std::size_t max_models);

}  // namespace llamapp::detail
