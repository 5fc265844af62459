// The engine on every architecture family the generator makes: dense, sliding-window, recurrent.
#include <gtest/gtest.h>

#include "support/engine_helpers.hpp"
#include "support/families.hpp"

using namespace llamapp;
using test::drain;
using test::encode;
using test::request;

namespace {

const std::vector<std::string> kPrompts = {
    "The quick brown fox jumps over the lazy dog and",
    "In a small village by the sea there lived",
    "Numbers: one two three four five six",
    "A long time ago in a galaxy far away",
};

class EngineFamilies : public ::testing::TestWithParam<test::Family> {
  protected:
    void SetUp() override {
        set_log_level(LogLevel::none);
        auto m = Model::load(test::generated_model(GetParam().file));
        ASSERT_TRUE(m) << m.error().describe();
        model_ = std::move(*m);
    }
    Engine engine(int slots, int draft_tokens = 0) {
        EngineOptions o;
        o.speculative.n_max = draft_tokens;
        o.speculative.lookup_match =
            1;  // draft on any repeated token: mostly rejected drafts to undo
        o.context.n_ctx = 512;
        o.context.n_seq_max = slots;
        o.context.n_threads = 2;
        o.min_adopt_tokens = 2;
        return test::create_engine(*model_, std::move(o));
    }
    std::vector<Token> solo(const std::vector<Token>& prompt, int max_tokens) {
        ContextOptions co;
        co.n_ctx = 512;
        co.n_threads = 2;
        auto ctx = Context::create(*model_, co);
        GenerateOptions o = test::greedy(max_tokens);
        o.ignore_eos = true;
        auto r = ctx->generate(prompt, o);
        if (!r) throw std::runtime_error(r.error().describe());
        return r->tokens;
    }
    std::optional<Model> model_;
};

}  // namespace

TEST_P(EngineFamilies, ProbesWhatReuseIsSafe) {
    Engine e = engine(2);
    const ReuseModes& m = e.reuse_modes();
    EXPECT_EQ(m.trim_tail, !GetParam().recurrent) << m.describe();
    EXPECT_EQ(m.copy_prefix, !GetParam().recurrent) << m.describe();
    EXPECT_TRUE(m.copy_whole) << m.describe();
    EXPECT_EQ(m.sliding_window > 0, GetParam().sliding_window);
}

TEST_P(EngineFamilies, ConcurrentRequestsMatchSoloRuns) {
    Engine e = engine(4);
    std::vector<RequestHandle> handles;
    for (const auto& p : kPrompts) handles.push_back(*e.submit(request(encode(*model_, p), 16)));
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
        auto d = drain(handles[i]);
        EXPECT_EQ(d.completion.generation.tokens, solo(encode(*model_, kPrompts[i]), 16))
            << "prompt " << i;
    }
}

TEST_P(EngineFamilies, PrefixReuseMatchesColdWhereTheFamilyAllowsIt) {
    Engine e = engine(2);
    const auto base = encode(*model_, kPrompts[0]);
    auto first = drain(*e.submit(request(base, 8)));
    // Diverges from the cached transcript after the prompt: attention models trim back to the
    // prompt, a recurrent state cannot rewind and starts over.
    std::vector<Token> diverging = base;
    const auto more = encode(*model_, " keeps running far away");
    diverging.insert(diverging.end(), more.begin() + 1, more.end());
    auto d = drain(*e.submit(request(diverging, 8)));
    EXPECT_EQ(d.completion.generation.tokens, solo(diverging, 8));
    if (GetParam().recurrent) {
        EXPECT_EQ(d.completion.cache.reused_tokens, 0);
    } else {
        EXPECT_EQ(d.completion.cache.source, ReuseSource::same_slot);
        EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(base.size()));
    }
    // Extending exactly what the sequence holds works on every family.
    std::vector<Token> extending = diverging;
    const auto& reply = d.completion.generation.tokens;
    extending.insert(extending.end(), reply.begin(), reply.end() - 1);
    extending.push_back(reply.back());
    auto x = drain(*e.submit(request(extending, 8)));
    EXPECT_EQ(x.completion.cache.reused_tokens,
              static_cast<int>(diverging.size() + reply.size() - 1));
    EXPECT_EQ(x.completion.generation.tokens, solo(extending, 8));
}

TEST_P(EngineFamilies, ForkedSessionsContinueIndependently) {
    Engine e = engine(3);
    const auto p = encode(*model_, kPrompts[1]);
    EngineRequest r = request(p, 6);
    r.session = "a";
    auto first = drain(*e.submit(r));
    ASSERT_TRUE(e.fork_session("a", "b"));
    std::vector<Token> transcript = p;
    const auto& reply = first.completion.generation.tokens;
    transcript.insert(transcript.end(), reply.begin(), reply.end());
    for (const char* id : {"a", "b"}) {
        EngineRequest turn = request(transcript, 6);
        turn.session = id;
        auto d = drain(*e.submit(turn));
        EXPECT_EQ(d.completion.cache.reused_tokens, static_cast<int>(transcript.size() - 1)) << id;
        EXPECT_EQ(d.completion.generation.tokens, solo(transcript, 6)) << id;
    }
}

TEST_P(EngineFamilies, DraftsLeaveRepliesAsTheyAreAndSkipFamiliesThatCannotDropATail) {
    Engine plain = engine(2);
    Engine drafting = engine(2, 3);
    int drafted = 0;
    for (const auto& p : {kPrompts[0], kPrompts[2]}) {
        // Digits only: ten single-token choices repeat soon, so there is something to draft.
        EngineRequest r = request(encode(*model_, p), 40);
        r.options.sampling.grammar = "root ::= [0-9]+";
        auto a = drain(*plain.submit(r));
        auto b = drain(*drafting.submit(r));
        EXPECT_EQ(b.completion.generation.tokens, a.completion.generation.tokens) << p;
        drafted += b.completion.draft_tokens;
    }
    // A recurrent state cannot take a rejected draft back: those models never draft.
    if (GetParam().recurrent)
        EXPECT_EQ(drafted, 0);
    else
        EXPECT_GT(drafted, 0);
}

INSTANTIATE_TEST_SUITE_P(Generated, EngineFamilies, test::generated_families(), test::family_name);

TEST(EngineChat, MessagesAreRenderedOnTheCallersThreadAndTheReplyParses) {
    set_log_level(LogLevel::none);
    auto model = Model::load(test::generated_model("qwen3-tiny.gguf"));
    ASSERT_TRUE(model);
    auto tmpl = ChatTemplate::create(*model);
    ASSERT_TRUE(tmpl) << tmpl.error().describe();
    EngineOptions o;
    o.context.n_ctx = 512;
    o.context.n_seq_max = 2;
    auto e = Engine::create(*model, o);
    ASSERT_TRUE(e);
    EngineRequest r = request({}, 8);
    r.options.stop = {"never"};
    auto sub = e->submit_chat(*tmpl, {{"system", "Be brief."}, {"user", "Hello"}}, r);
    ASSERT_TRUE(sub) << sub.error().describe();
    EXPECT_NE(sub->prompt.text.find("Hello"), std::string::npos);
    auto d = drain(sub->handle);
    EXPECT_EQ(d.completion.generation.usage.prompt_tokens,
              static_cast<int>(sub->prompt.tokens.size()));
    ChatMessage reply = ChatTemplate::parse(d.completion.generation.text, sub->prompt);
    EXPECT_EQ(reply.role, "assistant");
}
