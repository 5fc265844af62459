// Drives one real `llamapp serve` over HTTP: response shapes, SSE framing, tool calls, a matrix
// of bad requests, disconnects. Servers with options of their own: server_lifecycle_test.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "llamapp/model.hpp"
#include "support/eventually.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using llamapp::test::ServerProcess;
using namespace llamapp::test;

const std::string qwen = llamapp::test::generated_model("qwen3-tiny.gguf").string();

// One tool with a small argument space, so a random model closes its call quickly.
json weather_tool() {
    return json::array(
        {{{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather in a city"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
              {"required", {"city"}}}}}}}});
}

// A request whose reply must be a call of get_weather (thinking off: a random model's thinking
// block never ends).
json forced_call_body() {
    json body = chat_body(96);
    body["tools"] = weather_tool();
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    return body;
}

class Server : public ::testing::Test {
  protected:
    // -kvu: the slots share one cache, so that one request may use all of -c.
    static void SetUpTestSuite() {
        server_ = start_suite_server(
            {"-m", qwen, "-c", "2048", "-t", "2", "--parallel", "2", "-kvu", "--max-body-bytes",
             "65536", "--max-prompt-tokens", "256", "--max-stop", "4"},
            start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static ServerProcess* server_;
    static std::string start_error_;
};
ServerProcess* Server::server_ = nullptr;
std::string Server::start_error_;

TEST_F(Server, HealthModelsAndMetrics) {
    auto c = server_->client();
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    // What the engine's family probe chose for this (attention) model.
    EXPECT_EQ(json::parse(health->body)["prefix_reuse"], "trim, copy-prefix, copy-whole");
    EXPECT_EQ(c.Get("/health/live")->status, 200);
    EXPECT_EQ(c.Get("/health/ready")->status, 200);
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    auto m = json::parse(models->body);
    EXPECT_EQ(m["object"], "list");
    EXPECT_EQ(m["data"][0]["id"], "qwen3-tiny");
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    for (const char* family : {"llamapp_requests_total", "llamapp_time_to_first_token_seconds",
                               "llamapp_kvstore_entries"}) {
        EXPECT_NE(metrics->body.find(family), std::string::npos) << family;
    }
}

TEST_F(Server, ChatCompletionShape) {
    auto r = server_->client().Post("/v1/chat/completions", chat_body().dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["model"], "qwen3-tiny");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 8);
    EXPECT_EQ(j["usage"]["total_tokens"],
              j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
}

TEST_F(Server, CompletionFromTokenIdsWithLogprobs) {
    json body = {{"prompt", {1, 2, 3, 4}}, {"max_tokens", 3}, {"logprobs", 2}};
    auto r = server_->client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 3u);
    EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
}

std::vector<float> from_base64(const std::string& s) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        return c == '+' ? 62 : 63;
    };
    std::string bytes;
    for (std::size_t i = 0; i + 3 < s.size(); i += 4) {
        const int v = value(s[i]) << 18 | value(s[i + 1]) << 12 |
                      (s[i + 2] == '=' ? 0 : value(s[i + 2]) << 6) |
                      (s[i + 3] == '=' ? 0 : value(s[i + 3]));
        bytes += static_cast<char>(v >> 16 & 255);
        if (s[i + 2] != '=') bytes += static_cast<char>(v >> 8 & 255);
        if (s[i + 3] != '=') bytes += static_cast<char>(v & 255);
    }
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

TEST_F(Server, EmbeddingsAsFloatsAndBase64WithDimensions) {
    auto c = server_->client();
    auto post = [&](json body) {
        auto r = c.Post("/v1/embeddings", body.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
        return r ? json::parse(r->body, nullptr, false) : json::object();
    };
    auto floats = post({{"input", {"hello", "world"}}});
    ASSERT_EQ(floats["data"].size(), 2u);
    EXPECT_EQ(floats["data"][1]["index"], 1);
    const auto full = floats["data"][0]["embedding"].get<std::vector<float>>();
    auto b64 = post({{"input", "hello"}, {"encoding_format", "base64"}});
    EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()), full);
    auto cut = post({{"input", "hello"}, {"dimensions", 8}});
    const auto v = cut["data"][0]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(v.size(), 8u);
    double norm = 0, dot = 0, head = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        norm += v[i] * v[i];
        head += full[i] * full[i];
        dot += v[i] * full[i];
    }
    EXPECT_NEAR(norm, 1.0, 1e-4);
    EXPECT_NEAR(dot / std::sqrt(head), 1.0, 1e-4);  // same direction as the truncated full vector
    EXPECT_GT(floats["usage"]["prompt_tokens"].get<int>(), 0);

    // llama-server's unprefixed alias, and its native /embedding: inputs from "content", each
    // answered as {"index", "embedding": [vector]}; embd_normalize -1 leaves the vector as pooled.
    auto alias = c.Post("/embeddings", json{{"input", "hello"}}.dump(), "application/json");
    ASSERT_TRUE(alias && alias->status == 200);
    EXPECT_EQ(json::parse(alias->body)["data"][0]["embedding"], full);
    auto native = [&](const json& body) {
        auto r = c.Post("/embedding", body.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
        return r ? json::parse(r->body, nullptr, false) : json::array();
    };
    const json n = native({{"content", {"hello", "world"}}});
    ASSERT_EQ(n.size(), 2u) << n;
    EXPECT_EQ(n[1]["index"], 1);
    EXPECT_EQ(n[0]["embedding"], json::array({full}));
    const auto raw = native({{"content", "hello"}, {"embd_normalize", -1}})[0]["embedding"][0]
                         .get<std::vector<float>>();
    double raw_norm = 0;
    for (float x : raw) raw_norm += x * x;
    ASSERT_GT(raw_norm, 0);
    EXPECT_NEAR(raw[0] / std::sqrt(raw_norm), full[0], 1e-4);  // the same vector, unscaled
    expect_error_shape(c.Post("/embedding", json{{"content", "x"}, {"embd_normalize", 1}}.dump(),
                              "application/json"),
                       400, "embd_normalize 1");
    // An embedding model is no reranker: the rerank routes say so (NativeRerank ranks).
    for (const char* path : {"/rerank", "/v1/rerank", "/reranking", "/v1/reranking"})
        expect_error_shape(
            c.Post(path, json{{"query", "a"}, {"documents", {"b"}}}.dump(), "application/json"),
            400, path);
}

// Token ids are embedded as they are, not detokenized and tokenized again: "hello world" spelled
// one character per token stays that many tokens (tokenized again it would be two or three).
TEST_F(Server, TokenIdInputsAreEmbeddedAsGiven) {
    auto model = llamapp::Model::load(qwen, {.vocab_only = true});
    ASSERT_TRUE(model) << model.error().describe();
    const llamapp::Tokenizer tok = model->tokenizer();
    auto whole = tok.encode("hello world");
    ASSERT_TRUE(whole);
    std::vector<llamapp::Token> spelled;
    for (char ch : std::string("hello world")) {
        auto one = tok.encode(std::string(1, ch), {.add_special = false});
        ASSERT_TRUE(one && !one->empty());
        spelled.insert(spelled.end(), one->begin(), one->end());
    }
    ASSERT_GT(spelled.size(), whole->size());
    auto c = server_->client();
    auto embed = [&](const json& input) {
        auto r = c.Post("/v1/embeddings", json{{"input", input}}.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
        json j = r ? json::parse(r->body, nullptr, false) : json::object();
        return std::make_pair(j["data"][0]["embedding"].get<std::vector<float>>(),
                              j["usage"]["prompt_tokens"].get<int>());
    };
    const auto text = embed("hello world");
    const auto same = embed(*whole);
    EXPECT_EQ(same.first, text.first);
    EXPECT_EQ(same.second, static_cast<int>(whole->size()));
    const auto by_letter = embed(spelled);
    EXPECT_EQ(by_letter.second, static_cast<int>(spelled.size()));
    EXPECT_NE(by_letter.first, text.first);
}

TEST_F(Server, StreamedChatIsWellFramedServerSentEvents) {
    json body = chat_body(5);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    auto events = sse_events(r->body);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.back(), "data: [DONE]");
    std::string text;
    int finishes = 0;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        ASSERT_EQ(events[i].rfind("data: ", 0), 0u) << events[i];
        auto j = json::parse(events[i].substr(6));
        EXPECT_EQ(j["object"], "chat.completion.chunk");
        EXPECT_EQ(j["id"], json::parse(events[0].substr(6))["id"]);
        if (i == 0) {
            EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
        }
        if (j["choices"].empty()) {
            EXPECT_EQ(i + 2, events.size()) << "usage comes last";
            EXPECT_EQ(j["usage"]["completion_tokens"], 5);
            continue;
        }
        const auto& choice = j["choices"][0];
        if (!choice["finish_reason"].is_null()) ++finishes;
        if (choice["delta"].contains("content") && choice["delta"]["content"].is_string())
            text += choice["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(finishes, 1);
}

TEST_F(Server, ForcedToolCallWhole) {
    auto r = server_->client().Post("/v1/chat/completions", forced_call_body().dump(),
                                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json choice = json::parse(r->body)["choices"][0];
    const json& message = choice["message"];
    EXPECT_TRUE(message["content"].is_null()) << message;
    ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
    const json& call = message["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
    EXPECT_EQ(call["function"]["name"], "get_weather");
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args;
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
}

// A weak model, free to put any run of blanks between a call's JSON tokens, filled max_tokens
// with them instead of closing the call; one blank at most lets even a random model close it.
TEST_F(Server, AForcedCallClosesWellWithinSixtyFourTokens) {
    json body = forced_call_body();
    body["max_tokens"] = 64;
    auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "tool_calls") << reply;
    EXPECT_LT(reply["usage"]["completion_tokens"].get<int>(), 40) << reply;
    const json& call = reply["choices"][0]["message"]["tool_calls"][0]["function"];
    const std::string arguments = call["arguments"];
    EXPECT_EQ(arguments.find("  "), std::string::npos) << arguments;
}

TEST_F(Server, ForcedToolCallStreamedAsDeltas) {
    json body = forced_call_body();
    body["stream"] = true;
    auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto events = sse_events(r->body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "data: [DONE]");
    std::string arguments, id, name, finish;
    int fragments = 0;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        const json choice = json::parse(events[i].substr(6))["choices"][0];
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        const json& delta = choice["delta"];
        EXPECT_TRUE(!delta.contains("content") || delta["content"].is_null() ||
                    delta["content"] == "")
            << delta;
        if (!delta.contains("tool_calls")) continue;
        for (const auto& c : delta["tool_calls"]) {
            EXPECT_EQ(c["index"], 0);
            if (c.contains("id")) {
                EXPECT_TRUE(id.empty()) << "the call is announced once";
                id = c["id"];
                name = c["function"]["name"];
                EXPECT_EQ(c["type"], "function");
            }
            const std::string part = c["function"]["arguments"];
            fragments += part.empty() ? 0 : 1;
            arguments += part;
        }
    }
    EXPECT_TRUE(id.starts_with("call_"));
    EXPECT_EQ(name, "get_weather");
    EXPECT_TRUE(json::accept(arguments)) << arguments;
    EXPECT_GE(fragments, 2) << "arguments arrive as they are generated";
    EXPECT_EQ(finish, "tool_calls");
}

TEST_F(Server, ACallCutByMaxTokensStaysACall) {
    auto post = [](const json& body) {
        auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
        return r ? r->body : std::string();
    };
    const json full_reply = json::parse(post(forced_call_body()));
    const json& full = full_reply["choices"][0]["message"];
    ASSERT_EQ(full["tool_calls"].size(), 1u) << full;
    const int full_tokens = full_reply["usage"]["completion_tokens"];
    const std::string full_args = full["tool_calls"][0]["function"]["arguments"];

    // Greedy output is the same each time, so max_tokens = k cuts the same reply after k tokens:
    // wherever the cut falls, the reply is a call (or nothing yet), never markup shown as text.
    json body = forced_call_body();
    int cut_inside_arguments = 0;
    std::string cut_args;
    // Spread over the call's markup and arguments (each cut is a request; kept few for TSan).
    for (int k : {1, 2, 3, 5, 8, 12, 17, 23, 30, 38}) {
        if (k >= full_tokens) break;
        body["max_tokens"] = k;
        const json choice = json::parse(post(body))["choices"][0];
        ASSERT_EQ(choice["finish_reason"], "length") << k;
        const json& message = choice["message"];
        EXPECT_TRUE(message["content"].is_null() || message["content"] == "")
            << k << ": " << message;
        if (!message.contains("tool_calls")) continue;
        ASSERT_EQ(message["tool_calls"].size(), 1u) << k << ": " << message;
        const json& call = message["tool_calls"][0]["function"];
        EXPECT_EQ(call["name"], "get_weather") << k;
        const std::string args = call["arguments"];
        EXPECT_TRUE(full_args.starts_with(args)) << k << ": " << args << " of " << full_args;
        if (!args.empty() && args.size() < full_args.size() && cut_inside_arguments == 0) {
            cut_inside_arguments = k;
            cut_args = args;
        }
    }
    ASSERT_GT(cut_inside_arguments, 0);

    // Streamed, the same cut gives the same call and no text at the end.
    body["max_tokens"] = cut_inside_arguments;
    body["stream"] = true;
    const auto events = sse_events(post(body));
    std::string streamed_args, content;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        const json delta = json::parse(events[i].substr(6))["choices"][0]["delta"];
        if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
        if (!delta.contains("tool_calls")) continue;
        for (const auto& c : delta["tool_calls"])
            streamed_args += c["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(content, "");
    EXPECT_EQ(streamed_args, cut_args);
}

TEST_F(Server, StreamedReasoningAndAnswerMatchTheWholeReply) {
    // Qwen3 with thinking on: the reply opens a thinking block, which the parser splits out.
    json body = chat_body(24);
    auto whole = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 200) << whole->body;
    const json message = json::parse(whole->body)["choices"][0]["message"];
    body["stream"] = true;
    auto r = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    std::string reasoning, content;
    for (const auto& event : sse_events(r->body)) {
        if (event == "data: [DONE]") continue;
        const json j = json::parse(event.substr(6));
        const json& delta = j["choices"][0]["delta"];
        if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
        if (delta.contains("content") && delta["content"].is_string())
            content += delta["content"].get<std::string>();
    }
    EXPECT_EQ(reasoning, message.value("reasoning_content", ""));
    EXPECT_EQ(content, message["content"].get<std::string>());
    EXPECT_FALSE(reasoning.empty() && content.empty());
}

TEST_F(Server, BadRequestsGetTypedErrorsAndTheServerKeepsServing) {
    struct Case {
        std::string path;
        std::string body;
        int status;
    };
    auto chat = [](json patch) {
        json b = chat_body();
        for (auto& [k, v] : patch.items()) b[k] = v;
        return b.dump();
    };
    auto with_messages = [](json messages) {
        return json{{"messages", messages}, {"max_tokens", 4}}.dump();
    };
    const std::string cc = "/v1/chat/completions", co = "/v1/completions";
    std::vector<Case> cases = {
        {cc, "{", 400},
        {cc, "[]", 400},
        {cc, "null", 400},
        {cc, "", 400},
        {cc, R"({"max_tokens": 4})", 400},
        {cc, with_messages("hi"), 400},
        {cc, with_messages(json::array()), 400},
        {cc, with_messages({"hi"}), 400},
        {cc, with_messages({{{"content", "x"}}}), 400},
        {cc, with_messages({{{"role", "wizard"}, {"content", "x"}}}), 400},
        {cc, with_messages({{{"role", 5}, {"content", "x"}}}), 400},
        {cc, with_messages({{{"role", "user"}, {"content", 5}}}), 400},
        {cc, with_messages({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}), 400},
        {cc, with_messages({{{"role", "user"}, {"content", {"text"}}}}), 400},
        {cc, with_messages({{{"role", "user"}}}), 400},
        {cc, chat({{"max_tokens", -1}}), 400},
        {cc, chat({{"max_tokens", 0}}), 400},
        {cc, chat({{"max_tokens", 1000000000000LL}}), 400},
        {cc, chat({{"max_tokens", "10"}}), 400},
        {cc, chat({{"max_tokens", 1.5}}), 400},
        {cc, chat({{"temperature", -1}}), 400},
        {cc, chat({{"temperature", 3}}), 400},
        {cc, chat({{"temperature", "hot"}}), 400},
        {cc, chat({{"top_p", 1.5}}), 400},
        {cc, chat({{"presence_penalty", 5}}), 400},
        {cc, chat({{"frequency_penalty", "x"}}), 400},
        {cc, chat({{"seed", "abc"}}), 400},
        {cc, chat({{"seed", 1.5}}), 400},
        {cc, chat({{"n", 17}}), 400},
        {cc, chat({{"n", 0}}), 400},
        {cc, chat({{"stop", 5}}), 400},
        {cc, chat({{"stop", {"a", "b", "c", "d", "e"}}}), 400},
        {cc, chat({{"stop", {""}}}), 400},
        {cc, chat({{"stop", {1}}}), 400},
        {cc, chat({{"logit_bias", {1, 2}}}), 400},
        {cc, chat({{"logit_bias", {{"abc", 1}}}}), 400},
        {cc, chat({{"logit_bias", {{"999999999", 1}}}}), 400},
        {cc, chat({{"logit_bias", {{"5", 1000}}}}), 400},
        {cc, chat({{"logprobs", "yes"}}), 400},
        {cc, chat({{"logprobs", true}, {"top_logprobs", 50}}), 400},
        {cc, chat({{"top_logprobs", 2}}), 400},
        {cc, chat({{"response_format", "json"}}), 400},
        {cc, chat({{"response_format", {{"type", "xml"}}}}), 400},
        {cc,
         chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}),
         400},
        {cc, chat({{"grammar", "root ::= ("}}), 400},
        {cc, chat({{"stream", "yes"}}), 400},
        {cc, chat({{"stream_options", 5}}), 400},
        {cc, chat({{"tools", {{{"type", "function"}}}}}), 400},
        {cc, chat({{"tools", "get_weather"}}), 400},
        {cc, chat({{"tools", {{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}}}), 400},
        {cc, chat({{"tools", {{{"function", {{"name", "bad name"}}}}}}}), 400},
        {cc, chat({{"tools", {{{"function", {{"name", "f"}, {"parameters", "x"}}}}}}}), 400},
        {cc, chat({{"tools", {{{"function", {{"name", "f"}, {"parameters", {1}}}}}}}}), 400},
        {cc, chat({{"tools", weather_tool()}, {"tool_choice", "always"}}), 400},
        {cc, chat({{"tools", weather_tool()}, {"tool_choice", 1}}), 400},
        {cc, chat({{"tool_choice", "required"}}), 400},
        {cc,
         chat({{"tools", weather_tool()},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
         400},
        {cc, chat({{"tools", weather_tool()}, {"parallel_tool_calls", "yes"}}), 400},
        {cc, chat({{"tools", weather_tool()}, {"response_format", {{"type", "json_object"}}}}),
         400},
        {cc, chat({{"chat_template_kwargs", {{"enable_thinking", "no"}}}}), 400},
        {cc, with_messages({{{"role", "tool"}, {"content", "sunny"}}}), 400},
        {cc,
         with_messages(
             {{{"role", "assistant"},
               {"tool_calls",
                {{{"id", "c1"},
                  {"function", {{"name", "get_weather"}, {"arguments", "{not json"}}}}}}}}),
         400},
        {cc, with_messages({{{"role", "assistant"}, {"tool_calls", {{{"id", "c1"}}}}}}), 400},
        {cc, chat({{"session", 5}}), 400},
        {cc, chat({{"cache_prompt", "no"}}), 400},
        {cc, std::string(70000, ' '), 413},
        {cc, with_messages({{{"role", "user"}, {"content", std::string(3000, 'x')}}}), 400},
        {co, R"({"max_tokens": 4})", 400},
        {co, R"({"prompt": {}})", 400},
        {co, R"({"prompt": [-1]})", 400},
        {co, R"({"prompt": [999999999]})", 400},
        {co, R"({"prompt": ""})", 400},
        {co, R"({"prompt": "hi", "logprobs": 10})", 400},
        {co, R"({"prompt": ["a", "b"]})", 400},
        {"/v1/embeddings", R"({})", 400},
        {"/v1/embeddings", R"({"input": 5})", 400},
        {"/v1/embeddings", R"({"input": []})", 400},
        {"/v1/embeddings", R"({"input": [""]})", 400},
        {"/v1/embeddings", R"({"input": "x", "encoding_format": "hex"})", 400},
        {"/v1/embeddings", R"({"input": "x", "dimensions": 0})", 400},
        {"/v1/embeddings", R"({"input": "x", "dimensions": 100000})", 400},
        {"/tokenize", R"({"content": 5})", 400},
        {"/detokenize", R"({"tokens": [-5]})", 400},
        {"/v1/nope", "{}", 404},
    };
    ASSERT_GE(cases.size(), 40u);
    auto c = server_->client();
    for (const auto& k : cases) {
        auto r = c.Post(k.path, k.body, "application/json");
        expect_error_shape(r, k.status, k.path + " " + k.body.substr(0, 120));
    }
    auto get = c.Get("/v1/nothing-here");
    expect_error_shape(get, 404, "GET unknown route");
    // Still serving.
    auto ok = c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(Server, ClientThatDisconnectsFreesItsSlot) {
    auto c = server_->client();
    const std::string cancelled =
        "llamapp_requests_total{model=\"qwen3-tiny\",outcome=\"cancelled\"}";
    const double before = metric(get_text(c, "/metrics"), cancelled);
    json body = chat_body(2000);
    body["stream"] = true;
    for (int i = 0; i < 2; ++i)
        ASSERT_TRUE(stream_then_hang_up(server_->port(), body.dump())) << server_->log();
    EXPECT_TRUE(llamapp::test::eventually(
        [&] {
            return get_json(c, "/health")["busy_slots"] == 0 &&
                   metric(get_text(c, "/metrics"), cancelled) == before + 2;
        },
        std::chrono::seconds(30)))
        << "the slots were not freed after the clients left";
}

}  // namespace
