// Polling for a condition another thread or process brings about.
#pragma once

#include <chrono>
#include <thread>

namespace llamapp::test {

// Polls until `pred` holds or `timeout` passes; whether it held. The timeout is what a failure
// costs, not a pass: generous, because the same tests run on lavapipe (the Vulkan job), many
// times slower than the CPU backend.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(60),
                std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
        if (pred()) return true;
        std::this_thread::sleep_for(poll);
    }
    return pred();
}

}  // namespace llamapp::test
