// Backend: process-wide llama.cpp/ggml initialisation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
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
    std::string name;         // what ModelOptions::devices and --device take: "CPU", "RPC0"
    std::string description;  // an RPC device's is its server's host:port
    std::string backend;      // the ggml backend that drives it: "CPU", "RPC", "CUDA", "Vulkan"
    DeviceType type = DeviceType::other;
    std::uint64_t memory_total = 0;  // bytes, 0 when the backend does not say
    std::uint64_t memory_free = 0;
};

std::string_view to_string(DeviceType type);

// Every device the compiled backends can see, in llama.cpp's order (the CPU is always one of them;
// RPC devices come after the CPU here, though llama.cpp places layers on them first: see
// offload_devices()).
std::vector<DeviceInfo> list_devices();

// The devices a model's layers go to when ModelOptions::devices is empty, in the order
// ModelOptions::tensor_split and main_gpu index them: remote (RPC) devices first, then the local
// GPUs, as llama.cpp orders them.
std::vector<DeviceInfo> offload_devices();
std::size_t offload_device_count();

// The backends compiled into this build: "CPU", "RPC" and the GPU backend if any.
std::vector<std::string> compiled_backends();

// Remote devices: `llamapp rpc-server` (or llama.cpp's rpc-server) processes reached over ggml's
// RPC protocol, as "host:port". Each endpoint's devices join list_devices() and, unless a model
// names its devices, every model loaded afterwards. An endpoint that does not answer as an RPC
// server fails the call with network_error naming it, before anything is registered; one given
// twice is registered once. Thread-safe. The protocol has no authentication: reach only servers
// on a network you trust.
[[nodiscard]] Result<std::vector<DeviceInfo>> add_rpc_servers(
    std::span<const std::string> endpoints);

struct RpcServerOptions {
    std::string host = "127.0.0.1";
    int port = 50052;
    std::vector<std::string> devices;  // names from list_devices(); empty: the first GPU, else CPU
    int threads = 0;                   // CPU threads for the CPU device; 0: all cores
    std::filesystem::path cache_dir;   // where tensors sent once are kept by hash; empty: none
};

// Serves this process's devices over ggml RPC until the process ends (the call does not return
// unless the options are invalid or the port cannot be bound).
[[nodiscard]] Result<void> run_rpc_server(const RpcServerOptions& options);

// llama.cpp version and commit this build uses.
std::string llama_build_info();
// The same as llama-server spells it, "b<build>-<commit>" (its system_fingerprint, build_info).
std::string llama_build_tag();

}  // namespace llamapp
