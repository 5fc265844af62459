// RequestHandle: the caller's end of one engine request, a stream of events plus cancel().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "llamapp/generation.hpp"

namespace llamapp {

// Where the reused part of a prompt's KV came from.
enum class ReuseSource {
    none,        // computed from scratch
    same_slot,   // the sequence the request ran on already held it
    other_slot,  // copied from another sequence (a shared system prompt, a forked session)
    stored,      // restored from the KV store (CacheInfo::tier names the tier)
};
std::string_view to_string(ReuseSource source);

struct CacheInfo {
    int reused_tokens = 0;  // prompt tokens not computed (also in Generation::usage)
    ReuseSource source = ReuseSource::none;
    int slot = -1;     // the sequence the request ran on; -1 when it never left the queue
    std::string tier;  // source stored: the KV store tier that served the prefix ("ram", "disk")
};

struct Completion {
    std::uint64_t request_id = 0;
    Generation generation;  // text, tokens, finish reason, usage, timings, error
    CacheInfo cache;
    double queue_ms = 0;  // from submit to admission into a slot
    // Speculation (EngineOptions::speculative): tokens decoded as drafts, and how
    // many of them the sampler confirmed (each one a decode saved).
    int draft_tokens = 0;
    int draft_accepted = 0;
};

// A running request's counts and times so far (EngineRequest::report_progress).
struct Progress {
    int prompt_tokens = 0;     // the whole prompt
    int cached_tokens = 0;     // of which reused, not computed
    int processed_tokens = 0;  // of which in the KV cache so far, the reused ones included
    int completion_tokens = 0;
    double prompt_ms = 0;  // computing the prompt, so far (0 before its first decode)
    double decode_ms = 0;  // since the first sampled token
};

// One event of a request: a piece of its reply, or, last of all, its completion. A request
// that asked for progress also gets events of progress alone while its prompt is computed:
// one before the first decode and one after each chunk of the prompt.
struct EngineEvent {
    StreamPiece piece;                     // while not final; empty on a progress event
    std::optional<Progress> progress;      // report_progress: on every event but the final one
    std::optional<Completion> completion;  // set on the final event only
    bool final() const { return completion.has_value(); }
    bool prompt_progress() const {
        return progress && !completion && piece.token == no_token && piece.text.empty();
    }
};

namespace detail {
struct RequestChannel;
}

// Any thread may use a handle, one thread at a time. Destroying a handle whose request has not
// finished cancels it: a consumer that goes away frees its sequence within one decode step.
class RequestHandle {
  public:
    explicit RequestHandle(std::shared_ptr<detail::RequestChannel> channel);
    RequestHandle(RequestHandle&&) noexcept;
    RequestHandle& operator=(RequestHandle&&) noexcept;
    ~RequestHandle();

    std::uint64_t id() const;

    // Blocks for the next event; false once the final event has been returned.
    bool next(EngineEvent& event);

    enum class Wait { event, timeout, closed };
    // As next(), giving up after `timeout` (closed: the final event was already returned).
    Wait next_for(EngineEvent& event, std::chrono::milliseconds timeout);

    // Asks the engine to stop: a queued request leaves the queue, a running one stops within one
    // decode step. The final event still arrives (finish reason cancelled). Idempotent.
    void cancel();

    // Reads the remaining events and returns the completion.
    Completion wait();

  private:
    std::shared_ptr<detail::RequestChannel> channel_;
};

}  // namespace llamapp
