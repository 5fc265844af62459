// Footprint: the memory a model and a context of it will take on each device, computed before
// any of it is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/context.hpp"
#include "llamapp/error.hpp"
#include "llamapp/model.hpp"

namespace llamapp {

// The name system RAM goes by in footprints and memory budgets.
inline constexpr std::string_view host_device = "RAM";

struct DeviceFootprint {
    std::string device;  // host_device, or a GPU's backend name (e.g. "CUDA0")
    std::uint64_t weights = 0;
    std::uint64_t context = 0;  // KV cache or recurrent state
    std::uint64_t compute = 0;  // compute buffers
    std::uint64_t total() const { return weights + context + compute; }
};

struct Footprint {
    std::vector<DeviceFootprint> devices;  // the host is always present

    std::uint64_t total() const;
    // Bytes on `device`, 0 when the footprint has none there.
    std::uint64_t on(std::string_view device) const;
    // Adds another's bytes device by device (a second context of the same model, say).
    Footprint& operator+=(const Footprint& other);
};

// llama.cpp's no-allocation load (common_get_device_memory_data): the model's metadata is read
// and a context is laid out with `context`'s options, and every buffer's size is reported per
// device; no tensor data is read. Calls are serialised process-wide. Mapped weights count in
// full: once a model has run, their pages are resident. Errors: those of Model::load's checks
// (the file and the options), invalid_model_file when llama.cpp cannot lay the model out.
[[nodiscard]] Result<Footprint> estimate_footprint(const std::filesystem::path& path,
                                                   const ModelOptions& model,
                                                   const ContextOptions& context);

// What `context` and its model hold now on each device, as llama.cpp accounts its buffers, in
// the shape estimate_footprint predicts (host buffers, pinned ones included, count as RAM): where
// the layers and the KV cache went, and how far the estimate was off. The thread that uses the
// context calls it.
Footprint memory_in_use(Context& context);

// llama.cpp common's fit (common_fit_params, llama-server's --fit): what `model` and `context`
// leave to llama.cpp (n_gpu_layers -1, no tensor_split, n_ctx 0) is lowered until every offload
// device keeps its margin free (ModelOptions::fit_margins), by moving layers to the CPU and, for
// n_ctx 0, choosing a context no smaller than ModelOptions::fit_min_ctx. What the options set
// explicitly stays. Nothing changes without offload devices, with split mode tensor, or where
// the fit would need to move a mixture of experts' tensors (not carried by ModelOptions yet); a
// fit that finds no placement leaves the options as they are (the load then says what does not
// fit). Errors: those of estimate_footprint. Serialised with it.
[[nodiscard]] Result<void> fit_to_free_memory(const std::filesystem::path& path,
                                              ModelOptions& model, ContextOptions& context);

// Memory the process may still take on `device`: MemAvailable for the host (the kernel's own
// estimate of what can be allocated without swapping), the backend's free memory for a GPU.
std::uint64_t available_memory(std::string_view device);

}  // namespace llamapp
