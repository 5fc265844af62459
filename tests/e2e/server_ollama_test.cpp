// Ollama's API on `llamapp serve`: its error shape on every bad request, the root and version
// probes, timing fields, template overrides, cache reuse across turns, options the server does
// not apply, and a stream cut short. The official client's own test is
// tests/e2e/client_sdks/ollama.test.mjs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

const std::string qwen = generated_model("qwen3-tiny.gguf").string();
constexpr const char* hub_like_name = "tiny/llama-GGUF:Q4_0";

class OllamaApi : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        // A second model with fill-in-the-middle tokens, for suffix and capabilities; a third
        // that the operator named as a hub model reads, which no pull may take for that model.
        server_ = start_suite_server(
            {"-m", qwen, "-m", "coder=" + generated_model("coder-tiny.gguf").string(), "-m",
             std::string(hub_like_name) + "=" + shared_model("stories260K.gguf").string(), "-c",
             "1024", "-np", "2", "-t", "2"},
            start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static json post(const std::string& path, const json& body, int status = 200) {
        auto c = server_->client();
        auto r = c.Post(path, body.dump(), "application/json");
        EXPECT_TRUE(r) << path;
        if (!r) return {};
        EXPECT_EQ(r->status, status) << path << ": " << r->body;
        return json::parse(r->body, nullptr, false);
    }
    static ServerProcess* server_;
    static std::string start_error_;
};

ServerProcess* OllamaApi::server_ = nullptr;
std::string OllamaApi::start_error_;

json greedy(int num_predict) {
    return {{"temperature", 0}, {"seed", 1}, {"num_predict", num_predict}};
}

json chat(const json& messages, int num_predict) {
    return {{"model", "qwen3-tiny"},
            {"messages", messages},
            {"stream", false},
            {"think", false},
            {"options", greedy(num_predict)}};
}

json user(const std::string& text) {
    return {{"role", "user"}, {"content", text}};
}

// A copy is a plain name: one that reads as a path or a hub model would let a client pass a
// model off as a file or as a pull that never happened.
TEST_F(OllamaApi, ACopyIsAPlainNameAndAPullNeverTakesAnotherModelForTheHubs) {
    const std::vector<std::string> squatters = {"../../etc/passwd",
                                                "owner/repo:/etc/passwd",
                                                "hf.co/evil/model:Q4_0",
                                                "evil/model:Q4_0",
                                                "/tmp/model.gguf",
                                                "model.gguf",
                                                "hf.co/evil/model",
                                                "a:b:c",
                                                ".hidden"};
    for (const std::string& name : squatters) {
        const json r = post("/api/copy", {{"source", "qwen3-tiny"}, {"destination", name}}, 400);
        EXPECT_TRUE(r["error"].is_string()) << name << ": " << r;
    }
    auto listed = server_->client().Get("/api/tags");
    ASSERT_TRUE(listed);
    const json tags = json::parse(listed->body);  // a range-for would not keep a temporary alive
    for (const json& m : tags["models"]) {
        const std::string name = m["name"];
        EXPECT_TRUE(name.find("passwd") == std::string::npos &&
                    name.find("evil") == std::string::npos && !name.starts_with("model.gguf"))
            << name;
    }

    const json pulled = post(
        "/api/pull", {{"model", "hf.co/" + std::string(hub_like_name)}, {"stream", false}}, 400);
    EXPECT_FALSE(pulled.contains("status")) << pulled;
    EXPECT_NE(pulled["error"].get<std::string>().find("not that hub model"), std::string::npos)
        << pulled;

    post("/api/copy", {{"source", "qwen3-tiny"}, {"destination", "my-copy:v1"}});
    auto del =
        server_->client().Delete("/api/delete", R"({"model": "my-copy:v1"})", "application/json");
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 200) << del->body;
}

TEST_F(OllamaApi, TheRootAndTheVersionAnswerAsOllamasDo) {
    auto c = server_->client();
    auto root = c.Get("/");
    ASSERT_TRUE(root);
    EXPECT_EQ(root->status, 200);
    EXPECT_EQ(root->body, "Ollama is running");
    // A browser is not an Ollama client: it gets a page that says where the APIs are.
    auto page =
        c.Get("/", httplib::Headers{{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}});
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_NE(page->body.find("<a href=\"/v1/models\">"), std::string::npos) << page->body;
    auto head = c.Head("/");
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    const json v = get_json(c, "/api/version");
    EXPECT_TRUE(v["version"].is_string()) << v;
}

TEST_F(OllamaApi, BadRequestsGetOllamasErrorShapeAndTheServerKeepsServing) {
    struct Case {
        std::string path;
        std::string body;
        int status;
    };
    auto with = [](json base, const json& patch) {
        for (auto& [k, v] : patch.items()) base[k] = v;
        return base.dump();
    };
    const json c0 = chat(json::array({user("hi")}), 4);
    const json g0 = {{"model", "qwen3-tiny"}, {"prompt", "hi"}, {"stream", false}};
    const std::string ch = "/api/chat", ge = "/api/generate";
    const std::vector<Case> cases = {
        {ch, "{", 400},
        {ch, "[]", 400},
        {ch, "", 400},
        {ch, R"({"messages": []})", 400},
        {ch, with(c0, {{"model", 5}}), 400},
        {ch, with(c0, {{"model", ""}}), 400},  // not the default model: Ollama needs a name
        // Nested past any request's need: refused before anything recurses over it.
        {ch,
         R"({"model": "qwen3-tiny", "messages": )" + std::string(200000, '[') +
             std::string(200000, ']') + "}",
         400},
        {ch, with(c0, {{"keep_alive", std::string(100000, '1')}}), 400},
        {ch, with(c0, {{"keep_alive", "1h30"}}), 400},
        {ch, with(c0, {{"model", "nope:7b"}}), 404},
        {ch, with(c0, {{"messages", "hi"}}), 400},
        {ch, with(c0, {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}), 400},
        {ch, with(c0, {{"messages", {{{"role", "user"}, {"content", 5}}}}}), 400},
        {ch, with(c0, {{"messages", {{{"role", "user"}, {"content", "x"}, {"images", {"aGk="}}}}}}),
         400},
        {ch,
         with(c0, {{"messages",
                    {{{"role", "assistant"}, {"content", ""}, {"tool_calls", {{{"x", 1}}}}}}}}),
         400},
        {ch, with(c0, {{"messages", {{{"role", 1e308}, {"content", "x"}, {"tool_name", "f"}}}}}),
         400},
        {ch, with(c0, {{"options", 5}}), 400},
        {ch, with(c0, {{"options", {{"temperature", "hot"}}}}), 400},
        {ch, with(c0, {{"options", {{"top_p", 2}}}}), 400},
        {ch, with(c0, {{"options", {{"seed", "x"}}}}), 400},
        {ch, with(c0, {{"options", {{"stop", 5}}}}), 400},
        {ch, with(c0, {{"options", {{"num_ctx", 0}}}}), 400},
        {ch, with(c0, {{"format", "xml"}}), 400},
        {ch, with(c0, {{"format", 5}}), 400},
        {ch, with(c0, {{"think", 5}}), 400},
        {ch, with(c0, {{"think", "extreme"}}), 400},
        {ch, with(c0, {{"keep_alive", "soon"}}), 400},
        {ch, with(c0, {{"stream", "yes"}}), 400},
        {ch, with(c0, {{"tools", "clock"}}), 400},
        {ge, with(g0, {{"prompt", 5}}), 400},
        {ge, with(g0, {{"raw", "yes"}}), 400},
        {ge, with(g0, {{"images", {"aGk="}}}), 400},
        {ge, with(g0, {{"context", {1, 2, 3}}}), 400},
        {ge, with(g0, {{"template", "{{ .Messages }}"}}), 400},
        {ge, with(g0, {{"template", "{{ if .System }}x"}}), 400},
        {ge, with(g0, {{"template", "{{ .Prompt"}}), 400},
        {ge, with(g0, {{"suffix", "end"}}), 400},  // qwen3-tiny has no fill-in-the-middle tokens
        {ge, with(g0, {{"options", {{"num_predict", "many"}}}}), 400},
        {"/api/embed", R"({"model": "qwen3-tiny"})", 400},
        {"/api/embed", R"({"model": "qwen3-tiny", "input": 5})", 400},
        {"/api/embed", R"({"model": "qwen3-tiny", "input": "x", "truncate": "no"})", 400},
        {"/api/embed", R"({"model": "qwen3-tiny", "input": "x", "dimensions": 0})", 400},
        {"/api/embeddings", R"({"model": "qwen3-tiny"})", 400},
        {"/api/show", R"({})", 400},
        {"/api/show", R"({"model": "nope"})", 404},
        {"/api/pull", R"({"model": "qwen3-tiny"})", 400},
        {"/api/pull", R"({"model": "/etc/passwd"})", 400},
        {"/api/copy", R"({"source": "qwen3-tiny"})", 400},
        {"/api/copy", R"({"source": "nope", "destination": "x"})", 404},
        {"/api/copy", R"({"source": "qwen3-tiny", "destination": "qwen3-tiny"})", 409},
        {"/api/copy", R"({"source": "qwen3-tiny", "destination": "bad name!"})", 400},
    };
    auto c = server_->client();
    for (const Case& k : cases) {
        const std::string what = k.path + " " + k.body;
        auto r = c.Post(k.path, k.body, "application/json");
        ASSERT_TRUE(r) << what;
        EXPECT_EQ(r->status, k.status) << what << ": " << r->body;
        const json j = json::parse(r->body, nullptr, false);
        ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body;
        EXPECT_TRUE(j["error"].is_string() && !j["error"].get<std::string>().empty()) << what;
    }
    auto unnamed = c.Delete("/api/delete", R"({"model": ""})", "application/json");
    ASSERT_TRUE(unnamed);
    EXPECT_EQ(unnamed->status, 400) << "an empty name is no model, not the default one";
    auto del = c.Delete("/api/delete", R"({"model": "qwen3-tiny"})", "application/json");
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 400) << "the server's own model is not a client's to delete";
    EXPECT_TRUE(json::parse(del->body)["error"].is_string());
    EXPECT_EQ(post("/api/chat", chat(json::array({user("still there?")}), 2))["done"], true);
}

TEST_F(OllamaApi, TimingFieldsCountWhatRan) {
    const json r = post("/api/generate", {{"model", "qwen3-tiny:latest"},
                                          {"prompt", "Count with me"},
                                          {"stream", false},
                                          {"think", false},
                                          {"options", greedy(5)}});
    EXPECT_EQ(r["model"], "qwen3-tiny:latest");
    EXPECT_EQ(r["done"], true);
    EXPECT_EQ(r["done_reason"], "length");
    EXPECT_EQ(r["eval_count"], 5);
    EXPECT_GT(r["prompt_eval_count"].get<int>(), 0);
    const auto total = r["total_duration"].get<std::int64_t>();
    const auto prompt = r["prompt_eval_duration"].get<std::int64_t>();
    const auto eval = r["eval_duration"].get<std::int64_t>();
    EXPECT_GT(prompt, 0);
    EXPECT_GT(eval, 0);
    EXPECT_GE(total, prompt + eval);
    EXPECT_GE(r["load_duration"].get<std::int64_t>(), 0);
    EXPECT_TRUE(r["created_at"].get<std::string>().ends_with("Z"));
}

// A template override lays the prompt out itself: what reaches the model is the raw text the
// template makes (tests/unit/ollama_template_test.cpp checks the rendering).
TEST_F(OllamaApi, ATemplateOverrideTakesThePlaceOfTheChatTemplate) {
    json body = {
        {"model", "qwen3-tiny"},
        {"system", "Be brief."},
        {"prompt", "Name a color."},
        {"template", "{{ if .System }}{{ .System }} {{ end }}{{ .Prompt }}{{ .Response }}"},
        {"stream", false},
        {"options", greedy(3)}};
    const json templated = post("/api/generate", body);
    // The chat template would add its turn markers around the same two texts.
    body.erase("template");
    body["think"] = false;
    const json chat_laid_out = post("/api/generate", body);
    EXPECT_LT(templated["prompt_eval_count"].get<int>(),
              chat_laid_out["prompt_eval_count"].get<int>());
    EXPECT_EQ(templated["eval_count"], 3);
}

// The second turn of a conversation computes only what the first did not leave in the cache.
TEST_F(OllamaApi, ALaterTurnReusesTheFirstTurnsCache) {
    const json first_turn = json::array({user("Tell me about the sea in a few words.")});
    const json first = post("/api/chat", chat(first_turn, 8));
    json second_turn = first_turn;
    second_turn.push_back(first["message"]);
    second_turn.push_back(user("And the sky?"));
    const json warm = post("/api/chat", chat(second_turn, 4));
    // The same second turn under another opening has nothing to reuse.
    json cold_turn = second_turn;
    cold_turn[0] = user("Tell me about the land in a few words.");
    const json cold = post("/api/chat", chat(cold_turn, 4));
    EXPECT_LT(warm["prompt_eval_count"].get<int>(), cold["prompt_eval_count"].get<int>())
        << "warm " << warm << "\ncold " << cold;
}

TEST_F(OllamaApi, OptionsTheServerDoesNotApplyAreLoggedOnce) {
    json body = chat(json::array({user("hi")}), 2);
    body["options"]["num_thread"] = 8;
    body["options"]["not_an_option"] = true;
    body["options"]["num_ctx"] = 1 << 20;  // served with the loaded context, as Continue expects
    EXPECT_EQ(post("/api/chat", body)["done"], true);
    EXPECT_EQ(post("/api/chat", body)["done"], true);
    auto c = server_->client();
    ASSERT_TRUE(c.Get("/health"));  // the log lines above are written by now
    const std::string log = server_->log();
    auto count = [&](const std::string& needle) {
        std::size_t n = 0;
        for (auto at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
            ++n;
        return n;
    };
    EXPECT_EQ(count("ollama option \"num_thread\" not applied"), 1u) << log;
    EXPECT_EQ(count("ollama option \"not_an_option\" not applied"), 1u) << log;
    EXPECT_EQ(count("ollama option \"num_ctx\" not applied"), 1u) << log;
}

// num_ctx within the loaded context bounds the reply; num_predict -2 ("fill the context") runs
// up to that bound.
TEST_F(OllamaApi, NumCtxBoundsTheReplyThatNegativeNumPredictFills) {
    json body = chat(json::array({user("Go on and on")}), 0);
    body["options"]["num_predict"] = -2;
    body["options"]["num_ctx"] = 24;
    const json r = post("/api/chat", body);
    EXPECT_GT(r["eval_count"].get<int>(), 0) << r;
    EXPECT_LE(r["eval_count"].get<int>(), 24) << r;
    if (r["done_reason"] == "length") {
        EXPECT_EQ(r["eval_count"], 24) << r;
    }
}

TEST_F(OllamaApi, EmbedTruncatesUnlessToldNotTo) {
    std::string long_text;
    for (int i = 0; i < 1500; ++i) long_text += "word ";
    const json cut = post("/api/embed", {{"model", "qwen3-tiny"}, {"input", long_text}});
    ASSERT_EQ(cut["embeddings"].size(), 1u) << cut;
    post("/api/embed", {{"model", "qwen3-tiny"}, {"input", long_text}, {"truncate", false}}, 400);
}

TEST_F(OllamaApi, SuffixIsFillInTheMiddleWhereTheModelHasItsTokens) {
    const json r = post("/api/generate", {{"model", "coder:latest"},
                                          {"prompt", "def add(a, b):\n    return "},
                                          {"suffix", "\n\nprint(add(1, 2))\n"},
                                          {"stream", false},
                                          {"options", greedy(4)}});
    EXPECT_EQ(r["done"], true) << r;
    EXPECT_EQ(r["eval_count"], 4) << r;
    const json coder = post("/api/show", {{"model", "coder"}});
    const json caps = coder["capabilities"];
    EXPECT_NE(std::find(caps.begin(), caps.end(), "insert"), caps.end()) << coder;
    const json qwen_caps = post("/api/show", {{"model", "qwen3-tiny"}})["capabilities"];
    EXPECT_EQ(std::find(qwen_caps.begin(), qwen_caps.end(), "insert"), qwen_caps.end());
    EXPECT_NE(std::find(qwen_caps.begin(), qwen_caps.end(), "tools"), qwen_caps.end());
    // As Ollama lists them: embeddings are a capability of embedding models, though every
    // model computes them.
    EXPECT_EQ(std::find(qwen_caps.begin(), qwen_caps.end(), "embedding"), qwen_caps.end());
    EXPECT_EQ(coder["model_info"]["general.architecture"], coder["details"]["family"]);
}

// Ollama's streams are lines of JSON; one cut short by a drain ends with an {"error"} line.
TEST(OllamaStream, AStreamCutShortEndsWithAnErrorLine) {
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1", "--drain-grace", "0"});
    json body = chat(json::array({user("Write forever")}), 3000);
    body["stream"] = true;
    RawPost stream(server.port(), "/api/chat", body.dump());
    ASSERT_TRUE(stream.read_until("\"done\":false"));
    EXPECT_NE(stream.received().find("Content-Type: application/x-ndjson"), std::string::npos)
        << stream.received();
    server.signal(SIGTERM);
    ASSERT_TRUE(stream.read_until("{\"error\":"));
    EXPECT_EQ(stream.received().find("\"done\":true"), std::string::npos) << stream.received();
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
}

}  // namespace
