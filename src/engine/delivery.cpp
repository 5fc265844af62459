#include "engine/delivery.hpp"

#include "core/log_internal.hpp"

namespace llamapp::detail {

Delivery::Delivery(LifecycleHook hook, EngineMetrics& metrics, KvPersistence& persistence,
                   std::function<void()> publish_gauges)
    : hook_(std::move(hook)),
      metrics_(metrics),
      persistence_(persistence),
      publish_gauges_(std::move(publish_gauges)) {}

void Delivery::notify(const LifecycleEvent& event) const {
    if (!hook_) return;
    try {
        hook_(event);
    } catch (...) {
        log(LogLevel::warning, "engine: a lifecycle callback threw; ignored");
    }
}

void Delivery::notify(LifecycleStage stage, const Pending& pending) const {
    LifecycleEvent e;
    e.request_id = pending.id;
    e.stage = stage;
    e.session = pending.request.session;
    notify(e);
}

void Delivery::emit(Running& running, StreamPiece piece) {
    EngineEvent event;
    event.piece = std::move(piece);
    if (running.pending->request.report_progress) event.progress = progress_of(running);
    running.pending->channel->push(std::move(event));
}

void Delivery::emit_prompt_progress(Running& running) {
    if (!running.pending->request.report_progress) return;
    EngineEvent event;
    event.progress = progress_of(running);
    running.pending->channel->push(std::move(event));
}

Progress Delivery::progress_of(Running& r) const {
    const Generation& g = r.reply().result();
    Progress p;
    p.prompt_tokens = static_cast<int>(r.pending->request.prompt.size());
    p.cached_tokens = r.cache.reused_tokens;
    p.processed_tokens = r.resumed.empty() ? static_cast<int>(r.next_prompt) : p.prompt_tokens;
    p.completion_tokens = g.usage.completion_tokens;
    const auto first = r.reply().first_token_at();
    const auto now = Clock::now();
    if (first != Clock::time_point{}) {
        p.prompt_ms = ms_between(r.admitted, first);
        p.decode_ms = ms_between(first, now);
    } else if (p.processed_tokens > p.cached_tokens) {
        p.prompt_ms = ms_between(r.admitted, now);
    }
    return p;
}

void Delivery::stop_running(Slot& slot, FinishReason reason, std::optional<Error> error) {
    Running& r = *slot.running;
    std::string trailing = r.reply().finish(reason, std::move(error));
    if (!trailing.empty()) {
        StreamPiece piece;
        piece.text = std::move(trailing);
        emit(r, std::move(piece));
    }
    conclude_running(slot);
}

void Delivery::conclude_running(Slot& slot) {
    std::unique_ptr<Running> r = std::move(slot.running);
    slot.last_used = Clock::now();
    publish_gauges_();
    Completion c;
    c.request_id = r->pending->id;
    c.generation = std::move(r->reply().result());
    c.cache = r->cache;
    c.queue_ms = r->queue_ms;
    c.draft_tokens = r->draft_tokens;
    c.draft_accepted = r->draft_accepted;
    Timings& t = c.generation.timings;
    const auto first = r->reply().first_token_at();
    if (first != Clock::time_point{}) {
        t.prefill_ms = ms_between(r->admitted, first);
        const int computed = c.generation.usage.prompt_tokens - c.generation.usage.cached_tokens;
        t.prefill_tokens_per_s = t.prefill_ms > 0 ? computed * 1000.0 / t.prefill_ms : 0;
    }
    metrics_.llama_server.count_finished(c.generation);
    send_final(std::move(c), *r->pending);
    persistence_.finished(slot);
}

void Delivery::send_final(Completion c, const Pending& pending) {
    metrics_.count_outcome(c.generation);
    metrics_.end_to_end->observe(c.generation.timings.total_ms / 1000.0);
    LifecycleEvent e;
    e.request_id = c.request_id;
    e.stage = c.generation.finish_reason == FinishReason::cancelled ? LifecycleStage::cancelled
                                                                    : LifecycleStage::finished;
    e.session = pending.request.session;
    e.completion = &c;
    notify(e);
    pending.channel->push_final(std::move(c));
}

void Delivery::stop_queued(std::unique_ptr<Pending> pending, std::optional<Error> error) {
    Reply& reply = *pending->reply;
    // Never admitted: the prompt was not fed to the sampler and nothing of it was computed.
    reply.result().usage.prompt_tokens = static_cast<int>(pending->request.prompt.size());
    reply.finish(FinishReason::cancelled, std::move(error));
    Completion c;
    c.request_id = pending->id;
    c.generation = std::move(reply.result());
    c.queue_ms = ms_between(pending->submitted, Clock::now());
    send_final(std::move(c), *pending);
}

}  // namespace llamapp::detail
