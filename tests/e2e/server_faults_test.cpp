// The KV store on a failing disk: the real `llamapp serve` with tests/support/fault_fs.c preloaded,
// whose faults a test switches while the server runs. A full disk loses saves, not requests; a
// disk that cannot be read costs a recomputation and no entry; a stuck disk delays saves, not
// replies.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "support/eventually.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace llamapp::test;

const std::string stories = shared_model("stories260K.gguf").string();

class FaultyDisk {
  public:
    FaultyDisk() { fs::create_directories(cache()); }
    fs::path cache() const { return dir_.path() / "cache"; }
    void set(const std::string& fault) const {
        std::ofstream(dir_.path() / "control", std::ios::trunc) << fault;
    }
    // A server whose cache directory has the fault set now (and later).
    std::unique_ptr<ServerProcess> serve() const {
        const char* asan = std::getenv("ASAN_OPTIONS");
        const std::string asan_was = asan ? asan : "";
        ::setenv("LD_PRELOAD", (binary("libllamapp_fault_fs.so")).c_str(), 1);
        ::setenv("LLAMAPP_FAULT_DIR", cache().c_str(), 1);
        ::setenv("LLAMAPP_FAULT_CONTROL", (dir_.path() / "control").c_str(), 1);
        // An AddressSanitizer build wants its runtime first among the libraries.
        ::setenv("ASAN_OPTIONS", (asan_was + ":verify_asan_link_order=0").c_str(), 1);
        std::unique_ptr<ServerProcess> server;
        try {
            server = std::make_unique<ServerProcess>(std::vector<std::string>{
                "-m", stories, "-c", "1024", "-t", "2", "--parallel", "2", "--cache-ram", "0",
                "--cache-disk", cache().string(), "--cache-min-tokens", "32"});
        } catch (...) {
            restore_environment(asan, asan_was);
            throw;
        }
        restore_environment(asan, asan_was);
        return server;
    }
    // Whether a write has waited on "hold" (fault_fs.c marks it).
    bool held() const { return fs::exists(dir_.path() / "control.held"); }
    std::size_t files(const std::string& ending) const {
        std::size_t n = 0;
        for (const auto& e : fs::directory_iterator(cache()))
            n += e.path().filename().string().find(ending) != std::string::npos;
        return n;
    }

  private:
    static void restore_environment(const char* asan, const std::string& asan_was) {
        ::unsetenv("LD_PRELOAD");
        ::unsetenv("LLAMAPP_FAULT_DIR");
        ::unsetenv("LLAMAPP_FAULT_CONTROL");
        if (asan)
            ::setenv("ASAN_OPTIONS", asan_was.c_str(), 1);
        else
            ::unsetenv("ASAN_OPTIONS");
    }
    TempDir dir_;
};

std::string story(int i) {
    return fmt::format(
        "Story {}. Once upon a time, there was a little girl named Lily. She loved to play in the "
        "park with her friends. One day, she saw a big red ball under a tree and ran to get it.",
        i);
}

// A greedy completion's text; a failed request fails the test.
std::string complete(ServerProcess& server, const std::string& prompt) {
    auto c = server.client();
    const json body = {{"prompt", prompt}, {"n_predict", 8}, {"temperature", 0}};
    auto r = c.Post("/completion", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false).value("content", std::string());
}

double metric_of(ServerProcess& server, const std::string& series) {
    auto c = server.client();
    return metric(get_text(c, "/metrics"), series);
}

TEST(KvStoreFaults, AFullDiskLosesSavesNotRequests) {
    FaultyDisk disk;
    disk.set("enospc");
    auto server = disk.serve();
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(complete(*server, story(i)).empty());
    EXPECT_TRUE(eventually(
        [&] {
            return metric_of(*server,
                             R"(llamapp_kvstore_dropped_saves_total{reason="write_failed"})") >= 3;
        },
        std::chrono::seconds(30)));
    EXPECT_EQ(disk.files(".kvc"), 0u);
    EXPECT_EQ(disk.files(".tmp"), 0u) << "a failed write left its temporary file";
    // Space again: the next save lands, and serves.
    disk.set("");
    const std::string text = complete(*server, story(7));
    // Its own save when it finished (the older sequences it evicted are saved too, now).
    EXPECT_TRUE(eventually(
        [&] {
            return metric_of(*server,
                             R"(llamapp_kvstore_saves_total{tier="disk",reason="finish"})") >= 1;
        },
        std::chrono::seconds(30)));
    server.reset();
    server = disk.serve();
    EXPECT_EQ(complete(*server, story(7)), text);
    EXPECT_GE(metric_of(*server, R"(llamapp_kvstore_hits_total{tier="disk"})"), 1);
}

TEST(KvStoreFaults, AnUnreadableEntryIsRecomputedAndKept) {
    FaultyDisk disk;
    disk.set("");
    std::string text;
    {
        auto server = disk.serve();
        text = complete(*server, story(1));
        EXPECT_TRUE(eventually([&] { return disk.files(".kvc") >= 1; }, std::chrono::seconds(30)));
    }
    const std::size_t entries = disk.files(".kvc");
    disk.set("eio");
    {
        auto server = disk.serve();
        EXPECT_EQ(complete(*server, story(1)), text);  // computed, as a cold run computes it
        EXPECT_EQ(metric_of(*server, R"(llamapp_kvstore_hits_total{tier="disk"})"), 0);
    }
    EXPECT_EQ(disk.files(".kvc"), entries) << "a read error deleted an entry";
    disk.set("");
    auto server = disk.serve();
    EXPECT_EQ(complete(*server, story(1)), text);
    EXPECT_GE(metric_of(*server, R"(llamapp_kvstore_hits_total{tier="disk"})"), 1);
}

// Writes are held, not slowed: a reply that waited for a save would never come while the save
// is provably stuck in a write, whatever the machine's speed.
TEST(KvStoreFaults, AStuckDiskDelaysSavesNotReplies) {
    FaultyDisk disk;
    auto server = disk.serve();
    disk.set("hold");
    EXPECT_FALSE(complete(*server, story(0)).empty());
    // Its save (after the engine idles) is now stuck in a write, its file unpublished.
    ASSERT_TRUE(eventually([&] { return disk.held(); }, std::chrono::seconds(60)))
        << "no save reached the disk";
    for (int i = 1; i < 3; ++i) EXPECT_FALSE(complete(*server, story(i)).empty());
    EXPECT_EQ(disk.files(".kvc"), 0u) << "a save finished while the disk was held";
    EXPECT_GE(disk.files(".tmp"), 1u);
    disk.set("");
    EXPECT_TRUE(eventually([&] { return disk.files(".kvc") >= 3; }, std::chrono::seconds(60)));
    EXPECT_EQ(disk.files(".tmp"), 0u);
}

}  // namespace
