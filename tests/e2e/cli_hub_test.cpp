// The hub commands of the real binary against a loopback hub: pull, ls, search, run -hf,
// serve -hf, offline use and rm, each as a user types it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "llamapp/fingerprint.hpp"
#include "support/command.hpp"
#include "support/eventually.hpp"
#include "support/fake_hub.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

struct CliHub : ::testing::Test {
    void SetUp() override {
        hub.add_file("test/stories", "stories260K-Q8_0.gguf",
                     llamapp::test::shared_model("stories260K.gguf"));
        // The server started below inherits these; each command gets them on its line too.
        ::setenv("MODEL_ENDPOINT", hub.endpoint().c_str(), 1);
        ::setenv("LLAMA_CACHE", cache.path().c_str(), 1);
        ::unsetenv("HF_HUB_OFFLINE");
    }
    void TearDown() override {
        ::unsetenv("MODEL_ENDPOINT");
        ::unsetenv("LLAMA_CACHE");
    }
    llamapp::test::CommandResult llamapp(const std::string& args, bool with_stderr = true,
                                         const std::string& env = "") {
        return llamapp::test::run_command(env + " " + llamapp::test::binary("llamapp").string() +
                                          " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
    }
    llamapp::test::FakeHub hub;
    llamapp::test::TempDir cache;
};

TEST_F(CliHub, PullListRunServeAndRemoveAHubModel) {
    auto pull = llamapp("pull test/stories:Q8_0");
    ASSERT_EQ(pull.status, 0) << pull.out;
    EXPECT_NE(pull.out.find(cache.path().string()), std::string::npos) << pull.out;
    EXPECT_NE(pull.out.find("stories260K-Q8_0.gguf: 100% of"), std::string::npos) << pull.out;

    llamapp::test::TempDir dir;
    std::filesystem::copy_file(llamapp::test::shared_model("stories260K.gguf"), dir / "tale.gguf");
    auto ls = llamapp("ls --models-dir " + dir.path().string());
    EXPECT_TRUE(std::regex_search(
        ls.out, std::regex("test/stories:Q8_0 +[0-9.]+ [KM]iB +Q8_0 +llama +hub ")))
        << ls.out;
    EXPECT_TRUE(std::regex_search(ls.out, std::regex("tale +[0-9.]+ [KM]iB +- +llama +dir ")))
        << ls.out;
    auto files = llamapp("ls test/stories");
    EXPECT_NE(files.out.find("Q8_0"), std::string::npos) << files.out;
    auto found = llamapp("search stor");
    EXPECT_TRUE(std::regex_search(found.out, std::regex("test/stories +7 +3 +Q8_0\n")))
        << found.out;

    // From the cache, with the hub out of reach.
    auto run = llamapp("run -hf test/stories:Q8_0 -p 'Once upon a time' -n 30 --temp 0 --offline",
                       false, "MODEL_ENDPOINT=http://127.0.0.1:1/");
    ASSERT_EQ(run.status, 0) << run.out;
    EXPECT_EQ(run.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u)
        << run.out;
    EXPECT_EQ(hub.file_requests, 1);

    {
        llamapp::test::ServerProcess server({"-hf", "test/stories:Q8_0", "-c", "256", "-t", "2"});
        auto c = server.client();
        auto models = c.Get("/v1/models");
        ASSERT_TRUE(models);
        EXPECT_NE(models->body.find(R"("id":"test/stories:Q8_0")"), std::string::npos)
            << models->body;
    }

    auto rm = llamapp("rm test/stories");
    ASSERT_EQ(rm.status, 0) << rm.out;
    EXPECT_NE(rm.out.find("removed 1 file(s)"), std::string::npos) << rm.out;
    EXPECT_NE(llamapp("ls").out.find("(no model: the hub cache is"), std::string::npos);
}

// The disk fills up half way (a file size limit stands in for it): nothing is published, what
// arrived is kept, and the next pull resumes from there.
// As llama-server's router deletes a cached model: DELETE /models?model= unloads and forgets a
// hub model and deletes its files.
TEST_F(CliHub, TheServerDeletesAHubModelAndItsFiles) {
    ASSERT_EQ(llamapp("pull test/stories:Q8_0").status, 0);
    {
        llamapp::test::ServerProcess server({"-hf", "test/stories:Q8_0", "-c", "256", "-t", "2"});
        auto c = server.client();
        auto gone = c.Delete("/models?model=test/stories:Q8_0");
        ASSERT_TRUE(gone);
        EXPECT_EQ(gone->status, 200) << gone->body;
        EXPECT_EQ(gone->body, R"({"success":true})");
        EXPECT_EQ(c.Get("/v1/models")->body.find("test/stories"), std::string::npos);
        EXPECT_EQ(c.Delete("/models?model=test/stories:Q8_0")->status, 404);
    }
    EXPECT_NE(llamapp("ls").out.find("(no model: the hub cache is"), std::string::npos);
}

// llama-server's POST /models: a pull without a load, its progress and end as events of
// GET /models/sse; the pulled model is then served by its reference.
TEST_F(CliHub, AClientPullsAModelAndFollowsItsEvents) {
    llamapp::test::ServerProcess server({"-c", "256", "-t", "2"});
    std::mutex mutex;
    std::string events;
    std::atomic<bool> subscribed = false, done = false;
    std::thread listener([&] {
        auto c = server.client();
        c.Get(
            "/models/sse", [&](const httplib::Response&) { return subscribed = true, true; },
            [&](const char* data, std::size_t n) {
                std::lock_guard lock(mutex);
                events.append(data, n);
                return !done;
            });
    });
    auto seen = [&](const std::string& what) {
        std::lock_guard lock(mutex);
        return events.find(what) != std::string::npos;
    };
    ASSERT_TRUE(llamapp::test::eventually([&] { return subscribed.load(); }));
    auto c = server.client();
    const std::string body = R"({"model":"test/stories:Q8_0"})";
    auto started = c.Post("/models", body, "application/json");
    ASSERT_TRUE(started);
    EXPECT_EQ(started->status, 200) << started->body;
    EXPECT_TRUE(llamapp::test::eventually(
        [&] { return seen(R"("event":"download_finished","model":"test/stories:Q8_0")"); },
        std::chrono::seconds(30)))
        << events;
    EXPECT_TRUE(seen(R"("event":"download_progress")")) << events;
    auto missing = c.Post("/models", R"({"model":"test/absent:Q8_0"})", "application/json");
    EXPECT_EQ(missing->status, 200) << missing->body;
    EXPECT_TRUE(llamapp::test::eventually(
        [&] { return seen(R"("event":"download_failed","model":"test/absent:Q8_0")"); },
        std::chrono::seconds(30)))
        << events;
    done = true;

    EXPECT_EQ(c.Post("/models", body, "application/json")->status, 409);
    EXPECT_EQ(c.Post("/models", R"({"model":"tale.gguf"})", "application/json")->status, 400);
    auto chat =
        c.Post("/v1/completions",
               R"({"model":"test/stories:Q8_0","prompt":"Once upon a time","max_tokens":3})",
               "application/json");
    ASSERT_TRUE(chat);
    EXPECT_EQ(chat->status, 200) << chat->body;
    EXPECT_EQ(c.Delete("/models?model=test/stories:Q8_0")->status, 200);
    server.signal(SIGTERM);  // the drain ends the event stream, and the server exits
    EXPECT_EQ(server.wait_exit(std::chrono::seconds(30)), 0) << server.log();
    listener.join();
}

TEST_F(CliHub, ADiskThatFillsUpDuringAPullPublishesNothingAndThePullResumes) {
    // 1024 blocks: 512 KiB in dash's units, 1 MiB in bash's; the model is 1.13 MiB.
    auto full = llamapp::test::run_command("ulimit -f 1024 && trap '' XFSZ && " +
                                           llamapp::test::binary("llamapp").string() +
                                           " pull test/stories:Q8_0 2>&1");
    EXPECT_NE(full.status, 0) << full.out;
    EXPECT_NE(full.out.find("[io_error]"), std::string::npos) << full.out;
    EXPECT_NE(full.out.find("cannot write the download: File too large"), std::string::npos)
        << full.out;
    EXPECT_NE(llamapp("ls").out.find("(no model: the hub cache is"), std::string::npos);
    std::uintmax_t kept = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache.path()))
        if (e.path().extension() == ".downloadInProgress") kept = e.file_size();
    EXPECT_GT(kept, 0u);

    auto pull = llamapp("pull test/stories:Q8_0");
    ASSERT_EQ(pull.status, 0) << pull.out;
    EXPECT_GE(hub.range_requests, 1);
    EXPECT_NE(llamapp("ls").out.find("test/stories:Q8_0 "), std::string::npos);
}

// tests/support/fault_fs.c under the cache: a full disk, a disk that cannot be read and a slow
// disk during pulls. Nothing wrong is ever published, and what arrived is not thrown away.
TEST_F(CliHub, DiskFaultsDuringAPullPublishNothingWrongAndLoseNothingThatArrived) {
    llamapp::test::TempDir control_dir;
    const auto control = control_dir.path() / "control";
    const std::string faulty =
        "LD_PRELOAD=" + llamapp::test::binary("libllamapp_fault_fs.so").string() +
        " LLAMAPP_FAULT_DIR=" + cache.path().string() +
        " LLAMAPP_FAULT_CONTROL=" + control.string() +
        " ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"";
    auto set = [&](const std::string& fault) { std::ofstream(control) << fault; };
    auto listed = [&] { return llamapp("ls").out.find("test/stories:Q8_0 ") != std::string::npos; };

    set("enospc");
    auto full = llamapp("pull test/stories:Q8_0", true, faulty);
    EXPECT_NE(full.status, 0) << full.out;
    EXPECT_NE(full.out.find("[io_error]"), std::string::npos) << full.out;
    EXPECT_NE(full.out.find("No space left on device"), std::string::npos) << full.out;
    EXPECT_FALSE(listed());

    // The bytes arrive, but the digest check cannot read them: kept, not deleted, not published.
    set("eio");
    auto unreadable = llamapp("pull test/stories:Q8_0", true, faulty);
    EXPECT_NE(unreadable.status, 0) << unreadable.out;
    EXPECT_NE(unreadable.out.find("cannot read the download to check its digest"),
              std::string::npos)
        << unreadable.out;
    EXPECT_FALSE(listed());
    const auto model = llamapp::test::shared_model("stories260K.gguf");
    std::uintmax_t kept = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache.path()))
        if (e.is_regular_file()) kept = std::max(kept, e.file_size());
    EXPECT_EQ(kept, std::filesystem::file_size(model));

    set("slow 2");
    const int requests_before = hub.file_requests;
    auto slow = llamapp("pull test/stories:Q8_0", true, faulty);
    ASSERT_EQ(slow.status, 0) << slow.out;
    EXPECT_TRUE(listed());
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache.path()))
        if (e.path().filename() == "stories260K-Q8_0.gguf") {
            EXPECT_EQ(*llamapp::file_sha256(e.path()), *llamapp::file_sha256(model));
        }
    EXPECT_LE(hub.file_requests - requests_before, 1);  // at most a check of the range
}

TEST_F(CliHub, FailuresAreOneTypedLine) {
    auto absent = llamapp("pull test/absent");
    EXPECT_NE(absent.status, 0);
    EXPECT_NE(absent.out.find("[not_found]"), std::string::npos) << absent.out;
    EXPECT_EQ(absent.out.find("api/"), std::string::npos) << absent.out;  // no internal path
    EXPECT_NE(absent.out.find("test/absent"), std::string::npos) << absent.out;
    auto offline = llamapp("pull test/stories", true, "HF_HUB_OFFLINE=1");
    EXPECT_NE(offline.status, 0);
    EXPECT_NE(offline.out.find("not in the cache"), std::string::npos) << offline.out;
    // An Ollama library name: the way to find a repository.
    auto bad = llamapp("pull llama3.2:1b");
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.out.find("[invalid_argument]"), std::string::npos) << bad.out;
    EXPECT_NE(bad.out.find("`llamapp search llama3.2` lists repositories"), std::string::npos)
        << bad.out;
    EXPECT_EQ(hub.file_requests, 0);
}

// Every name llamapp prints for a hub model (ls, ps and /v1/models, Ollama's /api/tags) is taken
// back by pull, run and the server's routes, even with any-name serving off.
TEST_F(CliHub, EveryNameAHubModelIsShownByFindsItAgain) {
    ASSERT_EQ(llamapp("pull hf.co/test/stories:Q8_0").status, 0);
    auto ls = llamapp("ls");
    ASSERT_NE(ls.out.find("test/stories:Q8_0 "), std::string::npos) << ls.out;
    auto run = llamapp("run test/stories:Q8_0 'Once upon a time' -n 8 --temp 0", false);
    ASSERT_EQ(run.status, 0) << run.out;
    EXPECT_EQ(run.out.rfind("Once upon a time, there was", 0), 0u) << run.out;

    llamapp::test::ServerProcess server(
        {"-hf", "test/stories", "-c", "256", "-t", "2", "--no-accept-any-model"});
    auto c = server.client();
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_NE(models->body.find(R"("id":"test/stories")"), std::string::npos) << models->body;
    auto tags = c.Get("/api/tags");
    ASSERT_TRUE(tags);
    EXPECT_NE(tags->body.find(R"("name":"hf.co/test/stories:latest")"), std::string::npos)
        << tags->body;
    for (const char* name : {"test/stories", "test/stories:Q8_0", "hf.co/test/stories:latest",
                             "test/stories:stories260K-Q8_0.gguf", "hf.co/test/stories:q8_0"}) {
        SCOPED_TRACE(name);
        const nlohmann::json body = {{"model", name}, {"prompt", "Once"}, {"max_tokens", 2}};
        llamapp::test::post_json(c, "/v1/completions", body);
        const nlohmann::json ollama = {{"model", name},
                                       {"prompt", "Once"},
                                       {"stream", false},
                                       {"options", {{"num_predict", 2}}}};
        llamapp::test::post_json(c, "/api/generate", ollama);
    }
    const nlohmann::json other = {{"model", "test/stories:Q4_K_M"}, {"prompt", "Once"}};
    llamapp::test::post_json(c, "/v1/completions", other, 404);
}

// With the hub out of reach, a model in the cache runs anyway, saying so; --offline never asks.
TEST_F(CliHub, ACachedModelRunsWhileTheHubIsDown) {
    ASSERT_EQ(llamapp("pull test/stories:Q8_0").status, 0);
    auto run = llamapp("run test/stories:Q8_0 'Once upon a time' -n 8 --temp 0", true,
                       "MODEL_ENDPOINT=http://127.0.0.1:1/");
    ASSERT_EQ(run.status, 0) << run.out;
    EXPECT_NE(run.out.find("test/stories:Q8_0: the cached copy (the hub cannot be reached"),
              std::string::npos)
        << run.out;
    EXPECT_NE(run.out.find("Once upon a time, there was"), std::string::npos) << run.out;
    // show reads a cached model without asking the hub or a server.
    auto shown =
        llamapp("show test/stories:Q8_0 --port 1", true, "MODEL_ENDPOINT=http://127.0.0.1:1/");
    EXPECT_EQ(shown.status, 0) << shown.out;
    EXPECT_NE(shown.out.find("architecture        llama"), std::string::npos) << shown.out;
    auto absent =
        llamapp("run test/absent:Q8_0 'Once' -n 2", true, "MODEL_ENDPOINT=http://127.0.0.1:1/");
    EXPECT_NE(absent.status, 0);
    EXPECT_NE(absent.out.find("the hub cannot be reached"), std::string::npos) << absent.out;
    EXPECT_NE(absent.out.find("[network_error]"), std::string::npos) << absent.out;
}

// A peer that closes the connection after the hub's redirect: the pull tries again and succeeds;
// when the peer never answers it fails as one line that says so and keeps nothing that did not
// arrive.
TEST_F(CliHub, APullSurvivesConnectionsClosedAfterTheRedirect) {
    hub.drop_after_redirect = 2;
    auto pull = llamapp("pull test/stories:Q8_0");
    ASSERT_EQ(pull.status, 0) << pull.out;
    EXPECT_EQ(hub.drop_after_redirect, 0);
    EXPECT_NE(llamapp("ls").out.find("test/stories:Q8_0 "), std::string::npos);
    ASSERT_EQ(llamapp("rm test/stories").status, 0);

    hub.drop_after_redirect = 100;
    auto broken = llamapp("pull test/stories:Q8_0");
    EXPECT_NE(broken.status, 0);
    EXPECT_NE(broken.out.find(
                  "the connection to the hub broke (4 tries) (test/stories:Q8_0) [network_error]"),
              std::string::npos)
        << broken.out;
    EXPECT_EQ(broken.out.find("kept"), std::string::npos) << broken.out;
}

// Downloads that redirect to the API host itself, as a mirror or a proxy does.
TEST_F(CliHub, APullFromAHubThatRedirectsToItself) {
    hub.redirect_to_self = true;
    for (int i = 0; i < 3; ++i) {
        auto pull = llamapp("pull test/stories:Q8_0");
        ASSERT_EQ(pull.status, 0) << pull.out;
        ASSERT_EQ(llamapp("rm test/stories").status, 0);
    }
}

}  // namespace
