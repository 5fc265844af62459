// Internal: what the engine sends back to a request (its stream pieces, its progress, its final
// event) and how a request ends. Decode thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "engine/engine_metrics.hpp"
#include "engine/kv_persistence.hpp"
#include "engine/slot_table.hpp"

namespace llamapp::detail {

class Delivery {
  public:
    using Clock = Reply::Clock;
    using LifecycleHook = std::function<void(const LifecycleEvent&)>;
    // `publish_gauges` runs before each final event: a caller who got its reply and then reads
    // stats sees its slot idle.
    Delivery(LifecycleHook hook, EngineMetrics& metrics, KvPersistence& persistence,
             std::function<void()> publish_gauges);

    // The lifecycle hook (EngineOptions::on_lifecycle); what it throws is logged and dropped.
    void notify(const LifecycleEvent& event) const;
    void notify(LifecycleStage stage, const Pending& pending) const;
    void emit(Running& running, StreamPiece piece);
    // EngineRequest::report_progress: a progress event of its own (the prompt so far).
    void emit_prompt_progress(Running& running);

    // How a request ends. A running one the engine stops (cancelled, past its deadline, failed)
    // ends its reply with `reason` and is concluded; one whose reply ended by itself (stop,
    // length) is concluded at once. Concluding frees the slot and sends the final event. A
    // queued one the engine stops sends its final event without ever holding a slot.
    void stop_running(Slot& slot, FinishReason reason, std::optional<Error> error = std::nullopt);
    void conclude_running(Slot& slot);
    void stop_queued(std::unique_ptr<Pending> pending, std::optional<Error> error);

  private:
    Progress progress_of(Running& running) const;
    // The one way a request ends: outcome metrics, the lifecycle hook, then its final event.
    void send_final(Completion completion, const Pending& pending);

    LifecycleHook hook_;
    EngineMetrics& metrics_;
    KvPersistence& persistence_;
    std::function<void()> publish_gauges_;
};

}  // namespace llamapp::detail
