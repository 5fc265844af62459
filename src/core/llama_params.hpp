// Internal: options → llama.cpp parameters, shared by loading and by the memory estimate, so
// that an estimate describes exactly what a load would allocate.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "llama.h"
#include "llamapp/backend.hpp"
#include "llamapp/context.hpp"
#include "llamapp/model.hpp"

namespace llamapp::detail {

[[nodiscard]] Result<void> validate_model_options(const ModelOptions& options);

// What llama_model_params points into: alive for as long as the parameters are used.
struct ModelParamsStorage {
    std::vector<float> split;
    std::vector<ggml_backend_dev_t> devices;  // null-terminated
};
// Call validate_model_options first: the device names are taken as valid.
llama_model_params model_params(const ModelOptions& options, ModelParamsStorage& storage);

// How many devices the options place layers on: the devices named ("none": 0), else
// offload_devices().
std::size_t placement_device_count(const ModelOptions& options);

// The devices the options place layers on: those named, else offload_devices(); none when the
// model stays on the CPU.
std::vector<DeviceInfo> placement_devices(const ModelOptions& options);

// The host:port of every RPC server the options place layers on (by name, or through llama.cpp's
// default list).
std::vector<std::string> rpc_endpoints(const ModelOptions& options);

// Mesa's lavapipe (Vulkan on the CPU; Debian 12 ships 22.3) crashes the process in ggml-vulkan's
// flash-attention shader once two sequences share a decode, as older Mesa shader compilers are
// known to do with these shaders. So flash attention left to llama.cpp (`automatic`) is turned
// off where layers are on it (`descriptions`: the devices' ggml descriptions).
void avoid_lavapipe_flash_attention(llama_context_params& params, const ContextOptions& options,
                                    std::span<const std::string> descriptions);

// `info` may be partial (only what the GGUF header says): checks that need more are skipped.
[[nodiscard]] Result<void> validate_context_options(const ModelInfo& info,
                                                    const ContextOptions& options);
llama_context_params context_params(const ModelInfo& info, const ContextOptions& options);

}  // namespace llamapp::detail
