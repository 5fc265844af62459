// CancellationToken: a shared flag one thread sets and the decoding thread observes.
#pragma once

#include <atomic>
#include <memory>

namespace llamapp {

// Copies share one flag. cancel() is safe from any thread, including signal-free callbacks;
// a running decode notices it through llama.cpp's abort callback.
class CancellationToken {
  public:
    CancellationToken() : flag_(std::make_shared<std::atomic<bool>>(false)) {}
    void cancel() const noexcept { flag_->store(true, std::memory_order_release); }
    bool cancelled() const noexcept { return flag_->load(std::memory_order_acquire); }

  private:
    std::shared_ptr<std::atomic<bool>> flag_;
};

}  // namespace llamapp
