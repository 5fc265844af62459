// Internal: helpers for layers that register a fixed set of metric families at once.
#pragma once

#include <string>

#include "llamapp/metrics.hpp"

namespace llamapp::detail {

inline Labels with_label(Labels labels, std::string key, std::string value) {
    labels.emplace_back(std::move(key), std::move(value));
    return labels;
}

// Collects registration results into their pointers; the first failure is kept for the caller.
struct MetricRegistration {
    bool ok = true;
    Error first;

    template <typename T>
    void operator()(Result<T*> result, T*& into) {
        if (result) {
            into = *result;
        } else if (ok) {
            ok = false;
            first = result.error();
        }
    }
};

// The series of one counter family that differ only in the value of label `key`.
struct CounterFamily {
    MetricsRegistry& registry;
    MetricRegistration& keep;
    std::string name;
    std::string help;
    const Labels& labels;
    std::string key;

    void operator()(const char* value, Counter*& into) {
        keep(registry.counter(name, help, with_label(labels, key, value)), into);
    }
};

}  // namespace llamapp::detail
