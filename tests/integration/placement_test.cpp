// Where a model's layers and KV cache go: what llama.cpp reports holding per device, against the
// estimate, and every layer on the GPU when the build has one (LLAMAPP_BACKEND=vulkan on
// lavapipe, here).
#include <gtest/gtest.h>

#include <iostream>

#include "llamapp/backend.hpp"
#include "llamapp/footprint.hpp"
#include "support/engine_helpers.hpp"

namespace llamapp::test {
namespace {

const DeviceFootprint* find(const Footprint& f, std::string_view device) {
    for (const auto& d : f.devices)
        if (d.device == device) return &d;
    return nullptr;
}

// Every family the generator makes: attention (plain, quantized, sliding-window), recurrent and
// hybrid caches.
TEST(Placement, WhatTheContextHoldsIsWhatTheEstimateSaidDeviceByDevice) {
    set_log_level(LogLevel::none);
    for (const char* file : {"llama-tiny.gguf", "llama-tiny-q4_0.gguf", "qwen3-tiny.gguf",
                             "gemma2-tiny.gguf", "mamba-tiny.gguf", "jamba-tiny.gguf"}) {
        SCOPED_TRACE(file);
        const auto path = generated_model(file);
        ContextOptions options;
        options.n_ctx = 512;
        options.n_seq_max = 2;
        auto estimate = estimate_footprint(path, {}, options);
        ASSERT_TRUE(estimate) << estimate.error().describe();
        auto model = load_test_model(path);
        auto context = Context::create(model, options);
        ASSERT_TRUE(context) << context.error().describe();
        const Footprint used = memory_in_use(*context);

        EXPECT_EQ(used.devices.front().device, host_device);
        std::uint64_t weights = 0;
        for (const auto& d : used.devices) {
            weights += d.weights;
            const DeviceFootprint* predicted = find(*estimate, d.device);
            ASSERT_NE(predicted, nullptr) << d.device << " holds memory the estimate did not name";
            // The same layout code decides both: weights and cache to the byte. Compute buffers
            // are sized by a trial graph in each case. One exception: ggml's CPU backend repacks
            // quantized weights for its kernels into a buffer of their own, beside the whole
            // mapped file, and the estimate counts them once (the file's pages, read once for the
            // repacking, are the kernel's to reclaim; docs/performance.md has the figures).
            if (d.device == host_device) {
                EXPECT_GE(d.weights, predicted->weights);
            } else {
                EXPECT_EQ(d.weights, predicted->weights) << d.device;
            }
            EXPECT_EQ(d.context, predicted->context) << d.device;
            EXPECT_NEAR(static_cast<double>(d.compute), static_cast<double>(predicted->compute),
                        0.25 * static_cast<double>(predicted->compute) + 1.0)
                << d.device;
            std::cout << file << " " << d.device << ": weights " << d.weights << " / "
                      << predicted->weights << ", cache " << d.context << " / "
                      << predicted->context << ", compute " << d.compute << " / "
                      << predicted->compute << " (used / estimated)\n";
        }
        EXPECT_GE(static_cast<double>(weights),
                  0.95 * static_cast<double>(model.info().tensor_bytes));
        EXPECT_GT(used.total(), weights);
    }
}

TEST(Placement, EveryLayerAndTheKvCacheGoToTheGpuUnlessTheModelSaysNone) {
    const auto gpu = local_gpu();
    if (!gpu) GTEST_SKIP() << "no GPU: this build or this machine has none";
    set_log_level(LogLevel::none);
    const auto path = generated_model("llama-tiny.gguf");
    ContextOptions options;
    options.n_ctx = 512;
    {
        auto model = load_test_model(path);
        auto context = Context::create(model, options);
        ASSERT_TRUE(context) << context.error().describe();
        const Footprint used = memory_in_use(*context);
        const DeviceFootprint* on_gpu = find(used, *gpu);
        ASSERT_NE(on_gpu, nullptr);
        // All repeating layers: everything but the token embeddings, which llama.cpp keeps in RAM.
        EXPECT_GT(on_gpu->weights, used.devices.front().weights);
        EXPECT_GT(on_gpu->context, 0u);
        EXPECT_EQ(used.devices.front().context, 0u);
    }
    ModelOptions cpu_only;
    cpu_only.devices = {"none"};
    auto model = Model::load(path, cpu_only);
    ASSERT_TRUE(model) << model.error().describe();
    auto context = Context::create(*model, options);
    ASSERT_TRUE(context) << context.error().describe();
    const Footprint used = memory_in_use(*context);
    const DeviceFootprint* on_gpu = find(used, *gpu);
    EXPECT_TRUE(on_gpu == nullptr || on_gpu->weights + on_gpu->context == 0);
    EXPECT_GT(used.devices.front().context, 0u);
}

}  // namespace
}  // namespace llamapp::test
