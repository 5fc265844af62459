// Each test starts its own real `llamapp serve`: authentication, listening and CORS options,
// drafts, queue bounds under load, SIGTERM drain and a restart with the KV store.
#include <gtest/gtest.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/eventually.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using llamapp::test::ServerProcess;
using namespace llamapp::test;

const std::string qwen = llamapp::test::generated_model("qwen3-tiny.gguf").string();
// A function, not a constant: a missing fixture fails the tests that use it, not the binary.
std::string stories() {
    return llamapp::test::shared_model("stories260K.gguf").string();
}

TEST(ServerAuth, ApiKeyGuardsEverythingButHealth) {
    ServerProcess server({"-m", qwen, "-c", "512", "-t", "2", "--api-key", "s3cret"});
    auto c = server.client();
    expect_error_shape(c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json"), 401,
                       "no key");
    expect_error_shape(c.Get("/metrics"), 401, "metrics without a key");
    expect_error_shape(c.Post("/cache/clear", "", "application/json"), 401, "cache without a key");
    expect_error_shape(c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer wrong"}}),
                       401, "wrong key");
    expect_error_shape(c.Get("/v1/models", httplib::Headers{{"Authorization", "s3cret"}}), 401,
                       "not bearer");
    EXPECT_EQ(c.Get("/health")->status, 200);
    c.set_bearer_token_auth("s3cret");
    EXPECT_EQ(c.Get("/v1/models")->status, 200);
    EXPECT_EQ(c.Get("/metrics")->status, 200);
    EXPECT_EQ(c.Get("/cache")->status, 200);
    auto r = c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}

TEST(ServerOptions, ListensOnAUnixSocket) {
    llamapp::test::TempDir dir;
    const std::string path = (dir.path() / "llamapp.sock").string();
    ServerProcess server({"-m", qwen, "-c", "512", "-t", "2", "--unix-socket", path});
    httplib::Client c(path);
    c.set_address_family(AF_UNIX);
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    auto r = c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(server.port(), 0);  // no TCP listener
}

TEST(ServerOptions, CorsOnlyForListedOrigins) {
    ServerProcess server(
        {"-m", qwen, "-c", "512", "-t", "2", "--cors-origin", "https://app.example"});
    auto c = server.client();
    // Preflight from the listed origin.
    auto pre = c.Options("/v1/chat/completions",
                         httplib::Headers{{"Origin", "https://app.example"},
                                          {"Access-Control-Request-Method", "POST"}});
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
              std::string::npos);
    auto listed = c.Get("/v1/models", httplib::Headers{{"Origin", "https://app.example"}});
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    // Any other origin gets no CORS headers, so browsers refuse to read the answer.
    auto other = c.Get("/v1/models", httplib::Headers{{"Origin", "https://evil.example"}});
    ASSERT_TRUE(other);
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
    auto other_pre = c.Options("/v1/models", httplib::Headers{{"Origin", "https://evil.example"}});
    ASSERT_TRUE(other_pre);
    EXPECT_FALSE(other_pre->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerOptions, CorsIsOffByDefault) {
    ServerProcess server({"-m", qwen, "-c", "512", "-t", "2"});
    auto r = server.client().Get("/v1/models", httplib::Headers{{"Origin", "https://app.example"}});
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerOptions, DraftsAreOnByDefaultKeepTheReplyAndShowInMetricsByKind) {
    const json body = {{"prompt",
                        "Tom said, \"I like the red ball.\" Sue said, \"I like the red ball.\" "
                        "Tom said, \"I like"},
                       {"max_tokens", 48},
                       {"temperature", 0}};
    struct Setup {
        std::vector<std::string> flags;
        std::string kind;  // whose drafts are kept; empty: none
    };
    const Setup setups[] = {
        {{"--spec-type", "none"}, ""},
        {{}, "lookup"},  // drafting is on unless turned off
        {{"--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3"}, "ngram-simple"},
        {{"--draft-tokens", "0"}, ""},  // llamapp's older name of --spec-draft-n-max
        // The trained model drafted by its Q4_0 copy.
        {{"--spec-type", "draft-simple", "-md", generated_model("stories260K-q4_0.gguf").string()},
         "draft-simple"},
    };
    std::vector<std::string> replies;
    for (const Setup& setup : setups) {
        SCOPED_TRACE(setup.kind);
        std::vector<std::string> args = {"-m", stories(), "-c", "512", "-t", "2"};
        args.insert(args.end(), setup.flags.begin(), setup.flags.end());
        ServerProcess server(args);
        auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r && r->status == 200);
        replies.push_back(json::parse(r->body)["choices"][0]["text"]);
        auto m = server.client().Get("/metrics");
        ASSERT_TRUE(m);
        for (const char* kind : {"lookup", "ngram-simple", "draft-simple"}) {
            const auto value = prometheus_value(
                m->body, fmt::format("llamapp_draft_tokens_accepted_total{{model=\"stories260K\","
                                     "kind=\"{}\"}}",
                                     kind));
            ASSERT_TRUE(value) << kind;
            if (setup.kind == kind)
                EXPECT_GT(*value, 0) << kind;
            else
                EXPECT_EQ(*value, 0) << kind;
        }
    }
    for (const std::string& reply : replies) EXPECT_EQ(reply, replies.front());
}

// Per request: llama-server's speculative.n_max / n_min, `speculative: false`, and the drafts in
// the reply's timings (draft_n, draft_n_accepted; absent when none were decoded, as there).
TEST(ServerOptions, ARequestBoundsItsDraftsAndItsTimingsCountThem) {
    ServerProcess server({"-m", stories(), "-c", "512", "-t", "2"});
    auto ask = [&](const json& fields) {
        json body = {{"prompt",
                      "Once upon a time, there was a little girl named Lily. Once upon a time, "
                      "there was a"},
                     {"n_predict", 32},
                     {"temperature", 0}};
        body.update(fields);
        return server.client().Post("/completion", body.dump(), "application/json");
    };
    auto plain = ask(json::object());
    ASSERT_TRUE(plain && plain->status == 200);
    const json t = json::parse(plain->body)["timings"];
    ASSERT_TRUE(t.contains("draft_n")) << t;
    EXPECT_GT(t["draft_n_accepted"].get<int>(), 0);
    EXPECT_LE(t["draft_n_accepted"].get<int>(), t["draft_n"].get<int>());
    const std::string text = json::parse(plain->body)["content"];
    for (const json& off : {json{{"speculative", false}}, json{{"speculative.n_max", 0}},
                            json{{"speculative", {{"n_max", 0}}}}}) {
        auto r = ask(off);
        ASSERT_TRUE(r && r->status == 200) << off;
        const json body = json::parse(r->body);
        EXPECT_FALSE(body["timings"].contains("draft_n")) << off;
        EXPECT_EQ(body["content"], text) << off;
    }
    auto one = ask({{"speculative.n_max", 1}});
    ASSERT_TRUE(one && one->status == 200);
    EXPECT_EQ(json::parse(one->body)["content"], text);
    EXPECT_LE(json::parse(one->body)["timings"]["draft_n"].get<int>(), 32);
    for (const json& bad : {json{{"speculative.n_max", -1}}, json{{"speculative", "yes"}},
                            json{{"speculative.n_max", 2}, {"speculative.n_min", 3}}}) {
        auto r = ask(bad);
        ASSERT_TRUE(r) << bad;
        EXPECT_EQ(r->status, 400) << bad << r->body;
        EXPECT_TRUE(json::parse(r->body).contains("error")) << r->body;
    }
}

TEST(ServerLoad, QueueFullIs429WithRetryAfter) {
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "1", "--max-queue", "1"});
    std::atomic<int> ok{0}, limited{0}, other{0};
    std::atomic<bool> retry_after{true};
    std::vector<std::thread> clients;
    for (int i = 0; i < 6; ++i) {
        clients.emplace_back([&] {
            auto c = server.client();
            auto r = c.Post("/v1/chat/completions", chat_body(64).dump(), "application/json");
            if (r && r->status == 200) {
                ++ok;
            } else if (r && r->status == 429) {
                ++limited;
                if (r->get_header_value("Retry-After").empty()) retry_after = false;
                auto j = json::parse(r->body);
                if (j["error"]["type"] != "rate_limit_error") ++other;
            } else {
                ++other;
            }
        });
    }
    for (auto& t : clients) t.join();
    EXPECT_GE(ok.load(), 1);
    EXPECT_GE(limited.load(), 1);
    EXPECT_TRUE(retry_after.load());
    EXPECT_EQ(other.load(), 0);
}

TEST(ServerLoad, SixtyFourStreamingClientsWithRandomHangUps) {
    ServerProcess server(
        {"-m", qwen, "-c", "4096", "-t", "2", "--parallel", "4", "--max-queue", "64"});
    std::atomic<int> complete{0}, hung_up{0}, bad{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < 64; ++i) {
        clients.emplace_back([&, i] {
            json body = chat_body(5 + (i * 7) % 36);
            body["stream"] = true;
            if (i % 3 == 0) {
                if (stream_then_hang_up(server.port(), body.dump()))
                    ++hung_up;
                else
                    ++bad;
                return;
            }
            auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
            if (r && r->status == 200 && r->body.ends_with("data: [DONE]\n\n"))
                ++complete;
            else
                ++bad;
        });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(complete.load() + hung_up.load(), 64);
    auto c = server.client();
    bool idle = false;
    for (int i = 0; i < 200 && !idle; ++i) {
        auto h = get_json(c, "/health");
        idle = h["busy_slots"] == 0 && h["queued_requests"] == 0;
        if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(idle);
    auto after = c.Post("/v1/chat/completions", chat_body(3).dump(), "application/json");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->status, 200);
}

TEST(ServerLifecycle, SigtermDrainsInFlightRequests) {
    ServerProcess server({"-m", qwen, "-c", "2048", "-t", "2"});
    std::atomic<int> status{0};
    json reply;
    std::thread client([&] {
        auto c = server.client();
        auto r = c.Post("/v1/chat/completions", chat_body(200).dump(), "application/json");
        if (r) {
            status = r->status;
            reply = json::parse(r->body, nullptr, false);
        }
    });
    auto c = server.client();
    // SIGTERM only once the request runs: earlier it would be refused, not drained.
    const bool running = llamapp::test::eventually(
        [&] {
            auto h = c.Get("/health");
            return h && json::parse(h->body)["busy_slots"] == 1;
        },
        std::chrono::seconds(30));
    if (!running) {
        client.join();
        FAIL() << "the request never ran; status " << status.load();
    }
    server.signal(SIGTERM);
    client.join();
    EXPECT_EQ(status.load(), 200);
    EXPECT_EQ(reply["usage"]["completion_tokens"], 200) << reply.dump();
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
}

TEST(ServerLifecycle, RestartServesThePromptFromTheDiskCache) {
    llamapp::test::TempDir dir;
    const std::vector<std::string> args = {"-m",
                                           stories(),
                                           "-c",
                                           "1024",
                                           "-t",
                                           "2",
                                           "--cache-disk",
                                           dir.path().string(),
                                           "--cache-ram",
                                           "0",
                                           "--cache-min-tokens",
                                           "16"};
    json body = {{"prompt",
                  "Once upon a time, there was a little girl named Lily. She loved to play "
                  "outside in the park with her friends."},
                 {"max_tokens", 16},
                 {"temperature", 0}};
    json first, second;
    {
        ServerProcess server(args);
        auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r);
        first = json::parse(r->body);
        server.signal(SIGTERM);
        ASSERT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
    }
    ServerProcess server(args);
    auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    second = json::parse(r->body);
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"],
              first["usage"]["prompt_tokens"].get<int>() - 1);
    EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
}

}  // namespace
