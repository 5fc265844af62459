#include "llamapp/metrics.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace llamapp {

namespace {

void atomic_add(std::atomic<double>& target, double by) {
    double current = target.load(std::memory_order_relaxed);
    while (!target.compare_exchange_weak(current, current + by, std::memory_order_relaxed)) {
    }
}

bool valid_name(const std::string& name, bool allow_colon) {
    if (name.empty()) return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                        (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

std::string escape(const std::string& s, bool quote) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (quote && c == '"')
            out += "\\\"";
        else
            out += c;
    }
    return out;
}

std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", v);
}

std::string label_text(const Labels& labels, const std::string& extra_key = {},
                       const std::string& extra = {}) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : labels) parts.push_back(k + "=\"" + escape(v, true) + "\"");
    if (!extra_key.empty()) parts.push_back(extra_key + "=\"" + extra + "\"");
    if (parts.empty()) return {};
    std::string out = "{";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
    return out + "}";
}

}  // namespace

void Counter::inc(double by) {
    if (by > 0) atomic_add(value_, by);  // counters only go up
}

void Gauge::add(double by) {
    atomic_add(value_, by);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
    for (std::size_t i = 0; i <= bounds_.size(); ++i)
        buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v
    buckets_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(1,
                                                                       std::memory_order_relaxed);
    atomic_add(sum_, v);
    count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
    Snapshot s;
    s.bounds = bounds_;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        running += buckets_[i].load(std::memory_order_relaxed);
        s.cumulative.push_back(running);
    }
    s.sum = sum_.load(std::memory_order_relaxed);
    s.count = running;
    return s;
}

std::vector<double> latency_buckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

Result<MetricsRegistry::Family*> MetricsRegistry::family(const std::string& name, Kind kind,
                                                         const std::string& help,
                                                         const std::vector<double>& bounds,
                                                         const Labels& labels) {
    if (!valid_name(name, true))
        return fail(ErrorCode::invalid_argument, "invalid metric name", name);
    for (const auto& [k, v] : labels) {
        if (!valid_name(k, false) || k.starts_with("__") || k == "le") {
            return fail(ErrorCode::invalid_argument, "invalid label name", name + ": " + k);
        }
    }
    for (std::size_t i = 1; i < bounds.size(); ++i) {
        if (!(bounds[i] > bounds[i - 1])) {
            return fail(ErrorCode::invalid_argument, "histogram bounds must increase", name);
        }
    }
    auto [it, inserted] = families_.try_emplace(name, Family{kind, help, bounds, {}, {}, {}});
    Family& f = it->second;
    if (!inserted && (f.kind != kind || f.help != help || f.bounds != bounds)) {
        return fail(ErrorCode::invalid_argument,
                    "metric already registered with another type or shape", name);
    }
    return &f;
}

// The metric for `labels` in one of a family's maps, created on first use.
template <typename Metric, typename... Args>
Metric* child(std::map<Labels, std::unique_ptr<Metric>>& children, const Labels& labels,
              Args&&... args) {
    auto& slot = children[labels];
    if (!slot) slot = std::make_unique<Metric>(std::forward<Args>(args)...);
    return slot.get();
}

Result<Counter*> MetricsRegistry::counter(const std::string& name, const std::string& help,
                                          const Labels& labels) {
    std::lock_guard lock(mutex_);
    auto f = family(name, Kind::counter, help, {}, labels);
    if (!f) return std::unexpected(f.error());
    return child((*f)->counters, labels);
}

Result<Gauge*> MetricsRegistry::gauge(const std::string& name, const std::string& help,
                                      const Labels& labels) {
    std::lock_guard lock(mutex_);
    auto f = family(name, Kind::gauge, help, {}, labels);
    if (!f) return std::unexpected(f.error());
    return child((*f)->gauges, labels);
}

Result<Histogram*> MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                              std::vector<double> bounds, const Labels& labels) {
    std::lock_guard lock(mutex_);
    auto f = family(name, Kind::histogram, help, bounds, labels);
    if (!f) return std::unexpected(f.error());
    return child((*f)->histograms, labels, std::move(bounds));
}

std::string MetricsRegistry::prometheus_text() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [name, f] : families_) {
        static constexpr const char* types[] = {"counter", "gauge", "histogram"};
        out += "# HELP " + name + " " + escape(f.help, false) + "\n";
        out += "# TYPE " + name + " " + types[static_cast<int>(f.kind)] + "\n";
        for (const auto& [labels, c] : f.counters)
            out += name + label_text(labels) + " " + number(c->value()) + "\n";
        for (const auto& [labels, g] : f.gauges)
            out += name + label_text(labels) + " " + number(g->value()) + "\n";
        for (const auto& [labels, h] : f.histograms) {
            const auto s = h->snapshot();
            for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
                const std::string le = i < s.bounds.size() ? number(s.bounds[i]) : "+Inf";
                out += name + "_bucket" + label_text(labels, "le", le) + " " +
                       std::to_string(s.cumulative[i]) + "\n";
            }
            out += name + "_sum" + label_text(labels) + " " + number(s.sum) + "\n";
            out += name + "_count" + label_text(labels) + " " + std::to_string(s.count) + "\n";
        }
    }
    return out;
}

}  // namespace llamapp
