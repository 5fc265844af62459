// The reasoning budget on a model that never ends its thinking on its own: the random-weight
// qwen3-tiny with QwQ's template, whose reply prefix opens the thinking block ("<think>\n").
// Without a budget the thinking runs until max_tokens; with one it closes and the reply (a forced
// call, a JSON object, text) follows.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "support/paths.hpp"
#include "support/stories.hpp"

using namespace llamapp;
using json = nlohmann::json;

namespace {

std::string template_file(const std::string& name) {
    std::ifstream in(test::llama_source("models/templates/" + name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

ChatTemplate qwq() {
    auto created = ChatTemplate::create(test::qwen3_model(), template_file("Qwen-QwQ-32B.jinja"));
    if (!created) throw std::runtime_error(created.error().describe());
    return std::move(*created);
}

ChatResult ask(ChatOptions options, const std::string& question = "Weather in Rome?") {
    ContextOptions co;
    co.n_ctx = 1024;
    auto context = Context::create(test::qwen3_model(), co);
    EXPECT_TRUE(context);
    if (!context) return {};
    auto r = chat(*context, qwq(), {{.role = "user", .content = question}}, options);
    EXPECT_TRUE(r) << r.error().describe();
    return r ? std::move(*r) : ChatResult{};
}

ChatOptions options(int max_tokens, int budget, std::uint32_t seed = 1) {
    ChatOptions o;
    o.generate = test::greedy(max_tokens);
    if (seed != 1) {
        o.generate.sampling.temperature = 1.0f;
        o.generate.sampling.top_k = 0;
        o.generate.sampling.seed = seed;
    }
    o.generate.sampling.reasoning.tokens = budget;
    return o;
}

std::vector<ToolDefinition> weather() {
    return {{.name = "get_weather",
             .parameters = R"({"type":"object","properties":{"city":{"type":"string",
                 "enum":["Paris","Rome"]}},"required":["city"]})"}};
}

int tokens_of(const std::string& text) {
    auto t = test::qwen3_model().tokenizer().encode(text, {.add_special = false});
    return t ? static_cast<int>(t->size()) : -1;
}

}  // namespace

TEST(ReasoningBudget, WithoutOneTheThinkingNeverEnds) {
    const ChatResult r = ask(options(48, -1));
    EXPECT_EQ(r.generation.finish_reason, FinishReason::length);
    EXPECT_FALSE(r.message.reasoning_content.empty());
    EXPECT_TRUE(r.message.content.empty()) << r.message.content;
}

TEST(ReasoningBudget, ItClosesTheThinkingAndTheReplyGoesOn) {
    const ChatResult r = ask(options(48, 6));
    EXPECT_EQ(r.generation.text.find("</think>") != std::string::npos, true) << r.generation.text;
    // Six tokens of thinking, give or take how their text tokenizes again.
    EXPECT_LE(tokens_of(r.message.reasoning_content), 8) << r.message.reasoning_content;
    EXPECT_FALSE(r.message.content.empty());
    // With a message, the message is said before the marker.
    ChatOptions told = options(48, 4);
    told.generate.sampling.reasoning.message = " Enough thinking.";
    const ChatResult m = ask(told);
    EXPECT_NE(m.message.reasoning_content.find("Enough thinking."), std::string::npos)
        << m.message.reasoning_content;
    // Zero closes the block at once.
    EXPECT_TRUE(ask(options(48, 0)).message.reasoning_content.find_first_not_of(" \n") ==
                std::string::npos);
}

// Room for a forced reply to finish on every seed: the default budget takes a quarter for the
// thinking; what the grammar allows after it is bounded (a call's whitespace is one blank at most;
// a JSON object's spaces, up to two newlines and twenty blanks each, total ~260 bytes), and every
// token is at least a byte. So a reply cut short by max_tokens is a bug, never bad luck.
constexpr int forced_reply_tokens = 512;

// No budget given: a forced reply gets one, so that it arrives within max_tokens.
TEST(ReasoningBudget, AForcedCallAlwaysArrives) {
    for (std::uint32_t seed : {1u, 2u, 3u, 4u}) {
        ChatOptions o = options(forced_reply_tokens, -1, seed);
        o.render.tools = weather();
        o.render.tool_choice = ToolChoice::required;
        const ChatResult r = ask(o);
        EXPECT_EQ(r.generation.finish_reason, FinishReason::stop) << "seed " << seed;
        ASSERT_FALSE(r.message.tool_calls.empty()) << "seed " << seed << ": " << r.generation.text;
        EXPECT_EQ(r.message.tool_calls[0].name, "get_weather");
        EXPECT_FALSE(r.message.reasoning_content.empty()) << "seed " << seed;
        const json args = json::parse(r.message.tool_calls[0].arguments, nullptr, false);
        const std::string city = args.is_object() ? args.value("city", "") : "";
        EXPECT_TRUE(city == "Paris" || city == "Rome")
            << "seed " << seed << ": " << r.message.tool_calls[0].arguments;
    }
}

TEST(ReasoningBudget, AJsonReplyArrivesAfterTheThinking) {
    for (std::uint32_t seed : {1u, 2u, 3u}) {
        ChatOptions o = options(forced_reply_tokens, -1, seed);
        o.generate.sampling.json_schema =
            R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})";
        const ChatResult r = ask(o);
        EXPECT_EQ(r.generation.finish_reason, FinishReason::stop) << "seed " << seed;
        EXPECT_FALSE(r.message.reasoning_content.empty()) << "seed " << seed;
        const json reply = json::parse(r.message.content, nullptr, false);
        EXPECT_TRUE(reply.is_object() && reply.contains("ok") && reply["ok"].is_boolean())
            << "seed " << seed << ": " << r.generation.text;
    }
}

// Qwen3's own template leaves the opening to the model: the grammar then asks for the markers'
// tokens, which the budget watches for.
TEST(ReasoningBudget, TheGrammarSpellsTheMarkersAsTheirTokens) {
    auto qwen3 = ChatTemplate::create(test::qwen3_model());
    ASSERT_TRUE(qwen3);
    ChatRenderOptions r;
    r.tools = weather();
    r.tool_choice = ToolChoice::required;
    auto prompt = qwen3->render({{.role = "user", .content = "Weather?"}}, r);
    ASSERT_TRUE(prompt) << prompt.error().describe();
    EXPECT_EQ(prompt->thinking_start, "<think>");
    ASSERT_EQ(prompt->thinking_end.size(), 1u);
    EXPECT_EQ(prompt->thinking_end[0], "</think>");
    EXPECT_EQ(prompt->reply_grammar.gbnf.find("\"<think>\""), std::string::npos)
        << prompt->reply_grammar.gbnf;
    EXPECT_NE(prompt->reply_grammar.gbnf.find("<["), std::string::npos);
    GenerateOptions g = test::greedy(64);
    ASSERT_TRUE(prompt->constrain(g));
    EXPECT_EQ(g.sampling.reasoning.start, "<think>");
    EXPECT_EQ(g.sampling.reasoning.tokens, 16);  // a quarter of max_tokens
}
