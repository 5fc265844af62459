// Forced output always arrives: a required tool call or a JSON reply, on a model that never ends
// its thinking on its own (the random-weight qwen3-tiny with QwQ's template, whose reply opens
// the thinking block), in every protocol (Ollama's too), whole and streamed. No request sets a
// budget: the default one for forced replies closes the thinking.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

// What a reply came to, read from any protocol's whole body or stream.
struct Outcome {
    std::string reasoning;
    std::string text;
    std::string call;       // the first tool call's name
    std::string arguments;  // and its arguments
};

const json weather_tool_schema = {
    {"type", "object"},
    {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
    {"required", {"city"}}};
const json ok_schema = {
    {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};

class ForcedOutput : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        server_ =
            start_suite_server({"-m", generated_model("qwen3-tiny.gguf").string(), "-c", "2048",
                                "-np", "2", "-t", "2", "--temp", "0", "--chat-template-file",
                                llama_source("models/templates/Qwen-QwQ-32B.jinja").string()},
                               start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static std::string post(const std::string& path, json body, bool stream, int max_tokens = 96) {
        body["max_tokens"] = max_tokens;
        body["stream"] = stream;
        auto c = server_->client();
        auto r = c.Post(path, body.dump(), "application/json");
        EXPECT_TRUE(r);
        if (!r) return {};
        EXPECT_EQ(r->status, 200) << r->body;
        return r->body;
    }
    static ServerProcess* server_;
    static std::string start_error_;
};

ServerProcess* ForcedOutput::server_ = nullptr;
std::string ForcedOutput::start_error_;

json user(const std::string& text) {
    return json::array({{{"role", "user"}, {"content", text}}});
}

// The data of each event, whatever its name line.
std::vector<json> event_data(const std::string& body) {
    std::vector<json> out;
    for (const std::string& e : sse_events(body)) {
        const auto at = e.find("data: ");
        if (at == std::string::npos || e.compare(at, 12, "data: [DONE]") == 0) continue;
        out.push_back(json::parse(e.substr(at + 6)));
    }
    return out;
}

Outcome chat_outcome(const std::string& body, bool stream) {
    Outcome o;
    if (!stream) {
        const json m = json::parse(body)["choices"][0]["message"];
        o.reasoning = m.value("reasoning_content", "");
        o.text = m["content"].is_string() ? m["content"].get<std::string>() : "";
        if (m.contains("tool_calls")) {
            o.call = m["tool_calls"][0]["function"]["name"];
            o.arguments = m["tool_calls"][0]["function"]["arguments"];
        }
        return o;
    }
    for (const json& chunk : event_data(body)) {
        if (chunk["choices"].empty()) continue;
        const json& d = chunk["choices"][0]["delta"];
        o.reasoning += d.value("reasoning_content", "");
        if (d.contains("content") && d["content"].is_string()) o.text += d["content"];
        for (const json& call : d.value("tool_calls", json::array())) {
            if (call["index"] != 0) continue;
            if (call["function"].contains("name")) o.call = call["function"]["name"];
            o.arguments += call["function"].value("arguments", "");
        }
    }
    return o;
}

Outcome messages_outcome(const std::string& body, bool stream) {
    Outcome o;
    auto add_block = [&o](const json& b) {
        if (b["type"] == "thinking") o.reasoning += b["thinking"].get<std::string>();
        if (b["type"] == "text") o.text += b["text"].get<std::string>();
        if (b["type"] == "tool_use" && o.call.empty()) {
            o.call = b["name"];
            if (!b["input"].empty()) o.arguments = b["input"].dump();
        }
    };
    if (!stream) {
        const json message = json::parse(body);
        for (const json& b : message["content"]) add_block(b);
        return o;
    }
    for (const json& e : event_data(body)) {
        if (e["type"] == "content_block_start") add_block(e["content_block"]);
        if (e["type"] != "content_block_delta") continue;
        const json& d = e["delta"];
        if (d["type"] == "thinking_delta") o.reasoning += d["thinking"].get<std::string>();
        if (d["type"] == "text_delta") o.text += d["text"].get<std::string>();
        if (d["type"] == "input_json_delta" && e["index"] == 1) o.arguments += d["partial_json"];
    }
    return o;
}

// Whole or streamed, the response object: a stream's last event carries it.
Outcome responses_outcome(const std::string& body, bool stream) {
    json response;
    if (!stream) {
        response = json::parse(body);
    } else {
        for (const json& e : event_data(body))
            if (e.contains("response")) response = e["response"];
    }
    Outcome o;
    for (const json& item : response["output"]) {
        if (item["type"] == "reasoning")
            for (const json& part : item["content"]) o.reasoning += part["text"].get<std::string>();
        if (item["type"] == "message")
            for (const json& part : item["content"]) o.text += part["text"].get<std::string>();
        if (item["type"] == "function_call" && o.call.empty()) {
            o.call = item["name"];
            o.arguments = item["arguments"];
        }
    }
    return o;
}

// Ollama's message, whole or as NDJSON lines: thinking, content and tool calls (arguments as an
// object, whole in one line).
Outcome ollama_outcome(const std::string& body, bool stream) {
    std::vector<json> lines;
    if (!stream) {
        lines.push_back(json::parse(body));
    } else {
        std::size_t at = 0;
        for (auto end = body.find('\n'); end != std::string::npos; end = body.find('\n', at)) {
            lines.push_back(json::parse(body.substr(at, end - at)));
            at = end + 1;
        }
    }
    Outcome o;
    for (const json& line : lines) {
        const json& m = line["message"];
        o.reasoning += m.value("thinking", "");
        o.text += m.value("content", "");
        if (m.contains("tool_calls") && o.call.empty()) {
            o.call = m["tool_calls"][0]["function"]["name"];
            o.arguments = m["tool_calls"][0]["function"]["arguments"].dump();
        }
    }
    return o;
}

void expect_call(const Outcome& o, const std::string& what) {
    EXPECT_FALSE(o.reasoning.empty()) << what << ": the thinking is what the budget closes";
    EXPECT_EQ(o.call, "get_weather") << what << ": " << o.reasoning.size() << " chars of thinking";
}

// A JSON reply's room: the default budget takes a quarter for the thinking, and JSON's grammar
// lets the rest hold up to ~260 bytes (a dozen places for two newlines and twenty blanks), one
// token each at worst. With this many tokens the object always closes, so anything short of a
// whole object is the feature failing, not the limit.
constexpr int object_tokens = 512;

// Why `value` breaks `schema`, or empty: the types, enums and required keys the schemas here use.
std::string schema_violation(const json& value, const json& schema, const std::string& at) {
    const std::string type = schema.value("type", "");
    if ((type == "object" && !value.is_object()) || (type == "boolean" && !value.is_boolean()) ||
        (type == "string" && !value.is_string()))
        return at + " is not a " + type + ": " + value.dump();
    if (schema.contains("enum") && std::ranges::find(schema["enum"], value) == schema["enum"].end())
        return at + " is not one of " + schema["enum"].dump();
    if (type != "object") return {};
    const json required = schema.value("required", json::array());
    for (const json& key : required)
        if (!value.contains(key.get<std::string>())) return at + " lacks " + key.dump();
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, property] : properties.items()) {
        if (!value.contains(key)) continue;
        if (auto why = schema_violation(value[key], property, at + "." + key); !why.empty())
            return why;
    }
    return {};
}

// The reply's text is the object itself, whole and valid under the request's schema.
void expect_object(const Outcome& o, const json& schema, const std::string& what) {
    EXPECT_FALSE(o.reasoning.empty()) << what;
    const json reply = json::parse(o.text, nullptr, false);
    ASSERT_FALSE(reply.is_discarded()) << what << ": not JSON: " << o.text;
    EXPECT_EQ(schema_violation(reply, schema, "reply"), "") << what << ": " << o.text;
}

TEST_F(ForcedOutput, ChatCompletions) {
    const json tool = {
        {"type", "function"},
        {"function", {{"name", "get_weather"}, {"parameters", weather_tool_schema}}}};
    for (const bool stream : {false, true}) {
        const std::string mode = stream ? "streamed" : "whole";
        json call = {
            {"messages", user("Weather in Rome?")}, {"tools", {tool}}, {"tool_choice", "required"}};
        expect_call(chat_outcome(post("/v1/chat/completions", call, stream), stream),
                    "call " + mode);
        json object = {
            {"messages", user("Is it sunny?")},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "ok"}, {"schema", ok_schema}}}}}};
        expect_object(
            chat_outcome(post("/v1/chat/completions", object, stream, object_tokens), stream),
            ok_schema, "object " + mode);
    }
}

TEST_F(ForcedOutput, AnthropicMessages) {
    const json tool = {{"name", "get_weather"}, {"input_schema", weather_tool_schema}};
    for (const bool stream : {false, true}) {
        const std::string mode = stream ? "streamed" : "whole";
        json call = {{"messages", user("Weather in Rome?")},
                     {"tools", {tool}},
                     {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}};
        expect_call(messages_outcome(post("/v1/messages", call, stream), stream), "call " + mode);
        // llama-server's json_schema field, on this route too.
        json object = {{"messages", user("Is it sunny?")}, {"json_schema", ok_schema}};
        expect_object(messages_outcome(post("/v1/messages", object, stream, object_tokens), stream),
                      ok_schema, "object " + mode);
    }
}

TEST_F(ForcedOutput, OpenAiResponses) {
    const json tool = {
        {"type", "function"}, {"name", "get_weather"}, {"parameters", weather_tool_schema}};
    for (const bool stream : {false, true}) {
        const std::string mode = stream ? "streamed" : "whole";
        json call = {{"input", "Weather in Rome?"}, {"tools", {tool}}, {"tool_choice", "required"}};
        expect_call(responses_outcome(post("/v1/responses", call, stream), stream), "call " + mode);
        json object = {
            {"input", "Is it sunny?"},
            {"text",
             {{"format", {{"type", "json_schema"}, {"name", "ok"}, {"schema", ok_schema}}}}}};
        expect_object(
            responses_outcome(post("/v1/responses", object, stream, object_tokens), stream),
            ok_schema, "object " + mode);
    }
}

// think is left to the template (which opens the thinking), as Ollama leaves it when unset.
TEST_F(ForcedOutput, OllamaChat) {
    const json tool = {
        {"type", "function"},
        {"function", {{"name", "get_weather"}, {"parameters", weather_tool_schema}}}};
    for (const bool stream : {false, true}) {
        const std::string mode = stream ? "streamed" : "whole";
        const json options = {{"num_predict", 96}};
        json call = {{"model", "qwen3-tiny"},
                     {"messages", user("Weather in Rome?")},
                     {"tools", {tool}},
                     {"tool_choice", "required"},
                     {"options", options}};
        expect_call(ollama_outcome(post("/api/chat", call, stream), stream), "call " + mode);
        json object = {{"model", "qwen3-tiny"},
                       {"messages", user("Is it sunny?")},
                       {"format", ok_schema},
                       {"options", {{"num_predict", object_tokens}}}};
        expect_object(ollama_outcome(post("/api/chat", object, stream, object_tokens), stream),
                      ok_schema, "object " + mode);
    }
}

}  // namespace
