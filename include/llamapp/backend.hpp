// Backend: process-wide llama.cpp/ggml initialisation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llamapp/error.hpp"

namespace llamapp {

// Initialises llama.cpp's backends once per process and routes their logs to llamapp's logger.
// Safe to call from many threads and many times; every llamapp entry point that needs the
// backend calls it, so embedders rarely have to.
void ensure_backend();

enum class DeviceType { cpu, gpu, integrated_gpu, accelerator, other };

struct DeviceInfo {
    std::string name;
    std::string description;
    DeviceType type = DeviceType::other;
    std::uint64_t memory_total = 0;  // bytes, 0 when the backend does not say
    std::uint64_t memory_free = 0;
};

std::string_view to_string(DeviceType type);

// Every device the compiled backends can see (the CPU is always one of them).
std::vector<DeviceInfo> list_devices();

// Number of devices that can hold model layers (GPUs and accelerators), for tensor_split.
std::size_t offload_device_count();

// llama.cpp version and commit this build uses.
std::string llama_build_info();
// The same as llama-server spells it, "b<build>-<commit>" (its system_fingerprint, build_info).
std::string llama_build_tag();

}  // namespace llamapp
