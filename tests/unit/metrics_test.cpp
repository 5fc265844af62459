#include <gtest/gtest.h>

#include <thread>

#include "llamapp/metrics.hpp"

using namespace llamapp;

TEST(Metrics, CountersAndGaugesAreThreadSafe) {
    MetricsRegistry r;
    Counter* c = r.counter("llamapp_requests_total", "Requests.").value();
    Gauge* g = r.gauge("llamapp_queue_depth", "Queued requests.").value();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 10000; ++i) {
                c->inc();
                g->add(1);
                g->add(-1);
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(c->value(), 40000);
    EXPECT_EQ(g->value(), 0);
    c->inc(-5);  // counters never go down
    EXPECT_EQ(c->value(), 40000);
}

TEST(Metrics, SameNameAndLabelsIsTheSameMetric) {
    MetricsRegistry r;
    auto a = r.counter("x_total", "X.", {{"outcome", "ok"}});
    auto b = r.counter("x_total", "X.", {{"outcome", "ok"}});
    auto c = r.counter("x_total", "X.", {{"outcome", "error"}});
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
}

TEST(Metrics, ConflictsAndBadNamesAreErrors) {
    MetricsRegistry r;
    ASSERT_TRUE(r.counter("m", "help"));
    EXPECT_FALSE(r.gauge("m", "help"));
    EXPECT_FALSE(r.counter("m", "other help"));
    EXPECT_FALSE(r.counter("1bad", "h"));
    EXPECT_FALSE(r.counter("bad-name", "h"));
    EXPECT_FALSE(r.counter("ok", "h", {{"le", "1"}}));
    EXPECT_FALSE(r.counter("ok2", "h", {{"__reserved", "1"}}));
    EXPECT_FALSE(r.histogram("h", "h", {1, 1}));
    ASSERT_TRUE(r.histogram("h2", "h", {1, 2}));
    EXPECT_FALSE(r.histogram("h2", "h", {1, 3}));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Histogram h({0.1, 1, 10});
    for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.observe(v);
    auto s = h.snapshot();
    EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{2, 3, 4, 5}));
    EXPECT_EQ(s.count, 5u);
    EXPECT_DOUBLE_EQ(s.sum, 55.65);
}

TEST(Metrics, PrometheusTextFormat) {
    MetricsRegistry r;
    r.counter("llamapp_tokens_total", "Tokens.", {{"kind", "prompt"}}).value()->inc(3);
    r.gauge("llamapp_kv_cells_used", "Cells \\ in use.\nNow.").value()->set(7);
    auto* h = r.histogram("llamapp_ttft_seconds", "TTFT.", {0.5, 1}, {{"model", "a\"b"}}).value();
    h->observe(0.25);
    h->observe(2);
    EXPECT_EQ(r.prometheus_text(),
              "# HELP llamapp_kv_cells_used Cells \\\\ in use.\\nNow.\n"
              "# TYPE llamapp_kv_cells_used gauge\n"
              "llamapp_kv_cells_used 7\n"
              "# HELP llamapp_tokens_total Tokens.\n"
              "# TYPE llamapp_tokens_total counter\n"
              "llamapp_tokens_total{kind=\"prompt\"} 3\n"
              "# HELP llamapp_ttft_seconds TTFT.\n"
              "# TYPE llamapp_ttft_seconds histogram\n"
              "llamapp_ttft_seconds_bucket{model=\"a\\\"b\",le=\"0.5\"} 1\n"
              "llamapp_ttft_seconds_bucket{model=\"a\\\"b\",le=\"1\"} 1\n"
              "llamapp_ttft_seconds_bucket{model=\"a\\\"b\",le=\"+Inf\"} 2\n"
              "llamapp_ttft_seconds_sum{model=\"a\\\"b\"} 2.25\n"
              "llamapp_ttft_seconds_count{model=\"a\\\"b\"} 2\n");
}
