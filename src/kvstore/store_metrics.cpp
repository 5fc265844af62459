#include "kvstore/store_metrics.hpp"

#include "core/metric_registration.hpp"

namespace llamapp::detail {

namespace {

// Loading or writing a snapshot: 100 µs to 30 s.
std::vector<double> io_buckets() {
    return {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
            0.1,    0.25,   0.5,   1,      2.5,   10,   30};
}

}  // namespace

double TierMetrics::total_saves() const {
    double n = 0;
    for (const Counter* c : saves) n += c ? c->value() : 0;
    return n;
}

double StoreMetrics::dropped() const {
    return dropped_pool_full->value() + dropped_quota->value() + dropped_too_large->value() +
           dropped_write_failed->value();
}

Result<StoreMetrics> StoreMetrics::create(std::shared_ptr<MetricsRegistry> registry,
                                          const Labels& labels) {
    StoreMetrics m;
    m.registry = registry;
    m.labels = labels;
    MetricsRegistry& r = *registry;
    MetricRegistration keep;
    keep(r.counter("llamapp_kvstore_misses_total", "Lookups that found no usable stored prefix",
                   labels),
         m.misses);
    keep(r.counter("llamapp_kvstore_duplicate_saves_total",
                   "Saves skipped because the store already held the tokens", labels),
         m.duplicates);
    keep(r.counter("llamapp_kvstore_restore_failures_total",
                   "Stored entries a context refused to restore", labels),
         m.restore_failures);
    CounterFamily dropped(r, keep, "llamapp_kvstore_dropped_saves_total",
                          "Saves not taken, by reason", labels, "reason");
    dropped("pool_full", m.dropped_pool_full);
    dropped("quota", m.dropped_quota);
    dropped("too_large", m.dropped_too_large);
    dropped("write_failed", m.dropped_write_failed);
    keep(r.gauge("llamapp_kvstore_pending_saves", "Saves waiting for a writer thread", labels),
         m.pending);
    if (!keep.ok) return std::unexpected(keep.first);
    return m;
}

Result<TierMetrics> StoreMetrics::tier(const std::string& name) const {
    TierMetrics t;
    MetricsRegistry& r = *registry;
    const Labels l = with_label(labels, "tier", name);
    MetricRegistration keep;
    keep(r.gauge("llamapp_kvstore_entries", "Entries held by a tier", l), t.entries);
    keep(r.gauge("llamapp_kvstore_bytes", "Bytes held by a tier", l), t.bytes);
    keep(r.gauge("llamapp_kvstore_capacity_bytes", "Byte quota of a tier (0 = none)", l),
         t.capacity);
    keep(r.counter("llamapp_kvstore_hits_total", "Lookups served by a tier", l), t.hits);
    keep(r.counter("llamapp_kvstore_evictions_total", "Entries evicted from a tier", l),
         t.evictions);
    keep(r.counter("llamapp_kvstore_corrupt_files_total",
                   "Entries removed because they failed verification", l),
         t.corrupt);
    for (SaveReason reason : {SaveReason::finish, SaveReason::prefill, SaveReason::evict,
                              SaveReason::shutdown, SaveReason::put}) {
        keep(r.counter("llamapp_kvstore_saves_total", "Entries stored, by tier and reason",
                       with_label(l, "reason", std::string(to_string(reason)))),
             t.saves[static_cast<std::size_t>(reason)]);
    }
    keep(r.histogram("llamapp_kvstore_restore_seconds", "Time to load and verify an entry",
                     io_buckets(), l),
         t.restore_seconds);
    keep(r.histogram("llamapp_kvstore_save_seconds", "Time to store an entry", io_buckets(), l),
         t.save_seconds);
    if (!keep.ok) return std::unexpected(keep.first);
    return t;
}

}  // namespace llamapp::detail
