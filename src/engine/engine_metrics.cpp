#include "engine/engine_metrics.hpp"

#include <algorithm>
#include <string>

#include "core/metric_registration.hpp"

namespace llamapp::detail {

namespace {

std::vector<double> token_latency_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

std::vector<double> batch_size_buckets() {
    return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
}

// What the decode thread's steps and calls do: rows, padding, time, pressure and drafts.
void register_decode_loop(MetricsRegistry& r, MetricRegistration& keep, const Labels& labels,
                          EngineMetrics& m) {
    keep(r.counter("llamapp_decode_calls_total", "llama_decode calls", labels), m.decode_calls);
    keep(r.counter("llamapp_decoded_tokens_total", "Tokens (batch rows) sent to llama_decode",
                   labels),
         m.decoded_tokens);
    keep(r.counter("llamapp_padding_rows_total",
                   "Throwaway rows that kept a call of streams in one ubatch (a KV cache per slot)",
                   labels),
         m.padding_rows);
    keep(r.counter("llamapp_step_seconds_total",
                   "Decode thread time spent in scheduling steps (planning, decoding, sampling, "
                   "delivering)",
                   labels),
         m.step_seconds);
    keep(r.counter("llamapp_decode_seconds_total", "Time spent inside llama_decode", labels),
         m.decode_seconds);
    keep(r.counter("llamapp_kv_pressure_total", "Decode calls that found no room in the KV cache",
                   labels),
         m.kv_pressure);
    keep(r.counter("llamapp_kv_paused_total",
                   "Running requests that gave their KV cells up under pressure and waited to "
                   "compute them again",
                   labels),
         m.preempted);
    CounterFamily drafted(r, keep, "llamapp_draft_tokens_total",
                          "Drafted tokens decoded, by where the drafts came from", labels, "kind");
    CounterFamily accepted(r, keep, "llamapp_draft_tokens_accepted_total",
                           "Drafted tokens that the sampler confirmed, by kind", labels, "kind");
    for (std::size_t k = 0; k < draft_kind_count; ++k) {
        const std::string kind(to_string(static_cast<DraftKind>(k)));
        drafted(kind.c_str(), m.draft_tokens[k]);
        accepted(kind.c_str(), m.draft_accepted[k]);
    }
    CounterFamily drafted_at(r, keep, "llamapp_draft_position_decoded_total",
                             "Drafts decoded, by position after their lead (the last: and beyond)",
                             labels, "position");
    CounterFamily accepted_at(r, keep, "llamapp_draft_position_accepted_total",
                              "Drafts kept, by position after their lead (the last: and beyond)",
                              labels, "position");
    for (std::size_t p = 0; p < EngineMetrics::draft_positions; ++p) {
        const std::string position = std::to_string(p + 1);
        drafted_at(position.c_str(), m.drafted_at[p]);
        accepted_at(position.c_str(), m.accepted_at[p]);
    }
    keep(r.counter("llamapp_draft_seconds_total",
                   "Decode thread time making drafts (a draft model: also decoding every call "
                   "of the model on it)",
                   labels),
         m.draft_seconds);
    keep(r.counter("llamapp_draft_verify_seconds_total",
                   "Time inside llama_decode calls that carried drafts", labels),
         m.verify_seconds);
}

}  // namespace

Result<EngineMetrics> EngineMetrics::create(std::shared_ptr<MetricsRegistry> registry,
                                            const Labels& labels) {
    EngineMetrics m;
    m.registry = registry;
    MetricsRegistry& r = *registry;
    MetricRegistration keep;
    CounterFamily outcome(r, keep, "llamapp_requests_total", "Requests finished, by outcome",
                          labels, "outcome");
    outcome("stop", m.stop);
    outcome("length", m.length);
    outcome("cancelled", m.cancelled);
    outcome("timeout", m.timed_out);
    outcome("error", m.failed);
    outcome("rejected", m.rejected);
    keep(r.counter("llamapp_prompt_tokens_total", "Prompt tokens of admitted requests", labels),
         m.prompt_tokens);
    keep(r.counter("llamapp_prompt_tokens_cached_total",
                   "Prompt tokens whose KV was reused instead of computed", labels),
         m.cached_tokens);
    keep(r.counter("llamapp_generated_tokens_total", "Tokens sampled", labels), m.generated_tokens);
    register_decode_loop(r, keep, labels, m);
    CounterFamily reuse(r, keep, "llamapp_prefix_reuse_total",
                        "Admitted requests by where their prompt prefix came from", labels,
                        "source");
    reuse("none", m.reuse_none);
    reuse("same_slot", m.reuse_same);
    reuse("other_slot", m.reuse_other);
    reuse("stored", m.reuse_stored);
    keep(r.gauge("llamapp_kv_cache_tokens",
                 "Tokens held in the KV cache over all sequences (shared cells count per sequence)",
                 labels),
         m.kv_tokens);
    keep(r.gauge("llamapp_kv_cache_capacity_tokens", "KV cache cells", labels), m.kv_capacity);
    keep(r.gauge("llamapp_queue_depth", "Requests waiting for a slot", labels), m.queue_depth);
    keep(r.gauge("llamapp_busy_slots", "Slots running a request", labels), m.busy_slots);
    keep(r.histogram("llamapp_time_to_first_token_seconds", "From submit to the first token",
                     latency_buckets(), labels),
         m.ttft);
    keep(r.histogram("llamapp_inter_token_latency_seconds", "Between consecutive tokens",
                     token_latency_buckets(), labels),
         m.inter_token);
    keep(r.histogram("llamapp_request_duration_seconds", "From submit to the final event",
                     latency_buckets(), labels),
         m.end_to_end);
    keep(r.histogram("llamapp_queue_wait_seconds", "From submit to admission into a slot",
                     latency_buckets(), labels),
         m.queue_wait);
    keep(r.histogram("llamapp_batch_size_tokens", "Tokens per llama_decode call",
                     batch_size_buckets(), labels),
         m.batch_size);
    if (!keep.ok) return std::unexpected(keep.first);
    auto llama_server = LlamaServerMetrics::create(r);
    if (!llama_server) return std::unexpected(llama_server.error());
    m.llama_server = *llama_server;
    return m;
}

Result<LlamaServerMetrics> LlamaServerMetrics::create(MetricsRegistry& r) {
    LlamaServerMetrics m;
    MetricRegistration keep;
    keep(r.counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed."),
         m.prompt_tokens);
    keep(r.counter("llamacpp:prompt_tokens_cached_total",
                   "Number of prompt tokens reused from the KV cache."),
         m.prompt_tokens_cached);
    keep(r.counter("llamacpp:prompt_seconds_total", "Prompt process time"), m.prompt_seconds);
    keep(r.counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed."),
         m.predicted_tokens);
    keep(r.counter("llamacpp:tokens_predicted_seconds_total", "Predict process time"),
         m.predicted_seconds);
    keep(r.counter("llamacpp:n_decode_total", "Total number of llama_decode() calls"), m.decodes);
    keep(r.counter("llamacpp:n_tokens_max", "Largest observed n_tokens."), m.n_tokens_max);
    keep(r.counter("llamacpp:spec_decode_num_draft_tokens_total",
                   "Number of draft tokens proposed."),
         m.draft_tokens);
    keep(r.counter("llamacpp:spec_decode_num_accepted_tokens_total",
                   "Number of draft tokens accepted."),
         m.draft_accepted);
    keep(r.counter("llamacpp:spec_decode_num_drafts_total", "Number of drafts decoded."), m.drafts);
    keep(r.gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s."),
         m.prompt_rate);
    keep(r.gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s."),
         m.predicted_rate);
    keep(r.gauge("llamacpp:requests_processing", "Number of requests processing."), m.processing);
    keep(r.gauge("llamacpp:requests_deferred", "Number of requests deferred."), m.deferred);
    keep(r.gauge("llamacpp:n_busy_slots_per_decode",
                 "Average number of busy slots per llama_decode() call"),
         m.busy_per_decode);
    if (!keep.ok) return std::unexpected(keep.first);
    return m;
}

void LlamaServerMetrics::count_finished(const Generation& g) {
    const Usage& u = g.usage;
    prompt_tokens->inc(u.prompt_tokens - u.cached_tokens);
    prompt_tokens_cached->inc(u.cached_tokens);
    prompt_seconds->inc(g.timings.prefill_ms / 1000.0);
    predicted_tokens->inc(u.completion_tokens);
    predicted_seconds->inc(g.timings.decode_ms / 1000.0);
    const double n_tokens = u.prompt_tokens + u.completion_tokens;
    // Another engine may raise it at once; the series only ever grows.
    if (const double now = n_tokens_max->value(); n_tokens > now) n_tokens_max->inc(n_tokens - now);
    auto rate = [](const Counter* tokens, const Counter* seconds) {
        return seconds->value() > 0 ? tokens->value() / seconds->value() : 0.0;
    };
    prompt_rate->set(rate(prompt_tokens, prompt_seconds));
    predicted_rate->set(rate(predicted_tokens, predicted_seconds));
}

void LlamaServerMetrics::publish(int busy, std::size_t queued) {
    processing->add(busy - published_busy_);
    deferred->add(static_cast<double>(queued) - static_cast<double>(published_queued_));
    published_busy_ = busy;
    published_queued_ = queued;
}

void LlamaServerMetrics::count_decode(int busy) {
    decodes->inc();
    decodes_ += 1;
    busy_sum_ += busy;
    busy_per_decode->set(busy_sum_ / decodes_);
}

void LlamaServerMetrics::count_drafts(int decoded, int accepted) {
    if (decoded == 0) return;
    draft_tokens->inc(decoded);
    draft_accepted->inc(accepted);
    drafts->inc();
}

void EngineMetrics::count_drafts(DraftKind kind, int decoded, int accepted) {
    const auto k = static_cast<std::size_t>(kind);
    draft_tokens[k]->inc(decoded);
    draft_accepted[k]->inc(accepted);
    for (int i = 0; i < decoded; ++i) {
        const auto p = std::min(static_cast<std::size_t>(i), draft_positions - 1);
        drafted_at[p]->inc();
        if (i < accepted) accepted_at[p]->inc();
    }
    llama_server.count_drafts(decoded, accepted);
}

void EngineMetrics::count_outcome(const Generation& g) {
    switch (g.finish_reason) {
        case FinishReason::stop:
            stop->inc();
            break;
        case FinishReason::length:
            length->inc();
            break;
        case FinishReason::cancelled:
            if (g.error && g.error->code == ErrorCode::timeout)
                timed_out->inc();
            else
                cancelled->inc();
            break;
        case FinishReason::error:
            failed->inc();
            break;
    }
    generated_tokens->inc(g.usage.completion_tokens);
}

void EngineMetrics::count_reuse(ReuseSource source, int tokens) {
    switch (source) {
        case ReuseSource::none:
            reuse_none->inc();
            break;
        case ReuseSource::same_slot:
            reuse_same->inc();
            break;
        case ReuseSource::other_slot:
            reuse_other->inc();
            break;
        case ReuseSource::stored:
            reuse_stored->inc();
            break;
    }
    cached_tokens->inc(tokens);
}

}  // namespace llamapp::detail
