#include "llamapp/footprint.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <span>
#include <sstream>

#include "../src/llama-ext.h"  // llama.cpp's staging API (memory breakdown), as common uses it
#include "core/context_state.hpp"
#include "core/gguf_probe.hpp"
#include "core/internals.hpp"
#include "core/llama_params.hpp"
#include "core/log_internal.hpp"
#include "fit.h"
#include "ggml-backend.h"
#include "llamapp/backend.hpp"

namespace llamapp {

namespace {

std::uint64_t meminfo_available() {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemAvailable:", 0) != 0) continue;
        std::istringstream fields(line.substr(13));
        std::uint64_t kib = 0;
        fields >> kib;
        return kib * 1024;
    }
    return 0;
}

// What common's probe load is given: the placement's model parameters and the context's, with
// the flash-attention choice Context::create makes on the same devices.
struct ProbeParams {
    detail::ModelParamsStorage storage;  // `model`'s device list and split point into it
    llama_model_params model{};
    llama_context_params context{};
};

Result<void> prepare_probe(const std::filesystem::path& path, const ModelOptions& model,
                           const ContextOptions& context, ProbeParams& out) {
    auto summary = detail::probe_gguf(path);
    if (!summary) return std::unexpected(summary.error());
    ModelInfo header;
    header.path = path;
    header.architecture = summary->architecture;
    if (auto ok = detail::validate_context_options(header, context); !ok) return ok;
    out.model = detail::model_params(model, out.storage);
    out.model.progress_callback = nullptr;
    out.context = detail::context_params(header, context);
    std::vector<std::string> descriptions;
    for (const DeviceInfo& d : detail::placement_devices(model))
        descriptions.push_back(d.description);
    detail::avoid_lavapipe_flash_attention(out.context, context, descriptions);
    return {};
}

}  // namespace

std::uint64_t Footprint::total() const {
    std::uint64_t sum = 0;
    for (const auto& d : devices) sum += d.total();
    return sum;
}

std::uint64_t Footprint::on(std::string_view device) const {
    for (const auto& d : devices)
        if (d.device == device) return d.total();
    return 0;
}

Footprint& Footprint::operator+=(const Footprint& other) {
    for (const auto& o : other.devices) {
        auto it = std::find_if(devices.begin(), devices.end(),
                               [&](const DeviceFootprint& d) { return d.device == o.device; });
        if (it == devices.end()) {
            devices.push_back(o);
            continue;
        }
        it->weights += o.weights;
        it->context += o.context;
        it->compute += o.compute;
    }
    return *this;
}

Result<Footprint> estimate_footprint(const std::filesystem::path& path, const ModelOptions& model,
                                     const ContextOptions& context) {
    ensure_backend();
    if (auto ok = detail::validate_model_options(model); !ok) return std::unexpected(ok.error());
    ProbeParams probe;
    if (auto ok = prepare_probe(path, model, context, probe); !ok)
        return std::unexpected(ok.error());
    std::vector<ggml_backend_dev_t> devices;
    std::uint32_t n_layer = 0, n_ctx_train = 0, n_expert = 0;
    common_device_memory_data_vec data;
    try {
        // GGML_LOG_LEVEL_NONE: leave llama.cpp's process-wide logger alone (patch 0003).
        detail::QuietLlamaWarnings quiet;
        data = common_get_device_memory_data(path.c_str(), &probe.model, &probe.context, devices,
                                             n_layer, n_ctx_train, n_expert, GGML_LOG_LEVEL_NONE);
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_model_file,
                    fmt::format("llama.cpp could not lay the model out: {}", e.what()),
                    path.string());
    }
    // One entry per model device, in the order of `devices`, then the host.
    if (data.size() != devices.size() + 1)
        return fail(ErrorCode::internal, "unexpected memory breakdown from llama.cpp");
    Footprint f;
    for (std::size_t i = 0; i < data.size(); ++i) {
        DeviceFootprint d;
        d.device = i < devices.size() ? std::string(ggml_backend_dev_name(devices[i]))
                                      : std::string(host_device);
        d.weights = data[i].model;
        d.context = data[i].context;
        d.compute = data[i].compute;
        f.devices.push_back(std::move(d));
    }
    return f;
}

Footprint memory_in_use(Context& context) {
    Footprint f;
    f.devices.push_back({std::string(host_device)});
    auto device_named = [&](std::string name) -> DeviceFootprint& {
        for (auto& d : f.devices)
            if (d.device == name) return d;
        return f.devices.emplace_back(DeviceFootprint{std::move(name)});
    };
    for (const auto& [buft, bytes] :
         llama_get_memory_breakdown(detail::context_state(context).ctx.get())) {
        ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
        // The CPU's own buffer types (its repacked weights) are RAM as much as host buffers are.
        const bool in_ram = ggml_backend_buft_is_host(buft) || dev == nullptr ||
                            ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
        DeviceFootprint& d = in_ram ? f.devices.front() : device_named(ggml_backend_dev_name(dev));
        d.weights += bytes.model;
        d.context += bytes.context;
        d.compute += bytes.compute;
    }
    return f;
}

Result<void> fit_to_free_memory(const std::filesystem::path& path, ModelOptions& model,
                                ContextOptions& context) {
    ensure_backend();
    if (!model.fit || model.vocab_only || model.split_mode == SplitMode::tensor) return {};
    if (auto ok = detail::validate_model_options(model); !ok) return ok;
    const std::size_t n_devices = detail::placement_device_count(model);
    // Explicit choices are the user's (llama.cpp's fit would refuse to change them anyway).
    if (n_devices == 0 || model.n_gpu_layers != -1 || !model.tensor_split.empty()) return {};
    ProbeParams probe;
    if (auto ok = prepare_probe(path, model, context, probe); !ok) return ok;
    llama_model_params& mparams = probe.model;
    llama_context_params& cparams = probe.context;
    std::vector<float> split(llama_max_devices(), 0.0f);
    std::copy(model.tensor_split.begin(), model.tensor_split.end(), split.begin());
    std::vector<llama_model_tensor_buft_override> overrides(llama_max_tensor_buft_overrides(),
                                                            {nullptr, nullptr});
    std::vector<std::size_t> margins(llama_max_devices(), std::size_t{1} << 30);
    if (model.fit_margins.size() == 1)  // one value for every device, as llama.cpp's --fit-target
        std::fill(margins.begin(), margins.end(), model.fit_margins.front());
    else
        for (std::size_t i = 0; i < model.fit_margins.size() && i < margins.size(); ++i)
            margins[i] = model.fit_margins[i];
    common_params_fit_status status;
    {
        detail::QuietLlamaWarnings quiet;
        status = common_fit_params(path.c_str(), &mparams, &cparams, split.data(), overrides.data(),
                                   margins.data(), model.fit_min_ctx, nullptr, GGML_LOG_LEVEL_NONE);
    }
    if (status == COMMON_PARAMS_FIT_STATUS_ERROR)
        return fail(ErrorCode::invalid_model_file,
                    "llama.cpp could not lay the model out to fit it", path.string());
    if (status == COMMON_PARAMS_FIT_STATUS_FAILURE) {
        detail::log(LogLevel::warning, "fit: no placement of {} keeps the devices' margins free",
                    path.filename().string());
        return {};
    }
    if (overrides.front().pattern != nullptr) {
        detail::log(
            LogLevel::warning,
            "fit: {} would fit only with its experts' tensors moved to the CPU, which is not "
            "supported yet; placing it as given",
            path.filename().string());
        return {};
    }
    model.n_gpu_layers = mparams.n_gpu_layers;
    // Layers per device, written where there are several.
    const auto shares = std::span(split).first(n_devices);
    if (std::ranges::any_of(shares, [](float f) { return f != 0.0f; }))
        model.tensor_split.assign(shares.begin(), shares.end());
    if (context.n_ctx == 0) context.n_ctx = cparams.n_ctx;
    detail::log(LogLevel::info, "fit: {} with {} layers on the devices, n_ctx {}",
                path.filename().string(),
                model.n_gpu_layers < 0 ? std::string("all") : std::to_string(model.n_gpu_layers),
                context.n_ctx);
    return {};
}

std::uint64_t available_memory(std::string_view device) {
    if (device == host_device) return meminfo_available();
    ensure_backend();
    for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (device != ggml_backend_dev_name(dev)) continue;
        std::size_t free = 0, total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        return free;
    }
    return 0;
}

}  // namespace llamapp
