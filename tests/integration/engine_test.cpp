// Engine on the real trained tiny model: batching, reuse, sessions, cancellation, queue bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "support/engine_helpers.hpp"
#include "support/prometheus.hpp"

using namespace llamapp;
using namespace std::chrono_literals;
using test::drain;
using test::encode;
using test::request;

namespace {

EngineOptions options(int slots, std::int64_t n_ctx = 1024) {
    EngineOptions o;
    o.context.n_ctx = n_ctx;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;  // a tiny model; one thread never waits at a barrier for a
                              // descheduled partner when ctest runs two tests on two cores
    o.min_adopt_tokens = 4;
    return o;
}

Engine engine(EngineOptions o) {
    return test::create_engine(test::stories_model(), std::move(o));
}

const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "The little dog",
    "Lily wanted to play with her friend Tom in the park",
    "One day, a big bird",
    "Tim had a red ball. He liked to",
    "There was a girl named Sue",
    "The sun was hot and the cat",
    "Mom said it was time for bed, but Ben",
};

// What the foundation's single-stream generate produces for a prompt alone.
std::vector<Token> solo(const std::vector<Token>& prompt, int max_tokens) {
    Context ctx = test::stories_context(1024);
    GenerateOptions o = test::greedy(max_tokens);
    o.ignore_eos = true;
    auto r = ctx.generate(prompt, o);
    if (!r) throw std::runtime_error(r.error().describe());
    return r->tokens;
}

}  // namespace

// The requests are submitted at once, so which rows share a decode call does not depend on
// timing: llama.cpp's kernels may sum in another order when a sequence's rows sit elsewhere in
// a batch or its cells elsewhere in the cache, and a greedy stream then drifts after a few dozen
// tokens (seen with requests arriving one by one on a loaded machine).
namespace {
std::vector<RequestHandle> submit_together(Engine& e, int max_tokens) {
    std::vector<EngineRequest> requests;
    for (const auto& p : kPrompts)
        requests.push_back(request(encode(test::stories_model(), p), max_tokens));
    auto handles = e.submit_all(std::move(requests));
    if (!handles) throw std::runtime_error(handles.error().describe());
    return std::move(*handles);
}
}  // namespace

TEST(Engine, ConcurrentGreedyRequestsMatchEachRunAlone) {
    const Model& m = test::stories_model();
    Engine e = engine(options(4));
    // 8 requests on 4 slots: half queue, all batch.
    std::vector<RequestHandle> handles = submit_together(e, 48);
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
        auto d = drain(handles[i]);
        EXPECT_EQ(d.finals, 1);
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::length);
        EXPECT_EQ(d.completion.generation.tokens, solo(encode(m, kPrompts[i]), 48))
            << "prompt " << i;
        EXPECT_EQ(d.text, d.completion.generation.text);
    }
}

// Also with streams' tokens and prompt chunks in one decode call or in two.
TEST(Engine, EveryStrategyProducesTheSameGreedyText) {
    const Model& m = test::stories_model();
    std::vector<std::vector<Token>> expected;
    for (const auto& p : kPrompts) expected.push_back(solo(encode(m, p), 24));
    for (bool separate : {true, false}) {
        for (auto strategy :
             {decode_maximal(), prefill_priority(), balanced(), first_token_first()}) {
            EngineOptions o = options(3);
            o.strategy = strategy;
            o.prefill_chunk = 3;  // several prefill chunks per prompt
            o.separate_prompt_rows = separate;
            Engine e = engine(o);
            std::vector<RequestHandle> handles = submit_together(e, 24);
            for (std::size_t i = 0; i < handles.size(); ++i) {
                auto d = drain(handles[i]);
                EXPECT_EQ(d.completion.generation.tokens, expected[i])
                    << strategy->name() << " separate=" << separate << " prompt " << i;
            }
        }
    }
}

// A user's strategy that gives nobody anything on odd calls (the engine must fall back) and
// asks far beyond every limit on even ones (the engine must clamp).
class Careless final : public BatchStrategy {
  public:
    std::string_view name() const override { return "careless"; }
    void plan(std::span<const SequenceDemand> demand, const BatchBudget& budget,
              std::span<int> take) override {
        ++calls;
        for (const auto& d : demand) {
            saw_decoding = saw_decoding || d.decoding;
            saw_prefill = saw_prefill || d.prefill_left > 0;
        }
        saw_budget = saw_budget || budget.max_tokens > 0;
        std::fill(take.begin(), take.end(), calls % 2 == 1 ? 0 : 100000);
    }
    int calls = 0;  // the decode thread is the only caller
    bool saw_decoding = false, saw_prefill = false, saw_budget = false;
};

TEST(Engine, AUserStrategyIsCalledClampedAndBackedUp) {
    const Model& m = test::stories_model();
    std::vector<std::vector<Token>> expected;
    for (const auto& p : kPrompts) expected.push_back(solo(encode(m, p), 24));
    auto strategy = std::make_shared<Careless>();
    EngineOptions o = options(3);
    o.strategy = strategy;
    o.prefill_chunk = 3;
    std::vector<RequestHandle> handles;
    {
        Engine e = engine(o);
        handles = submit_together(e, 24);
        for (std::size_t i = 0; i < handles.size(); ++i)
            EXPECT_EQ(drain(handles[i]).completion.generation.tokens, expected[i]) << i;
    }  // the engine's thread has stopped: the counters are safe to read
    EXPECT_GT(strategy->calls, 24);
    EXPECT_TRUE(strategy->saw_decoding);
    EXPECT_TRUE(strategy->saw_prefill);
    EXPECT_TRUE(strategy->saw_budget);
}

TEST(Engine, ShortPromptTailsAfterADeepPrefixAreWidenedToOneTile) {
    const Model& m = test::stories_model();
    Engine e = engine(options(1));
    // A deep prompt: the story prompts over and over, 600 tokens.
    std::vector<Token> deep = encode(m, kPrompts[2]);
    while (deep.size() < 600) {
        const auto more = encode(m, " " + kPrompts[deep.size() % kPrompts.size()]);
        deep.insert(deep.end(), more.begin() + 1, more.end());
    }
    deep.resize(600);
    drain(*e.submit(request(deep, 1)));
    // Ten more tokens: computing them alone would take the slow attention path, so 64 are.
    std::vector<Token> next = deep;
    const auto more = encode(m, " and they played all day long in the sun");
    next.insert(next.end(), more.begin() + 1, more.begin() + 11);
    auto warm = drain(*e.submit(request(next, 8)));
    EXPECT_EQ(warm.completion.cache.source, ReuseSource::same_slot);
    EXPECT_EQ(warm.completion.cache.reused_tokens, static_cast<int>(next.size()) - 64);
    EXPECT_EQ(warm.completion.generation.tokens, solo(next, 8));

    // Off: only the new tokens are computed.
    EngineOptions o = options(1);
    o.min_prefill_rows = 0;
    Engine plain = engine(o);
    drain(*plain.submit(request(deep, 1)));
    auto exact = drain(*plain.submit(request(next, 8)));
    EXPECT_EQ(exact.completion.cache.reused_tokens, 600);
    EXPECT_EQ(exact.completion.generation.tokens, warm.completion.generation.tokens);
}

TEST(Engine, PrefixReuseInTheSameSlotMatchesCold) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2));
    const auto base = encode(m, kPrompts[2]);
    auto first = drain(*e.submit(request(base, 16)));
    // The next turn: the previous prompt and reply, then more text.
    std::vector<Token> next = base;
    next.insert(next.end(), first.completion.generation.tokens.begin(),
                first.completion.generation.tokens.end());
    const auto more = encode(m, " Then they went home");
    next.insert(next.end(), more.begin() + 1, more.end());  // without its BOS
    auto warm = drain(*e.submit(request(next, 16)));
    EXPECT_EQ(warm.completion.cache.source, ReuseSource::same_slot);
    // The reply's last token was sampled but never decoded, so it is not in the cache.
    EXPECT_EQ(warm.completion.cache.reused_tokens,
              static_cast<int>(base.size() + first.completion.generation.tokens.size() - 1));
    EXPECT_EQ(warm.completion.generation.usage.cached_tokens, warm.completion.cache.reused_tokens);
    EXPECT_EQ(warm.completion.generation.tokens, solo(next, 16));

    // The same prompt again reuses all but its last token, and still produces fresh logits.
    auto again = drain(*e.submit(request(next, 16)));
    EXPECT_EQ(again.completion.cache.reused_tokens, static_cast<int>(next.size() - 1));
    EXPECT_EQ(again.completion.generation.tokens, warm.completion.generation.tokens);

    EngineRequest cold = request(next, 16);
    cold.options.reuse_prefix = false;
    auto c = drain(*e.submit(cold));
    EXPECT_EQ(c.completion.cache.source, ReuseSource::none);
    EXPECT_EQ(c.completion.generation.tokens, warm.completion.generation.tokens);
}

TEST(Engine, AnotherSlotsPrefixIsAdopted) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2));
    const auto system = encode(m,
                               "Lily and Ben were friends. They liked to play in the park "
                               "every day after school, and they shared their toys.");
    auto with = [&](const std::string& tail) {
        auto t = encode(m, tail);
        std::vector<Token> p = system;
        p.insert(p.end(), t.begin() + 1, t.end());
        return p;
    };
    // Request 1 pins slot A through a session, so request 2 must run on the other slot.
    EngineRequest r1 = request(with(" One day"), 8);
    r1.session = "pinned";
    auto d1 = drain(*e.submit(r1));
    EXPECT_EQ(d1.completion.cache.source, ReuseSource::none);

    const auto p2 = with(" The dog");
    auto d2 = drain(*e.submit(request(p2, 12)));
    EXPECT_NE(d2.completion.cache.slot, d1.completion.cache.slot);
    EXPECT_EQ(d2.completion.cache.source, ReuseSource::other_slot);
    EXPECT_GE(d2.completion.cache.reused_tokens, static_cast<int>(system.size()) - 1);
    EXPECT_EQ(d2.completion.generation.tokens, solo(p2, 12));
    EXPECT_EQ(e.reuse_modes().copy_prefix, true);
}

TEST(Engine, SessionsStickForkAndEnd) {
    const Model& m = test::stories_model();
    Engine e = engine(options(3));
    const auto p = encode(m, kPrompts[0]);
    EngineRequest r = request(p, 10);
    r.session = "a";
    auto first = drain(*e.submit(r));
    ASSERT_TRUE(e.fork_session("a", "b"));
    EXPECT_EQ(e.fork_session("a", "b").error().code, ErrorCode::already_exists);
    EXPECT_EQ(e.fork_session("missing", "c").error().code, ErrorCode::not_found);
    auto list = e.sessions();
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].id, "a");
    EXPECT_EQ(list[1].id, "b");
    EXPECT_NE(list[0].slot, list[1].slot);
    EXPECT_EQ(list[0].cached_tokens, list[1].cached_tokens);

    // Both continuations extend the shared transcript from their own sequence.
    std::vector<Token> transcript = p;
    transcript.insert(transcript.end(), first.completion.generation.tokens.begin(),
                      first.completion.generation.tokens.end());
    for (const char* id : {"a", "b"}) {
        auto tail = encode(m, id[0] == 'a' ? " and the cat" : " but the dog");
        std::vector<Token> next = transcript;
        next.insert(next.end(), tail.begin() + 1, tail.end());
        EngineRequest turn = request(next, 10);
        turn.session = id;
        auto d = drain(*e.submit(turn));
        EXPECT_EQ(d.completion.cache.source, ReuseSource::same_slot) << id;
        EXPECT_EQ(d.completion.cache.slot, id[0] == 'a' ? list[0].slot : list[1].slot);
        EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(transcript.size() - 1));
        EXPECT_EQ(d.completion.generation.tokens, solo(next, 10)) << id;
    }
    ASSERT_TRUE(e.end_session("b"));
    EXPECT_EQ(e.end_session("b").error().code, ErrorCode::not_found);
    EXPECT_EQ(e.sessions().size(), 1u);
}

TEST(Engine, IdleSessionsAreReclaimedWhenSlotsRunOut) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2));
    for (const char* id : {"s1", "s2", "s3"}) {
        EngineRequest r = request(encode(m, kPrompts[1]), 4);
        r.session = id;
        auto d = drain(*e.submit(r));
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::length) << id;
    }
    auto list = e.sessions();
    ASSERT_EQ(list.size(), 2u);  // s1, the least recently used, was reclaimed
    EXPECT_EQ(list[0].id, "s2");
    EXPECT_EQ(list[1].id, "s3");
}

// The value of one series in Prometheus text, or -1 when it is missing.
double series_value(const std::string& text, const std::string& series) {
    return test::prometheus_value(text, series).value_or(-1);
}

double decode_calls(const Engine& e) {
    return series_value(e.metrics().prometheus_text(), "llamapp_decode_calls_total");
}

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

TEST(Engine, KvPressureFailsOnlyWhatCannotFit) {
    const Model& m = test::stories_model();
    // 256 cells shared by 4 slots, each wanting about 150.
    Engine e = engine(options(4, 256));
    // Together, so that they run at once whatever the scheduling of this thread.
    std::vector<EngineRequest> four;
    for (int i = 0; i < 4; ++i) four.push_back(request(encode(m, kPrompts[i]), 140));
    auto handles = *e.submit_all(std::move(four));
    int finished = 0, overflowed = 0;
    for (auto& h : handles) {
        auto d = drain(h);
        EXPECT_EQ(d.finals, 1);
        const auto& g = d.completion.generation;
        if (g.finish_reason == FinishReason::length) ++finished;
        if (g.finish_reason == FinishReason::error) {
            ASSERT_TRUE(g.error);
            EXPECT_EQ(g.error->code, ErrorCode::context_overflow);
            ++overflowed;
        }
    }
    EXPECT_GE(finished, 1);
    EXPECT_EQ(finished + overflowed, 4);
    EXPECT_GT(overflowed, 0);
    // Cached sequences are evicted for new work instead of failing it.
    for (int i = 0; i < 3; ++i) {
        auto d = drain(*e.submit(request(encode(m, kPrompts[4 + i]), 100)));
        EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::length);
    }
    EXPECT_TRUE(test::eventually([&] { return e.stats().busy_slots == 0; }));
}

TEST(Engine, KvPressureEvictsAnIdleSequenceBeforeFailingAnyone) {
    const Model& m = test::stories_model();
    // 256 cells, two slots: one idle sequence holding ~120 cells, then a request needing ~220.
    EngineOptions o = options(2, 256);
    o.draft_tokens = 0;  // drafts would be dropped first; this is about cached sequences
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

TEST(Engine, SubmitAllIsAllOrNothing) {
    const Model& m = test::stories_model();
    EngineOptions o = options(2);
    o.max_queued_requests = 3;
    Engine e = engine(o);
    const auto p = encode(m, kPrompts[0]);
    std::vector<EngineRequest> mixed = {request(p, 4), request({}, 4), request(p, 4)};
    auto bad = e.submit_all(mixed);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
    std::vector<EngineRequest> too_many(4, request(p, 4));
    auto over = e.submit_all(too_many);
    ASSERT_FALSE(over);
    EXPECT_EQ(over.error().code, ErrorCode::queue_full);
    EXPECT_EQ(e.stats().queued_requests, 0u);
    auto ok = e.submit_all({request(p, 4), request(p, 4), request(p, 4)});
    ASSERT_TRUE(ok);
    ASSERT_EQ(ok->size(), 3u);
    for (auto& h : *ok) EXPECT_EQ(drain(h).completion.generation.usage.completion_tokens, 4);
}

TEST(Engine, SplitKvCacheCopiesPrefixesAndKeepsOutputs) {
    const Model& m = test::stories_model();
    EngineOptions o = options(2, 1024);
    o.unified_kv = false;  // 512 cells per slot
    Engine e = engine(o);
    EXPECT_FALSE(e.reuse_modes().copy_prefix);
    EXPECT_TRUE(e.reuse_modes().copy_whole);
    EXPECT_TRUE(e.reuse_modes().trim_tail);
    EXPECT_EQ(e.n_ctx(), 512);
    EXPECT_EQ(e.submit(request(std::vector<Token>(600, 1), 4)).error().code,
              ErrorCode::context_overflow);

    std::vector<RequestHandle> handles;
    for (int i = 0; i < 4; ++i) handles.push_back(*e.submit(request(encode(m, kPrompts[i]), 24)));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(drain(handles[static_cast<std::size_t>(i)]).completion.generation.tokens,
                  solo(encode(m, kPrompts[static_cast<std::size_t>(i)]), 24));
    }

    // Adoption from the other stream: a whole copy, then the tail trimmed.
    const auto base = encode(m, kPrompts[2]);
    EngineRequest r1 = request(base, 8);
    r1.session = "pinned";
    auto d1 = drain(*e.submit(r1));
    std::vector<Token> p2 = base;
    const auto tail = encode(m, " The dog barked");
    p2.insert(p2.end(), tail.begin() + 1, tail.end());
    auto d2 = drain(*e.submit(request(p2, 12)));
    EXPECT_NE(d2.completion.cache.slot, d1.completion.cache.slot);
    EXPECT_EQ(d2.completion.cache.source, ReuseSource::other_slot);
    EXPECT_EQ(d2.completion.cache.reused_tokens, static_cast<int>(base.size()));
    EXPECT_EQ(d2.completion.generation.tokens, solo(p2, 12));

    ASSERT_TRUE(e.end_session("pinned"));
    EngineRequest s = request(base, 6);
    s.session = "a";
    auto first = drain(*e.submit(s));
    ASSERT_TRUE(e.fork_session("a", "b"));
    std::vector<Token> next = base;
    next.insert(next.end(), first.completion.generation.tokens.begin(),
                first.completion.generation.tokens.end());
    EngineRequest turn = request(next, 6);
    turn.session = "b";
    auto forked = drain(*e.submit(turn));
    EXPECT_EQ(forked.completion.cache.reused_tokens, static_cast<int>(next.size() - 1));
    EXPECT_EQ(forked.completion.generation.tokens, solo(next, 6));
}

TEST(Engine, LogprobsArriveWithEachPiece) {
    const Model& m = test::stories_model();
    Engine e = engine(options(1));
    EngineRequest r = request(encode(m, kPrompts[0]), 6);
    r.options.top_logprobs = 3;
    auto h = e.submit(r);
    ASSERT_TRUE(h);
    EngineEvent ev;
    int with = 0;
    while (h->next(ev)) {
        if (ev.final) {
            EXPECT_EQ(ev.completion->generation.logprobs.size(), 6u);
            continue;
        }
        ASSERT_TRUE(ev.piece.logprobs);
        EXPECT_EQ(ev.piece.logprobs->chosen.token, ev.piece.token);
        EXPECT_EQ(ev.piece.logprobs->top.size(), 3u);
        EXPECT_LE(ev.piece.logprobs->chosen.logprob, 0.0f);
        ++with;
    }
    EXPECT_EQ(with, 6);
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
    auto d = drain(*e.submit(r));
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
    std::promise<void> admitted;
    o.on_lifecycle = [&](const LifecycleEvent& ev) {
        if (ev.stage == LifecycleStage::admitted) admitted.set_value();
    };
    Engine e = engine(o);
    auto h = e.submit(request(long_prompt(m, 3000), 4));
    ASSERT_TRUE(h);
    ASSERT_EQ(admitted.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
    // The request's one 3,000-token decode is now starting (it takes seconds); the shutdown
    // lands inside it and must not wait for it.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto started = std::chrono::steady_clock::now();
    e.shutdown(0ms);
    const double waited_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    const auto d = drain(*h);
    EXPECT_EQ(d.completion.generation.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(d.completion.generation.usage.completion_tokens, 0);
    EXPECT_EQ(series_value(e.metrics().prometheus_text(), "llamapp_decoded_tokens_total"), 0)
        << "the decode ran to its end; shutdown waited " << waited_ms << " ms";
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

TEST(Engine, ARequestDeadlineAbortsItsDecodeInFlight) {
    const Model& m = test::stories_model();
    EngineOptions o = one_big_step(4096);
    // The deadline passes while the request is being admitted, so its one 3,000-token decode
    // starts late: only the abort callback can stop it before a token is sampled.
    o.on_lifecycle = [](const LifecycleEvent& ev) {
        if (ev.stage == LifecycleStage::admitted)
            std::this_thread::sleep_for(std::chrono::milliseconds(600));
    };
    Engine e = engine(o);
    EngineRequest r = request(long_prompt(m, 3000), 4);
    // Long enough that the decode thread reaches admission in time even on a loaded machine.
    r.options.timeout = std::chrono::milliseconds(500);
    auto d = drain(*e.submit(r));
    const Generation& g = d.completion.generation;
    EXPECT_EQ(g.finish_reason, FinishReason::cancelled);
    EXPECT_EQ(g.usage.completion_tokens, 0);
    ASSERT_TRUE(g.error);
    EXPECT_EQ(g.error->code, ErrorCode::timeout);
    EXPECT_EQ(g.error->message, "generation deadline passed");
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

TEST(Engine, ABurstSharingASystemPromptComputesItOnce) {
    const Model& m = test::stories_model();
    EngineOptions o = options(4, 2048);
    o.prefill_chunk = 32;  // the shared prefix takes several steps to compute
    Engine e = engine(o);
    std::vector<Token> system;
    while (system.size() < 200) {
        auto t = encode(m, " Lily and Ben were best friends and liked to play outside.");
        system.insert(system.end(), t.begin() + (system.empty() ? 0 : 1), t.end());
    }
    std::vector<EngineRequest> burst;
    std::vector<std::vector<Token>> prompts;
    for (int i = 0; i < 4; ++i) {
        auto tail = encode(m, kPrompts[static_cast<std::size_t>(i)]);
        std::vector<Token> p = system;
        p.insert(p.end(), tail.begin() + 1, tail.end());
        prompts.push_back(p);
        burst.push_back(request(p, 8));
    }
    auto handles = e.submit_all(std::move(burst));
    ASSERT_TRUE(handles);
    int adopted = 0;
    for (std::size_t i = 0; i < handles->size(); ++i) {
        auto d = drain((*handles)[i]);
        if (d.completion.cache.source == ReuseSource::other_slot) {
            ++adopted;
            EXPECT_GE(d.completion.cache.reused_tokens, static_cast<int>(system.size()) - 1);
        }
        EXPECT_EQ(d.completion.generation.tokens, solo(prompts[i], 8)) << i;
    }
    EXPECT_EQ(adopted, 3);
}

TEST(Engine, CacheScopesKeepTenantsApart) {
    const Model& m = test::stories_model();
    Engine e = engine(options(2));
    const auto p = encode(m, kPrompts[2]);
    auto in = [&](const std::string& scope, const std::string& session = {}) {
        EngineRequest r = request(p, 6);
        r.cache_scope = scope;
        r.session = session;
        return drain(*e.submit(r)).completion;
    };
    EXPECT_EQ(in("tenant-a", "chat").cache.source, ReuseSource::none);
    // Another tenant with the same prompt neither reuses the slot nor copies from it.
    auto other = in("tenant-b");
    EXPECT_EQ(other.cache.source, ReuseSource::none);
    EXPECT_EQ(other.cache.reused_tokens, 0);
    // The same tenant does.
    auto same = in("tenant-b");
    EXPECT_EQ(same.cache.source, ReuseSource::same_slot);
    EXPECT_EQ(same.generation.tokens, other.generation.tokens);

    auto list = e.sessions();
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].scope, "tenant-a");
    EXPECT_EQ(list[0].id, "chat");
    // A session id is only found within its scope.
    EXPECT_EQ(e.end_session("chat").error().code, ErrorCode::not_found);
    EXPECT_EQ(e.fork_session("chat", "copy", "tenant-b").error().code, ErrorCode::not_found);
    ASSERT_TRUE(e.fork_session("chat", "copy", "tenant-a"));
    EXPECT_TRUE(e.end_session("copy", "tenant-a"));
    EXPECT_TRUE(e.end_session("chat", "tenant-a"));
}
