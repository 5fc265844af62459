// Request fields of the real `llamapp serve` binary that change what comes back: reasoning split
// out, seed, stop strings, chat log-probs, logit_bias, cache_prompt and session.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

class ServerFields : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        server_ = start_suite_server({"-m", generated_model("qwen3-tiny.gguf").string(), "-c",
                                      "2048", "-t", "2", "--parallel", "2"},
                                     start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static json post(const std::string& path, const json& body) {
        auto r = server_->client().Post(path, body.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
        if (!r) return json::object();
        if (body.value("stream", false)) {
            json events = json::array();
            for (const auto& e : sse_events(r->body))
                if (e != "data: [DONE]") events.push_back(json::parse(e.substr(6)));
            return events;
        }
        return json::parse(r->body, nullptr, false);
    }
    // A completion's text under these sampling fields. The truncation filters are off so that
    // above temperature zero the random-weight model draws from its whole vocabulary: two draws
    // of 16 tokens then practically never agree unless their seeds do.
    static std::string sampled(const json& fields) {
        json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 16},
                     {"top_k", 0},
                     {"top_p", 1.0},
                     {"min_p", 0.0}};
        body.update(fields);
        const json r = post("/v1/completions", body);
        return r.is_object() ? r.value(json::json_pointer("/choices/0/text"), "") : "";
    }
    static ServerProcess* server_;
    static std::string start_error_;
};
ServerProcess* ServerFields::server_ = nullptr;
std::string ServerFields::start_error_;

TEST_F(ServerFields, ReasoningIsSplitOutWholeAndStreamed) {
    // A grammar makes even a random model write a thinking block, then an answer.
    json body = chat_body(40);
    body["grammar"] = R"(root ::= "<think>" [a-z ]{2,12} "</think>" [a-z]{1,8})";
    const json message = post("/v1/chat/completions", body)["choices"][0]["message"];
    const std::string reasoning = message.value("reasoning_content", "");
    const std::string content = message.value("content", "");
    EXPECT_FALSE(reasoning.empty()) << message;
    EXPECT_FALSE(content.empty()) << message;
    EXPECT_EQ(content.find("think>"), std::string::npos) << message;
    EXPECT_EQ(reasoning.find("think>"), std::string::npos) << message;

    body["stream"] = true;
    std::string streamed_reasoning, streamed_content;
    for (const auto& chunk : post("/v1/chat/completions", body)) {
        const json& delta = chunk["choices"][0]["delta"];
        streamed_reasoning += delta.value("reasoning_content", "");
        if (delta.contains("content") && delta["content"].is_string())
            streamed_content += delta["content"].get<std::string>();
    }
    EXPECT_EQ(streamed_reasoning, reasoning);
    EXPECT_EQ(streamed_content, content);
}

// A seed ignored for a fixed one makes every seed agree; ignored for a fresh one, the same seed
// disagrees with itself. A temperature read as zero makes them all greedy, hence all equal.
TEST_F(ServerFields, TheSeedDecidesTheSampledText) {
    const std::string a = sampled({{"temperature", 1.0}, {"seed", 1234}});
    EXPECT_EQ(sampled({{"temperature", 1.0}, {"seed", 1234}}), a);
    std::set<std::string> texts = {a};
    for (const int seed : {1, 2, 3}) texts.insert(sampled({{"temperature", 1.0}, {"seed", seed}}));
    EXPECT_GT(texts.size(), 1u) << a;
}

TEST_F(ServerFields, TemperatureZeroIsGreedyAndAboveItSamples) {
    // The greedy text by another route than the temperature: one candidate left to draw from.
    const std::string greedy = sampled({{"temperature", 1.0}, {"top_k", 1}, {"seed", 5}});
    // Zero ignored, the default temperature would sample, and each seed its own text.
    EXPECT_EQ(sampled({{"temperature", 0}, {"seed", 6}}), greedy);
    EXPECT_EQ(sampled({{"temperature", 0}, {"seed", 7}}), greedy);
    // And a temperature above zero must not be taken as zero.
    bool any_other = false;
    for (const int seed : {8, 9, 10})
        any_other = any_other || sampled({{"temperature", 1.0}, {"seed", seed}}) != greedy;
    EXPECT_TRUE(any_other) << greedy;
}

TEST_F(ServerFields, AStopStringEndsTheReplyBeforeIt) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 32}, {"temperature", 0}};
    const std::string full = post("/v1/completions", body)["choices"][0]["text"];
    // Three ASCII letters that first occur a few characters in.
    std::size_t at = std::string::npos;
    for (std::size_t k = 4; k + 3 <= full.size() && at == std::string::npos; ++k) {
        const std::string s = full.substr(k, 3);
        if (std::all_of(s.begin(), s.end(), [](char c) { return std::isalpha(c) != 0; }) &&
            full.find(s) == k)
            at = k;
    }
    ASSERT_NE(at, std::string::npos) << full;
    body["stop"] = {"\x01never", full.substr(at, 3)};
    const json choice = post("/v1/completions", body)["choices"][0];
    EXPECT_EQ(choice["text"], full.substr(0, at));
    EXPECT_EQ(choice["finish_reason"], "stop");
}

TEST_F(ServerFields, ChatLogprobsWholeAndStreamed) {
    json body = chat_body(6);
    body["logprobs"] = true;
    body["top_logprobs"] = 2;
    const json whole = post("/v1/chat/completions", body)["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(whole.size(), 6u) << whole;
    for (const auto& t : whole) {
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        ASSERT_EQ(t["top_logprobs"].size(), 2u);
        // Greedy: the chosen token is the most likely one.
        EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
        EXPECT_TRUE(t["bytes"].is_array());
    }
    body["stream"] = true;
    json streamed = json::array();
    for (const auto& chunk : post("/v1/chat/completions", body)) {
        if (chunk["choices"].empty()) continue;
        const json& lp = chunk["choices"][0]["logprobs"];
        if (lp.is_object())
            for (const auto& t : lp["content"]) streamed.push_back(t);
    }
    ASSERT_EQ(streamed.size(), whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i)
        EXPECT_EQ(streamed[i]["token"], whole[i]["token"]) << i;
}

TEST_F(ServerFields, LogitBiasForcesAToken) {
    const json ids = post("/tokenize", {{"content", " hello"}, {"add_special", false}})["tokens"];
    ASSERT_EQ(ids.size(), 1u) << ids;
    const std::string piece = post("/detokenize", {{"tokens", ids}})["content"];
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"logit_bias", {{std::to_string(ids[0].get<int>()), 100}}}};
    EXPECT_EQ(post("/v1/completions", body)["choices"][0]["text"], piece + piece + piece + piece);
}

TEST_F(ServerFields, CachePromptAndSessionDecideWhatIsReused) {
    json body = chat_body(4);
    body["messages"][0]["content"] = "A question nobody asked before in this test run";
    body["session"] = "fields-session";
    const json first = post("/v1/chat/completions", body)["usage"];
    const int prompt = first["prompt_tokens"];
    // At most the chat template's opening tokens, which earlier requests in this process share.
    EXPECT_LT(first["prompt_tokens_details"]["cached_tokens"].get<int>(), prompt / 2);
    body["cache_prompt"] = false;
    EXPECT_EQ(post("/v1/chat/completions", body)["usage"]["prompt_tokens_details"]["cached_tokens"],
              0);
    body.erase("cache_prompt");
    EXPECT_EQ(post("/v1/chat/completions", body)["usage"]["prompt_tokens_details"]["cached_tokens"],
              prompt - 1);
}

}  // namespace

// n choices: each a request of its own; a seed given moves on per choice, so that the choices
// differ. (The same request twice need not give the same choices:
// rows that share a decode call, or a reused prefix, may change the logits in their last bits.)
TEST_F(ServerFields, NChoicesAreSampledEachOnItsOwn) {
    json body = chat_body(12);
    body["temperature"] = 1.0;
    body["seed"] = 7;
    body["n"] = 3;
    const json r = post("/v1/chat/completions", body);
    ASSERT_EQ(r["choices"].size(), 3u) << r;
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(r["choices"][i]["index"], i);
        EXPECT_EQ(r["choices"][i]["message"]["role"], "assistant");
    }
    // The prompt is counted once, the completions of every choice.
    const int prompt_tokens = r["usage"]["prompt_tokens"];
    const int completion_tokens = r["usage"]["completion_tokens"];
    EXPECT_GE(completion_tokens, 3);
    EXPECT_LE(completion_tokens, 36);
    EXPECT_EQ(r["usage"]["total_tokens"], prompt_tokens + completion_tokens);
    EXPECT_NE(r["choices"][0]["message"], r["choices"][1]["message"]);
    EXPECT_NE(r["choices"][1]["message"], r["choices"][2]["message"]);

    json completion = {{"prompt", "Hello"}, {"max_tokens", 4}, {"n", 2}, {"temperature", 0}};
    const json c = post("/v1/completions", completion);
    ASSERT_EQ(c["choices"].size(), 2u) << c;
    EXPECT_EQ(c["choices"][1]["index"], 1);
    EXPECT_TRUE(c["choices"][1]["text"].is_string());

    // Streamed, the choices follow one another, each ending with its finish reason; one usage
    // chunk counts them all, then [DONE].
    body["n"] = 2;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto s = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(s);
    ASSERT_EQ(s->status, 200) << s->body;
    const std::vector<std::string> events = llamapp::test::sse_events(s->body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "data: [DONE]");
    std::string text[2];
    int finished[2] = {0, 0};
    int previous = 0;
    int streamed_tokens = -1;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        const json e = json::parse(events[i].substr(std::string("data: ").size()));
        if (e["choices"].empty()) {
            streamed_tokens = e["usage"]["completion_tokens"];
            continue;
        }
        const int index = e["choices"][0]["index"];
        ASSERT_TRUE(index == 0 || index == 1) << e;
        EXPECT_GE(index, previous) << "choice 1 follows choice 0";
        previous = index;
        const json& delta = e["choices"][0]["delta"];
        for (const char* key : {"content", "reasoning_content"})
            if (delta.contains(key) && delta[key].is_string())
                text[index] += delta[key].get<std::string>();
        if (!e["choices"][0]["finish_reason"].is_null()) ++finished[index];
    }
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);
    EXPECT_FALSE(text[0].empty());
    EXPECT_FALSE(text[1].empty());
    EXPECT_GE(streamed_tokens, 2);
    EXPECT_LE(streamed_tokens, 24);
    body.erase("stream_options");
    body["n"] = 17;
    body["stream"] = false;
    expect_error_shape(
        server_->client().Post("/v1/chat/completions", body.dump(), "application/json"), 400, "n");
}
