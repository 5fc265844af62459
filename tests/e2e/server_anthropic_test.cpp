// Anthropic's Messages API on `llamapp serve`: its reply and event shapes, its error shape on
// every bad request, x-api-key, stop sequences and prefix-cache usage. The official SDK's own
// test is tests/e2e/client_sdks/anthropic.test.mjs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

class AnthropicMessages : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        server_ = start_suite_server({"-m", shared_model("stories260K.gguf").string(), "-c", "512",
                                      "-np", "2", "-t", "2", "--temp", "0", "--api-key", "k1"},
                                     start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static httplib::Result send(const std::string& path, const std::string& body,
                                const std::string& key = "k1") {
        auto c = server_->client();
        return c.Post(path, {{"x-api-key", key}}, body, "application/json");
    }
    static json post(const json& body, int status = 200) {
        auto r = send("/v1/messages", body.dump());
        EXPECT_TRUE(r);
        if (!r) return {};
        EXPECT_EQ(r->status, status) << r->body;
        return json::parse(r->body, nullptr, false);
    }
    static ServerProcess* server_;
    static std::string start_error_;
};

ServerProcess* AnthropicMessages::server_ = nullptr;
std::string AnthropicMessages::start_error_;

json user(const json& content) {
    return {{"role", "user"}, {"content", content}};
}

// {"type": "error", "error": {"type": ..., "message": ...}} and nothing of OpenAI's shape.
void expect_anthropic_error(const httplib::Result& r, int status, const std::string& type,
                            const std::string& what) {
    ASSERT_TRUE(r) << what;
    EXPECT_EQ(r->status, status) << what << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j.value("type", ""), "error") << what << ": " << r->body;
    ASSERT_TRUE(j.contains("error") && j["error"].is_object()) << what << ": " << r->body;
    EXPECT_EQ(j["error"].value("type", ""), type) << what << ": " << r->body;
    EXPECT_FALSE(j["error"].value("message", "").empty()) << what;
}

TEST_F(AnthropicMessages, AWholeReplyAndItsUsage) {
    const json body = {{"max_tokens", 6},
                       {"system", {{{"type", "text"}, {"text", "Be kind."}}}},
                       {"messages", {user("Once upon a time")}}};
    const json r = post(body);
    EXPECT_EQ(r["type"], "message");
    EXPECT_EQ(r["role"], "assistant");
    EXPECT_TRUE(r["id"].get<std::string>().starts_with("msg_"));
    ASSERT_EQ(r["content"].size(), 1u);
    EXPECT_EQ(r["content"][0]["type"], "text");
    EXPECT_EQ(r["stop_reason"], "max_tokens");
    EXPECT_TRUE(r["stop_sequence"].is_null());
    EXPECT_EQ(r["usage"]["output_tokens"], 6);
    EXPECT_FALSE(r.contains("timings"));
    // Asked again, the prompt is read from the prefix cache and usage splits it so.
    const json again = post(body);
    EXPECT_EQ(again["content"], r["content"]);
    EXPECT_GT(again["usage"]["cache_read_input_tokens"].get<int>(), 0);
    EXPECT_EQ(
        again["usage"]["input_tokens"].get<int>() +
            again["usage"]["cache_read_input_tokens"].get<int>(),
        r["usage"]["input_tokens"].get<int>() + r["usage"]["cache_read_input_tokens"].get<int>());
}

TEST_F(AnthropicMessages, AStopSequenceEndsTheReplyAndIsNamed) {
    const json messages = {user("Once upon a time")};
    const std::string text =
        post({{"max_tokens", 24}, {"messages", messages}})["content"][0]["text"];
    ASSERT_GT(text.size(), 6u);
    const std::string stop = text.substr(3, 3);
    const json r = post({{"max_tokens", 24}, {"messages", messages}, {"stop_sequences", {stop}}});
    EXPECT_EQ(r["stop_reason"], "stop_sequence");
    EXPECT_EQ(r["stop_sequence"], stop);
    EXPECT_EQ(r["content"][0]["text"], text.substr(0, text.find(stop)));
}

// Each event's name is its data's type; blocks open and close in order with matching indices.
TEST_F(AnthropicMessages, AStreamHasAnthropicsEventSequence) {
    auto r = send("/v1/messages",
                  json{{"max_tokens", 5}, {"stream", true}, {"messages", {user("Hello")}}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<std::string> types;
    std::string text;
    for (const std::string& e : sse_events(r->body)) {
        ASSERT_TRUE(e.starts_with("event: ")) << e;
        const auto newline = e.find('\n');
        const std::string name = e.substr(7, newline - 7);
        ASSERT_TRUE(e.compare(newline + 1, 6, "data: ") == 0) << e;
        const json data = json::parse(e.substr(newline + 7));
        EXPECT_EQ(data["type"], name);
        types.push_back(name);
        if (name == "content_block_delta") {
            EXPECT_EQ(data["index"], 0);
            text += data["delta"]["text"].get<std::string>();
        }
        if (name == "message_delta") {
            EXPECT_EQ(data["delta"]["stop_reason"], "max_tokens");
            EXPECT_EQ(data["usage"]["output_tokens"], 5);
        }
    }
    ASSERT_GE(types.size(), 6u);
    EXPECT_EQ(types[0], "message_start");
    EXPECT_EQ(types[1], "ping");
    EXPECT_EQ(types[2], "content_block_start");
    EXPECT_EQ(types[types.size() - 3], "content_block_stop");
    EXPECT_EQ(types[types.size() - 2], "message_delta");
    EXPECT_EQ(types.back(), "message_stop");
    // The same text as the whole reply.
    EXPECT_EQ(text, post({{"max_tokens", 5}, {"messages", {user("Hello")}}})["content"][0]["text"]);
}

TEST_F(AnthropicMessages, BadInputIsA400InAnthropicsShapeAndTheServerKeepsServing) {
    const json ok_messages = {user("x")};
    const std::vector<json> bad = {
        json::object(),
        {{"messages", "x"}},
        {{"messages", {5}}},
        {{"messages", {{{"role", "system"}, {"content", "x"}}}}},
        {{"messages", {{{"role", "user"}}}}},
        {{"messages", {user(5)}}},
        {{"messages", {user({{{"type", "image"}, {"source", json::object()}}})}}},
        {{"messages", {user({{{"type", "tool_result"}}})}}},
        {{"messages", {user({{{"type", "video"}}})}}},
        {{"messages",
          {{{"role", "assistant"},
            {"content", {{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}, {"input", "x"}}}}}}}},
        {{"messages", ok_messages}, {"max_tokens", 0}},
        {{"messages", ok_messages}, {"system", 3}},
        {{"messages", ok_messages}, {"stop_sequences", "x"}},
        {{"messages", ok_messages}, {"stop_sequences", {""}}},
        {{"messages", ok_messages}, {"temperature", "hot"}},
        {{"messages", ok_messages}, {"tools", {{{"type", "web_search_20250305"}, {"name", "w"}}}}},
        {{"messages", ok_messages}, {"tools", {{{"name", "f"}}}}},
        {{"messages", ok_messages}, {"tool_choice", {{"type", "any"}}}},
        {{"messages", ok_messages}, {"tool_choice", {{"type", "sometimes"}}}},
        {{"messages", ok_messages}, {"thinking", {{"type", "enabled"}, {"budget_tokens", 0}}}},
        {{"messages", ok_messages}, {"metadata", "x"}},
    };
    for (const json& body : bad) {
        expect_anthropic_error(send("/v1/messages", body.dump()), 400, "invalid_request_error",
                               body.dump());
        expect_anthropic_error(send("/v1/messages/count_tokens", body.dump()), 400,
                               "invalid_request_error", "count_tokens " + body.dump());
    }
    expect_anthropic_error(send("/v1/messages", "{not json"), 400, "invalid_request_error", "json");
    expect_anthropic_error(send("/v1/messages", json{{"messages", ok_messages}}.dump(), "wrong"),
                           401, "authentication_error", "key");
    // A server of one model answers Claude's names with it (tests/e2e/server_models_test.cpp).
    EXPECT_EQ(post({{"model", "claude-sonnet-4-5"},
                    {"max_tokens", 2},
                    {"messages", ok_messages}})["model"],
              "stories260K");
    EXPECT_EQ(post({{"max_tokens", 2}, {"messages", ok_messages}})["usage"]["output_tokens"], 2);
}

}  // namespace
