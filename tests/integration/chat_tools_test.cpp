// Tool calls through the Qwen3 template of the generated qwen3-tiny model: the template's grammar
// forces calls even though the weights are random, and the parsers read them back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "llamapp/chat_stream.hpp"
#include "support/stories.hpp"

using namespace llamapp;
using json = nlohmann::json;

namespace {

const Model& qwen3() {
    return test::qwen3_model();
}

// Small argument spaces so a random model finishes its call quickly.
std::vector<ToolDefinition> weather_tools() {
    return {{.name = "get_weather",
             .description = "Current weather in a city",
             .parameters = R"({"type":"object","properties":{"city":{"type":"string",
                 "enum":["Paris","Rome"]}},"required":["city"]})"},
            {.name = "get_time",
             .description = "Local time in a city",
             .parameters = R"({"type":"object","properties":{"utc":{"type":"boolean"}},
                 "required":["utc"]})"}};
}

ChatRenderOptions forced(const std::string& tool) {
    ChatRenderOptions o;
    o.enable_thinking = false;  // a thinking block of a random model never ends
    o.tools = weather_tools();
    o.tool_choice = ToolChoice::required;
    o.forced_tool = tool;
    return o;
}

struct Forced {
    ChatPrompt prompt;
    Generation generation;
};

Forced generate_forced(const std::string& tool) {
    auto tmpl = ChatTemplate::create(qwen3());
    EXPECT_TRUE(tmpl);
    auto prompt = tmpl->render({{.role = "user", .content = "Weather in Paris?"}}, forced(tool));
    EXPECT_TRUE(prompt) << prompt.error().describe();
    ContextOptions co;
    co.n_ctx = 1024;
    auto ctx = Context::create(qwen3(), co);
    EXPECT_TRUE(ctx);
    GenerateOptions g = test::greedy(96);
    EXPECT_TRUE(prompt->constrain(g));
    auto gen = ctx->generate(std::span<const Token>(prompt->tokens), g);
    EXPECT_TRUE(gen) << gen.error().describe();
    return {std::move(*prompt), std::move(*gen)};
}

}  // namespace

TEST(ChatTools, TheTemplateDescribesTheToolsAndDerivesAGrammar) {
    auto tmpl = ChatTemplate::create(qwen3());
    ASSERT_TRUE(tmpl);
    ChatRenderOptions o;
    o.tools = weather_tools();
    auto automatic = tmpl->render({{.role = "user", .content = "hi"}}, o);
    ASSERT_TRUE(automatic) << automatic.error().describe();
    EXPECT_NE(automatic->text.find("get_weather"), std::string::npos);
    EXPECT_NE(automatic->text.find("get_time"), std::string::npos);
    // "auto": free text until the model opens a call.
    EXPECT_FALSE(automatic->reply_grammar.gbnf.empty());
    EXPECT_TRUE(automatic->reply_grammar.lazy);
    EXPECT_FALSE(automatic->reply_grammar.triggers.empty());

    o.tool_choice = ToolChoice::none;
    auto none = tmpl->render({{.role = "user", .content = "hi"}}, o);
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->reply_grammar.gbnf.empty());

    // A forced call describes every tool but its grammar offers only the forced one.
    auto one = tmpl->render({{.role = "user", .content = "hi"}}, forced("get_time"));
    ASSERT_TRUE(one);
    EXPECT_NE(one->text.find("get_weather"), std::string::npos);
    EXPECT_FALSE(one->reply_grammar.lazy);
    EXPECT_NE(one->reply_grammar.gbnf.find("get_time"), std::string::npos);
    EXPECT_EQ(one->reply_grammar.gbnf.find("get_weather"), std::string::npos);
    // The call is the reply: no free text may run before it.
    const std::string& g = one->reply_grammar.gbnf;
    const std::size_t root = g.find("root ::= ");
    ASSERT_NE(root, std::string::npos);
    const std::string root_rule = g.substr(root, g.find('\n', root) - root);
    EXPECT_FALSE(std::regex_search(root_rule, std::regex(R"( until-[0-9]+\? )"))) << root_rule;
    // Naming the tool is enough; the choice need not also say "required".
    ChatRenderOptions named = forced("get_time");
    named.tool_choice = ToolChoice::automatic;
    auto same = tmpl->render({{.role = "user", .content = "hi"}}, named);
    ASSERT_TRUE(same);
    EXPECT_EQ(same->reply_grammar.gbnf, g);

    // Parallel calls repeat the call rule; without them (OpenAI's parallel_tool_calls=false) the
    // grammar holds one call, even for templates where llama.cpp writes a repeat regardless.
    const std::regex repeats(R"((^|\n)tool-calls ::= .*\)[+*]\n)");
    o.tool_choice = ToolChoice::required;
    o.parallel_tool_calls = true;
    auto parallel = tmpl->render({{.role = "user", .content = "hi"}}, o);
    ASSERT_TRUE(parallel);
    EXPECT_TRUE(std::regex_search(parallel->reply_grammar.gbnf, repeats))
        << parallel->reply_grammar.gbnf;
    o.parallel_tool_calls = false;
    auto single = tmpl->render({{.role = "user", .content = "hi"}}, o);
    ASSERT_TRUE(single);
    EXPECT_FALSE(std::regex_search(single->reply_grammar.gbnf, repeats))
        << single->reply_grammar.gbnf;
    EXPECT_NE(single->reply_grammar.gbnf.find("tool-calls ::= "), std::string::npos);
}

TEST(ChatTools, ARequiredCallIsTheReply) {
    const Forced f = generate_forced("get_weather");
    const ChatMessage m = ChatTemplate::parse(f.generation.text, f.prompt);
    ASSERT_EQ(m.tool_calls.size(), 1u) << f.generation.text;
    // One call is all the grammar allows: the reply ends after it instead of running on.
    EXPECT_EQ(f.generation.finish_reason, FinishReason::stop) << f.generation.text;
    EXPECT_TRUE(m.content.empty()) << m.content;
    const ToolCall& call = m.tool_calls[0];
    EXPECT_EQ(call.name, "get_weather");
    EXPECT_TRUE(call.id.starts_with("call_")) << call.id;
    const json args = json::parse(call.arguments);
    ASSERT_TRUE(args.contains("city")) << call.arguments;
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << call.arguments;
}

TEST(ChatTools, MarkupTokensCanBeShownAsText) {
    const Tokenizer tok = qwen3().tokenizer();
    auto ids = tok.encode("<|im_end|>", {.add_special = false, .parse_special = true});
    ASSERT_TRUE(ids);
    ASSERT_EQ(ids->size(), 1u);
    ASSERT_TRUE(tok.is_control(ids->front()));
    Detokenizer hidden(tok);
    Detokenizer shown(tok, false, {ids->front()});
    EXPECT_EQ(hidden.push(ids->front()).value_or("?"), "");
    EXPECT_EQ(shown.push(ids->front()).value_or("?"), "<|im_end|>");
}

TEST(ChatTools, StreamedDeltasAddUpToTheWholeParse) {
    const Forced f = generate_forced("get_time");
    const ChatMessage whole = ChatTemplate::parse(f.generation.text, f.prompt);
    ASSERT_EQ(whole.tool_calls.size(), 1u) << f.generation.text;

    // Feed the reply in small pieces, as the engine streams it.
    ChatStreamParser parser(f.prompt);
    std::vector<ChatDelta> deltas;
    const std::string& text = f.generation.text;
    for (std::size_t i = 0; i < text.size(); i += 3)
        deltas.push_back(parser.push(text.substr(i, 3)));
    deltas.push_back(parser.finish());

    std::string content, arguments, name, id;
    int announcements = 0;
    for (const auto& d : deltas) {
        content += d.content;
        for (const auto& c : d.tool_calls) {
            EXPECT_EQ(c.index, 0u);
            if (!c.name.empty()) {
                ++announcements;
                name = c.name;
                id = c.id;
            }
            arguments += c.arguments;
        }
    }
    EXPECT_EQ(announcements, 1);  // id and name once, then argument fragments
    EXPECT_EQ(name, "get_time");
    EXPECT_TRUE(id.starts_with("call_"));
    EXPECT_TRUE(content.empty()) << content;
    EXPECT_EQ(arguments, whole.tool_calls[0].arguments);
    EXPECT_TRUE(json::accept(arguments)) << arguments;
    ASSERT_EQ(parser.message().tool_calls.size(), 1u);
    EXPECT_EQ(parser.message().tool_calls[0].arguments, arguments);
}

TEST(ChatTools, ReasoningStreamsApartFromTheAnswer) {
    auto tmpl = ChatTemplate::create(qwen3());
    ASSERT_TRUE(tmpl);
    auto prompt = tmpl->render({{.role = "user", .content = "2+2?"}}, {.enable_thinking = true});
    ASSERT_TRUE(prompt);
    ChatStreamParser parser(*prompt);
    std::string reasoning, content;
    for (const char* piece : {"<think>", "\nadd", " them\n", "</think>", "\n\nfo", "ur"}) {
        const ChatDelta d = parser.push(piece);
        reasoning += d.reasoning_content;
        content += d.content;
    }
    const ChatDelta last = parser.finish();
    reasoning += last.reasoning_content;
    content += last.content;
    EXPECT_EQ(reasoning.substr(0, reasoning.find_last_not_of('\n') + 1), "add them");
    EXPECT_EQ(content, "four");
}

TEST(ChatTools, ConversationsWithCallsAndResultsRender) {
    auto tmpl = ChatTemplate::create(qwen3());
    ASSERT_TRUE(tmpl);
    ChatMessage call{.role = "assistant"};
    call.tool_calls = {{.id = "call_1", .name = "get_weather", .arguments = R"({"city":"Rome"})"}};
    ChatMessage result{.role = "tool", .content = "sunny, 24 C", .tool_call_id = "call_1"};
    ChatRenderOptions o;
    o.tools = weather_tools();
    auto prompt = tmpl->render({{.role = "user", .content = "Weather in Rome?"}, call, result}, o);
    ASSERT_TRUE(prompt) << prompt.error().describe();
    EXPECT_NE(prompt->text.find(R"("arguments": {"city": "Rome"})"), std::string::npos)
        << prompt->text;
    EXPECT_NE(prompt->text.find("sunny, 24 C"), std::string::npos);
}

TEST(ChatTools, BadToolDefinitionsAreTypedErrors) {
    auto tmpl = ChatTemplate::create(qwen3());
    ASSERT_TRUE(tmpl);
    const std::vector<ChatMessage> hi = {{.role = "user", .content = "hi"}};
    auto render_with = [&](ChatRenderOptions o) { return tmpl->render(hi, o); };

    ChatRenderOptions o;
    o.tools = {{.name = "bad name"}};
    auto r = render_with(o);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(r.error().context, "tools[0].name");

    o.tools = {{.name = "f"}, {.name = "f"}};
    ASSERT_FALSE(render_with(o));

    o.tools = {{.name = "f", .parameters = "[1,2]"}};
    r = render_with(o);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_json_schema);
    EXPECT_EQ(r.error().context, "tools[0].parameters");

    o.tools = {
        {.name = "f", .parameters = R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})"}};
    r = render_with(o);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context, "tools[0].parameters");

    o.tools = weather_tools();
    o.forced_tool = "nope";
    r = render_with(o);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context, "tool_choice");

    ChatRenderOptions required;
    required.tool_choice = ToolChoice::required;
    ASSERT_FALSE(render_with(required));

    // A tool-call grammar never silently replaces the caller's own constraint.
    o.forced_tool.clear();
    auto prompt = render_with(o);
    ASSERT_TRUE(prompt);
    GenerateOptions g;
    g.sampling.json_schema = R"({"type":"object"})";
    auto constrained = prompt->constrain(g);
    ASSERT_FALSE(constrained);
    EXPECT_EQ(constrained.error().code, ErrorCode::invalid_argument);
}

TEST(ChatTools, ACallCutShortStaysACall) {
    const Forced f = generate_forced("get_weather");
    const std::string& text = f.generation.text;
    const std::size_t args = text.find("\"city\"");
    ASSERT_NE(args, std::string::npos) << text;
    const std::string cut = text.substr(0, args + 4);  // max_tokens ended inside the arguments

    const ChatMessage m = ChatTemplate::parse(cut, f.prompt, /*complete=*/false);
    EXPECT_TRUE(m.content.empty()) << m.content;
    ASSERT_EQ(m.tool_calls.size(), 1u) << cut;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    const std::string whole = ChatTemplate::parse(text, f.prompt).tool_calls.at(0).arguments;
    EXPECT_TRUE(whole.starts_with(m.tool_calls[0].arguments)) << m.tool_calls[0].arguments;

    // Streamed, the end of a cut reply adds no markup as text after the call's deltas.
    ChatStreamParser parser(f.prompt);
    std::string content;
    for (std::size_t i = 0; i < cut.size(); i += 2)
        content += parser.push(cut.substr(i, 2)).content;
    content += parser.finish(/*complete=*/false).content;
    EXPECT_TRUE(content.empty()) << content;
    ASSERT_EQ(parser.message().tool_calls.size(), 1u);
    EXPECT_EQ(parser.message().tool_calls[0].name, "get_weather");

    // Cut before the name ended: nothing usable, and no markup shown either.
    const std::string early = text.substr(0, text.find("get_weather") + 5);
    const ChatMessage none = ChatTemplate::parse(early, f.prompt, /*complete=*/false);
    EXPECT_TRUE(none.tool_calls.empty()) << none.tool_calls[0].name;
    EXPECT_EQ(none.content.find("tool_call"), std::string::npos) << none.content;
}

TEST(ChatTools, AThrottledStreamAddsUpToTheSameReply) {
    auto tmpl = ChatTemplate::create(qwen3());
    ASSERT_TRUE(tmpl);
    auto prompt = tmpl->render({{.role = "user", .content = "2+2?"}}, {.enable_thinking = true});
    ASSERT_TRUE(prompt);
    std::string reply = "<think>\nadd them\n</think>\n\n";
    for (int i = 0; i < 200; ++i) reply += " four";

    // Practically no parsing time allowed: the first piece is parsed, the rest wait for finish.
    ChatStreamParser parser(*prompt, /*max_parse_share=*/1e-9);
    std::string reasoning, content;
    int reports = 0;
    for (std::size_t i = 0; i < reply.size(); i += 5) {
        const ChatDelta d = parser.push(reply.substr(i, 5));
        reports += d.empty() ? 0 : 1;
        reasoning += d.reasoning_content;
        content += d.content;
    }
    const ChatDelta last = parser.finish();
    reasoning += last.reasoning_content;
    content += last.content;
    EXPECT_LE(reports, 1);
    const ChatMessage whole = ChatTemplate::parse(reply, *prompt);
    EXPECT_EQ(reasoning, whole.reasoning_content);
    EXPECT_EQ(content, whole.content);
    EXPECT_EQ(parser.message().content, whole.content);
}
