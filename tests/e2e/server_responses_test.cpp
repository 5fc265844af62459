// OpenAI's Responses API on `llamapp serve`: the response object and its event stream, stored
// responses continued by previous_response_id with their KV reused, and OpenAI's error shape on
// every bad request. The official SDK's own test is tests/e2e/client_sdks/openai.test.mjs.
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

class Responses : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        server_ = start_suite_server({"-m", shared_model("stories260K.gguf").string(), "-c", "1024",
                                      "-np", "2", "-t", "2", "--temp", "0", "--responses-max", "3"},
                                     start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static httplib::Result send(const std::string& path, const std::string& body) {
        auto c = server_->client();
        return c.Post(path, body, "application/json");
    }
    static json post(const json& body, int status = 200,
                     const std::string& path = "/v1/responses") {
        auto r = send(path, body.dump());
        EXPECT_TRUE(r);
        if (!r) return {};
        EXPECT_EQ(r->status, status) << r->body;
        return json::parse(r->body, nullptr, false);
    }
    static ServerProcess* server_;
    static std::string start_error_;
};

ServerProcess* Responses::server_ = nullptr;
std::string Responses::start_error_;

std::string output_text(const json& response) {
    std::string text;
    for (const json& item : response["output"])
        if (item["type"] == "message")
            for (const json& part : item["content"]) text += part["text"].get<std::string>();
    return text;
}

TEST_F(Responses, AWholeResponseIsStoredUntilDeleted) {
    const json r = post({{"input", "Once upon a time"},
                         {"instructions", "Tell a story."},
                         {"max_output_tokens", 6},
                         {"metadata", {{"run", "1"}}}});
    EXPECT_EQ(r["object"], "response");
    const std::string id = r["id"];
    EXPECT_TRUE(id.starts_with("resp_"));
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r["instructions"], "Tell a story.");
    EXPECT_EQ(r["metadata"]["run"], "1");
    EXPECT_EQ(r["max_output_tokens"], 6);
    ASSERT_EQ(r["output"].size(), 1u);
    const json& item = r["output"][0];
    EXPECT_EQ(item["type"], "message");
    EXPECT_TRUE(item["id"].get<std::string>().starts_with("msg_"));
    EXPECT_EQ(item["role"], "assistant");
    EXPECT_EQ(item["content"][0]["type"], "output_text");
    EXPECT_FALSE(output_text(r).empty());
    EXPECT_EQ(r["usage"]["output_tokens"], 6);
    EXPECT_EQ(r["usage"]["total_tokens"],
              r["usage"]["input_tokens"].get<int>() + r["usage"]["output_tokens"].get<int>());
    // The same input counted, not run.
    const json counted = post({{"input", "Once upon a time"}, {"instructions", "Tell a story."}},
                              200, "/v1/responses/input_tokens");
    EXPECT_EQ(counted["object"], "response.input_tokens");
    EXPECT_EQ(counted["input_tokens"], r["usage"]["input_tokens"]);

    auto c = server_->client();
    EXPECT_EQ(get_json(c, "/v1/responses/" + id), r);
    // Its input as items: text input is one user message.
    const json items = get_json(c, "/v1/responses/" + id + "/input_items");
    EXPECT_EQ(items["object"], "list");
    ASSERT_EQ(items["data"].size(), 1u) << items;
    EXPECT_EQ(items["data"][0]["role"], "user");
    EXPECT_EQ(items["data"][0]["content"][0]["text"], "Once upon a time");
    EXPECT_EQ(items["has_more"], false);
    EXPECT_EQ(items["first_id"], items["data"][0]["id"]);
    auto deleted = c.Delete("/v1/responses/" + id);
    ASSERT_TRUE(deleted);
    EXPECT_EQ(json::parse(deleted->body)["deleted"], true);
    auto gone = c.Get("/v1/responses/" + id);
    ASSERT_TRUE(gone);
    expect_error_shape(gone, 404, "deleted");
    // store: false keeps nothing to continue.
    const json unstored = post({{"input", "Hello"}, {"max_output_tokens", 2}, {"store", false}});
    EXPECT_EQ(unstored["store"], false);
    expect_error_shape(c.Get("/v1/responses/" + unstored["id"].get<std::string>()), 404,
                       "unstored");
}

// Item input is listed as given, newest first unless order=asc, a page at a time.
TEST_F(Responses, InputItemsAreListedAPageAtATime) {
    const json input = {
        {{"type", "message"}, {"role", "user"}, {"content", "Once upon a time"}, {"id", "m1"}},
        {{"type", "message"}, {"role", "assistant"}, {"content", "there was a cat."}},
        {{"type", "message"}, {"role", "user"}, {"content", "And then?"}}};
    const json r = post({{"input", input}, {"max_output_tokens", 2}});
    auto c = server_->client();
    const std::string path = "/v1/responses/" + r["id"].get<std::string>() + "/input_items";
    const json newest = get_json(c, path + "?limit=2");
    ASSERT_EQ(newest["data"].size(), 2u) << newest;
    EXPECT_EQ(newest["data"][0]["content"], "And then?");
    EXPECT_EQ(newest["has_more"], true);
    const json rest = get_json(c, path + "?limit=2&after=" + newest["last_id"].get<std::string>());
    ASSERT_EQ(rest["data"].size(), 1u) << rest;
    EXPECT_EQ(rest["data"][0]["id"], "m1");  // the client's own id is kept
    EXPECT_EQ(rest["has_more"], false);
    EXPECT_EQ(get_json(c, path + "?order=asc")["data"][0]["id"], "m1");
    expect_error_shape(c.Get(path + "?limit=500"), 400, "limit");
    expect_error_shape(c.Get("/v1/responses/resp_nope/input_items"), 404, "unknown");
}

// The next turn is the stored conversation and the new input: its prompt begins with what the
// first turn computed, so the prefix cache holds it.
TEST_F(Responses, PreviousResponseIdContinuesTheConversationWithItsKv) {
    const json first = post({{"input", "The dragon slept"}, {"max_output_tokens", 8}});
    const json second = post({{"input", "Then the knight came"},
                              {"previous_response_id", first["id"]},
                              {"max_output_tokens", 4}});
    EXPECT_EQ(second["previous_response_id"], first["id"]);
    const int first_input = first["usage"]["input_tokens"];
    EXPECT_GT(second["usage"]["input_tokens"].get<int>(),
              first_input + first["usage"]["output_tokens"].get<int>());
    EXPECT_GE(second["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), first_input);
    // The same conversation sent whole, without the store, is the same prompt.
    const json whole =
        post({{"input",
               {{{"role", "user"}, {"content", "The dragon slept"}},
                {{"type", "message"},
                 {"role", "assistant"},
                 {"content", {{{"type", "output_text"}, {"text", output_text(first)}}}}},
                {{"role", "user"}, {"content", "Then the knight came"}}}}},
             200, "/v1/responses/input_tokens");
    EXPECT_EQ(whole["input_tokens"], second["usage"]["input_tokens"]);
    // A chain goes on; an unknown id is refused by name.
    const json third = post(
        {{"input", "The end"}, {"previous_response_id", second["id"]}, {"max_output_tokens", 2}});
    EXPECT_GT(third["usage"]["input_tokens"].get<int>(),
              second["usage"]["input_tokens"].get<int>());
    auto r =
        send("/v1/responses", json{{"input", "x"}, {"previous_response_id", "resp_nope"}}.dump());
    expect_error_shape(r, 400, "unknown previous id");
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "previous_response_id");
}

TEST_F(Responses, TheStoreKeepsOnlyTheNewestResponses) {
    std::vector<std::string> ids;
    for (int i = 0; i < 4; ++i)
        ids.push_back(post({{"input", "Hi"}, {"max_output_tokens", 1}})["id"]);
    auto c = server_->client();
    expect_error_shape(c.Get("/v1/responses/" + ids[0]), 404, "pushed out");  // --responses-max 3
    EXPECT_EQ(get_json(c, "/v1/responses/" + ids[3])["id"], ids[3]);
}

// Each event's name is its data's type, numbered in order; the text of the deltas is the
// response's, and the same as the whole reply's.
TEST_F(Responses, AStreamHasTheResponsesEventSequence) {
    const json body = {{"input", "Hello"}, {"max_output_tokens", 5}};
    json streamed = body;
    streamed["stream"] = true;
    auto r = send("/responses", streamed.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<std::string> types;
    std::string text;
    json final_response;
    int sequence = 0;
    for (const std::string& e : sse_events(r->body)) {
        ASSERT_TRUE(e.starts_with("event: ")) << e;
        const auto newline = e.find('\n');
        const std::string name = e.substr(7, newline - 7);
        const json data = json::parse(e.substr(newline + 7));
        EXPECT_EQ(data["type"], name);
        EXPECT_EQ(data["sequence_number"], sequence++);
        types.push_back(name);
        if (name == "response.output_text.delta") text += data["delta"].get<std::string>();
        if (name == "response.output_text.done") {
            EXPECT_EQ(data["text"], text);
        }
        if (name == "response.incomplete") final_response = data["response"];
    }
    const std::vector<std::string> opening = {"response.created", "response.in_progress",
                                              "response.output_item.added",
                                              "response.content_part.added"};
    ASSERT_GE(types.size(), 8u);
    EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + 4), opening);
    const std::vector<std::string> closing = {"response.output_text.done",
                                              "response.content_part.done",
                                              "response.output_item.done", "response.incomplete"};
    EXPECT_EQ(std::vector<std::string>(types.end() - 4, types.end()), closing);
    EXPECT_EQ(output_text(final_response), text);
    EXPECT_EQ(final_response["usage"]["output_tokens"], 5);
    EXPECT_EQ(text, output_text(post(body)));
    // A streamed response is stored like a whole one.
    auto c = server_->client();
    EXPECT_EQ(get_json(c, "/v1/responses/" + final_response["id"].get<std::string>())["status"],
              "incomplete");
}

TEST_F(Responses, BadInputIsA400InOpenAIsShapeAndTheServerKeepsServing) {
    const std::vector<json> bad = {
        json::object(),
        {{"input", 5}},
        {{"input", json::array()}},
        {{"input", {5}}},
        {{"input", {{{"role", "tool"}, {"content", "x"}}}}},
        {{"input", {{{"role", "user"}}}}},
        {{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}},
        {{"input", {{{"role", "user"}, {"content", {{{"type", "input_text"}}}}}}}},
        {{"input", {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}}}}},
        {{"input",
          {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{"}}}}},
        {{"input", {{{"type", "function_call_output"}, {"output", "x"}}}}},
        {{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}},
        {{"input", {{{"type", "web_search_call"}}}}},
        {{"input", "x"}, {"max_output_tokens", 0}},
        {{"input", "x"}, {"instructions", 3}},
        {{"input", "x"}, {"temperature", "hot"}},
        {{"input", "x"}, {"store", "yes"}},
        {{"input", "x"}, {"tools", {{{"type", "web_search"}}}}},
        {{"input", "x"}, {"tools", {{{"type", "function"}}}}},
        {{"input", "x"}, {"tool_choice", "required"}},
        {{"input", "x"}, {"tool_choice", "sometimes"}},
        {{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}},
        {{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}},
        {{"input", "x"}, {"reasoning", {{"effort", "extreme"}}}},
        {{"input", "x"}, {"background", true}},
        {{"input", "x"}, {"truncation", "auto"}},
        {{"input", "x"}, {"previous_response_id", 7}},
        {{"input", "x"}, {"metadata", "x"}},
    };
    for (const json& body : bad) {
        expect_error_shape(send("/v1/responses", body.dump()), 400, body.dump());
        expect_error_shape(send("/v1/responses/input_tokens", body.dump()), 400,
                           "input_tokens " + body.dump());
    }
    expect_error_shape(send("/v1/responses", "{not json"), 400, "json");
    // A server of one model answers any name with it (tests/e2e/server_models_test.cpp).
    EXPECT_EQ(post({{"model", "gpt-4.1"}, {"input", "x"}, {"max_output_tokens", 2}})["model"],
              "stories260K");
    EXPECT_EQ(post({{"input", "x"}, {"max_output_tokens", 2}})["usage"]["output_tokens"], 2);
}

}  // namespace
