// Internal: what submitting threads and the decode thread share, and each request's channel.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "core/reply.hpp"
#include "kvstore/store_client.hpp"
#include "llamapp/engine.hpp"
#include "llamapp/request_handle.hpp"

namespace llamapp::detail {

struct Inbox;

// One request's events, written by the decode thread and read by the handle's thread.
struct RequestChannel {
    RequestChannel(std::uint64_t request_id, CancellationToken token, std::weak_ptr<Inbox> box)
        : id(request_id), cancel(std::move(token)), inbox(std::move(box)) {}

    void push(EngineEvent event);
    void push_final(Completion completion);
    void request_cancel();  // sets the token and wakes the decode thread

    const std::uint64_t id;
    const CancellationToken cancel;
    const std::weak_ptr<Inbox> inbox;

    std::mutex mutex;
    std::condition_variable ready;
    std::deque<EngineEvent> events;
    bool final_pushed = false;
    bool final_taken = false;
};

// A validated request on its way to a slot.
struct Pending {
    using Clock = Reply::Clock;
    std::uint64_t id = 0;
    EngineRequest request;
    std::shared_ptr<RequestChannel> channel;
    std::unique_ptr<Reply> reply;  // sampler built on the submitting thread
    Clock::time_point submitted;
    Clock::time_point queue_deadline = Clock::time_point::max();
    Clock::time_point deadline = Clock::time_point::max();
    std::optional<KvHit> stored;  // looked up and loaded on the submitting thread
};

struct Inbox {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::unique_ptr<Pending>> submitted;  // not yet seen by the decode thread
    std::deque<std::function<void()>> commands;      // run on the decode thread
    bool dirty = false;     // something changed: a cancel, a submit, a command
    bool accepting = true;  // false once shutdown began
    bool stop = false;      // the decode thread must exit
    // Bounds cover requests not yet in a slot (in `submitted` or the decode thread's queue).
    std::size_t queued_requests = 0;
    std::size_t queued_tokens = 0;

    void poke() {
        {
            std::lock_guard lock(mutex);
            dirty = true;
        }
        wake.notify_one();
    }
};

}  // namespace llamapp::detail
