// Engine on the real trained tiny model: cancellation (by handle, drop, deadline, shutdown, also
// of a decode in flight), queue bounds, bad requests, KV pressure and metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "llamapp/log.hpp"
#include "support/prometheus.hpp"
#include "support/stories_engine.hpp"

using namespace llamapp;
using namespace std::chrono_literals;
using test::drain;
using test::encode;
using test::request;
using test::stories::engine;
using test::stories::kPrompts;
using test::stories::options;

namespace {

// The value of one series in Prometheus text, or -1 when it is missing.
double series_value(const std::string& text, const std::string& series) {
    return test::prometheus_value(text, series).value_or(-1);
}

double decode_calls(const Engine& e) {
    return series_value(e.metrics().prometheus_text(), "llamapp_decode_calls_total");
}

}  // namespace

TEST(Engine, CancelDropAndDeadlinesFreeTheSlot) {
    const Model& m = test::stories_model();
    Engine e = engine(options(1, 4096));
    const auto p = encode(m, kPrompts[0]);

    auto h = e.submit(request(p, -1));  // runs until the context is full unless stopped
    ASSERT_TRUE(h);
    EngineEvent ev;
    ASSERT_TRUE(h->next(ev));
    h->cancel();
    const double calls_at_cancel = decode_calls(e);
    auto d = drain(*h);
    // Within one step: at most the decode already under way when cancel() ran.
    EXPECT_LE(decode_calls(e) - calls_at_cancel, 1);
    EXPECT_EQ(d.finals, 1);
    EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
    EXPECT_LT(d.completion.generation.usage.completion_tokens, 4000);
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));

    {
        auto dropped = e.submit(request(p, -1));
        ASSERT_TRUE(dropped);
        EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 1; }));
    }  // the consumer goes away
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));

    EngineRequest timed = request(p, -1);
    timed.options.timeout = 30ms;
    auto t = drain(*e.submit(timed));
    EXPECT_EQ(t.completion.generation.finish_reason, FinishReason::cancelled);
    ASSERT_TRUE(t.completion.generation.error);
    EXPECT_EQ(t.completion.generation.error->code, ErrorCode::timeout);

    // A queued request whose queue deadline passes leaves the queue.
    auto blocker = e.submit(request(p, -1));
    ASSERT_TRUE(blocker);
    EngineRequest waits = request(p, 4);
    waits.queue_timeout = 20ms;
    auto q = drain(*e.submit(waits));
    EXPECT_EQ(q.completion.generation.finish_reason, FinishReason::cancelled);
    ASSERT_TRUE(q.completion.generation.error);
    EXPECT_EQ(q.completion.generation.error->code, ErrorCode::timeout);
    EXPECT_EQ(q.completion.cache.slot, -1);
    EXPECT_GE(q.completion.queue_ms, 20);
    // Cancelling a queued request takes it out of the queue at once.
    auto queued = e.submit(request(p, 4));
    ASSERT_TRUE(queued);
    queued->cancel();
    auto qc = drain(*queued);
    EXPECT_EQ(qc.completion.generation.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(qc.completion.cache.slot, -1);
    blocker->cancel();
    drain(*blocker);
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));
    EXPECT_EQ(drain(*e.submit(request(p, 4))).completion.generation.usage.completion_tokens, 4);
}

TEST(Engine, QueueBoundRejectsAtOnce) {
    const Model& m = test::stories_model();
    EngineOptions o = options(1, 4096);
    o.max_queued_requests = 2;
    Engine e = engine(o);
    const auto p = encode(m, kPrompts[0]);
    auto running = e.submit(request(p, -1));
    ASSERT_TRUE(running);
    ASSERT_TRUE(test::eventually([&] { return e.stats().busy_slots == 1; }));
    auto q1 = e.submit(request(p, 4));
    auto q2 = e.submit(request(p, 4));
    ASSERT_TRUE(q1);
    ASSERT_TRUE(q2);
    auto over = e.submit(request(p, 4));
    ASSERT_FALSE(over);
    EXPECT_EQ(over.error().code, ErrorCode::queue_full);
    EXPECT_EQ(e.stats().queued_requests, 2u);
    running->cancel();
    EXPECT_EQ(drain(*q1).completion.generation.usage.completion_tokens, 4);
    EXPECT_EQ(drain(*q2).completion.generation.usage.completion_tokens, 4);

    EngineOptions tokens = options(1, 4096);
    tokens.max_queued_tokens = p.size() + 2;
    Engine t = engine(tokens);
    auto busy = t.submit(request(p, -1));
    ASSERT_TRUE(test::eventually([&] { return t.stats().busy_slots == 1; }));
    auto queued = t.submit(request(p, 4));  // kept: a dropped handle would leave the queue
    ASSERT_TRUE(queued);
    auto too_many = t.submit(request(p, 4));
    ASSERT_FALSE(too_many);
    EXPECT_EQ(too_many.error().code, ErrorCode::queue_full);
}

TEST(Engine, BadRequestsAreRejectedAndTheEngineKeepsServing) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2, 256));
    const auto p = encode(m, kPrompts[0]);
    auto code = [](const Result<RequestHandle>& r) {
        return r ? ErrorCode::internal : r.error().code;
    };
    EXPECT_EQ(code(e.submit(request({}, 4))), ErrorCode::invalid_argument);
    EXPECT_EQ(code(e.submit(request({1, 999999}, 4))), ErrorCode::invalid_argument);
    EXPECT_EQ(code(e.submit(request({-5}, 4))), ErrorCode::invalid_argument);
    EXPECT_EQ(code(e.submit(request(std::vector<Token>(300, 1), 4))), ErrorCode::context_overflow);
    EngineRequest bad = request(p, 0);
    EXPECT_EQ(code(e.submit(bad)), ErrorCode::invalid_argument);
    bad = request(p, 4);
    bad.options.sampling.grammar = "root ::= (";
    EXPECT_EQ(code(e.submit(bad)), ErrorCode::invalid_grammar);
    bad = request(p, 4);
    bad.options.sampling.temperature = -1;
    EXPECT_EQ(code(e.submit(bad)), ErrorCode::invalid_argument);
    bad = request(p, 4);
    bad.queue_timeout = -7ms;
    EXPECT_EQ(code(e.submit(bad)), ErrorCode::invalid_argument);
    EXPECT_EQ(code(e.submit("", request({}, 4))), ErrorCode::invalid_argument);
    EXPECT_EQ(
        drain(*e.submit(kPrompts[0], request({}, 4))).completion.generation.usage.completion_tokens,
        4);
}

namespace {

// Four requests of about 150 cells each, on an engine of 4 slots sharing 256 cells; submitted
// together, so that they run at once whatever the scheduling of this thread.
std::vector<RequestHandle> overfill_the_cache(Engine& e, const Model& m) {
    std::vector<EngineRequest> four;
    for (int i = 0; i < 4; ++i) four.push_back(request(encode(m, kPrompts[i]), 140));
    return *e.submit_all(std::move(four));
}

}  // namespace

// llama-server's test_completion_unified: requests that each fit the shared cache alone all
// finish whole, however they overlap. The one holding the most cells pauses and computes them
// again once there is room (its reply had been cut short, or failed, before).
TEST(Engine, KvPressurePausesTheLongestReplyAndEveryRequestFinishesWhole) {
    const Model& m = test::stories_model();
    Engine e = engine(options(4, 256));
    auto handles = overfill_the_cache(e, m);
    for (auto& h : handles) {
        auto d = drain(h);
        EXPECT_EQ(d.finals, 1);
        const auto& g = d.completion.generation;
        EXPECT_EQ(g.finish_reason, FinishReason::length);
        EXPECT_FALSE(g.error);
        EXPECT_EQ(g.usage.completion_tokens, 140);
    }
    const std::string text = e.metrics().prometheus_text();
    EXPECT_GT(series_value(text, "llamapp_kv_paused_total"), 0) << text;
    // Cached sequences are evicted for new work instead of failing it.
    for (int i = 0; i < 3; ++i) {
        auto d = drain(*e.submit(request(encode(m, kPrompts[4 + i]), 100)));
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::length);
    }
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));
}

// A paused request still belongs to its caller: a cancel ends it while it waits for room, and
// the requests that were not cancelled still finish whole.
TEST(Engine, APausedRequestEndsWhenCancelledAndTheOthersFinishWhole) {
    const Model& m = test::stories_model();
    Engine e = engine(options(4, 256));
    auto handles = overfill_the_cache(e, m);
    ASSERT_TRUE(test::eventually([&] {
        return series_value(e.metrics().prometheus_text(), "llamapp_kv_paused_total") > 0;
    }));
    handles[0].cancel();
    handles[3].cancel();
    for (std::size_t i = 0; i < handles.size(); ++i) {
        auto d = drain(handles[i]);
        EXPECT_EQ(d.finals, 1);
        const auto& g = d.completion.generation;
        EXPECT_FALSE(g.error);
        if (i == 1 || i == 2) {
            EXPECT_EQ(g.usage.completion_tokens, 140);
        }
    }
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));
}

TEST(Engine, KvPressureEvictsAnIdleSequenceBeforeFailingAnyone) {
    const Model& m = test::stories_model();
    // 256 cells, two slots: one idle sequence holding ~120 cells, then a request needing ~220.
    EngineOptions o = options(2, 256);
    o.speculative.n_max = 0;  // drafts would be dropped first; this is about cached sequences
    Engine e = engine(o);
    // A session keeps its slot, so the next request must take the other one and run into it.
    auto first = request(encode(m, kPrompts[0]), 110);
    first.session = "idle";
    auto idle = drain(*e.submit(first));
    ASSERT_EQ(idle.completion.generation.finish_reason, FinishReason::length);
    const std::size_t idle_cells = static_cast<std::size_t>(e.stats().kv_tokens);
    ASSERT_GT(idle_cells, 100u);
    const auto big_prompt = encode(m, kPrompts[1]);
    auto big = drain(*e.submit(request(big_prompt, 200)));
    EXPECT_EQ(big.completion.generation.finish_reason, FinishReason::length);
    EXPECT_EQ(big.completion.generation.usage.completion_tokens, 200);
    const std::string text = e.metrics().prometheus_text();
    EXPECT_GT(series_value(text, "llamapp_kv_pressure_total"), 0) << text;
    EXPECT_EQ(series_value(text, "llamapp_requests_total{outcome=\"error\"}"), 0);
    // Only the new request's sequence is left: the idle one gave its cells up.
    EXPECT_LE(static_cast<std::size_t>(e.stats().kv_tokens), big_prompt.size() + 200);
}

// The soak's finding: a reply without max_tokens filled the shared cache and the short requests
// beside it failed with "the KV cache is full". The long one yields instead.
TEST(Engine, ALongReplyYieldsTheCacheToAShortRequestInsteadOfStarvingIt) {
    const Model& m = test::stories_model();
    EngineOptions o = options(2, 256);
    o.speculative.n_max = 0;
    Engine e = engine(o);
    auto hog = e.submit(request(encode(m, kPrompts[0]), -1));  // until the context is full
    ASSERT_TRUE(hog);
    EngineEvent ev;
    for (int pieces = 0; pieces < 150 && hog->next(ev);) ++pieces;
    const auto short_prompt = encode(m, kPrompts[1]);
    auto small = e.submit(request(short_prompt, 80));
    ASSERT_TRUE(small);
    const auto short_reply = drain(*small);
    const auto long_reply = drain(*hog);
    EXPECT_EQ(short_reply.completion.generation.finish_reason, FinishReason::length);
    EXPECT_EQ(short_reply.completion.generation.usage.completion_tokens, 80);
    EXPECT_FALSE(short_reply.completion.generation.error);
    // The long reply ends as if its context were full: no error, fewer tokens than alone.
    EXPECT_EQ(long_reply.completion.generation.finish_reason, FinishReason::length);
    EXPECT_FALSE(long_reply.completion.generation.error);
    EXPECT_EQ(
        series_value(e.metrics().prometheus_text(), "llamapp_requests_total{outcome=\"error\"}"),
        0);
}

TEST(Engine, MetricsAndLifecycleEvents) {
    const Model& m = test::stories_model();
    EngineOptions o = options(2);
    std::mutex mu;
    std::map<LifecycleStage, int> seen;
    o.on_lifecycle = [&](const LifecycleEvent& ev) {
        std::lock_guard lock(mu);
        ++seen[ev.stage];
    };
    o.metric_labels = {{"model", "stories"}};
    Engine e = engine(o);
    const auto p = encode(m, kPrompts[0]);
    drain(*e.submit(request(p, 8)));
    drain(*e.submit(request(p, 8)));
    auto c = e.submit(request(p, -1));
    c->cancel();
    drain(*c);
    EXPECT_FALSE(e.submit(request({}, 4)));
    const std::string text = e.metrics().prometheus_text();
    EXPECT_NE(text.find("llamapp_requests_total{model=\"stories\",outcome=\"length\"} 2"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("llamapp_requests_total{model=\"stories\",outcome=\"rejected\"} 1"),
              std::string::npos);
    EXPECT_NE(text.find("llamapp_prefix_reuse_total{model=\"stories\",source=\"same_slot\"}"),
              std::string::npos);
    EXPECT_NE(text.find("llamapp_time_to_first_token_seconds_bucket"), std::string::npos);
    EXPECT_NE(text.find("llamapp_inter_token_latency_seconds_count{model=\"stories\"}"),
              std::string::npos);
    EXPECT_NE(text.find("llamapp_kv_cache_capacity_tokens{model=\"stories\"} 1024"),
              std::string::npos);
    std::lock_guard lock(mu);
    // The cancelled request may have left the queue before it was ever admitted.
    EXPECT_GE(seen[LifecycleStage::admitted], 2);
    EXPECT_EQ(seen[LifecycleStage::finished], 2);
    EXPECT_EQ(seen[LifecycleStage::cancelled], 1);
    EXPECT_EQ(seen[LifecycleStage::rejected], 1);
    EXPECT_GE(seen[LifecycleStage::first_token], 2);
}

TEST(Engine, MetricsCountWhatHappened) {
    const Model& m = test::stories_model();
    Engine e = engine(options(1));
    const auto p = encode(m, kPrompts[1]);
    const double n = static_cast<double>(p.size());
    drain(*e.submit(request(p, 8)));
    drain(*e.submit(request(p, 8)));
    auto timed = request(encode(m, kPrompts[2]), -1);
    timed.options.timeout = std::chrono::milliseconds(50);
    const Generation timed_out = drain(*e.submit(timed)).completion.generation;
    // On a loaded machine the deadline may pass before admission or before the first token.
    const bool admitted =
        !(timed_out.error && timed_out.error->message.find("in the queue") != std::string::npos);
    const bool sampled = timed_out.usage.completion_tokens > 0;
    EXPECT_FALSE(e.submit("", request({}, 4)));  // rejected before it reaches the queue
    const std::string text = e.metrics().prometheus_text();
    EXPECT_EQ(series_value(text, "llamapp_requests_total{outcome=\"length\"}"), 2) << text;
    EXPECT_EQ(series_value(text, "llamapp_requests_total{outcome=\"timeout\"}"), 1);
    EXPECT_EQ(series_value(text, "llamapp_requests_total{outcome=\"rejected\"}"), 1);
    const double timed_prompt = static_cast<double>(encode(m, kPrompts[2]).size());
    EXPECT_EQ(series_value(text, "llamapp_prompt_tokens_total"),
              2 * n + (admitted ? timed_prompt : 0));
    // The slot holds all but the last token of the repeated prompt (and maybe a few tokens the
    // third prompt shares with it).
    EXPECT_GE(series_value(text, "llamapp_prompt_tokens_cached_total"), n - 1);
    EXPECT_LT(series_value(text, "llamapp_prompt_tokens_cached_total"), n - 1 + timed_prompt);
    EXPECT_GE(series_value(text, "llamapp_generated_tokens_total"), 16);
    EXPECT_GE(series_value(text, "llamapp_decoded_tokens_total"), n + 1);
    EXPECT_GT(series_value(text, "llamapp_decode_calls_total"), 0);
    EXPECT_GT(series_value(text, "llamapp_decode_seconds_total"), 0);
    EXPECT_GE(series_value(text, "llamapp_step_seconds_total"),
              series_value(text, "llamapp_decode_seconds_total"));
    // Every successful call is observed; the timed request's last call may have been aborted.
    EXPECT_GE(series_value(text, "llamapp_batch_size_tokens_count"),
              series_value(text, "llamapp_decode_calls_total") - 1);
    EXPECT_EQ(series_value(text, "llamapp_request_duration_seconds_count"), 3);
    EXPECT_EQ(series_value(text, "llamapp_queue_wait_seconds_count"), 2 + admitted);
    EXPECT_EQ(series_value(text, "llamapp_time_to_first_token_seconds_count"), 2 + sampled);
    EXPECT_GE(series_value(text, "llamapp_inter_token_latency_seconds_count"), 14);
    EXPECT_EQ(series_value(text, "llamapp_queue_depth"), 0);
    EXPECT_TRUE(test::eventually(
        [&] { return series_value(e.metrics().prometheus_text(), "llamapp_busy_slots") == 0; }));
    const double kv = series_value(e.metrics().prometheus_text(), "llamapp_kv_cache_tokens");
    EXPECT_GT(kv, 0);  // the finished sequences stay cached
    EXPECT_LE(kv, series_value(text, "llamapp_kv_cache_capacity_tokens"));
}

// The slot reads idle once the caller holds the final event, not a step later (llama-server's
// test_metrics_slots_idle_after_completion asks /slots right after the reply).
TEST(Engine, AFinishedRequestsSlotReadsIdleAtOnce) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2));
    const auto p = encode(m, kPrompts[0]);
    for (int round = 0; round < 20; ++round) {
        drain(*e.submit(request(p, 2)));
        const EngineStats s = e.stats();
        EXPECT_EQ(s.busy_slots, 0) << "round " << round;
        for (const bool running : s.slot_running) EXPECT_FALSE(running) << "round " << round;
    }
}

TEST(Engine, ShutdownCancelsWhatRunsAndRefusesNewWork) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2, 4096));
    const auto p = encode(m, kPrompts[0]);
    std::vector<RequestHandle> handles;
    for (int i = 0; i < 4; ++i) handles.push_back(*e.submit(request(p, -1)));
    e.shutdown(0ms);
    for (auto& h : handles) {
        auto d = drain(h);
        EXPECT_EQ(d.finals, 1);
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
    }
    auto late = e.submit(request(p, 4));
    ASSERT_FALSE(late);
    EXPECT_EQ(late.error().code, ErrorCode::shutting_down);
    EXPECT_EQ(e.fork_session("a", "b").error().code, ErrorCode::shutting_down);
}

TEST(Engine, GraceLetsRunningRequestsFinish) {
    const Model& m = test::stories_model();
    const auto p = encode(m, kPrompts[0]);
    // Repeated because a submit that races the decode thread going idle was once cancelled by a
    // graceful shutdown: the window is narrow, and a loaded machine hits it within a few dozen.
    for (int round = 0; round < 40; ++round) {
        Engine e = engine(options(2));
        auto h = e.submit(request(p, 32));
        e.shutdown(10s);
        auto d = drain(*h);
        ASSERT_EQ(d.completion.generation.finish_reason, FinishReason::length) << "round " << round;
    }
}

namespace {

std::vector<Token> long_prompt(const Model& m, std::size_t n) {
    std::vector<Token> p;
    while (p.size() < n) {
        auto t = encode(m, " Lily and Ben played in the park with their big red ball.");
        p.insert(p.end(), t.begin() + (p.empty() ? 0 : 1), t.end());
    }
    return p;
}

EngineOptions one_big_step(std::int64_t n_ctx) {
    EngineOptions o = options(1, n_ctx);
    o.prefill_chunk = static_cast<int>(n_ctx);
    o.context.n_batch = n_ctx;
    return o;
}

}  // namespace

TEST(Engine, CancellingARequestAbortsItsDecodeInFlight) {
    const Model& m = test::stories_model();
    EngineOptions o = one_big_step(4096);
    CancellationToken cancel;
    // Cancelled as it is admitted, i.e. just before its 3,000-token decode starts: only the
    // abort callback can stop that decode before it completes.
    o.on_lifecycle = [&](const LifecycleEvent& ev) {
        if (ev.stage == LifecycleStage::admitted) cancel.cancel();
    };
    Engine e = engine(o);
    EngineRequest r = request(long_prompt(m, 3000), 4);
    r.options.cancel = cancel;
    // llama.cpp reports the abort as an error of llama_decode; a cancellation is none.
    std::mutex lines_mutex;
    std::vector<std::string> errors, debug;
    set_log_sink([&](LogLevel level, std::string_view line) {
        std::lock_guard lock(lines_mutex);
        (level >= LogLevel::warning ? errors : debug).emplace_back(line);
    });
    const LogLevel was = log_level();
    set_log_level(LogLevel::debug);
    auto d = drain(*e.submit(r));
    set_log_level(was);
    set_log_sink({});
    for (const std::string& line : errors)
        EXPECT_EQ(line.find("llama_decode"), std::string::npos) << line;
    EXPECT_NE(std::find(debug.begin(), debug.end(),
                        "llama_decode: stopped for a cancellation or deadline"),
              debug.end());
    EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(d.completion.generation.usage.completion_tokens, 0);
    // The aborted decode was rolled back: the sequence holds nothing of the prompt.
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));
    EXPECT_EQ(e.stats().kv_tokens, 0);
    EXPECT_NE(e.metrics().prometheus_text().find("llamapp_requests_total{outcome=\"cancelled\"} 1"),
              std::string::npos);
}

TEST(Engine, ShutdownAbortsADecodeServingOneRequest) {
    const Model& m = test::stories_model();
    EngineOptions o = one_big_step(4096);
    o.max_queued_requests = 1;
    std::promise<void> admitted, released;
    std::future<void> was_admitted = admitted.get_future();
    std::shared_future<void> go = released.get_future().share();
    std::atomic<int> admissions{0};
    // The decode thread waits as the request is admitted, just before its one 3,000-token decode
    // (which takes seconds), until the shutdown is under way. Bounded, so that a failed test
    // cannot hang the engine's destructor.
    o.on_lifecycle = [&](const LifecycleEvent& ev) {
        if (ev.stage != LifecycleStage::admitted || admissions++ > 0) return;
        admitted.set_value();
        go.wait_for(60s);
    };
    Engine e = engine(o);
    const double calls = decode_calls(e);
    auto h = e.submit(request(long_prompt(m, 3000), 4));
    ASSERT_TRUE(h);
    ASSERT_EQ(was_admitted.wait_for(60s), std::future_status::ready);
    // With the queue full, a probe is refused as queue_full until the shutdown begins, then as
    // shutting_down: the one sign of the shutdown that does not need the decode thread.
    const auto p = encode(m, kPrompts[0]);
    auto queued = e.submit(request(p, 4));
    ASSERT_TRUE(queued);
    auto shutting_down = [&] {
        auto r = e.submit(request(p, 4));
        return !r && r.error().code == ErrorCode::shutting_down;
    };
    EXPECT_FALSE(shutting_down());
    std::thread stopper([&] { e.shutdown(0ms); });
    const bool began = test::eventually(shutting_down, 60s);
    released.set_value();  // the decode starts as the shutdown interrupts, and must not finish
    stopper.join();
    ASSERT_TRUE(began);
    const auto d = drain(*h);
    EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(d.completion.generation.usage.completion_tokens, 0);
    EXPECT_GE(decode_calls(e) - calls, 1) << "the decode was never started";
    EXPECT_EQ(series_value(e.metrics().prometheus_text(), "llamapp_decoded_tokens_total"), 0)
        << "the decode ran to its end: the shutdown did not abort it";
    EXPECT_EQ(drain(*queued).completion.generation.finish_reason, FinishReason::cancelled);
}

TEST(Engine, ADecodeOverItsTimeBudgetIsAbortedAndTheEngineLivesOn) {
    const Model& m = test::stories_model();
    EngineOptions o = one_big_step(4096);
    o.context.decode_timeout = std::chrono::milliseconds(1);
    Engine e = engine(o);
    for (int i = 0; i < 2; ++i) {
        auto d = drain(*e.submit(request(long_prompt(m, 3000), 4)));
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
        ASSERT_TRUE(d.completion.generation.error);
        EXPECT_EQ(d.completion.generation.error->code, ErrorCode::timeout);
        EXPECT_EQ(e.stats().kv_tokens, 0);
    }
}

namespace {

// One request whose deadline passes while the decode thread holds it at admission, so that its
// one 3,000-token decode starts past the deadline: only the abort callback can stop that decode
// before a token is sampled. False, with nothing checked, when the request was not admitted
// before its deadline (a loaded machine): it expired in the queue instead.
bool deadline_aborts_the_decode(const Model& m, std::chrono::milliseconds timeout) {
    using Clock = std::chrono::steady_clock;
    EngineOptions o = one_big_step(4096);
    std::promise<Clock::time_point> deadline_known;
    std::shared_future<Clock::time_point> deadline = deadline_known.get_future().share();
    std::atomic<bool> admitted{false};
    o.on_lifecycle = [&](const LifecycleEvent& ev) {
        if (ev.stage != LifecycleStage::admitted) return;
        admitted = true;
        // Waits for the deadline itself, the outcome this needs, not for another thread.
        if (deadline.wait_for(60s) == std::future_status::ready)
            std::this_thread::sleep_until(deadline.get());
    };
    Engine e = engine(o);
    EngineRequest r = request(long_prompt(m, 3000), 4);
    r.options.timeout = timeout;
    auto h = e.submit(r);
    // The engine's deadline is `timeout` after a moment inside submit(): before this.
    deadline_known.set_value(Clock::now() + timeout + 1ms);
    if (!h) {
        ADD_FAILURE() << h.error().describe();
        return true;
    }
    const auto d = drain(*h);
    if (!admitted) return false;
    const Generation& g = d.completion.generation;
    EXPECT_EQ(g.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(g.usage.completion_tokens, 0);
    EXPECT_GE(decode_calls(e), 1) << "the decode was never started";
    EXPECT_EQ(series_value(e.metrics().prometheus_text(), "llamapp_decoded_tokens_total"), 0)
        << "the decode ran to its end: the deadline did not abort it";
    if (!g.error) {
        ADD_FAILURE() << "a deadline is reported as an error";
        return true;
    }
    EXPECT_EQ(g.error->code, ErrorCode::timeout);
    EXPECT_EQ(g.error->message, "generation deadline passed");
    return true;
}

}  // namespace

TEST(Engine, ARequestDeadlineAbortsItsDecodeInFlight) {
    const Model& m = test::stories_model();
    // A longer deadline only when a loaded machine could not admit the request in time.
    for (const auto timeout : {200ms, 2000ms, 20000ms})
        if (deadline_aborts_the_decode(m, timeout)) return;
    FAIL() << "the request was never admitted before its deadline";
}

TEST(Engine, CancellingOneHandleLeavesRequestsSharingItsOptionsAlone) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2, 1024));
    CancellationToken caller;  // copied into every request with its options
    // The cancelled ones are endless, so they cannot finish before they are cancelled.
    EngineRequest endless = request(encode(m, kPrompts[0]), -1);
    endless.options.cancel = caller;
    EngineRequest r = endless;
    r.options.max_tokens = 24;
    auto first = e.submit(endless);
    auto second = e.submit(r);
    ASSERT_TRUE(first && second);
    first->cancel();
    EXPECT_EQ(drain(*first).completion.generation.finish_reason, FinishReason::cancelled);
    const auto kept = drain(*second).completion.generation;
    EXPECT_EQ(kept.finish_reason, FinishReason::length);
    EXPECT_EQ(kept.usage.completion_tokens, 24);
    // The caller's own token still reaches every request made with it.
    auto third = e.submit(endless);
    ASSERT_TRUE(third);
    caller.cancel();
    EXPECT_EQ(drain(*third).completion.generation.finish_reason, FinishReason::cancelled);
}
