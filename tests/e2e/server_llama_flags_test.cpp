// `llamapp serve` driven by a llama-server command line and environment: its flags mean what
// they mean there, and one llamapp cannot honour is refused by name.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/eventually.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

// Sets an environment variable for one scope (the server child inherits it).
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
    ~ScopedEnv() { ::unsetenv(name_); }

  private:
    const char* name_;
};

// A loopback port nothing listens on (bound, read and closed again).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
}

}  // namespace

// The test suite's usual llama-server line, switches it needs no action on included.
TEST(LlamaServerFlags, ItsCommandLineSetsTheDefaultsOfEveryRequest) {
    ServerProcess server({"-m",
                          shared_model("stories260K.gguf").string(),
                          "--temp",
                          "0",
                          "--seed",
                          "42",
                          "-n",
                          "5",
                          "-c",
                          "512",
                          "-np",
                          "2",
                          "-t",
                          "2",
                          "--no-slots",
                          "--metrics",
                          "-cb",
                          "--no-webui",
                          "-kvu",
                          "-a",
                          "tinyllama-2,fim,code",
                          "--tags",
                          "chat,small",
                          "-to",
                          "60",
                          "-ngl",
                          "0",
                          "-fa",
                          "off",
                          "--no-jinja"});
    auto c = server.client();
    const json prompt_only = {{"prompt", "Once upon a time"}};
    const json first = post_json(c, "/v1/completions", prompt_only);
    EXPECT_EQ(first["usage"]["completion_tokens"], 5) << first.dump();
    // --temp 0 is greedy: the same text again, and the same as a request asking for it.
    EXPECT_EQ(post_json(c, "/v1/completions", prompt_only)["choices"][0]["text"],
              first["choices"][0]["text"]);
    json explicit_greedy = prompt_only;
    explicit_greedy["temperature"] = 0;
    explicit_greedy["max_tokens"] = 5;
    EXPECT_EQ(post_json(c, "/v1/completions", explicit_greedy)["choices"][0]["text"],
              first["choices"][0]["text"]);
    // A field the request gives wins over the flag.
    json three = prompt_only;
    three["max_tokens"] = 3;
    EXPECT_EQ(post_json(c, "/v1/completions", three)["usage"]["completion_tokens"], 3);

    // --alias: the first name in alphabetical order is the id, every name routes.
    const json models = get_json(c, "/v1/models");
    ASSERT_EQ(models["data"].size(), 1u) << models.dump();
    const json& tiny = models["data"][0];
    EXPECT_EQ(tiny["id"], "code");
    EXPECT_EQ(tiny["aliases"], json({"code", "fim", "tinyllama-2"})) << models.dump();
    EXPECT_EQ(tiny["tags"], json({"chat", "small"}));
    json chat = chat_body(4);
    chat["model"] = "tinyllama-2";
    EXPECT_EQ(post_json(c, "/v1/chat/completions", chat)["model"], "code");
}

// LLAMA_ARG_* variables do what their flags do; a flag on the command line wins.
TEST(LlamaServerFlags, TheEnvironmentSetsWhatTheFlagsSet) {
    ScopedEnv n_predict("LLAMA_ARG_N_PREDICT", "2");
    ScopedEnv keys("LLAMA_API_KEY", "first,second");
    ScopedEnv ctx("LLAMA_ARG_CTX_SIZE", "999999");
    ServerProcess server(
        {"-m", shared_model("stories260K.gguf").string(), "-c", "256", "-t", "2", "-np", "1"});
    auto c = server.client();
    const json body = {{"prompt", "Once upon a time"}, {"temperature", 0}};
    EXPECT_EQ(c.Post("/v1/completions", body.dump(), "application/json")->status, 401);
    for (const char* key : {"first", "second"}) {
        c.set_bearer_token_auth(key);
        EXPECT_EQ(post_json(c, "/v1/completions", body)["usage"]["completion_tokens"], 2) << key;
    }
    EXPECT_EQ(get_json(c, "/v1/models")["data"][0]["meta"]["n_ctx"], 256);
}

// As in llama-server: -np auto (4 slots) shares one KV cache (a request may use all of -c); a
// --parallel given gives -c / slots each. A flag or LLAMA_ARG_KV_UNIFIED chooses instead, and the
// last flag wins.
TEST(LlamaServerFlags, AGivenParallelSplitsTheCacheAndAutoSharesIt) {
    const auto slot_ctx = [](std::vector<std::string> extra) {
        std::vector<std::string> args = {
            "-m", shared_model("stories260K.gguf").string(), "-c", "2048", "-t", "2"};
        args.insert(args.end(), extra.begin(), extra.end());
        ServerProcess server(args);
        auto c = server.client();
        const json slots = get_json(c, "/slots");
        return std::pair{slots.size(), slots.at(0).at("n_ctx").get<int>()};
    };
    EXPECT_EQ(slot_ctx({}), std::pair(std::size_t{4}, 2048));
    EXPECT_EQ(slot_ctx({"-np", "-1"}), std::pair(std::size_t{4}, 2048));
    EXPECT_EQ(slot_ctx({"-np", "1"}), std::pair(std::size_t{1}, 2048));
    EXPECT_EQ(slot_ctx({"-np", "4"}), std::pair(std::size_t{4}, 512));
    EXPECT_EQ(slot_ctx({"-np", "8", "--no-kv-unified", "-kvu"}), std::pair(std::size_t{8}, 2048));
    EXPECT_EQ(slot_ctx({"-np", "2", "--kv-unified", "--no-kv-unified"}),
              std::pair(std::size_t{2}, 1024));
    {
        ScopedEnv on("LLAMA_ARG_KV_UNIFIED", "true");
        EXPECT_EQ(slot_ctx({"-np", "2"}), std::pair(std::size_t{2}, 2048));
    }
    ScopedEnv off("LLAMA_ARG_KV_UNIFIED", "false");
    EXPECT_EQ(slot_ctx({}), std::pair(std::size_t{4}, 512));
}

// --reasoning-budget closes every reply's thinking (QwQ's template opens it, and a random model
// never closes it), saying --reasoning-budget-message first; a request's own budget wins.
TEST(LlamaServerFlags, TheReasoningBudgetClosesTheThinking) {
    ServerProcess server({"-m", generated_model("qwen3-tiny.gguf").string(), "-c", "1024", "-t",
                          "2", "-np", "1", "--temp", "0", "--reasoning-budget", "4",
                          "--reasoning-budget-message", " Time to answer.", "--chat-template-file",
                          llama_source("models/templates/Qwen-QwQ-32B.jinja").string()});
    auto c = server.client();
    json body = chat_body(32);
    const json m = post_json(c, "/v1/chat/completions", body)["choices"][0]["message"];
    EXPECT_NE(m.value("reasoning_content", "").find("Time to answer."), std::string::npos) << m;
    EXPECT_FALSE(m["content"].get<std::string>().empty()) << m;
    // reasoning_format none (llama-server's --reasoning-format none): the thinking stays in the
    // content.
    json inline_thinking = body;
    inline_thinking["reasoning_format"] = "none";
    const json in_content =
        post_json(c, "/v1/chat/completions", inline_thinking)["choices"][0]["message"];
    EXPECT_FALSE(in_content.contains("reasoning_content")) << in_content;
    EXPECT_NE(in_content["content"].get<std::string>().find("Time to answer.</think>"),
              std::string::npos)
        << in_content;
    body["reasoning_budget_tokens"] = -1;  // unlimited: the thinking takes every token
    const json unlimited = post_json(c, "/v1/chat/completions", body)["choices"][0]["message"];
    EXPECT_EQ(unlimited["content"], "") << unlimited;
}

// A last assistant message is continued (llama-server's prefill, vLLM's continue_final_message),
// and --verbose adds llama-server's __verbose object, which shows the prompt.
TEST(LlamaServerFlags, AnAssistantPrefillIsContinuedAndVerboseShowsThePrompt) {
    const std::vector<std::string> args = {
        "-m",
        shared_model("stories260K.gguf").string(),
        "-c",
        "512",
        "-t",
        "2",
        "-np",
        "1",
        "--temp",
        "0",
        "--chat-template-file",
        llama_source("models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja").string()};
    ServerProcess server(args);
    auto c = server.client();
    const std::string turn =
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n";
    auto ask = [&](const json& last, json extra = json::object()) {
        json body = {{"max_tokens", 4},
                     {"messages",
                      {{{"role", "system"}, {"content", "Book"}},
                       {{"role", "user"}, {"content", "What is the best book"}}}}};
        if (!last.is_null()) body["messages"].push_back({{"role", "assistant"}, {"content", last}});
        body["verbose"] = true;
        if (extra.is_object()) body.update(extra);
        return c.Post("/v1/chat/completions", body.dump(), "application/json");
    };
    auto prompt_of = [](const httplib::Result& r) {
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
        const json j = json::parse(r ? r->body : "{}", nullptr, false);
        return j["__verbose"].value("prompt", std::string("(no __verbose)"));
    };
    EXPECT_TRUE(prompt_of(ask(nullptr)).ends_with(turn));
    EXPECT_TRUE(prompt_of(ask("Whill")).ends_with(turn + "Whill"));
    const json parts = {{{"type", "text"}, {"text", "Wh"}}, {{"type", "text"}, {"text", "ill"}}};
    EXPECT_TRUE(prompt_of(ask(parts)).ends_with(turn + "Wh\n\nill"));
    EXPECT_TRUE(prompt_of(ask("Whill",
                              {{"add_generation_prompt", false}, {"continue_final_message", true}}))
                    .ends_with(turn + "Whill"));
    const auto quiet = ask(nullptr, {{"verbose", false}});
    ASSERT_TRUE(quiet);
    EXPECT_FALSE(json::parse(quiet->body).contains("__verbose"));
    {
        // --verbose: every reply has it (the server then logs at debug level too).
        std::vector<std::string> verbose_args = args;
        verbose_args.push_back("--verbose");
        ServerProcess verbose(verbose_args);
        auto v = verbose.client();
        const auto r = v.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_TRUE(json::parse(r->body).contains("__verbose")) << r->body;
    }
    expect_error_shape(ask("Whill", {{"continue_final_message", true}}), 400,
                       "continue_final_message with add_generation_prompt");
    expect_error_shape(
        ask("Whill", {{"add_generation_prompt", false}, {"continue_final_message", "everything"}}),
        400, "an unknown continuation");
}

TEST(LlamaServerFlags, WhatLlamappCannotHonourIsRefusedByName) {
    const std::string serve = binary("llamapp").string() + " serve --port 0 ";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {serve + "--lora adapter.gguf", "--lora"},
        {serve + "--context-shift", "--context-shift"},
        {serve + "-nocb", "--no-cont-batching"},
        {serve + "--spec-draft-cpu-moe", "--spec-draft-cpu-moe"},
        {serve + "--grammar 'root ::= \"a\"'", "--grammar"},
        {"LLAMA_ARG_SWA_FULL=1 " + serve, "LLAMA_ARG_SWA_FULL"},
        {serve + "--webui", "no web UI"},
    };
    for (const auto& [command, flag] : cases) {
        const CommandResult r = run_command(command + " 2>&1");
        EXPECT_EQ(r.status, 1) << command << "\n" << r.out;
        EXPECT_NE(r.out.find(flag), std::string::npos) << command << "\n" << r.out;
        EXPECT_NE(r.out.find("[invalid_argument]"), std::string::npos) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
    }
}

// llama-server's speculative flags that llamapp takes, given wrong: one line each, at start.
TEST(LlamaServerFlags, BadSpeculativeFlagsAreOneLine) {
    const std::string serve = binary("llamapp").string() + " serve --port 0 -m " +
                              shared_model("stories260K.gguf").string() + " ";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"--spec-type draft-simple", "draft-simple needs a draft model"},
        {"--spec-type draft-mtp", "draft-mtp"},
        {"-md " + generated_model("coder-tiny.gguf").string(), "vocabulary"},
        {"--spec-type lookup,ngram-nothing", "ngram-nothing"},
        {"--spec-draft-n-max 999", "n_max"},
        {"--spec-draft-n-max 3 --spec-draft-n-min 9", "n_min"},
        {"--spec-type ngram-mod --spec-ngram-mod-n-match 0", "ngram-mod match"},
        {"--spec-draft-hf a/b", "draft model is a file"},
    };
    for (const auto& [flags, what] : cases) {
        const CommandResult r = run_command(serve + flags + " 2>&1");
        EXPECT_EQ(r.status, 1) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find(what), std::string::npos) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find("[invalid_argument]"), std::string::npos) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
    }
}

// Google Vertex AI's prediction protocol, switched on by its AIP_* variables as llama-server's
// is: instances run through their routes side by side, each answered (or refused) on its own.
TEST(LlamaServerFlags, VertexAiPredictionsRunEachInstanceThroughItsRoute) {
    const int port = free_port();  // for AIP_HTTP_PORT, which overrides --port 0
    ASSERT_GT(port, 0);
    const std::string port_text = std::to_string(port);
    ScopedEnv mode("AIP_MODE", "PREDICTION");
    ScopedEnv http_port("AIP_HTTP_PORT", port_text.c_str());
    ScopedEnv health("AIP_HEALTH_ROUTE", "healthz");
    ServerProcess server({"-m", shared_model("stories260K.gguf").string(), "-c", "512", "-t", "2",
                          "-np", "2", "--temp", "0"});
    ASSERT_EQ(server.port(), port);
    auto c = server.client();
    EXPECT_EQ(c.Get("/healthz")->status, 200);
    const json chat = {{"max_tokens", 6}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
    json as_instance = chat;
    as_instance["@requestFormat"] = "chatCompletions";
    as_instance["stream"] = true;  // answered whole: a prediction is one object
    const json native = {
        {"@requestFormat", "/completion"}, {"prompt", "Once upon a time"}, {"n_predict", 4}};
    const json unknown = {{"@requestFormat", "noSuchRoute"}};
    const json bad = {{"@requestFormat", "chatCompletions"}, {"max_tokens", -3}};
    const json r = post_json(c, "/predict",
                             {{"instances", {as_instance, native, unknown, bad, "not an object"}}});
    ASSERT_EQ(r["predictions"].size(), 5u) << r.dump();
    const json& p = r["predictions"];
    EXPECT_EQ(p[0]["choices"][0]["message"],
              post_json(c, "/v1/chat/completions", chat)["choices"][0]["message"]);
    EXPECT_EQ(p[1]["tokens_predicted"], 4);
    for (int i : {2, 3, 4}) EXPECT_TRUE(p[i]["error"]["message"].is_string()) << p[i].dump();
    EXPECT_EQ(p[3]["error"]["param"], "max_tokens");
    post_json(c, "/predict", {{"instances", "none"}}, 400);
    post_json(c, "/predict", {{"other", json::array()}}, 400);
}

// llama-server's comma-separated --host: every address at the same port, each serving every
// route; an address that cannot be bound stops the server, named.
TEST(LlamaServerFlags, EveryAddressOfACommaListedHostServes) {
    {
        const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
        sockaddr_in6 addr{};
        addr.sin6_family = AF_INET6;
        addr.sin6_addr = in6addr_loopback;
        const bool ipv6 =
            fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
        if (fd >= 0) ::close(fd);
        if (!ipv6) GTEST_SKIP() << "IPv6 loopback is unavailable";
    }
    ServerProcess server({"-m", shared_model("stories260K.gguf").string(), "-c", "256", "-t", "2",
                          "-np", "1", "--host", "127.0.0.1,::1", "--api-key", "k"});
    // The second address's line may still be on its way when the first one's was read.
    const std::string second = "serving on http://[::1]:" + std::to_string(server.port());
    EXPECT_TRUE(eventually([&] { return server.log().find(second) != std::string::npos; }))
        << server.log();
    for (const char* host : {"127.0.0.1", "::1"}) {
        httplib::Client c(host, server.port());
        c.set_bearer_token_auth("k");
        auto health = c.Get("/health");
        ASSERT_TRUE(health) << host;
        EXPECT_EQ(health->status, 200) << host;
        const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 3}};
        EXPECT_EQ(post_json(c, "/v1/completions", body)["usage"]["completion_tokens"], 3) << host;
        c.set_bearer_token_auth("wrong");
        EXPECT_EQ(c.Post("/v1/completions", body.dump(), "application/json")->status, 401);
    }
    const CommandResult r = run_command(binary("llamapp").string() + " serve -m " +
                                        shared_model("stories260K.gguf").string() +
                                        " --port 0 --host 127.0.0.1,192.0.2.1 2>&1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("192.0.2.1"), std::string::npos) << r.out;
}

// --reasoning-effort, --chat-template-kwargs and --reasoning-preserve give every chat template
// its variables; a request's chat_template_kwargs replace them by name.
TEST(LlamaServerFlags, TemplateVariablesFromTheCommandLineReachEveryChat) {
    const std::string oss = llama_source("models/templates/openai-gpt-oss-120b.jinja").string();
    ServerProcess server({"-m", generated_model("qwen3-tiny.gguf").string(), "-c", "512", "-t", "2",
                          "-np", "1", "--chat-template-file", oss, "--reasoning-effort", "high",
                          "--chat-template-kwargs", R"({"reasoning_effort": "minimal"})",
                          "--no-reasoning-preserve"});
    auto c = server.client();
    auto rendered = [&](const json& extra) {
        json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
        if (extra.is_object()) body.update(extra);
        return post_json(c, "/apply-template", body)["prompt"].get<std::string>();
    };
    // The later flag wins over the object's key of the same name, as in llama-server.
    EXPECT_NE(rendered(json::object()).find("Reasoning: high"), std::string::npos);
    EXPECT_NE(
        rendered({{"chat_template_kwargs", {{"reasoning_effort", "low"}}}}).find("Reasoning: low"),
        std::string::npos);
    const CommandResult bad = run_command(binary("llamapp").string() +
                                          " serve --port 0 --chat-template-kwargs '[1]' 2>&1");
    EXPECT_EQ(bad.status, 1) << bad.out;
    EXPECT_NE(bad.out.find("--chat-template-kwargs"), std::string::npos) << bad.out;
}

// No model on the command line is llama-server's router mode: /props describes the server, a
// model is loaded only when asked to under --no-models-autoload, and an unknown name is refused
// even with --accept-any-model (no one model is the server's).
TEST(LlamaServerFlags, WithoutAModelTheServerIsARouter) {
    TempDir dir;
    std::filesystem::copy_file(shared_model("stories260K.gguf"), dir / "tale.gguf");
    ScopedEnv any("LLAMAPP_ACCEPT_ANY_MODEL", "1");
    ServerProcess server({"--models-dir", dir.path().string(), "-c", "256", "-t", "2",
                          "--models-max", "2", "--no-models-autoload"});
    auto c = server.client();
    const json props = json::parse(c.Get("/props")->body);
    EXPECT_EQ(props["role"], "router") << props;
    EXPECT_EQ(props["max_instances"], 2) << props;
    EXPECT_EQ(props["models_autoload"], false) << props;
    EXPECT_EQ(json::parse(c.Get("/props?model=tale")->body)["model_alias"], "tale");

    const json chat = {{"model", "tale"},
                       {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                       {"max_tokens", 2}};
    const json refused = post_json(c, "/v1/chat/completions", chat, 400);
    EXPECT_NE(refused["error"]["message"].get<std::string>().find("not loaded"), std::string::npos)
        << refused;
    post_json(c, "/models/load", {{"model", "tale"}}, 202);
    EXPECT_TRUE(eventually([&] {
        auto r = c.Get("/models/tale");
        return r && json::parse(r->body)["status"] == "ready";
    }));
    EXPECT_EQ(post_json(c, "/v1/chat/completions", chat)["usage"]["completion_tokens"], 2);

    json unknown = chat;
    unknown["model"] = "non-existent/model";
    post_json(c, "/v1/chat/completions", unknown, 404);
    unknown["stream"] = true;
    post_json(c, "/v1/chat/completions", unknown, 404);

    // Only a model pulled from the hub has files to delete (CliHub deletes one).
    EXPECT_EQ(c.Delete("/models?model=tale")->status, 400);
    EXPECT_EQ(c.Delete("/models?model=nope")->status, 404);
    EXPECT_EQ(c.Delete("/models")->status, 400);
    EXPECT_EQ(json::parse(c.Get("/models/tale")->body)["status"], "ready");
}
