// Internal: the metric families the KV store writes, one set of series per tier.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "llamapp/kv_store.hpp"
#include "llamapp/metrics.hpp"

namespace llamapp::detail {

struct TierMetrics {
    Gauge* entries = nullptr;
    Gauge* bytes = nullptr;
    Gauge* capacity = nullptr;
    Counter* hits = nullptr;
    Counter* evictions = nullptr;
    Counter* corrupt = nullptr;
    std::array<Counter*, 6> saves{};  // by SaveReason value
    Histogram* restore_seconds = nullptr;
    Histogram* save_seconds = nullptr;

    Counter* saves_for(SaveReason r) const { return saves[static_cast<std::size_t>(r)]; }
    double total_saves() const;
};

struct StoreMetrics {
    static Result<StoreMetrics> create(std::shared_ptr<MetricsRegistry> registry,
                                       const Labels& labels);
    Result<TierMetrics> tier(const std::string& name) const;

    std::shared_ptr<MetricsRegistry> registry;
    Labels labels;
    Counter* misses = nullptr;
    Counter* duplicates = nullptr;
    Counter* restore_failures = nullptr;
    Counter* dropped_pool_full = nullptr;
    Counter* dropped_quota = nullptr;
    Counter* dropped_too_large = nullptr;
    Counter* dropped_write_failed = nullptr;
    Gauge* pending = nullptr;

    double dropped() const;
};

}  // namespace llamapp::detail
