// Several models behind one `llamapp serve`: routing by "model", a models directory loaded on
// demand, a failed file beside working ones, the operator's load and unload routes, the budget.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "support/command.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

json completion(const std::string& model, int max_tokens = 4) {
    return {{"model", model},
            {"prompt", "Once upon a time"},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
}

std::string status_of(httplib::Client& c, const std::string& id) {
    return get_json(c, "/models/" + id).value("status", "");
}

TEST(ServerModels, RequestsAreRoutedByModelAndADirectoryIsServedOnDemand) {
    TempDir dir;
    std::filesystem::create_symlink(generated_model("llama-tiny.gguf"), dir / "llama-tiny.gguf");
    std::ofstream(dir / "broken.gguf") << "not a model";
    std::ofstream(dir / "notes.txt") << "ignored: not a GGUF";
    // Named like a -m model: the -m one is served, the copy skipped.
    std::filesystem::create_symlink(generated_model("llama-tiny.gguf"), dir / "stories.gguf");
    ServerProcess server({"-m", generated_model("qwen3-tiny.gguf").string(), "-m",
                          "stories=" + shared_model("stories260K.gguf").string(), "--models-dir",
                          dir.path().string(), "-c", "512", "-t", "2", "--parallel", "2"});
    auto c = server.client();

    const json listed = get_json(c, "/v1/models");
    std::map<std::string, std::string> status;
    for (const json& m : listed["data"]) status[m["id"]] = m["status"];
    EXPECT_EQ(status, (std::map<std::string, std::string>{{"broken", "failed"},
                                                          {"llama-tiny", "unloaded"},
                                                          {"qwen3-tiny", "ready"},
                                                          {"stories", "ready"}}))
        << listed.dump();
    for (const json& m : listed["data"]) {
        if (m["id"] == "broken") {
            EXPECT_EQ(m["error"]["code"], "invalid_model_file");
        } else {
            EXPECT_EQ(m["capabilities"], json({"completion", "chat", "embedding"})) << m.dump();
        }
        if (m["status"] == "ready") {
            EXPECT_GT(m["meta"]["footprint_bytes"]["RAM"].get<double>(), 0) << m.dump();
        }
    }

    // Each model answers for itself; the default is the first -m.
    for (const std::string model : {"qwen3-tiny", "stories", ""}) {
        json body = completion(model);
        if (model.empty()) body.erase("model");
        auto r = c.Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(json::parse(r->body)["model"], model.empty() ? "qwen3-tiny" : model);
    }
    auto unknown = c.Post("/v1/completions", completion("nope").dump(), "application/json");
    expect_error_shape(unknown, 404, "an unknown model");
    EXPECT_EQ(json::parse(unknown->body)["error"]["code"], "model_not_found");
    // With several models no one is the server's: the 404 says which names would have worked.
    const std::string said = json::parse(unknown->body)["error"]["message"];
    for (const char* known : {"'qwen3-tiny'", "'stories'", "'llama-tiny'", "/v1/models"})
        EXPECT_NE(said.find(known), std::string::npos) << said;
    auto broken = c.Post("/v1/chat/completions",
                         json{{"model", "broken"}, {"messages", chat_body()["messages"]}}.dump(),
                         "application/json");
    expect_error_shape(broken, 503, "a model that failed");
    EXPECT_EQ(json::parse(broken->body)["error"]["code"], "model_unavailable");
    // A generative model embeds on a context made at its first embedding request, and its
    // footprint counts that context from then on.
    auto footprint = [&c](const std::string& id) {
        return get_json(c, "/models/" + id)["meta"]["footprint_bytes"]["RAM"].get<double>();
    };
    const double before = footprint("stories");
    auto embedded = c.Post("/v1/embeddings", json{{"model", "stories"}, {"input", "x"}}.dump(),
                           "application/json");
    ASSERT_TRUE(embedded);
    ASSERT_EQ(embedded->status, 200) << embedded->body;
    EXPECT_EQ(json::parse(embedded->body)["data"][0]["embedding"].size(), 64u);
    EXPECT_GT(footprint("stories"), before);

    // A directory model loads on its first request, and the others keep serving meanwhile.
    auto lazy = c.Post("/v1/completions", completion("llama-tiny").dump(), "application/json");
    ASSERT_TRUE(lazy);
    EXPECT_EQ(lazy->status, 200) << lazy->body;
    EXPECT_EQ(status_of(c, "llama-tiny"), "ready");

    const std::string metrics = get_text(c, "/metrics");
    EXPECT_EQ(metric(metrics, "llamapp_requests_total{model=\"stories\",outcome=\"length\"}"), 1)
        << metrics;
    EXPECT_EQ(metric(metrics, "llamapp_requests_total{model=\"qwen3-tiny\",outcome=\"length\"}"),
              2);
    EXPECT_EQ(metric(metrics, "llamapp_models_resident"), 3);
    const json health = get_json(c, "/health/ready");
    EXPECT_EQ(health["status"], "ok");
    EXPECT_EQ(health["models"].size(), 4u);
}

// --no-embeddings: a generative model refuses embeddings, in each protocol's shape, and serves
// everything else.
TEST(ServerModels, NoEmbeddingsRefusesThemFromAGenerativeModelInEachProtocolsShape) {
    ServerProcess server({"-m", shared_model("stories260K.gguf").string(), "-c", "256", "-t", "2",
                          "--no-embeddings"});
    auto c = server.client();
    auto openai = c.Post("/v1/embeddings", json{{"input", "x"}}.dump(), "application/json");
    expect_error_shape(openai, 400, "OpenAI's embeddings");
    EXPECT_EQ(json::parse(openai->body)["error"]["code"], "model_not_capable");
    const std::string said = json::parse(openai->body)["error"]["message"];
    EXPECT_NE(said.find("--no-embeddings"), std::string::npos) << said;
    const json ollama = post_json(c, "/api/embed", {{"model", "stories260K"}, {"input", "x"}}, 400);
    EXPECT_NE(ollama.value("error", "").find("--no-embeddings"), std::string::npos) << ollama;
    const json listed = get_json(c, "/v1/models")["data"][0];
    EXPECT_EQ(listed["capabilities"], json({"completion", "chat"})) << listed;
    EXPECT_EQ(post_json(c, "/v1/completions", completion("stories260K"))["model"], "stories260K");
}

// A server of one model answers whatever name an OpenAI or Anthropic client sends ("gpt-4",
// "claude-…") with it, as llama-server does, and says which model answered; Ollama's routes keep
// exact names (a 404 is what makes its clients pull), and --no-accept-any-model restores the 404.
TEST(ServerModels, AServerOfOneModelAnswersAnyNameButOllamasRoutesAndWhenToldNot) {
    const std::string model = shared_model("stories260K.gguf").string();
    ServerProcess lenient({"-m", model, "-c", "256", "-t", "2"});
    auto c = lenient.client();
    const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
    json openai = chat;
    openai["model"] = "gpt-4";
    EXPECT_EQ(post_json(c, "/v1/chat/completions", openai)["model"], "stories260K");
    json anthropic = chat;
    anthropic["model"] = "claude-sonnet-4-5";
    EXPECT_EQ(post_json(c, "/v1/messages", anthropic)["model"], "stories260K");
    json ollama = chat;
    ollama["model"] = "llama3.2";
    ollama["stream"] = false;
    const json refused = post_json(c, "/api/chat", ollama, 404);
    EXPECT_NE(refused.value("error", "").find("'stories260K'"), std::string::npos) << refused;

    ServerProcess strict({"-m", model, "-c", "256", "-t", "2", "--no-accept-any-model"});
    auto s = strict.client();
    const json unknown = post_json(s, "/v1/chat/completions", openai, 404);
    EXPECT_EQ(unknown["error"]["code"], "model_not_found") << unknown;
    EXPECT_NE(unknown["error"]["message"].get<std::string>().find("known: 'stories260K'"),
              std::string::npos)
        << unknown;
}

TEST(ServerModels, OperatorsLoadAndUnloadModelsAndFollowALoad) {
    ServerProcess server({"-m", "stories=" + shared_model("stories260K.gguf").string(), "-m",
                          "llama=" + generated_model("llama-tiny.gguf").string(), "-c", "256", "-t",
                          "2", "--api-key", "k"});
    httplib::Client c = server.client();
    c.set_bearer_token_auth("k");
    auto unload = c.Post("/models/unload", json{{"model", "llama"}}.dump(), "application/json");
    ASSERT_TRUE(unload);
    EXPECT_EQ(unload->status, 200) << unload->body;
    EXPECT_EQ(json::parse(unload->body)["status"], "unloaded");
    expect_error_shape(
        c.Post("/models/unload", json{{"model", "llama"}}.dump(), "application/json"), 409,
        "unloading an unloaded model");
    EXPECT_EQ(get_json(c, "/health")["models"][0]["status"], "unloaded");
    // `llamapp ps` shows what is resident; --all the rest too.
    const std::string ps =
        binary("llamapp").string() + " ps --port " + std::to_string(server.port()) + " --api-key k";
    const CommandResult resident = run_command(ps + " 2>&1");
    EXPECT_EQ(resident.status, 0) << resident.out;
    EXPECT_NE(resident.out.find("stories"), std::string::npos) << resident.out;
    EXPECT_EQ(resident.out.find("llama "), std::string::npos) << resident.out;
    // serve's environment finds the same server.
    const CommandResult all =
        run_command("LLAMA_ARG_PORT=" + std::to_string(server.port()) + " LLAMA_API_KEY=k " +
                    binary("llamapp").string() + " ps --all 2>&1");
    EXPECT_EQ(all.status, 0) << all.out;
    EXPECT_NE(all.out.find("unloaded"), std::string::npos) << all.out;
    const CommandResult refused = run_command(ps + "-wrong 2>&1");
    EXPECT_EQ(refused.status, 1) << refused.out;
    EXPECT_NE(refused.out.find("API key is required (Authorization: Bearer ...) [unauthorized]"),
              std::string::npos)
        << refused.out;

    auto load = c.Post("/models/load", json{{"model", "llama"}, {"stream", true}}.dump(),
                       "application/json");
    ASSERT_TRUE(load);
    ASSERT_EQ(load->status, 200) << load->body;
    const auto events = sse_events(load->body);
    ASSERT_FALSE(events.empty());
    const json last = json::parse(events.back().substr(6));
    EXPECT_EQ(last["status"], "ready") << load->body;
    expect_error_shape(c.Post("/models/load", json{{"model", "llama"}}.dump(), "application/json"),
                       409, "loading a loaded model");
    expect_error_shape(c.Post("/models/load", json{{"model", "none"}}.dump(), "application/json"),
                       404, "loading an unknown model");
    expect_error_shape(c.Post("/models/load", "{}", "application/json"), 400, "no model");
    expect_error_shape(c.Get("/models/none"), 404, "an unknown model's listing");
    auto r = c.Post("/v1/completions", completion("llama").dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    httplib::Client anonymous = server.client();
    expect_error_shape(
        anonymous.Post("/models/unload", json{{"model", "llama"}}.dump(), "application/json"), 401,
        "the admin routes are behind the key");
}

// `llamapp stop` unloads a model of a running server, quietly as `ollama stop` does; `llamapp
// show` describes a model read from its file, or asked of the server by its alias; each failure
// is one typed line.
TEST(ServerModels, StopUnloadsAndShowDescribesFromTheCommandLine) {
    ServerProcess server({"-m", "tale=" + shared_model("stories260K.gguf").string(), "-m",
                          "qwen=" + generated_model("qwen3-tiny.gguf").string(), "-c", "256", "-t",
                          "2", "--api-key", "k"});
    const std::string llamapp = binary("llamapp").string();
    const std::string at = " --port " + std::to_string(server.port()) + " --api-key k 2>&1";
    const CommandResult stopped = run_command(llamapp + " stop qwen" + at);
    EXPECT_EQ(stopped.status, 0) << stopped.out;
    EXPECT_EQ(stopped.out, "");
    const CommandResult listed = run_command(llamapp + " ps --all" + at);
    EXPECT_TRUE(std::regex_search(listed.out, std::regex("\\nqwen +unloaded"))) << listed.out;
    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"stop qwen" + at, "[busy]"},
             {"stop none" + at, "[not_found]"},
             {"stop tale --port " + std::to_string(server.port()) + " 2>&1", "[unauthorized]"},
             {"show none" + at,
              "'none' is no file nor a cached hub model, and the server answered"},
             {"show none --port 1 2>&1", "and no server answered (127.0.0.1:1) [io_error]"},
             {"show /dev/null 2>&1", "[invalid_model_file]"}}) {
        const CommandResult r = run_command(llamapp + " " + args);
        EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
    }

    // By the server's alias: what /api/show says, the template a loaded model renders included.
    const CommandResult by_alias = run_command(llamapp + " show qwen" + at);
    ASSERT_EQ(by_alias.status, 0) << by_alias.out;
    for (const char* line :
         {"architecture        qwen3", "context length", "completion", "tools", "thinking"})
        EXPECT_NE(by_alias.out.find(line), std::string::npos) << line << "\n" << by_alias.out;
    // By file, with no server: the same facts from the header.
    const CommandResult by_file =
        run_command(llamapp + " show --json " + generated_model("qwen3-tiny.gguf").string());
    ASSERT_EQ(by_file.status, 0) << by_file.out;
    const json file = json::parse(by_file.out);
    EXPECT_EQ(file["architecture"], "qwen3");
    EXPECT_GT(file["parameters"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(file["capabilities"], json({"completion", "tools", "thinking"}));
    const CommandResult alias_json = run_command(llamapp + " show --json qwen" + at);
    EXPECT_EQ(json::parse(alias_json.out), file);
    const CommandResult tmpl = run_command(llamapp + " show --template qwen" + at);
    EXPECT_NE(tmpl.out.find("<|im_start|>"), std::string::npos) << tmpl.out;
    const CommandResult story =
        run_command(llamapp + " show " + shared_model("stories260K.gguf").string() + " 2>&1");
    EXPECT_TRUE(std::regex_search(story.out, std::regex("parameters +2[0-9.]+K"))) << story.out;
    EXPECT_EQ(story.out.find("tools"), std::string::npos) << story.out;
    const CommandResult ranker =
        run_command(llamapp + " show " + generated_model("qwen3-rerank-tiny.gguf").string());
    EXPECT_NE(ranker.out.find("    rerank\n"), std::string::npos) << ranker.out;
    EXPECT_EQ(ranker.out.find("completion"), std::string::npos) << ranker.out;
}

TEST(ServerModels, AModelOverTheMemoryBudgetIsRefusedNamingTheBytes) {
    TempDir dir;
    std::filesystem::create_symlink(generated_model("llama-tiny.gguf"), dir / "llama-tiny.gguf");
    ServerProcess server(
        {"--models-dir", dir.path().string(), "--memory-budget", "1M", "-c", "256", "-t", "2"});
    auto c = server.client();
    auto r = c.Post("/v1/completions", completion("llama-tiny").dump(), "application/json");
    expect_error_shape(r, 503, "over the budget");
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["code"], "insufficient_memory");
    EXPECT_NE(e["message"].get<std::string>().find("1.0 MiB are available"), std::string::npos)
        << e.dump();
    EXPECT_EQ(status_of(c, "llama-tiny"), "unloaded");
    EXPECT_EQ(get_json(c, "/v1/models")["data"][0]["error"]["code"], "insufficient_memory");
}

}  // namespace

// A presets file in llama-server's INI format: per-model flags over [*] over the command line.
TEST(ServerPresets, EachSectionIsAModelWithItsOwnFlags) {
    TempDir dir;
    const std::string stories = shared_model("stories260K.gguf").string();
    const auto write = [&](const std::string& text) {
        std::ofstream(dir / "models.ini") << text;
        return (dir / "models.ini").string();
    };
    const std::string ini =
        write("version = 1\n; comment\n[*]\nctx-size = 256\n\n[tale]\nmodel = " + stories +
              "\nparallel = 2\nalias = story,kids\nload-on-startup = true\n"
              "temp = 0\nn-predict = 3\ntags = short\n\n"
              "[tale-big]\nmodel = " +
              stories + "\nctx-size = 512\nkeep-alive = 30s\n");
    {
        ServerProcess server({"--models-preset", ini, "-t", "2", "--parallel", "3"});
        auto c = server.client();
        // The section's sampling defaults: greedy, 3 tokens, for a request that names neither.
        const json body = {{"model", "kids"}, {"prompt", "Once upon a time"}};
        std::string first;
        for (int i = 0; i < 2; ++i) {
            auto r = c.Post("/v1/completions", body.dump(), "application/json");
            ASSERT_TRUE(r);
            ASSERT_EQ(r->status, 200) << r->body;
            const json reply = json::parse(r->body);
            EXPECT_EQ(reply["model"], "tale");
            EXPECT_EQ(reply["usage"]["completion_tokens"], 3) << r->body;
            if (i == 0) first = reply["choices"][0]["text"];
            EXPECT_EQ(reply["choices"][0]["text"], first) << "greedy, so the same text";
        }
        json big = body;
        big["model"] = "tale-big";
        big["max_tokens"] = 4;
        ASSERT_EQ(c.Post("/v1/completions", big.dump(), "application/json")->status, 200);
        std::map<std::string, json> models;
        const json listing = json::parse(c.Get("/v1/models")->body);
        for (const json& m : listing["data"]) models[m["id"]] = m;
        ASSERT_EQ(models.size(), 2u);
        EXPECT_EQ(models["tale"]["aliases"], json({"tale", "story", "kids"}));
        EXPECT_EQ(models["tale"]["tags"], json({"short"}));
        EXPECT_EQ(models["tale"]["meta"]["n_ctx"], 256);
        EXPECT_EQ(models["tale"]["meta"]["slots"], 2);
        // A cache per slot, as --parallel is given: 512 / 3, which llama.cpp rounds up to 256.
        EXPECT_EQ(models["tale-big"]["meta"]["n_ctx"], 256);
        EXPECT_EQ(models["tale-big"]["meta"]["slots"], 3);  // the command line's
        EXPECT_EQ(models["tale-big"]["meta"]["keep_alive_seconds"], 30);
    }
    // A key llamapp cannot honour per model, and a section without a model: one line each.
    for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
             {"[a]\nmodel = " + stories + "\nlora = x.gguf\n", "[a]: The following argument"},
             {"[a]\nmodel = " + stories + "\ntemp = -1\n", "temperature"},
             {"[a]\nmodel = " + stories + "\nport = 1\n", "[a]: The following argument"},
             {"[b]\nctx-size = 64\n", "[b] names no model"},
             {"[c]\nno-such-key = 1\n", "option 'no-such-key' not recognized"}}) {
        auto r = run_command(binary("llamapp").string() + " serve --port 0 --models-preset " +
                             write(text) + " 2>&1");
        EXPECT_NE(r.status, 0) << text;
        EXPECT_NE(r.out.find(says), std::string::npos) << text << "\n" << r.out;
        EXPECT_NE(r.out.find("[invalid_argument]"), std::string::npos) << r.out;
    }
}
