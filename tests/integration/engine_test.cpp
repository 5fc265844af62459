// Engine on the real trained tiny model: batching, strategies, reuse, sessions, scopes.
// Cancellation, deadlines, bounds and metrics: engine_lifecycle_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>

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
        saw_budget = saw_budget || budget.n_batch > 0;
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
    // Ten more tokens: computing them alone would take the CPU kernel's slow attention path, so
    // 64 are. A GPU's attention has no such path: there the ten are computed alone.
    const int computed = test::local_gpu() ? 10 : 64;
    std::vector<Token> next = deep;
    const auto more = encode(m, " and they played all day long in the sun");
    next.insert(next.end(), more.begin() + 1, more.begin() + 11);
    auto warm = drain(*e.submit(request(next, 8)));
    EXPECT_EQ(warm.completion.cache.source, ReuseSource::same_slot);
    EXPECT_EQ(warm.completion.cache.reused_tokens, static_cast<int>(next.size()) - computed);
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

TEST(Engine, TheAutomaticKvLayoutSharesOneCacheUpToFourSlotsAndSplitsItAbove) {
    // Unified: every slot may use all of n_ctx; per slot: n_ctx / slots each.
    using Layout = EngineOptions::KvLayout;
    for (const auto& [slots, layout, unified] :
         {std::tuple{4, Layout::automatic, true}, std::tuple{8, Layout::automatic, false},
          std::tuple{8, Layout::unified, true}, std::tuple{2, Layout::per_slot, false}}) {
        EngineOptions o = options(slots, 2048);
        o.kv_layout = layout;
        EXPECT_EQ(o.unified_kv(), unified) << slots;
        Engine e = engine(o);
        EXPECT_EQ(e.n_ctx(), unified ? 2048 : 2048 / slots) << slots;
        EXPECT_EQ(e.reuse_modes().copy_prefix, unified) << slots;
    }
}

TEST(Engine, SplitKvCacheCopiesPrefixesAndKeepsOutputs) {
    const Model& m = test::stories_model();
    EngineOptions o = options(2, 1024);
    o.kv_layout = EngineOptions::KvLayout::per_slot;  // 512 cells per slot
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

// With a cache per slot llama.cpp decodes a run of consecutive slots per pass: an idle slot
// between two streams gets a throwaway row at its next position, cut off after each call, so
// that it costs a row instead of a pass (sequential_split.hpp). What it holds stays reusable.
TEST(Engine, AnIdleSlotBetweenStreamsIsPaddedAndKeepsWhatItHolds) {
    const Model& m = test::stories_model();
    EngineOptions o = options(3, 1536);
    o.kv_layout = EngineOptions::KvLayout::per_slot;
    o.speculative.n_max = 0;
    Engine e = engine(o);
    auto on_slot = [&](const std::vector<Token>& prompt, int max_tokens, int slot) {
        EngineRequest r = request(prompt, max_tokens);
        r.slot = slot;
        return r;
    };
    const auto idle_prompt = encode(m, kPrompts[0]);
    const auto held = drain(*e.submit(on_slot(idle_prompt, 8, 1))).completion.generation.tokens;
    const auto padding = [&] {
        return test::prometheus_value(e.metrics().prometheus_text(), "llamapp_padding_rows_total")
            .value_or(-1);
    };
    EXPECT_EQ(padding(), 0);

    const auto p0 = encode(m, kPrompts[1]), p2 = encode(m, kPrompts[2]);
    auto handles = e.submit_all({on_slot(p0, 24, 0), on_slot(p2, 24, 2)});
    ASSERT_TRUE(handles);
    EXPECT_EQ(drain((*handles)[0]).completion.generation.tokens, solo(p0, 24));
    EXPECT_EQ(drain((*handles)[1]).completion.generation.tokens, solo(p2, 24));
    // One padding row for each call that held both streams: at least their replies' steps.
    EXPECT_GE(padding(), 20);

    std::vector<Token> next = idle_prompt;
    next.insert(next.end(), held.begin(), held.end());
    const auto more = encode(m, " Then");
    next.insert(next.end(), more.begin() + 1, more.end());
    auto again = drain(*e.submit(on_slot(next, 12, 1)));
    EXPECT_EQ(again.completion.cache.source, ReuseSource::same_slot);
    // It holds its prompt and every reply token but the last (sampled, never decoded).
    EXPECT_EQ(again.completion.cache.reused_tokens,
              static_cast<int>(idle_prompt.size() + held.size() - 1));
    EXPECT_EQ(again.completion.generation.tokens, solo(next, 12));
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
        if (ev.final()) {
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

// llama-server's return_progress and timings_per_token: progress alone before the prompt's first
// decode and after each chunk of it, then on every piece; nothing of it unless asked for.
TEST(Engine, ProgressIsReportedPerPromptChunkAndOnEachPiece) {
    const Model& m = test::stories_model();
    EngineOptions o = options(1);
    o.prefill_chunk = 8;
    o.min_prefill_rows = 0;
    Engine e = engine(o);
    const std::vector<Token> prompt = encode(m, kPrompts[2] + ". " + kPrompts[4]);
    ASSERT_GT(prompt.size(), 16u);
    const int total = static_cast<int>(prompt.size());
    for (const bool again : {false, true}) {  // the second run reuses all but the last token
        EngineRequest r = request(prompt, 4);
        r.report_progress = true;
        auto h = e.submit(r);
        ASSERT_TRUE(h);
        std::vector<Progress> prompt_reports;
        int pieces = 0;
        EngineEvent ev;
        while (h->next(ev)) {
            if (ev.final()) break;
            ASSERT_TRUE(ev.progress);
            const Progress& p = *ev.progress;
            EXPECT_EQ(p.prompt_tokens, total);
            if (ev.prompt_progress()) {
                EXPECT_EQ(pieces, 0) << "prompt progress after a piece";
                prompt_reports.push_back(p);
                continue;
            }
            ++pieces;
            EXPECT_EQ(p.processed_tokens, total);
            EXPECT_EQ(p.completion_tokens, pieces);
            EXPECT_GT(p.prompt_ms, 0.0);
        }
        ASSERT_GE(prompt_reports.size(), 2u);
        const Progress& first = prompt_reports.front();
        EXPECT_EQ(first.processed_tokens, first.cached_tokens);
        EXPECT_EQ(first.prompt_ms, 0.0);
        EXPECT_EQ(first.cached_tokens, again ? total - 1 : 0);
        for (std::size_t i = 1; i < prompt_reports.size(); ++i) {
            EXPECT_GT(prompt_reports[i].processed_tokens, prompt_reports[i - 1].processed_tokens);
            EXPECT_GE(prompt_reports[i].prompt_ms, prompt_reports[i - 1].prompt_ms);
        }
        EXPECT_EQ(prompt_reports.back().processed_tokens, total);
        const int computed = total - first.cached_tokens;
        EXPECT_EQ(prompt_reports.size(), 1u + static_cast<std::size_t>((computed + 7) / 8));
        EXPECT_EQ(pieces, 4);
    }
    auto plain = e.submit(request(prompt, 2));
    ASSERT_TRUE(plain);
    EngineEvent ev;
    while (plain->next(ev)) EXPECT_FALSE(ev.progress);
}
