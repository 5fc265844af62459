// Operating the real `llamapp serve` binary: clients that hang up, queue bounds beyond the HTTP
// thread pool's old size, the API key file, the access log, drain, raw SSE as curl reads it, and
// the flags that shape requests.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "llamapp/fingerprint.hpp"
#include "support/command.hpp"
#include "support/eventually.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

const std::string qwen = generated_model("qwen3-tiny.gguf").string();

const std::string cancelled_series =
    "llamapp_requests_total{model=\"qwen3-tiny\",outcome=\"cancelled\"}";

// A chat request that runs until cancelled (or for thousands of tokens).
json endless_chat(bool stream) {
    json body = chat_body(3000);
    body["ignore_eos"] = true;
    if (stream) body["stream"] = true;
    return body;
}

// Generous: under ThreadSanitizer the server runs several times slower.
template <typename Pred>
bool wait_for(Pred pred) {
    return eventually(pred, std::chrono::seconds(30), std::chrono::milliseconds(20));
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.find(needle) != std::string::npos) out.push_back(line);
    return out;
}

TEST(ServerOps, NonStreamedClientThatHangsUpIsCancelled) {
    ServerProcess server({"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1"});
    auto c = server.client();
    RawPost post(server.port(), "/v1/chat/completions", endless_chat(false).dump());
    ASSERT_TRUE(post.sent());
    ASSERT_TRUE(wait_for([&] { return get_json(c, "/health")["busy_slots"] == 1; }));
    post.hang_up();  // mid-generation: tokens are flowing, the engine is never quiet
    EXPECT_TRUE(wait_for([&] {
        return get_json(c, "/health")["busy_slots"] == 0 &&
               metric(get_text(c, "/metrics"), cancelled_series) == 1;
    })) << "the request kept running after its client left";
}

TEST(ServerOps, AQueueBoundAboveSixtyFourStillGets429) {
    // 100 clients on one slot and a queue of 80: every request must reach the engine, so the
    // 19 beyond the bound are told 429 instead of waiting unseen for an HTTP thread.
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1", "--max-queue", "80"});
    std::vector<std::unique_ptr<RawPost>> posts;
    for (int i = 0; i < 100; ++i) {
        posts.push_back(std::make_unique<RawPost>(server.port(), "/v1/chat/completions",
                                                  endless_chat(false).dump()));
        ASSERT_TRUE(posts.back()->sent());
    }
    int limited = 0;
    std::vector<bool> answered(posts.size(), false);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (limited < 19 && std::chrono::steady_clock::now() < until) {
        for (std::size_t i = 0; i < posts.size(); ++i) {
            if (answered[i] || !posts[i]->read_until("\r\n\r\n", std::chrono::milliseconds(1)))
                continue;
            answered[i] = true;
            EXPECT_EQ(posts[i]->received().rfind("HTTP/1.1 429", 0), 0u) << posts[i]->received();
            EXPECT_NE(posts[i]->received().find("Retry-After"), std::string::npos);
            // As a client told "Connection: close" does; until then its HTTP thread waits for
            // a next request on the connection, and the last few clients would wait for it.
            posts[i]->hang_up();
            ++limited;
        }
    }
    EXPECT_EQ(limited, 19);
    auto c = server.client();
    auto ready = c.Get("/health/ready");
    ASSERT_TRUE(ready);
    EXPECT_EQ(ready->status, 503);
    EXPECT_EQ(json::parse(ready->body)["status"], "busy");
    EXPECT_EQ(json::parse(ready->body)["queued_requests"], 80);
    posts.clear();  // everyone hangs up: running and queued requests are all cancelled
    EXPECT_TRUE(wait_for([&] {
        const json h = get_json(c, "/health");
        return h["busy_slots"] == 0 && h["queued_requests"] == 0;
    }));
    EXPECT_EQ(c.Get("/health/ready")->status, 200);
}

TEST(ServerOps, ApiKeyFromAFile) {
    TempDir dir;
    const auto key_file = dir.path() / "key";
    // A key, and a key known by its digest only (as `printf %s KEY | sha256sum` prints it).
    const std::string digest = llamapp::sha256_hex("kept-as-a-digest");
    std::ofstream(key_file) << "from-a-file\nsha256:" << digest << "\n";
    {
        ServerProcess server(
            {"-m", qwen, "-c", "512", "-t", "2", "--api-key-file", key_file.string()});
        auto c = server.client();
        expect_error_shape(c.Get("/v1/models"), 401, "no key");
        c.set_bearer_token_auth("from-a-file");
        EXPECT_EQ(c.Get("/v1/models")->status, 200);
        c.set_bearer_token_auth("kept-as-a-digest");
        EXPECT_EQ(c.Get("/v1/models")->status, 200);
        for (const std::string& wrong : {"sha256:" + digest, digest, std::string("from-a-fil")}) {
            c.set_bearer_token_auth(wrong);
            EXPECT_EQ(c.Get("/v1/models")->status, 401) << wrong;
        }
    }
    // An empty file must not quietly turn authentication off.
    std::ofstream(key_file, std::ios::trunc) << "\n";
    try {
        ServerProcess server(
            {"-m", qwen, "-c", "512", "-t", "2", "--api-key-file", key_file.string()});
        FAIL() << "the server started with an empty API key";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("the API key file is empty"), std::string::npos)
            << e.what();
    }
}

TEST(ServerOps, AccessLogHasOneLinePerRequest) {
    ServerProcess server({"-m", qwen, "-c", "1024", "-t", "2"});
    auto c = server.client();
    ASSERT_EQ(c.Post("/v1/chat/completions", chat_body(4).dump(), "application/json")->status, 200);
    json streamed = chat_body(5);
    streamed["stream"] = true;
    ASSERT_EQ(c.Post("/v1/chat/completions", streamed.dump(), "application/json")->status, 200);
    ASSERT_EQ(c.Post("/v1/chat/completions", "{", "application/json")->status, 400);
    ASSERT_EQ(c.Get("/v1/models")->status, 200);
    server.signal(SIGTERM);
    ASSERT_EQ(server.wait_exit(std::chrono::seconds(30)), 0);
    const std::string& log = server.log();
    EXPECT_EQ(lines_with(log, "path=/v1/chat/completions").size(), 3u) << log;
    for (const auto& [id, tokens] : {std::pair{"chatcmpl-1", 4}, std::pair{"chatcmpl-2", 5}}) {
        const auto lines = lines_with(log, std::string("id=") + id + " ");
        ASSERT_EQ(lines.size(), 1u) << log;
        for (const std::string& field :
             std::vector<std::string>{"method=POST", "path=/v1/chat/completions", "status=200",
                                      "finish=length", fmt::format("completion_tokens={}", tokens),
                                      "prompt_tokens=", "ttft_ms=", "total_ms="})
            EXPECT_NE(lines[0].find(field), std::string::npos) << field << " in " << lines[0];
    }
    EXPECT_EQ(lines_with(log, "path=/v1/chat/completions status=400").size(), 1u) << log;
    EXPECT_EQ(lines_with(log, "method=GET path=/v1/models status=200").size(), 1u) << log;
}

TEST(ServerOps, DrainRefusesNewWorkAndFinishesStreams) {
    // A grace longer than the stream needs even under ThreadSanitizer (the default is 30 s).
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1", "--drain-grace", "300"});
    json body = chat_body(600);
    body["ignore_eos"] = true;
    body["stream"] = true;
    RawPost stream(server.port(), "/v1/chat/completions", body.dump());
    ASSERT_TRUE(stream.read_until("data: "));
    server.signal(SIGTERM);
    auto c = server.client();
    ASSERT_TRUE(wait_for([&] {
        auto r = c.Get("/health/ready");
        return r && r->status == 503;
    }));
    EXPECT_EQ(get_json(c, "/health")["status"], "draining");
    auto refused = c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
    expect_error_shape(refused, 503, "a request during drain");
    EXPECT_FALSE(refused->get_header_value("Retry-After").empty());
    // The stream that was running goes on to its end.
    ASSERT_TRUE(stream.read_until("data: [DONE]", std::chrono::seconds(180)));
    EXPECT_NE(stream.received().find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(60)), 0) << server.log();
}

TEST(ServerOps, DrainGraceRunsOutAndCancelsTheRest) {
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1", "--drain-grace", "0"});
    RawPost stream(server.port(), "/v1/chat/completions", endless_chat(true).dump());
    ASSERT_TRUE(stream.read_until("data: "));
    server.signal(SIGTERM);
    ASSERT_TRUE(stream.read_until("data: [DONE]"));
    // Cut short with an error event, not a finish.
    EXPECT_NE(stream.received().find("\"error\""), std::string::npos) << stream.received();
    EXPECT_EQ(stream.received().find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
}

// Chunked transfer, text/event-stream, and every event a `data: ` line ending in a blank line,
// exactly as curl receives them.
void expect_raw_sse(const std::string& raw, const std::string& object) {
    const auto split = raw.find("\r\n\r\n");
    ASSERT_NE(split, std::string::npos) << raw;
    const std::string head = raw.substr(0, split), body = raw.substr(split + 4);
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
    EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
    EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
    ASSERT_TRUE(body.ends_with("\n\ndata: [DONE]\n\n")) << body;
    const auto events = sse_events(body);
    ASSERT_GE(events.size(), 3u);
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        ASSERT_EQ(events[i].rfind("data: {", 0), 0u) << events[i];
        EXPECT_EQ(events[i].find('\n'), std::string::npos) << "one line per event";
        const json j = json::parse(events[i].substr(6), nullptr, false);
        ASSERT_TRUE(j.is_object()) << events[i];
        EXPECT_EQ(j["object"], object);
    }
}

TEST(ServerOps, CurlReadsWellFramedServerSentEvents) {
    ServerProcess server({"-m", qwen, "-c", "1024", "-t", "2"});
    TempDir dir;
    const auto curl = [&](const std::string& path, const json& body) {
        const auto file = dir.path() / "body.json";
        std::ofstream(file) << body.dump();
        return run_command(fmt::format("curl -sS -N -D - -H 'Content-Type: application/json' "
                                       "--data-binary @{} http://127.0.0.1:{}{}",
                                       file.string(), server.port(), path))
            .out;
    };
    json chat = chat_body(6);
    chat["stream"] = true;
    expect_raw_sse(curl("/v1/chat/completions", chat), "chat.completion.chunk");
    const json completion = {
        {"prompt", "Hello"}, {"max_tokens", 6}, {"temperature", 0}, {"stream", true}};
    const std::string raw = curl("/v1/completions", completion);
    expect_raw_sse(raw, "text_completion");
    // The streamed text is the text of the same request answered whole.
    std::string text;
    for (const auto& e : sse_events(raw.substr(raw.find("\r\n\r\n") + 4)))
        if (e != "data: [DONE]") text += json::parse(e.substr(6))["choices"][0]["text"];
    json whole = completion;
    whole.erase("stream");
    auto r = server.client().Post("/v1/completions", whole.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200);
    EXPECT_EQ(text, json::parse(r->body)["choices"][0]["text"]);
}

TEST(ServerOps, FlagsShapeWhatTheServerAccepts) {
    TempDir dir;
    // A template with no role markers: the prompt is the message text alone.
    const auto tmpl = dir.path() / "bare.jinja";
    std::ofstream(tmpl) << "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    ServerProcess server({"-m", qwen, "-c", "1024", "-t", "2", "--no-accept-any-model", "--alias",
                          "house-model", "--chat-template-file", tmpl.string(), "--max-tokens",
                          "16", "--max-embedding-inputs", "2", "--embeddings"});
    auto c = server.client();
    EXPECT_EQ(get_json(c, "/v1/models")["data"][0]["id"], "house-model");
    json body = chat_body(4);
    body["model"] = "house-model";
    auto ok = c.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(ok && ok->status == 200) << (ok ? ok->body : "");
    // /tokenize of the bare message text gives exactly the prompt the template made.
    auto tokens = c.Post("/tokenize", json{{"content", "Hello there"}}.dump(), "application/json");
    ASSERT_TRUE(tokens && tokens->status == 200);
    const json ids = json::parse(tokens->body)["tokens"];
    EXPECT_EQ(json::parse(ok->body)["usage"]["prompt_tokens"], ids.size());
    auto text = c.Post("/detokenize", json{{"tokens", ids}}.dump(), "application/json");
    ASSERT_TRUE(text && text->status == 200);
    EXPECT_EQ(json::parse(text->body)["content"], "Hello there");

    body["model"] = "qwen3-tiny";  // the file name no longer names the model (strict names)
    expect_error_shape(c.Post("/v1/chat/completions", body.dump(), "application/json"), 404,
                       "the file's name");
    body["model"] = "house-model";
    body["max_tokens"] = 17;
    expect_error_shape(c.Post("/v1/chat/completions", body.dump(), "application/json"), 400,
                       "over --max-tokens");
    expect_error_shape(
        c.Post("/v1/embeddings", json{{"input", {"a", "b", "c"}}}.dump(), "application/json"), 400,
        "over --max-embedding-inputs");
}

TEST(ServerOps, CacheFlagsSetTheTierQuotasAndTheCacheRoutesManageIt) {
    TempDir dir;
    ServerProcess server({"-m", qwen, "-c", "512", "-t", "2", "--cache-ram", "3", "--cache-disk",
                          dir.path().string(), "--cache-disk-max", "5", "--cache-min-tokens", "8"});
    auto c = server.client();
    const std::string text = get_text(c, "/metrics");
    EXPECT_EQ(metric(text, "llamapp_kvstore_capacity_bytes{tier=\"ram\"}"), 3 << 20) << text;
    EXPECT_EQ(metric(text, "llamapp_kvstore_capacity_bytes{tier=\"disk\"}"), 5 << 20) << text;

    auto entry_files = [&] {
        int n = 0;
        for (const auto& f : std::filesystem::directory_iterator(dir.path()))
            n += f.path().extension() == ".kvc";
        return n;
    };
    auto chat = c.Post("/v1/chat/completions", chat_body(16).dump(), "application/json");
    ASSERT_TRUE(chat && chat->status == 200);
    json stats;
    ASSERT_TRUE(wait_for([&] {
        stats = get_json(c, "/cache");
        return stats["tiers"][1]["entries"] >= 1 && entry_files() >= 1;
    })) << stats.dump();
    EXPECT_EQ(stats["tiers"][0]["name"], "ram");
    EXPECT_EQ(stats["tiers"][1]["name"], "disk");
    EXPECT_EQ(stats["tiers"][1]["capacity_bytes"], 5 << 20);
    EXPECT_GT(stats["tiers"][1]["bytes"], 0);
    EXPECT_EQ(stats["tiers"][1]["entries"], entry_files());

    auto post = [&](const std::string& path, const std::string& body) {
        return c.Post(path, body, "application/json");
    };
    auto forever = post("/cache/prune", R"({"unused_for_seconds":18446744073709551615})");
    ASSERT_TRUE(forever && forever->status == 200);
    EXPECT_EQ(json::parse(forever->body)["removed"], 0);
    EXPECT_EQ(json::parse(post("/cache/prune", "{}")->body)["error"]["code"],
              "missing_required_parameter");
    auto kept = post("/cache/prune", R"({"unused_for_seconds":3600})");
    ASSERT_TRUE(kept && kept->status == 200);
    EXPECT_EQ(json::parse(kept->body)["removed"], 0);
    for (const char* bad :
         {R"({})", R"({"unused_for_seconds":-1})", R"({"unused_for_seconds":"1h"})", "not json"})
        expect_error_shape(post("/cache/prune", bad), 400, bad);
    const int files = entry_files();
    auto cleared = post("/cache/clear", "");
    ASSERT_TRUE(cleared && cleared->status == 200);
    EXPECT_GE(json::parse(cleared->body)["removed"], files);
    stats = get_json(c, "/cache");
    EXPECT_EQ(stats["tiers"][0]["entries"], 0);
    EXPECT_EQ(stats["tiers"][1]["entries"], 0);
    EXPECT_EQ(entry_files(), 0);
}

TEST(ServerOps, TheRequestDeadlineEndsALongGeneration) {
    ServerProcess server({"-m", qwen, "-c", "4096", "-t", "2", "--timeout", "1"});
    auto c = server.client();
    auto r = c.Post("/v1/chat/completions", endless_chat(false).dump(), "application/json");
    expect_error_shape(r, 504, "past --timeout");
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "timeout_error");
    EXPECT_EQ(metric(get_text(c, "/metrics"),
                     "llamapp_requests_total{model=\"qwen3-tiny\",outcome=\"timeout\"}"),
              1);
}

// Every option of run and serve sits in a named group: "Other options" holds only the help flags.
void expect_only_help_flags_ungrouped(const std::string& help) {
    const auto other = help.find("\nOther options:\n");
    ASSERT_NE(other, std::string::npos) << help;
    std::istringstream lines(help.substr(other + 16));
    std::string line;
    while (std::getline(lines, line) && line.starts_with("  "))
        EXPECT_TRUE(line.starts_with("  -h,--help") || line.starts_with("  --help-all")) << line;
}

TEST(ServerOps, HelpShowsTheCommonFlagsAndHelpAllEveryFlag) {
    const std::string llamapp = binary("llamapp").string();
    const std::string short_help = run_command(llamapp + " serve --help").out;
    for (const char* flag : {"-m,", "--hf-repo", "-c,", "--host", "--port", "--api-key"})
        EXPECT_NE(short_help.find(flag), std::string::npos) << flag << " missing from:\n"
                                                            << short_help;
    EXPECT_EQ(short_help.find("--cache-disk"), std::string::npos) << "a rare flag in --help";
    EXPECT_NE(short_help.find("llamapp serve --help-all"), std::string::npos) << short_help;
    for (const char* command : {" serve", " run"})
        expect_only_help_flags_ungrouped(run_command(llamapp + command + " --help-all").out);

    const std::string help = run_command(llamapp + " serve --help-all").out;
    for (const char* flag : {"-m",
                             "-c,",
                             "-np",
                             "-t,",
                             "-ngl",
                             "--port",
                             "--host",
                             "--unix-socket",
                             "--api-key",
                             "--api-key-file",
                             "-ctk",
                             "-ctv",
                             "-fa",
                             "--alias",
                             "--chat-template-file",
                             "--max-queue",
                             "--cache-ram",
                             "--cache-disk",
                             "--cache-disk-max",
                             "--timeout",
                             "--drain-grace",
                             "--cors-origin",
                             "--draft-tokens",
                             "--embeddings,--no-embeddings"})
        EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from:\n" << help;
    // A flag's names without the values CLI11 is told they set ("--no-embeddings{-1}").
    for (const char* value : {"{-1}", "{true}", "{false}"})
        EXPECT_EQ(help.find(value), std::string::npos) << value << " in:\n" << help;
}

}  // namespace
