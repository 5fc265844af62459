// Metrics: counters, gauges and fixed-bucket histograms, rendered as Prometheus text.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "llamapp/error.hpp"

namespace llamapp {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Updates are lock-free and safe from any thread; hot paths keep the pointer they registered.
class Counter {
  public:
    void inc(double by = 1.0);
    double value() const { return value_.load(std::memory_order_relaxed); }

  private:
    std::atomic<double> value_{0.0};
};

class Gauge {
  public:
    void set(double v) { value_.store(v, std::memory_order_relaxed); }
    void add(double by);
    double value() const { return value_.load(std::memory_order_relaxed); }

  private:
    std::atomic<double> value_{0.0};
};

class Histogram {
  public:
    // `bounds`: strictly increasing upper bounds; +Inf is implicit.
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);

    struct Snapshot {
        std::vector<double> bounds;
        std::vector<std::uint64_t> cumulative;  // one per bound, then +Inf
        double sum = 0;
        std::uint64_t count = 0;
    };
    Snapshot snapshot() const;

  private:
    std::vector<double> bounds_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // bounds_.size() + 1
    std::atomic<double> sum_{0.0};
    std::atomic<std::uint64_t> count_{0};
};

// Bucket bounds in seconds for request latencies (5 ms to 2 minutes).
std::vector<double> latency_buckets();

// A named set of metric families. Registering the same name and labels twice returns the same
// metric; the same name with another type, help text or bucket layout is an error. Returned
// pointers stay valid for the registry's lifetime. Thread-safe.
class MetricsRegistry {
  public:
    [[nodiscard]] Result<Counter*> counter(const std::string& name, const std::string& help,
                                           const Labels& labels = {});
    [[nodiscard]] Result<Gauge*> gauge(const std::string& name, const std::string& help,
                                       const Labels& labels = {});
    [[nodiscard]] Result<Histogram*> histogram(const std::string& name, const std::string& help,
                                               std::vector<double> bounds,
                                               const Labels& labels = {});

    // Prometheus text exposition format (version 0.0.4), families sorted by name.
    std::string prometheus_text() const;

  private:
    enum class Kind { counter, gauge, histogram };
    struct Family {
        Kind kind;
        std::string help;
        std::vector<double> bounds;
        std::map<Labels, std::unique_ptr<Counter>> counters;
        std::map<Labels, std::unique_ptr<Gauge>> gauges;
        std::map<Labels, std::unique_ptr<Histogram>> histograms;
    };
    [[nodiscard]] Result<Family*> family(const std::string& name, Kind kind,
                                         const std::string& help, const std::vector<double>& bounds,
                                         const Labels& labels);

    mutable std::mutex mutex_;
    std::map<std::string, Family> families_;
};

}  // namespace llamapp
