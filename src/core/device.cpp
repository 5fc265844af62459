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

std::vector<DeviceInfo> list_devices() {
    ensure_backend();
    std::vector<DeviceInfo> devices;
    for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        DeviceInfo info;
        info.name = ggml_backend_dev_name(dev);
        info.description = ggml_backend_dev_description(dev);
        switch (ggml_backend_dev_type(dev)) {
            case GGML_BACKEND_DEVICE_TYPE_CPU:
                info.type = DeviceType::cpu;
                break;
            case GGML_BACKEND_DEVICE_TYPE_GPU:
                info.type = DeviceType::gpu;
                break;
            case GGML_BACKEND_DEVICE_TYPE_IGPU:
                info.type = DeviceType::integrated_gpu;
                break;
            case GGML_BACKEND_DEVICE_TYPE_ACCEL:
                info.type = DeviceType::accelerator;
                break;
            default:
                info.type = DeviceType::other;
                break;
        }
        std::size_t free = 0, total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        info.memory_free = free;
        info.memory_total = total;
        devices.push_back(std::move(info));
    }
    return devices;
}

std::size_t offload_device_count() {
    std::size_t n = 0;
    for (const auto& d : list_devices()) {
        if (d.type == DeviceType::gpu || d.type == DeviceType::integrated_gpu) ++n;
    }
    return n;
}

}  // namespace llamapp
