#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <future>
#include <thread>

#include "support/stories.hpp"

using namespace llamapp;
using test::greedy;

namespace {

const char* const kPrompt = "Once upon a time";

ErrorCode error_of(const Result<Generation>& r) {
    return r ? ErrorCode::internal : r.error().code;
}

}  // namespace

TEST(Generation, StreamPullAndGenerateAgree) {
    Context ctx = test::stories_context();
    auto whole = ctx.generate(kPrompt, greedy(60));
    ASSERT_TRUE(whole);

    std::string pushed;
    int pieces = 0;
    EXPECT_TRUE(ctx.clear());
    auto streamed = ctx.stream(kPrompt, greedy(60), [&](const StreamPiece& p) {
        pushed += p.text;
        ++pieces;
        return true;
    });
    ASSERT_TRUE(streamed);
    EXPECT_EQ(pushed, whole->text);
    EXPECT_EQ(pieces, 60);

    EXPECT_TRUE(ctx.clear());
    auto tokens = ctx.model().tokenizer().encode(kPrompt);
    ASSERT_TRUE(tokens);
    auto stream = ctx.start(*tokens, greedy(60));
    ASSERT_TRUE(stream);
    std::string pulled;
    StreamPiece piece;
    while (stream->next(piece)) pulled += piece.text;
    EXPECT_EQ(pulled, whole->text);
    EXPECT_EQ(stream->result().tokens, whole->tokens);
}

TEST(Generation, ReportsUsageAndTimings) {
    Context ctx = test::stories_context();
    auto r = ctx.generate(kPrompt, greedy(20));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->usage.prompt_tokens, 5);  // BOS + 4
    EXPECT_EQ(r->usage.completion_tokens, 20);
    EXPECT_EQ(r->finish_reason, FinishReason::length);
    EXPECT_GT(r->timings.prefill_ms, 0);
    EXPECT_GT(r->timings.decode_tokens_per_s, 0);
    EXPECT_GT(r->timings.ttft_ms, 0);
    EXPECT_GE(r->timings.total_ms, r->timings.ttft_ms);
}

TEST(Generation, StopStringCutsTextAndIsNeverEmitted) {
    Context ctx = test::stories_context();
    auto full = ctx.generate(kPrompt, greedy(60));
    ASSERT_TRUE(full);
    const std::string stop = "little girl";
    const auto at = full->text.find(stop);
    ASSERT_NE(at, std::string::npos);

    EXPECT_TRUE(ctx.clear());
    GenerateOptions o = greedy(60);
    o.stop = {"never-appears", stop};
    std::string streamed;
    auto r = ctx.stream(kPrompt, o, [&](const StreamPiece& p) {
        streamed += p.text;
        EXPECT_EQ(p.text.find("little"), std::string::npos);
        return true;
    });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::stop);
    EXPECT_EQ(r->stop_sequence, stop);
    EXPECT_EQ(r->text, full->text.substr(0, at));
    EXPECT_EQ(streamed, r->text);
}

TEST(Generation, CallbackCanStopAndTokenCanCancel) {
    Context ctx = test::stories_context();
    int seen = 0;
    auto r = ctx.stream(kPrompt, greedy(100), [&](const StreamPiece&) { return ++seen < 3; });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::cancelled);
    EXPECT_EQ(r->usage.completion_tokens, 3);

    GenerateOptions o = greedy(100);
    r = ctx.stream(kPrompt, o, [&](const StreamPiece&) {
        o.cancel.cancel();  // copies share the flag
        return true;
    });
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::cancelled);
    EXPECT_EQ(r->usage.completion_tokens, 1);
}

TEST(Generation, CancelFromAnotherThreadStopsAnEndlessRun) {
    Context ctx = test::stories_context(2048);
    GenerateOptions o = greedy(-1);
    o.ignore_eos = true;
    constexpr int kCancelAt = 8;
    // The run pauses at its kCancelAt-th token until another thread has cancelled it, so the
    // cancel always lands mid-run, however fast the whole context would otherwise fill.
    std::promise<void> reached, cancelled;
    std::future<void> run_reached = reached.get_future(), run_cancelled = cancelled.get_future();
    std::thread canceller([&, token = o.cancel] {
        run_reached.wait();
        token.cancel();
        cancelled.set_value();
    });
    int seen = 0;
    auto r = ctx.stream(kPrompt, o, [&](const StreamPiece&) {
        if (++seen == kCancelAt) {
            reached.set_value();
            run_cancelled.wait();
        }
        return true;  // only the token stops it
    });
    if (seen < kCancelAt) reached.set_value();  // never reached: let the thread end
    canceller.join();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::cancelled);
    // Noticed at the next step at the latest, far short of the 2,048 the context allows.
    EXPECT_GE(r->usage.completion_tokens, kCancelAt);
    EXPECT_LE(r->usage.completion_tokens, kCancelAt + 1);
    // The context is usable afterwards and reuses what was computed.
    auto again = ctx.generate(kPrompt, greedy(5));
    ASSERT_TRUE(again);
    EXPECT_EQ(again->usage.completion_tokens, 5);
}

TEST(Generation, DeadlineEndsGeneration) {
    Context ctx = test::stories_context(2048);
    GenerateOptions o = greedy(-1);
    o.ignore_eos = true;
    o.timeout = std::chrono::milliseconds(30);
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r);  // even when the deadline passes during prefill
    ASSERT_EQ(r->finish_reason, FinishReason::cancelled) << "2048 tokens should not fit in 30 ms";
    ASSERT_TRUE(r->error);
    EXPECT_EQ(r->error->code, ErrorCode::timeout);
}

TEST(Generation, BadRequestsAreTypedErrors) {
    Context ctx = test::stories_context(64);
    EXPECT_EQ(error_of(ctx.generate("", greedy(5))), ErrorCode::invalid_argument);
    EXPECT_EQ(error_of(ctx.generate(std::span<const Token>{}, greedy(5))),
              ErrorCode::invalid_argument);
    EXPECT_EQ(error_of(ctx.generate(kPrompt, greedy(0))), ErrorCode::invalid_argument);
    std::string long_prompt;
    for (int i = 0; i < 100; ++i) long_prompt += "Once upon a time ";
    EXPECT_EQ(error_of(ctx.generate(long_prompt, greedy(5))), ErrorCode::context_overflow);
    const std::vector<Token> bad_ids = {1, 600};
    EXPECT_EQ(error_of(ctx.generate(bad_ids, greedy(5))), ErrorCode::invalid_argument);

    GenerateOptions grammar = greedy(5);
    grammar.sampling.grammar = "root ::= (";
    EXPECT_EQ(error_of(ctx.generate(kPrompt, grammar)), ErrorCode::invalid_grammar);
    GenerateOptions schema = greedy(5);
    schema.sampling.json_schema = "{\"type\": ";
    EXPECT_EQ(error_of(ctx.generate(kPrompt, schema)), ErrorCode::invalid_json_schema);
    GenerateOptions bias = greedy(5);
    bias.sampling.logit_bias = {{9999, -1.0f}};
    EXPECT_EQ(error_of(ctx.generate(kPrompt, bias)), ErrorCode::invalid_argument);

    // Nothing above broke the context.
    auto ok = ctx.generate(kPrompt, greedy(5));
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->usage.completion_tokens, 5);
}

TEST(Generation, RunsUntilContextIsFull) {
    Context ctx = test::stories_context(64);
    GenerateOptions o = greedy(1000);
    o.ignore_eos = true;
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::length);
    // llama.cpp rounds n_ctx up to a multiple of 256. Every position is used; the last sampled
    // token needs none because it is never fed back.
    EXPECT_EQ(r->usage.prompt_tokens + r->usage.completion_tokens, ctx.n_ctx() + 1);
}

TEST(Generation, GrammarConstrainsOutput) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(10);
    o.sampling.grammar = "root ::= \"yes\" | \"no\"";
    auto r = ctx.generate("Is the sky blue?", o);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_TRUE(r->text == "yes" || r->text == "no") << r->text;
    EXPECT_EQ(r->finish_reason, FinishReason::stop);
}

TEST(Generation, JsonSchemaOutputParsesAndValidates) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(200);
    o.sampling.temperature = 0.7f;
    o.sampling.seed = 42;
    o.sampling.json_schema = R"({"type":"object","properties":{
        "answer":{"enum":["yes","no"]},"count":{"type":"integer","minimum":0,"maximum":9}},
        "required":["answer","count"],"additionalProperties":false})";
    auto r = ctx.generate("Tell me", o);
    ASSERT_TRUE(r) << r.error().describe();
    ASSERT_EQ(r->finish_reason, FinishReason::stop) << r->text;
    auto j = nlohmann::json::parse(r->text);
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j["answer"] == "yes" || j["answer"] == "no");
    EXPECT_TRUE(j["count"].is_number_integer());
    EXPECT_EQ(j.size(), 2u);
}

TEST(Generation, LogprobsAreSortedAndMatchGreedy) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(10);
    o.logprobs = true;
    o.top_logprobs = 3;
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->logprobs.size(), 10u);
    for (const auto& lp : r->logprobs) {
        ASSERT_EQ(lp.top.size(), 3u);
        EXPECT_LE(lp.chosen.logprob, 0.0f);
        EXPECT_EQ(lp.top[0].token, lp.chosen.token);  // greedy picks the most likely
        EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
        EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
        EXPECT_FALSE(lp.top[0].piece.empty());
    }
}

// llama-server's post_sampling_probs: what the chain left, renormalized; greedy is certain.
TEST(Generation, PostSamplingProbabilitiesAreWhatTheChainLeft) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(8);
    o.sampling.temperature = 1.0f;
    o.sampling.top_k = 4;
    o.sampling.top_p = 1.0f;
    o.sampling.min_p = 0.0f;
    o.sampling.seed = 11;
    o.top_logprobs = 10;
    o.post_sampling_probs = true;
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->logprobs.size(), 8u);
    for (const auto& lp : r->logprobs) {
        ASSERT_FALSE(lp.top.empty());
        EXPECT_LE(lp.top.size(), 4u);  // top_k kept at most four
        double sum = 0;
        bool chosen_listed = false;
        for (std::size_t i = 0; i < lp.top.size(); ++i) {
            sum += std::exp(lp.top[i].logprob);
            chosen_listed = chosen_listed || lp.top[i].token == lp.chosen.token;
            if (i > 0) {
                EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
            }
        }
        EXPECT_NEAR(sum, 1.0, 1e-4);
        EXPECT_TRUE(chosen_listed);
        EXPECT_LE(lp.chosen.logprob, 0.0f);
    }
    ASSERT_TRUE(ctx.clear());
    GenerateOptions g = greedy(3);
    g.top_logprobs = 5;
    g.post_sampling_probs = true;
    auto certain = ctx.generate(kPrompt, g);
    ASSERT_TRUE(certain);
    for (const auto& lp : certain->logprobs) {
        EXPECT_EQ(lp.chosen.logprob, 0.0f);
        ASSERT_EQ(lp.top.size(), 1u);
        EXPECT_EQ(lp.top[0].token, lp.chosen.token);
    }
}

TEST(Generation, PrefixReuseGivesTheColdOutput) {
    Context ctx = test::stories_context();
    const std::string base = "Once upon a time, there was a little girl named Lily.";
    const std::string extended = base + " She had a red ball";
    auto cold = ctx.generate(extended, greedy(40));
    ASSERT_TRUE(cold);

    EXPECT_TRUE(ctx.clear());
    ASSERT_TRUE(ctx.generate(base, greedy(10)));
    auto warm = ctx.generate(extended, greedy(40));
    ASSERT_TRUE(warm);
    EXPECT_GT(warm->usage.cached_tokens, 10);
    EXPECT_EQ(warm->text, cold->text);

    // Same prompt again: everything but the last token is reused.
    auto same = ctx.generate(extended, greedy(40));
    ASSERT_TRUE(same);
    EXPECT_EQ(same->usage.cached_tokens, same->usage.prompt_tokens - 1);
    EXPECT_EQ(same->text, cold->text);

    GenerateOptions no_reuse = greedy(40);
    no_reuse.reuse_prefix = false;
    auto fresh = ctx.generate(extended, no_reuse);
    ASSERT_TRUE(fresh);
    EXPECT_EQ(fresh->usage.cached_tokens, 0);
    EXPECT_EQ(fresh->text, cold->text);
}

TEST(Generation, SeededSamplingIsReproducible) {
    Context ctx = test::stories_context();
    GenerateOptions o;
    o.max_tokens = 30;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 1234;
    auto a = ctx.generate(kPrompt, o);
    auto b = ctx.generate(kPrompt, o);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->tokens, b->tokens);
}

TEST(Generation, EverySamplerTakesPartAndIsSeeded) {
    Context ctx = test::stories_context();
    std::vector<void (*)(SamplingParams&)> variants = {
        [](SamplingParams& p) {
            p.repeat_penalty = 1.3f;
            p.frequency_penalty = 0.5f;
            p.presence_penalty = 0.5f;
        },
        [](SamplingParams& p) { p.dry_multiplier = 0.8f; },
        [](SamplingParams& p) {
            p.xtc_probability = 0.5f;
            p.xtc_threshold = 0.1f;
        },
        [](SamplingParams& p) { p.mirostat = 1; },
        [](SamplingParams& p) { p.mirostat = 2; },
        [](SamplingParams& p) {
            p.typical_p = 0.9f;
            p.min_p = 0.1f;
            p.top_k = 0;
        },
    };
    GenerateOptions base;
    base.max_tokens = 48;
    base.ignore_eos = true;
    base.sampling.seed = 7;
    // A prompt that repeats itself, so that repetition penalties and DRY have something to act on.
    const std::string prompt = "Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom";
    auto plain = ctx.generate(prompt, base);
    ASSERT_TRUE(plain) << plain.error().describe();
    for (std::size_t i = 0; i < variants.size(); ++i) {
        GenerateOptions o = base;
        variants[i](o.sampling);
        auto r = ctx.generate(prompt, o);
        ASSERT_TRUE(r) << r.error().describe();
        EXPECT_EQ(r->usage.completion_tokens, 48);
        // Each sampler takes part: the same seed draws other tokens than without it, and the
        // same ones again when repeated.
        EXPECT_NE(r->tokens, plain->tokens) << "variant " << i;
        auto again = ctx.generate(prompt, o);
        ASSERT_TRUE(again);
        EXPECT_EQ(again->tokens, r->tokens) << "variant " << i;
    }
}

TEST(Generation, NonDefaultModelAndContextOptionsGiveTheSameText) {
    Context ctx = test::stories_context();
    auto expected = ctx.generate(kPrompt, greedy(24));
    ASSERT_TRUE(expected);
    ModelOptions mo;
    mo.use_mmap = false;
    mo.use_mlock = true;  // may be refused by the system (a warning), never an error
    mo.split_mode = SplitMode::none;
    auto m = Model::load(test::shared_model("stories260K.gguf"), mo);
    ASSERT_TRUE(m) << m.error().describe();
    for (const bool flags : {false, true}) {
        ContextOptions co;
        co.n_ctx = 512;
        co.n_threads = 1;
        co.n_threads_batch = 2;
        co.offload_kqv = flags;
        co.kv_unified = flags;
        co.flash_attn = flags ? FlashAttention::on : FlashAttention::off;
        auto c = Context::create(*m, co);
        ASSERT_TRUE(c) << c.error().describe();
        auto r = c->generate(kPrompt, greedy(24));
        ASSERT_TRUE(r) << r.error().describe();
        EXPECT_EQ(r->tokens, expected->tokens) << "flags " << flags;
    }
}

TEST(Generation, LogitBiasBansTheGreedyToken) {
    Context ctx = test::stories_context();
    auto first = ctx.generate(kPrompt, greedy(1));
    ASSERT_TRUE(first);
    GenerateOptions o = greedy(1);
    o.sampling.logit_bias = {{first->tokens[0], -INFINITY}};
    auto banned = ctx.generate(kPrompt, o);
    ASSERT_TRUE(banned);
    EXPECT_NE(banned->tokens[0], first->tokens[0]);
}

TEST(Generation, OneGenerationAtATime) {
    Context ctx = test::stories_context();
    auto tokens = ctx.model().tokenizer().encode(kPrompt);
    auto stream = ctx.start(*tokens, greedy(10));
    ASSERT_TRUE(stream);
    EXPECT_EQ(error_of(ctx.generate(kPrompt, greedy(2))), ErrorCode::unsupported_operation);
    StreamPiece p;
    while (stream->next(p)) {
    }
    EXPECT_TRUE(ctx.generate(kPrompt, greedy(2)));
}

TEST(Generation, ContextsShareOneModelAcrossThreads) {
    std::vector<std::string> outputs(3);
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) {
        threads.emplace_back([&, i] {
            Context ctx = test::stories_context(256);
            auto r = ctx.generate(kPrompt, greedy(30));
            if (r) outputs[i] = r->text;
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_FALSE(outputs[0].empty());
    EXPECT_EQ(outputs[0], outputs[1]);
    EXPECT_EQ(outputs[1], outputs[2]);
}

TEST(Generation, GrammarThatAllowsNothingEndsWithAnErrorNotACrash) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(10);
    o.sampling.grammar = "root ::= \"yes\"";
    // Ban every token that could start "yes": the grammar then admits nothing.
    auto tok = ctx.model().tokenizer();
    for (Token t = 0; t < tok.vocab_size(); ++t) {
        auto piece = tok.piece(t, false);
        if (piece && !piece->empty() && std::string("yes").starts_with(*piece)) {
            o.sampling.logit_bias.push_back({t, -INFINITY});
        }
    }
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::error);
    ASSERT_TRUE(r->error);
    EXPECT_EQ(r->error->code, ErrorCode::invalid_grammar);
    EXPECT_TRUE(ctx.generate(kPrompt, greedy(3)));
}

TEST(Generation, GrammarWithIgnoreEosStopsWhenTheGrammarIsComplete) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(20);
    o.ignore_eos = true;
    o.sampling.grammar = "root ::= \"yes\"";
    auto r = ctx.generate(kPrompt, o);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_EQ(r->text, "yes");
}

TEST(Generation, OutOfVocabularyTokenInGrammarAndBadStopsAreRejected) {
    Context ctx = test::stories_context();
    GenerateOptions o = greedy(5);
    o.sampling.grammar = "root ::= <[999999]>";
    EXPECT_EQ(error_of(ctx.generate(kPrompt, o)), ErrorCode::invalid_grammar);
    GenerateOptions stops = greedy(5);
    stops.stop = {"\xA9"};
    EXPECT_EQ(error_of(ctx.generate(kPrompt, stops)), ErrorCode::invalid_argument);
    GenerateOptions bias = greedy(5);
    bias.sampling.logit_bias = {{5, 3e38f}};
    EXPECT_EQ(error_of(ctx.generate(kPrompt, bias)), ErrorCode::invalid_argument);
}
