// CancellationToken: a shared flag one thread sets and the decoding thread observes.
#pragma once

#include <atomic>
#include <memory>

namespace llamapp {

// Copies share one flag. cancel() is safe from any thread, including signal-free callbacks;
// a running decode notices it through llama.cpp's abort callback.
class CancellationToken {
  public:
    CancellationToken() : state_(std::make_shared<State>()) {}
    void cancel() const noexcept { state_->flag.store(true, std::memory_order_release); }
    bool cancelled() const noexcept {
        for (const State* s = state_.get(); s; s = s->parent.get())
            if (s->flag.load(std::memory_order_acquire)) return true;
        return false;
    }
    // A token of its own that also reads as cancelled once this one is: cancelling the child
    // leaves this one (and its other children) untouched.
    CancellationToken child() const {
        CancellationToken t;
        t.state_->parent = state_;
        return t;
    }

  private:
    struct State {
        std::atomic<bool> flag{false};
        std::shared_ptr<const State> parent;
    };
    std::shared_ptr<State> state_;
};

}  // namespace llamapp
