// Internal: the metric families the engine writes, registered once per engine.
#pragma once

#include <array>
#include <memory>

#include "llamapp/generation.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/request_handle.hpp"
#include "llamapp/speculative.hpp"

namespace llamapp::detail {

// llama-server's metric families (llamacpp:*), so that dashboards and alerts built on it keep
// working. Unlabeled: every engine of a registry adds into the same series, a server's totals
// over its models; its gauges are the sums (busy, deferred) or the last engine's (per decode).
struct LlamaServerMetrics {
    static Result<LlamaServerMetrics> create(MetricsRegistry& registry);
    // A request that held a slot, at its end: prompt tokens computed and reused, reply tokens,
    // and the time each part took; the rate gauges follow.
    void count_finished(const Generation& g);
    // Decode thread, each step: the engine's own running and waiting requests, added into the
    // shared gauges as a change since its last call.
    void publish(int busy, std::size_t queued);
    void count_decode(int busy);
    void count_drafts(int decoded, int accepted);

    Counter* prompt_tokens = nullptr;
    Counter* prompt_tokens_cached = nullptr;
    Counter* prompt_seconds = nullptr;
    Counter* predicted_tokens = nullptr;
    Counter* predicted_seconds = nullptr;
    Counter* decodes = nullptr;
    Counter* n_tokens_max = nullptr;  // a counter there too: raised to the largest sequence seen
    Counter* draft_tokens = nullptr;
    Counter* draft_accepted = nullptr;
    Counter* drafts = nullptr;
    Gauge* prompt_rate = nullptr;
    Gauge* predicted_rate = nullptr;
    Gauge* processing = nullptr;
    Gauge* deferred = nullptr;
    Gauge* busy_per_decode = nullptr;

  private:
    int published_busy_ = 0;
    std::size_t published_queued_ = 0;
    double decodes_ = 0;
    double busy_sum_ = 0;
};

struct EngineMetrics {
    // Registers every family in `registry` with `labels` added to each series.
    static Result<EngineMetrics> create(std::shared_ptr<MetricsRegistry> registry,
                                        const Labels& labels);

    void count_outcome(const Generation& g);  // by finish reason, timeouts apart
    void count_rejected() { rejected->inc(); }
    void count_reuse(ReuseSource source, int tokens);
    // A lead's drafts: how many were decoded and how many of them the sampler confirmed.
    void count_drafts(DraftKind kind, int decoded, int accepted);

    std::shared_ptr<MetricsRegistry> registry;
    Counter* stop = nullptr;
    Counter* length = nullptr;
    Counter* cancelled = nullptr;
    Counter* timed_out = nullptr;
    Counter* failed = nullptr;
    Counter* rejected = nullptr;
    Counter* prompt_tokens = nullptr;
    Counter* cached_tokens = nullptr;
    Counter* generated_tokens = nullptr;
    Counter* decode_calls = nullptr;
    Counter* decoded_tokens = nullptr;  // batch rows; divided by decode_calls = mean batch size
    Counter* padding_rows = nullptr;    // not in decoded_tokens (sequential_split.hpp)
    // Decode thread time: whole steps, and the part of them inside llama_decode; the rest is
    // planning, sampling, detokenizing and handing pieces to the callers.
    Counter* step_seconds = nullptr;
    Counter* decode_seconds = nullptr;
    Counter* kv_pressure = nullptr;  // llama_decode found no room
    Counter* preempted = nullptr;    // running requests that gave their cells up for a while
    // By DraftKind: proposed and decoded, and of those confirmed by the sampler.
    std::array<Counter*, draft_kind_count> draft_tokens{};
    std::array<Counter*, draft_kind_count> draft_accepted{};
    // By position after the lead (1 .. draft_positions, the last also counting those beyond):
    // how often a draft was decoded there and kept there. Their ratio is the acceptance curve.
    static constexpr std::size_t draft_positions = 8;
    std::array<Counter*, draft_positions> drafted_at{};
    std::array<Counter*, draft_positions> accepted_at{};
    // Decode thread time making drafts (proposing them; a draft model also decodes each of the
    // target's calls), and inside the llama_decode calls that carried drafts (verification).
    Counter* draft_seconds = nullptr;
    Counter* verify_seconds = nullptr;
    Counter* reuse_none = nullptr;
    Counter* reuse_same = nullptr;
    Counter* reuse_other = nullptr;
    Counter* reuse_stored = nullptr;
    Gauge* kv_tokens = nullptr;
    Gauge* kv_capacity = nullptr;
    Gauge* queue_depth = nullptr;
    Gauge* busy_slots = nullptr;
    Histogram* ttft = nullptr;
    Histogram* inter_token = nullptr;
    Histogram* end_to_end = nullptr;
    Histogram* queue_wait = nullptr;
    Histogram* batch_size = nullptr;
    LlamaServerMetrics llama_server;
};

}  // namespace llamapp::detail
