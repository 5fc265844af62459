// Internal: the metric families the engine writes, registered once per engine.
#pragma once

#include <memory>

#include "llamapp/generation.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/request_handle.hpp"

namespace llamapp::detail {

struct EngineMetrics {
    // Registers every family in `registry` with `labels` added to each series.
    static Result<EngineMetrics> create(std::shared_ptr<MetricsRegistry> registry,
                                        const Labels& labels);

    void count_outcome(const Generation& g);  // by finish reason, timeouts apart
    void count_rejected() { rejected->inc(); }
    void count_reuse(ReuseSource source, int tokens);

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
    Counter* kv_pressure = nullptr;     // llama_decode found no room
    Counter* draft_tokens = nullptr;    // EngineOptions::draft_tokens: proposed and decoded
    Counter* draft_accepted = nullptr;  // of those, confirmed by the sampler
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
};

}  // namespace llamapp::detail
