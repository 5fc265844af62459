// llama-server's own routes on `llamapp serve`: /completion (whole and streamed), /tokenize,
// /detokenize, /apply-template, /props and /slots, with the shapes its clients read.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/prometheus.hpp"
#include "support/server_process.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

class NativeRoutes : public ::testing::Test {
  protected:
    // -kvu: the slots share one cache, so that one request may use all of -c.
    static void SetUpTestSuite() {
        server_ = start_suite_server(
            {"-m", shared_model("stories260K.gguf").string(), "-c", "512", "-np", "2", "-kvu", "-t",
             "2", "--temp", "0", "-n", "16", "--slots", "-a", "tinyllama-2"},
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

ServerProcess* NativeRoutes::server_ = nullptr;
std::string NativeRoutes::start_error_;

TEST_F(NativeRoutes, ACompletionHasLlamaServersFields) {
    const json r = post("/completion", {{"prompt", "I believe the meaning of life is"},
                                        {"n_predict", 8},
                                        {"return_tokens", true}});
    EXPECT_EQ(r["model"], "tinyllama-2");
    EXPECT_EQ(r["stop"], true);
    EXPECT_EQ(r["stop_type"], "limit");
    EXPECT_EQ(r["truncated"], false);
    EXPECT_EQ(r["tokens_predicted"], 8);
    EXPECT_EQ(r["tokens"].size(), 8u);
    EXPECT_EQ(r["timings"]["predicted_n"], 8);
    // The prompt with its BOS, as llama-server counts and shows it.
    EXPECT_EQ(r["tokens_evaluated"],
              r["timings"]["prompt_n"].get<int>() + r["timings"]["cache_n"].get<int>());
    EXPECT_EQ(r["prompt"].get<std::string>().rfind("<s>", 0), 0u) << r["prompt"];
    EXPECT_TRUE(r["has_new_line"].is_boolean());
    EXPECT_EQ(r["generation_settings"]["n_predict"], 8);
    EXPECT_EQ(r["generation_settings"]["temperature"], 0.0);  // --temp
    EXPECT_TRUE(r["content"].is_string() && !r["content"].get<std::string>().empty());

    // -n is the default; a stop string ends it as a word, named.
    const json d = post("/completions", {{"prompt", "Once upon a time"}});
    EXPECT_EQ(d["tokens_predicted"], 16);
    EXPECT_EQ(d["tokens"], json::array());  // return_tokens off
    const std::string text = d["content"];
    const std::string word = text.substr(text.size() / 2, 3);
    const json w = post("/completion", {{"prompt", "Once upon a time"}, {"stop", {word}}});
    EXPECT_EQ(w["stop_type"], "word") << w.dump();
    EXPECT_EQ(w["stopping_word"], word);
    EXPECT_EQ(w["content"], text.substr(0, text.find(word)));
}

TEST_F(NativeRoutes, PromptFormsListsOfPromptsAndChosenFields) {
    const json tokens = post("/tokenize", {{"content", "Once upon a time"}, {"add_special", true}});
    const json by_text = post("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 4}});
    const json by_ids = post("/completion", {{"prompt", tokens["tokens"]}, {"n_predict", 4}});
    EXPECT_EQ(by_ids["content"], by_text["content"]);
    // A list without ids at its top is several prompts, answered in order.
    const json both =
        post("/completion", {{"prompt", {tokens["tokens"], "Once upon a time"}}, {"n_predict", 4}});
    ASSERT_TRUE(both.is_array()) << both.dump();
    ASSERT_EQ(both.size(), 2u);
    EXPECT_EQ(both[0]["index"], 0);
    EXPECT_EQ(both[1]["index"], 1);
    EXPECT_EQ(both[0]["content"], both[1]["content"]);
    const json some =
        post("/completion", {{"prompt", "Once"},
                             {"n_predict", 2},
                             {"response_fields", {"content", "generation_settings/n_predict"}}});
    EXPECT_EQ(some.size(), 2u) << some.dump();
    EXPECT_EQ(some["generation_settings/n_predict"], 2);
    const json probs = post("/completion", {{"prompt", "Once"}, {"n_predict", 3}, {"n_probs", 5}});
    ASSERT_EQ(probs["completion_probabilities"].size(), 3u) << probs.dump();
    const json& first = probs["completion_probabilities"][0];
    EXPECT_LE(first["logprob"].get<double>(), 0.0);
    EXPECT_EQ(first["top_logprobs"].size(), 5u);
    EXPECT_TRUE(first["bytes"].is_array());
}

TEST_F(NativeRoutes, AStreamEndsWithTheWholeObjectAndNoDone) {
    auto c = server_->client();
    const json body = {{"prompt", "Once upon a time"}, {"n_predict", 6}, {"stream", true}};
    auto r = c.Post("/completion", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
    std::string content;
    json last;
    for (const std::string& event : sse_events(r->body)) {
        ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
        last = json::parse(event.substr(6));
        ASSERT_TRUE(last["stop"].is_boolean());
        if (!last["stop"].get<bool>()) {
            EXPECT_EQ(last["tokens"].size(), 1u);
            content += last["content"].get<std::string>();
        }
    }
    EXPECT_EQ(last["stop"], true);
    EXPECT_EQ(last["content"], "");
    EXPECT_EQ(last["timings"]["predicted_n"], 6);
    EXPECT_EQ(content,
              post("/completion", {{"prompt", "Once upon a time"}, {"n_predict", 6}})["content"]);
}

TEST_F(NativeRoutes, TokenizeDetokenizeTemplatePropsAndSlots) {
    const json plain = post("/tokenize", {{"content", "Hello world"}});
    const json with_bos = post("/tokenize", {{"content", "Hello world"}, {"add_special", true}});
    EXPECT_EQ(with_bos["tokens"].size(), plain["tokens"].size() + 1);  // add_special off by default
    EXPECT_EQ(with_bos["tokens"][0], 1);
    const json pieces = post("/tokenize", {{"content", "Hello"}, {"with_pieces", true}});
    ASSERT_FALSE(pieces["tokens"].empty());
    EXPECT_TRUE(pieces["tokens"][0]["id"].is_number_integer());
    EXPECT_TRUE(pieces["tokens"][0]["piece"].is_string());
    EXPECT_EQ(post("/detokenize", {{"tokens", with_bos["tokens"]}})["content"], "<s> Hello world");
    EXPECT_EQ(post("/tokenize", json::object())["tokens"], json::array());

    const json rendered =
        post("/apply-template", {{"messages", {{{"role", "user"}, {"content", "Hi there"}}}}});
    EXPECT_NE(rendered["prompt"].get<std::string>().find("Hi there"), std::string::npos);

    auto c = server_->client();
    const json props = get_json(c, "/props");
    EXPECT_EQ(props["total_slots"], 2);
    EXPECT_EQ(props["model_alias"], "tinyllama-2");
    EXPECT_NE(props["model_path"].get<std::string>().find(".gguf"), std::string::npos);
    EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 512);
    EXPECT_EQ(props["endpoint_slots"], true);
    EXPECT_EQ(props["bos_token"], "<s>");
    // The drafts a request gets unless it says otherwise (llamapp's prompt lookup by default).
    const json& params = props["default_generation_settings"]["params"];
    EXPECT_EQ(params["speculative.types"], "lookup");
    EXPECT_EQ(params["speculative.n_max"], 3);
    const json slots = get_json(c, "/slots");
    ASSERT_EQ(slots.size(), 2u) << slots.dump();
    EXPECT_EQ(slots[0]["is_processing"], false);
    EXPECT_EQ(slots[0]["speculative"], true);
    EXPECT_EQ(slots[1]["id"], 1);
}

TEST_F(NativeRoutes, BadInputIsA400AndTheServerKeepsServing) {
    auto c = server_->client();
    const std::vector<json> bad = {
        json::object(),
        {{"prompt", 5}},
        {{"prompt", json::array()}},
        {{"prompt", {1, 99999}}},
        {{"prompt", "x"}, {"n_predict", "many"}},
        {{"prompt", "x"}, {"n_probs", 500}},
        {{"prompt", "x"}, {"logit_bias", {{1}}}},
        {{"prompt", {{"multimodal_data", {"AAAA"}}}}},
        {{"prompt", "x"}, {"post_sampling_probs", "yes"}},
        {{"prompt", {"a", "b"}}, {"stream", true}},
    };
    for (const json& body : bad)
        expect_error_shape(c.Post("/completion", body.dump(), "application/json"), 400,
                           body.dump());
    expect_error_shape(c.Post("/completion", "{not json", "application/json"), 400, "not json");
    expect_error_shape(c.Post("/detokenize", R"({"tokens":[-1]})", "application/json"), 400,
                       "bad id");
    expect_error_shape(c.Post("/apply-template", R"({"messages":"x"})", "application/json"), 400,
                       "bad messages");
    EXPECT_EQ(post("/completion", {{"prompt", "Once"}, {"n_predict", 2}})["tokens_predicted"], 2);
}

// --no-slots turns /slots off with 501, as there; a second server on a port in use fails.
TEST(NativeRoutesOff, NoSlotsIs501AndATakenPortIsRefused) {
    ServerProcess server(
        {"-m", shared_model("stories260K.gguf").string(), "-c", "256", "-t", "2", "--no-slots"});
    auto c = server.client();
    auto r = c.Get("/slots");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 501) << r->body;
    EXPECT_TRUE(json::parse(r->body).contains("error"));
    const CommandResult second = run_command(
        binary("llamapp").string() + " serve -c 256 -t 2 --port " + std::to_string(server.port()) +
        " -m " + shared_model("stories260K.gguf").string() + " 2>&1");
    EXPECT_EQ(second.status, 1) << second.out;
    EXPECT_NE(second.out.find("is the port taken?"), std::string::npos) << second.out;
}

}  // namespace

// llama-server's metric names, for the dashboards built on it: its counters add up to what the
// replies' timings say, cached prompt tokens apart.
TEST_F(NativeRoutes, MetricsUnderLlamaServersNamesAddUpToTheTimings) {
    auto c = server_->client();
    const auto before = c.Get("/metrics");
    ASSERT_TRUE(before);
    EXPECT_TRUE(before->has_header("Process-Start-Time-Unix"));
    auto value = [](const std::string& text, const std::string& name) {
        return prometheus_value(text, name).value_or(-1);
    };
    for (const char* name :
         {"llamacpp:prompt_tokens_total", "llamacpp:n_decode_total", "llamacpp:requests_processing",
          "llamacpp:n_busy_slots_per_decode", "llamacpp:spec_decode_num_drafts_total"})
        EXPECT_GE(value(before->body, name), 0) << name;
    int computed = 0, cached = 0, predicted = 0;
    for (int n : {4, 8}) {
        const json r =
            post("/completion",
                 {{"prompt", "The quick brown fox jumps over the lazy dog"}, {"n_predict", n}});
        computed += r["timings"]["prompt_n"].get<int>();
        cached += r["timings"]["cache_n"].get<int>();
        predicted += r["timings"]["predicted_n"].get<int>();
    }
    EXPECT_GT(cached, 0);  // the second reused the first's prompt
    const std::string after = get_text(c, "/metrics");
    auto delta = [&](const char* name) { return value(after, name) - value(before->body, name); };
    EXPECT_EQ(delta("llamacpp:prompt_tokens_total"), computed);
    EXPECT_EQ(delta("llamacpp:prompt_tokens_cached_total"), cached);
    EXPECT_EQ(delta("llamacpp:tokens_predicted_total"), predicted);
    EXPECT_GT(delta("llamacpp:n_decode_total"), 0);
    EXPECT_EQ(value(after, "llamacpp:requests_processing"), 0);
    EXPECT_EQ(value(after, "llamacpp:requests_deferred"), 0);
    EXPECT_GT(value(after, "llamacpp:prompt_tokens_seconds"), 0);
    EXPECT_NE(after.find("# TYPE llamacpp:n_tokens_max counter"), std::string::npos);
}

// llama-server's stream telemetry: return_progress sends the prompt's progress before the
// reply, timings_per_token puts the timings so far on each chunk; chat streams end with the
// timings on their last chunk.
TEST_F(NativeRoutes, StreamsReportPromptProgressAndTimingsPerToken) {
    auto c = server_->client();
    std::string prompt;
    for (int i = 0; i < 12; ++i) prompt += "the quick brown fox jumps over the lazy dog ";
    const json body = {{"prompt", prompt},
                       {"n_predict", 3},
                       {"stream", true},
                       {"cache_prompt", false},
                       {"timings_per_token", true},
                       {"return_progress", true}};
    auto r = c.Post("/completion", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<json> progress;
    int pieces = 0;
    for (const std::string& event : sse_events(r->body)) {
        const json chunk = json::parse(event.substr(6));
        ASSERT_TRUE(chunk.contains("timings")) << chunk.dump();
        if (chunk.contains("prompt_progress")) {
            EXPECT_EQ(pieces, 0);
            progress.push_back(chunk);
        } else if (!chunk["stop"].get<bool>()) {
            ++pieces;
            EXPECT_EQ(chunk["timings"]["predicted_n"], pieces);
        }
    }
    EXPECT_EQ(pieces, 3);
    ASSERT_GE(progress.size(), 2u);
    const json& first = progress.front();
    EXPECT_EQ(first["prompt_progress"]["processed"], first["prompt_progress"]["cache"]);
    EXPECT_EQ(first["timings"]["prompt_n"], 0);
    EXPECT_EQ(first["timings"]["prompt_ms"], 0.0);
    const json& done = progress.back()["prompt_progress"];
    EXPECT_EQ(done["processed"], done["total"]);
    EXPECT_GT(done["time_ms"].get<double>(), 0.0);

    json chat = chat_body(4);
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
    chat["return_progress"] = true;
    auto s = c.Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_TRUE(s);
    ASSERT_EQ(s->status, 200) << s->body;
    json last;
    int reports = 0, roles = 0;
    for (const std::string& event : sse_events(s->body)) {
        if (event == "data: [DONE]") continue;
        last = json::parse(event.substr(6));
        if (last.contains("prompt_progress")) ++reports;
        if (!last["choices"].empty() && last["choices"][0]["delta"].contains("role")) ++roles;
    }
    EXPECT_GE(reports, 2);
    EXPECT_EQ(roles, reports);  // each progress chunk is a role chunk, and no other is
    EXPECT_TRUE(last["choices"].empty());
    EXPECT_EQ(last["timings"]["predicted_n"], last["usage"]["completion_tokens"]);
}

// /infill on a code model: llama-server's layout (the project's other files, then the prefix,
// the prompt, the suffix and the middle marker); a model without the markers answers 501.
TEST(NativeInfill, TheGapIsLaidOutAsLlamaServerLaysItOut) {
    // The extra files take what the context leaves beside one batch and the reply.
    ServerProcess server({"-m", generated_model("coder-tiny.gguf").string(), "-c", "512", "-b",
                          "64", "-t", "2", "-np", "1", "--temp", "0"});
    auto c = server.client();
    const json body = {{"input_prefix", "def add(a, b):\n    "},
                       {"input_suffix", "\n    return c\n"},
                       {"input_extra", {{{"filename", "util.py"}, {"text", "x = 1"}}}},
                       {"prompt", "c ="},
                       {"n_predict", 4}};
    auto r = c.Post("/infill", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    EXPECT_EQ(reply["tokens_predicted"], 4);
    // StarCoder's vocabulary has no file separator llama.cpp recognises: each extra file comes
    // after a plain-text snippet marker instead.
    EXPECT_EQ(reply["prompt"],
              "\n\n--- snippet ---\n\nx = 1"
              "<fim_prefix>def add(a, b):\n    c =<fim_suffix>\n    return c\n<fim_middle>");
    json streamed = body;
    streamed["stream"] = true;
    auto s = c.Post("/infill", streamed.dump(), "application/json");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, 200);
    EXPECT_EQ(json::parse(sse_events(s->body).back().substr(6))["tokens_predicted"], 4);
    for (const json& bad :
         {json{{"input_prefix", "a"}}, json{{"input_prefix", "a"}, {"input_suffix", 5}},
          json{{"input_prefix", "a"}, {"input_suffix", "b"}, {"input_extra", "x"}},
          json{{"input_prefix", "a"},
               {"input_suffix", "b"},
               {"input_extra", {{{"filename", "f"}}}}}})
        expect_error_shape(c.Post("/infill", bad.dump(), "application/json"), 400, bad.dump());
}

TEST_F(NativeRoutes, InfillNeedsAModelWithFillInTheMiddleTokens) {
    auto c = server_->client();
    expect_error_shape(c.Post("/infill", json{{"input_prefix", "a"}, {"input_suffix", "b"}}.dump(),
                              "application/json"),
                       501, "stories260K has no FIM tokens");
}

// /rerank on a reranker, in llama-server's two shapes: Jina's and Cohere's (documents; results
// sorted by relevance_score, top_n of them, with usage) and TEI's (texts; a bare array of
// scores, with the text on request). An embeddings request to a reranker is refused.
TEST(NativeRerank, DocumentsAreScoredAndSortedInEitherShape) {
    ServerProcess server(
        {"-m", generated_model("qwen3-rerank-tiny.gguf").string(), "-c", "512", "-t", "2"});
    auto c = server.client();
    const json docs = {"A cat is a small animal.", "Paris is in France.", "Stocks fell today."};
    auto r = c.Post("/v1/rerank", json{{"query", "What is a cat?"}, {"documents", docs}}.dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json jina = json::parse(r->body);
    EXPECT_EQ(jina["object"], "list");
    EXPECT_EQ(jina["model"], "qwen3-rerank-tiny");
    EXPECT_GT(jina["usage"]["prompt_tokens"].get<int>(), 20);
    const json& results = jina["results"];
    ASSERT_EQ(results.size(), 3u) << jina;
    std::vector<int> seen;
    for (std::size_t i = 0; i < results.size(); ++i) {
        seen.push_back(results[i]["index"]);
        const double s = results[i]["relevance_score"];
        EXPECT_TRUE(s > 0 && s < 1) << jina;
        if (i > 0) {
            EXPECT_GE(results[i - 1]["relevance_score"].get<double>(), s) << jina;
        }
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));

    auto top = c.Post("/rerank",
                      json{{"query", "What is a cat?"}, {"documents", docs}, {"top_n", 1}}.dump(),
                      "application/json");
    ASSERT_TRUE(top && top->status == 200);
    const json best = json::parse(top->body)["results"];
    ASSERT_EQ(best.size(), 1u);
    EXPECT_EQ(best[0], results[0]);

    auto tei =
        c.Post("/reranking",
               json{{"query", "What is a cat?"}, {"texts", docs}, {"return_text", true}}.dump(),
               "application/json");
    ASSERT_TRUE(tei && tei->status == 200);
    const json bare = json::parse(tei->body);
    ASSERT_TRUE(bare.is_array() && bare.size() == 3u) << bare;
    EXPECT_EQ(bare[0]["index"], results[0]["index"]);
    EXPECT_NEAR(bare[0]["score"].get<double>(), results[0]["relevance_score"].get<double>(), 1e-5);
    EXPECT_EQ(bare[0]["text"], docs[results[0]["index"].get<std::size_t>()]);

    for (const json& bad : {json{{"documents", docs}}, json{{"query", "q"}, {"documents", {}}},
                            json{{"query", "q"}, {"documents", {1, 2}}},
                            json{{"query", "q"}, {"documents", docs}, {"top_n", 0}}})
        expect_error_shape(c.Post("/v1/rerank", bad.dump(), "application/json"), 400, bad.dump());
    expect_error_shape(c.Post("/v1/embeddings", json{{"input", "x"}}.dump(), "application/json"),
                       400, "embeddings of a reranker");
    EXPECT_EQ(json::parse(c.Get("/v1/models")->body)["data"][0]["capabilities"],
              json::array({"rerank"}));
}
