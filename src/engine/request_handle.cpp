#include "llamapp/request_handle.hpp"

#include "engine/inbox.hpp"

namespace llamapp {

std::string_view to_string(ReuseSource source) {
    switch (source) {
        case ReuseSource::none:
            return "none";
        case ReuseSource::same_slot:
            return "same_slot";
        case ReuseSource::stored:
            return "stored";
        case ReuseSource::other_slot:
            return "other_slot";
    }
    return "none";
}

namespace detail {

void RequestChannel::push(EngineEvent event) {
    {
        std::lock_guard lock(mutex);
        if (final_pushed) return;  // exactly one final event, nothing after it
        final_pushed = event.final();
        events.push_back(std::move(event));
    }
    ready.notify_one();
}

void RequestChannel::push_final(Completion completion) {
    {
        std::lock_guard lock(mutex);
        if (final_pushed) return;
        final_pushed = true;
        // Built in place: moving a whole event through a temporary trips g++ 12's
        // -Wmaybe-uninitialized on the empty optional log-probs under ASan.
        EngineEvent& e = events.emplace_back();
        e.completion = std::move(completion);
    }
    ready.notify_one();
}

void RequestChannel::request_cancel() {
    cancel.cancel();
    if (auto box = inbox.lock()) box->poke();
}

}  // namespace detail

RequestHandle::RequestHandle(std::shared_ptr<detail::RequestChannel> channel)
    : channel_(std::move(channel)) {}
RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;
RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
    if (this != &other) {
        if (channel_) cancel();
        channel_ = std::move(other.channel_);
    }
    return *this;
}
RequestHandle::~RequestHandle() {
    if (channel_) cancel();
}

std::uint64_t RequestHandle::id() const {
    return channel_ ? channel_->id : 0;
}

void RequestHandle::cancel() {
    if (!channel_) return;
    {
        std::lock_guard lock(channel_->mutex);
        if (channel_->final_pushed) return;  // nothing left to stop
    }
    channel_->request_cancel();
}

namespace {

// Pops the next event; the caller holds the channel's lock and has seen one waiting.
void take(detail::RequestChannel& c, EngineEvent& event) {
    event = std::move(c.events.front());
    c.events.pop_front();
    if (event.final()) c.final_taken = true;
}

}  // namespace

RequestHandle::Wait RequestHandle::next_for(EngineEvent& event, std::chrono::milliseconds timeout) {
    if (!channel_) return Wait::closed;
    auto& c = *channel_;
    std::unique_lock lock(c.mutex);
    if (c.final_taken) return Wait::closed;
    if (!c.ready.wait_for(lock, timeout, [&] { return !c.events.empty(); })) return Wait::timeout;
    take(c, event);
    return Wait::event;
}

bool RequestHandle::next(EngineEvent& event) {
    if (!channel_) return false;
    auto& c = *channel_;
    std::unique_lock lock(c.mutex);
    if (c.final_taken) return false;
    c.ready.wait(lock, [&] { return !c.events.empty(); });
    take(c, event);
    return true;
}

Completion RequestHandle::wait() {
    EngineEvent event;
    while (next(event)) {
        if (event.final()) return std::move(*event.completion);
    }
    Completion none;
    none.request_id = id();
    none.generation.finish_reason = FinishReason::error;
    none.generation.error = Error{
        ErrorCode::unsupported_operation, "the final event was already read from this handle", {}};
    return none;
}

}  // namespace llamapp
