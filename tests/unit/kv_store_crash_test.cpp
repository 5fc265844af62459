// A child saving entries is killed with SIGKILL at random points, many times. After each kill
// the store opens clean: no temporary files, nothing corrupt, and every entry the child had
// reported as published is there and verifies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>

#include "support/crash_entries.hpp"
#include "support/paths.hpp"
#include "support/temp_dir.hpp"

namespace llamapp {
namespace {

namespace fs = std::filesystem;

// Runs the child for about `run_ms`, kills it, and returns the indexes it reported.
std::vector<int> run_and_kill(const fs::path& dir, int round, int run_ms) {
    int out[2];
    if (::pipe(out) != 0) return {};
    const std::string child = test::binary("kvstore_crash_child").string();
    const std::string round_arg = std::to_string(round);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(out[1], 1);
        ::close(out[0]);
        ::close(out[1]);
        ::execl(child.c_str(), child.c_str(), dir.c_str(), round_arg.c_str(), nullptr);
        ::_exit(127);
    }
    ::close(out[1]);
    std::string text;
    char buf[4096];
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_ms);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              until - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) break;
        pollfd p{out[0], POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) > 0) {
            const ssize_t n = ::read(out[0], buf, sizeof buf);
            if (n <= 0) break;
            text.append(buf, static_cast<std::size_t>(n));
        }
    }
    ::kill(pid, SIGKILL);
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    ::close(out[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::vector<int> published;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (!line.empty()) published.push_back(std::stoi(line));
    }
    return published;
}

TEST(KvStoreCrash, KilledWritersLoseNothingPublished) {
    test::TempDir dir;
    std::mt19937 rng(99);
    std::vector<std::pair<int, int>> published;  // (round, index)
    const int rounds = 30;
    for (int round = 1; round <= rounds; ++round) {
        const int run_ms = std::uniform_int_distribution<int>(5, 120)(rng);
        for (int i : run_and_kill(dir.path(), round, run_ms)) published.emplace_back(round, i);

        KvStoreOptions options;
        options.ram_bytes = 0;
        options.directories.push_back({"", dir.path(), 0});
        auto store = KvStore::open(options);
        ASSERT_TRUE(store) << store.error().describe();
        const auto stats = (*store)->stats();
        EXPECT_EQ(stats.tiers.at(0).corrupt_files, 0u) << "round " << round;
        for (const auto& f : fs::directory_iterator(dir.path()))
            EXPECT_EQ(f.path().extension(), ".kvc") << f.path();
        for (auto [r, i] : published) {
            auto tokens = test::crash_tokens(r, i);
            tokens.push_back(-1);  // a prompt extending the entry hits all of it
            auto hit = detail::KvStoreClient(*store).fetch(test::crash_namespace(), tokens,
                                                           {.match = detail::KvMatch::exact});
            ASSERT_TRUE(hit) << "round " << r << " entry " << i << " was published but is gone";
            EXPECT_TRUE(std::ranges::equal(*hit->payload, test::crash_payload(r, i)));
        }
    }
    EXPECT_GT(published.size(), 0u);
}

}  // namespace
}  // namespace llamapp
