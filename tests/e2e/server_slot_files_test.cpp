// llama-server's slot actions on `llamapp serve --slot-save-path`: id_slot pinning, a slot saved
// under a file name, restored into another slot (its prefix then reused), erased, kept across a
// restart; and llama-server's errors for what is wrong.
#include <gtest/gtest.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

// Longer than the store's shortest restore (32 tokens), so that the store serves it too.
const std::string kPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big red ball under a tree and she wanted to";

std::vector<std::string> args(const std::filesystem::path& dir) {
    std::vector<std::string> a = {"-m",     shared_model("stories260K.gguf").string(),
                                  "-c",     "1024",
                                  "-np",    "2",
                                  "-t",     "2",
                                  "--temp", "0",
                                  "-n",     "12"};
    if (!dir.empty()) {
        a.push_back("--slot-save-path");
        a.push_back(dir.string());
    }
    return a;
}

json post(const ServerProcess& server, const std::string& path, const json& body,
          int status = 200) {
    auto c = server.client();
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return {};
    EXPECT_EQ(r->status, status) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
}

// llama-server's error shape, with `needle` in its message.
void expect_error(const httplib::Result& r, int status, const std::string& needle) {
    expect_error_shape(r, status, needle);
    if (!r) return;
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
}

json complete(const ServerProcess& server, const std::string& prompt, int slot) {
    return post(server, "/completion", {{"prompt", prompt}, {"id_slot", slot}});
}

}  // namespace

TEST(SlotFiles, SaveRestoreAndEraseAsLlamaServerDoes) {
    TempDir dir;
    ServerProcess server(args(dir.path()));
    const json first = complete(server, kPrompt, 1);
    EXPECT_EQ(first["id_slot"], 1);
    const int prompt_n = first["timings"]["prompt_n"];
    const int held = prompt_n + first["tokens_predicted"].get<int>() - 1;

    const json saved = post(server, "/slots/1?action=save", {{"filename", "story.bin"}});
    EXPECT_EQ(saved["id_slot"], 1);
    EXPECT_EQ(saved["filename"], "story.bin");
    EXPECT_EQ(saved["n_saved"], held);
    EXPECT_GT(saved["n_written"].get<int>(), 0);
    EXPECT_TRUE(saved["timings"]["save_ms"].is_number());
    EXPECT_TRUE(std::filesystem::exists(dir.path() / "story.bin"));

    const json restored = post(server, "/slots/0?action=restore", {{"filename", "story.bin"}});
    EXPECT_EQ(restored["n_restored"], held);
    EXPECT_GT(restored["n_read"].get<int>(), 0);
    EXPECT_TRUE(restored["timings"]["restore_ms"].is_number());
    // Slot 0 now holds slot 1's prompt: only the last token is computed again.
    const json again = complete(server, kPrompt, 0);
    EXPECT_EQ(again["id_slot"], 0);
    EXPECT_EQ(again["timings"]["prompt_n"], 1);
    EXPECT_EQ(again["content"], first["content"]);

    for (int slot : {0, 1}) {
        const json erased = post(server, fmt::format("/slots/{}?action=erase", slot), {});
        EXPECT_EQ(erased["id_slot"], slot);
        EXPECT_GT(erased["n_erased"].get<int>(), 0);
    }
    // Both slots are empty; the saved entry is in the store, and serves any slot.
    EXPECT_EQ(complete(server, kPrompt, 1)["timings"]["prompt_n"], 1);
    post(server, "/slots/1?action=erase", {});
    post(server, "/cache/clear", {});
    EXPECT_EQ(complete(server, kPrompt, 1)["timings"]["prompt_n"], prompt_n);
}

// Found by bench/run-soak.sh: two saves to one file name at once shared a temporary file, and
// one of them failed with a 500.
TEST(SlotFiles, SavesToOneFileAtOnceAllSucceed) {
    TempDir dir;
    ServerProcess server(args(dir.path()));
    complete(server, kPrompt, 0);
    complete(server, kPrompt, 1);
    std::vector<std::thread> savers;
    for (int i = 0; i < 8; ++i)
        savers.emplace_back([&, i] {
            post(server, fmt::format("/slots/{}?action=save", i % 2), {{"filename", "same.bin"}});
        });
    for (auto& t : savers) t.join();
    EXPECT_EQ(post(server, "/slots/0?action=restore", {{"filename", "same.bin"}})["id_slot"], 0);
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(SlotFiles, ASavedSlotOutlivesTheServer) {
    TempDir dir;
    json first;
    {
        ServerProcess server(args(dir.path()));
        first = complete(server, kPrompt, 0);
        post(server, "/slots/0?action=save", {{"filename", "kept"}});
    }
    ServerProcess server(args(dir.path()));
    post(server, "/slots/1?action=restore", {{"filename", "kept"}});
    const json again = complete(server, kPrompt, 1);
    EXPECT_EQ(again["timings"]["prompt_n"], 1);
    EXPECT_EQ(again["content"], first["content"]);
}

TEST(SlotFiles, WrongRequestsGetLlamaServersErrors) {
    TempDir dir;
    {
        ServerProcess without(args({}));
        auto c = without.client();
        expect_error(c.Post("/slots/0?action=erase", "{}", "application/json"), 501,
                     "--slot-save-path");
    }
    ServerProcess server(args(dir.path()));
    auto c = server.client();
    const json named = {{"filename", "x.bin"}};
    expect_error(c.Post("/slots/abc?action=save", named.dump(), "application/json"), 400,
                 "Invalid slot ID");
    expect_error(c.Post("/slots/0?action=fly", named.dump(), "application/json"), 400,
                 "Invalid action");
    expect_error(c.Post("/slots/7?action=erase", "{}", "application/json"), 400, "does not exist");
    for (const char* bad : {"../x", "a/b", ".hidden", "entry.kvc", ""})
        expect_error(
            c.Post("/slots/0?action=save", json{{"filename", bad}}.dump(), "application/json"), 400,
            "filename");
    expect_error(c.Post("/slots/0?action=save", "{}", "application/json"), 400, "filename");
    expect_error(c.Post("/slots/0?action=save", named.dump(), "application/json"), 400,
                 "holds no tokens");
    expect_error(c.Post("/slots/0?action=restore", named.dump(), "application/json"), 404,
                 "no such slot file");
    {
        std::ofstream foreign(dir.path() / "foreign.bin", std::ios::binary);
        foreign << "GGSQ not a slot file of ours";
    }
    expect_error(c.Post("/slots/0?action=restore", json{{"filename", "foreign.bin"}}.dump(),
                        "application/json"),
                 400, "not a slot file");
    expect_error(
        c.Post("/completion", json{{"prompt", "Hi"}, {"id_slot", 2}}.dump(), "application/json"),
        400, "slot 2 does not exist");
    // Still serving.
    EXPECT_EQ(complete(server, kPrompt, 1)["id_slot"], 1);
}
