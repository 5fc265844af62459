#include "ggml-backend.h"
#include "llamapp/backend.hpp"

namespace llamapp {

std::string_view to_string(DeviceType type) {
    switch (type) {
        case DeviceType::cpu:
            return "cpu";
        case DeviceType::gpu:
            return "gpu";
        case DeviceType::integrated_gpu:
            return "igpu";
        case DeviceType::accelerator:
            return "accelerator";
        case DeviceType::other:
            return "other";
    }
    return "other";
}

namespace {

DeviceType device_type(ggml_backend_dev_t dev) {
    switch (ggml_backend_dev_type(dev)) {
        case GGML_BACKEND_DEVICE_TYPE_CPU:
            return DeviceType::cpu;
        case GGML_BACKEND_DEVICE_TYPE_GPU:
            return DeviceType::gpu;
        case GGML_BACKEND_DEVICE_TYPE_IGPU:
            return DeviceType::integrated_gpu;
        case GGML_BACKEND_DEVICE_TYPE_ACCEL:
            return DeviceType::accelerator;
        default:
            return DeviceType::other;
    }
}

DeviceInfo describe(ggml_backend_dev_t dev) {
    DeviceInfo info;
    info.name = ggml_backend_dev_name(dev);
    info.description = ggml_backend_dev_description(dev);
    info.backend = ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev));
    info.type = device_type(dev);
    std::size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    info.memory_free = free;
    info.memory_total = total;
    return info;
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
    ensure_backend();
    std::vector<DeviceInfo> devices;
    for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i)
        devices.push_back(describe(ggml_backend_dev_get(i)));
    return devices;
}

// llama.cpp's default choice when a model names no devices (llama_model_load's device list):
// RPC devices first, then discrete GPUs, then integrated ones only where there is no discrete one.
std::vector<DeviceInfo> offload_devices() {
    std::vector<DeviceInfo> remote, gpus, igpus;
    for (DeviceInfo& d : list_devices()) {
        if (d.backend == "RPC")
            remote.push_back(std::move(d));
        else if (d.type == DeviceType::gpu)
            gpus.push_back(std::move(d));
        else if (d.type == DeviceType::integrated_gpu)
            igpus.push_back(std::move(d));
    }
    if (gpus.empty()) gpus = std::move(igpus);
    remote.insert(remote.end(), std::make_move_iterator(gpus.begin()),
                  std::make_move_iterator(gpus.end()));
    return remote;
}

std::size_t offload_device_count() {
    return offload_devices().size();
}

std::vector<std::string> compiled_backends() {
    ensure_backend();
    std::vector<std::string> names;
    for (std::size_t i = 0; i < ggml_backend_reg_count(); ++i)
        names.emplace_back(ggml_backend_reg_name(ggml_backend_reg_get(i)));
    return names;
}

}  // namespace llamapp
