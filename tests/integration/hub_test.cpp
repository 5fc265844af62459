// The hub client against a loopback hub: pulls into a real cache directory, digests checked,
// the hub's refusals as typed errors, resumed transfers, split models, offline use.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "llamapp/hub.hpp"
#include "llamapp/model.hpp"
#include "llamapp/model_manager.hpp"
#include "support/fake_hub.hpp"
#include "support/fake_proxy.hpp"
#include "support/paths.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using llamapp::ErrorCode;
using llamapp::HubOptions;
using llamapp::HubRef;
using llamapp::test::FakeHub;
using llamapp::test::hub_cache_dir;

class Hub : public ::testing::Test {
  protected:
    void SetUp() override {
        hub_cache_dir();
        ::setenv("MODEL_ENDPOINT", hub.endpoint().c_str(), 1);
    }
    std::string bytes_of(const fs::path& p) {
        std::ifstream in(p, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), {}};
    }
    FakeHub hub;
    HubOptions options;
};

TEST_F(Hub, APullIsVerifiedLoadsAndIsServedFromTheCacheAfterwards) {
    const fs::path stories = llamapp::test::shared_model("stories260K.gguf");
    hub.add_file("test/stories", "stories260K-Q8_0.gguf", stories);
    hub.add("test/stories", "README.md", "# stories\n");
    std::vector<llamapp::HubProgress> reports;
    std::mutex m;
    options.on_progress = [&](const llamapp::HubProgress& p) {
        std::lock_guard lock(m);
        reports.push_back(p);
    };
    auto pulled = llamapp::hub_pull(HubRef{"test/stories", "", "Q8_0"}, options);
    ASSERT_TRUE(pulled) << pulled.error().describe();
    EXPECT_EQ(bytes_of(pulled->path), bytes_of(stories));
    EXPECT_EQ(pulled->bytes_downloaded, fs::file_size(stories));
    EXPECT_TRUE(pulled->path.string().starts_with(hub_cache_dir().string()));
    ASSERT_FALSE(reports.empty());
    EXPECT_TRUE(reports.back().done);
    EXPECT_EQ(reports.back().file, "stories260K-Q8_0.gguf");
    llamapp::ModelOptions vocab;
    vocab.vocab_only = true;
    EXPECT_TRUE(llamapp::Model::load(pulled->path, vocab));

    auto again = llamapp::hub_pull(HubRef{"test/stories"}, options);
    ASSERT_TRUE(again) << again.error().describe();
    EXPECT_EQ(again->path, pulled->path);
    EXPECT_EQ(again->bytes_downloaded, 0u);
    EXPECT_EQ(hub.file_requests, 1);

    options.offline = true;
    const int calls = hub.api_calls;
    auto offline = llamapp::hub_pull(HubRef{"test/stories", "stories260K-Q8_0.gguf"}, options);
    ASSERT_TRUE(offline) << offline.error().describe();
    EXPECT_EQ(offline->path, pulled->path);
    EXPECT_EQ(hub.api_calls, calls);
    auto missing = llamapp::hub_pull(HubRef{"test/never-pulled"}, options);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, ErrorCode::not_found);

    // Other tests in this process may have pulled into the same cache: this repository's only.
    auto cached = llamapp::hub_cached_models();
    std::erase_if(cached, [](const auto& c) { return c.ref.repo != "test/stories"; });
    ASSERT_EQ(cached.size(), 1u);
    EXPECT_EQ(cached[0].ref.to_string(), "test/stories:stories260K-Q8_0.gguf");
    EXPECT_EQ(cached[0].bytes, fs::file_size(stories));
}

TEST_F(Hub, WrongBytesAreDeletedAndNothingEntersTheCache) {
    hub.add("test/corrupt", "m-Q8_0.gguf", "GGUF not what the listing says", std::string(64, 'a'));
    auto r = llamapp::hub_pull(HubRef{"test/corrupt"}, options);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::checksum_mismatch);
    EXPECT_NE(r.error().message.find(std::string(64, 'a')), std::string::npos);
    const fs::path repo = hub_cache_dir() / "models--test--corrupt";
    for (const char* dir : {"blobs", "snapshots"}) {
        if (!fs::exists(repo / dir)) continue;
        for (const auto& e : fs::recursive_directory_iterator(repo / dir))
            EXPECT_FALSE(e.is_regular_file()) << e.path();
    }
    for (const auto& c : llamapp::hub_cached_models()) EXPECT_NE(c.ref.repo, "test/corrupt");
}

// Files outside LFS are listed with their git blob id (SHA-1 of "blob <size>\0" + bytes).
TEST_F(Hub, AFileOutsideLfsIsCheckedAgainstItsGitBlobId) {
    hub.add("test/plain", "hello-Q8_0.gguf", "hello\n", "ce013625030ba8dba906f756967f9e9ca394464a");
    auto pulled = llamapp::hub_pull(HubRef{"test/plain"}, options);
    ASSERT_TRUE(pulled) << pulled.error().describe();
    EXPECT_EQ(bytes_of(pulled->path), "hello\n");
    hub.add("test/plain-bad", "hello-Q8_0.gguf", "hello\n",
            "0000000000000000000000000000000000000000");
    auto bad = llamapp::hub_pull(HubRef{"test/plain-bad"}, options);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, ErrorCode::checksum_mismatch);
    EXPECT_NE(bad.error().message.find("ce013625030ba8dba906f756967f9e9ca394464a"),
              std::string::npos)
        << bad.error().describe();
}

// The hub is not trusted: the names it gives become paths in the cache only when they are ids.
TEST_F(Hub, AHostileHubCannotNameAPathOutsideTheCache) {
    const fs::path outside = hub_cache_dir().parent_path() / "escaped-by-the-hub";
    hub.add("test/climb", "m-Q8_0.gguf", "GGUF bytes", "../../../../escaped-by-the-hub");
    auto bad_digest = llamapp::hub_pull(HubRef{"test/climb"}, options);
    ASSERT_FALSE(bad_digest);
    EXPECT_EQ(bad_digest.error().code, ErrorCode::not_found) << bad_digest.error().describe();

    hub.add("test/climb-commit", "m-Q8_0.gguf", "GGUF bytes");
    hub.listed_commit = "../../../../escaped-by-the-hub";
    auto bad_commit = llamapp::hub_pull(HubRef{"test/climb-commit"}, options);
    ASSERT_FALSE(bad_commit);
    EXPECT_EQ(bad_commit.error().code, ErrorCode::network_error);
    EXPECT_NE(bad_commit.error().message.find("not a hex id"), std::string::npos);
    EXPECT_FALSE(fs::exists(outside));
    EXPECT_FALSE(fs::exists(hub_cache_dir() / "escaped-by-the-hub"));
}

TEST_F(Hub, APullTheDiskCannotHoldIsRefusedBeforeAnyTransfer) {
    hub.add("test/huge", "huge-Q8_0.gguf", "GGUF", "", std::uint64_t{1} << 60);
    auto pulled = llamapp::hub_pull(HubRef{"test/huge"}, options);
    ASSERT_FALSE(pulled);
    EXPECT_EQ(pulled.error().code, ErrorCode::io_error);
    EXPECT_NE(pulled.error().message.find("the download needs 1099511627776.0 MiB more"),
              std::string::npos)
        << pulled.error().describe();
    EXPECT_EQ(hub.file_requests, 0);
}

// Behind a proxy every request goes through it: the API calls, the download and its redirect to
// the CDN. llama.cpp's downloader has no proxy setting, so llamapp's own transfer runs, and it
// resumes a partial file that an earlier pull left under llama.cpp's temporary name.
TEST_F(Hub, BehindAProxyEveryRequestGoesThroughItAndAPartialFileResumes) {
    llamapp::test::FakeProxy proxy;
    const fs::path stories = llamapp::test::shared_model("stories260K.gguf");
    hub.add_file("test/proxied", "stories260K-Q8_0.gguf", stories);
    const std::string bytes = bytes_of(stories);
    const fs::path blobs = hub_cache_dir() / "models--test--proxied" / "blobs";
    fs::create_directories(blobs);
    {
        std::ofstream out(blobs / (llamapp::sha256_hex(bytes) + ".downloadInProgress"),
                          std::ios::binary);
        out << bytes.substr(0, bytes.size() / 2);
    }
    ::setenv("HTTP_PROXY", proxy.url("user:p%40ss").c_str(), 1);
    auto pulled = llamapp::hub_pull(HubRef{"test/proxied"}, options);
    auto hits = llamapp::hub_search("proxied", 5, options);
    ::unsetenv("HTTP_PROXY");
    ASSERT_TRUE(pulled) << pulled.error().describe();
    EXPECT_EQ(bytes_of(pulled->path), bytes);
    EXPECT_EQ(hub.file_requests, 1);
    EXPECT_EQ(proxy.last_range(), fmt::format("bytes={}-", bytes.size() / 2));
    ASSERT_TRUE(hits) << hits.error().describe();
    EXPECT_EQ(hits->size(), 1u);
    // refs, tree, resolve (answered with a redirect), the CDN's file, search.
    EXPECT_EQ(proxy.requests, 5);
    EXPECT_EQ(proxy.proxy_authorization(), "Basic dXNlcjpwQHNz");  // user:p@ss

    // Offline, the pulled file is found in the cache as llama.cpp's layout has it.
    options.offline = true;
    auto cached = llamapp::hub_pull(HubRef{"test/proxied"}, options);
    ASSERT_TRUE(cached) << cached.error().describe();
    EXPECT_EQ(cached->path, pulled->path);
}

// A download that goes quiet is broken off after the stall timeout and resumed from where it
// stopped; one that stays quiet fails saying so, and what arrived serves the next pull.
TEST_F(Hub, AStalledDownloadIsResumedAndOneThatStaysStalledFailsSayingSo) {
    std::string bytes(256 << 10, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 % 251);
    hub.add("test/quiet", "q-Q8_0.gguf", bytes);
    options.stall_timeout = std::chrono::seconds(1);
    hub.stall_next_transfers = 1;
    auto resumed = llamapp::hub_pull(HubRef{"test/quiet"}, options);
    ASSERT_TRUE(resumed) << resumed.error().describe();
    EXPECT_EQ(bytes_of(resumed->path), bytes);
    EXPECT_EQ(hub.file_requests, 2);
    EXPECT_EQ(hub.range_requests, 1);
    ASSERT_TRUE(llamapp::hub_remove(HubRef{"test/quiet"}));

    hub.stall_next_transfers = 100;
    auto stalled = llamapp::hub_pull(HubRef{"test/quiet"}, options);
    ASSERT_FALSE(stalled);
    EXPECT_EQ(stalled.error().code, ErrorCode::network_error);
    EXPECT_EQ(stalled.error().message,
              "the download stalled: nothing arrived for 1 s (4 tries); what arrived is kept for "
              "the next pull to resume");
    EXPECT_EQ(hub.file_requests, 6);
    hub.stall_next_transfers = 0;
    auto finished = llamapp::hub_pull(HubRef{"test/quiet"}, options);
    ASSERT_TRUE(finished) << finished.error().describe();
    EXPECT_EQ(bytes_of(finished->path), bytes);
    EXPECT_EQ(hub.range_requests, 5);  // the three stalled retries, then the one that finished
}

// A token is sent as given with every request, whatever its form: llama.cpp's own listing drops
// one that does not look like a hub token, which a mirror's tokens need not.
TEST_F(Hub, ATokenOfAnyFormIsSent) {
    hub.add("test/mirror", "m-Q4_K_M.gguf", "GGUF mirror bytes");
    hub.required_token = "mirror-token";
    options.token = hub.required_token;
    auto pulled = llamapp::hub_pull(HubRef{"test/mirror"}, options);
    ASSERT_TRUE(pulled) << pulled.error().describe();
    EXPECT_EQ(bytes_of(pulled->path), "GGUF mirror bytes");
}

TEST_F(Hub, RefusalsAreTypedAndATokenIsSent) {
    hub.add("test/gated", "g-Q4_K_M.gguf", "GGUF gated bytes");
    hub.required_token = "hf_" + std::string(34, 'x');
    auto anonymous = llamapp::hub_pull(HubRef{"test/gated"}, options);
    ASSERT_FALSE(anonymous);
    EXPECT_EQ(anonymous.error().code, ErrorCode::unauthorized);
    EXPECT_NE(anonymous.error().message.find("HF_TOKEN"), std::string::npos);
    options.token = hub.required_token;
    auto with_token = llamapp::hub_pull(HubRef{"test/gated"}, options);
    ASSERT_TRUE(with_token) << with_token.error().describe();
    EXPECT_EQ(bytes_of(with_token->path), "GGUF gated bytes");

    auto absent = llamapp::hub_pull(HubRef{"test/absent"}, options);
    ASSERT_FALSE(absent);
    EXPECT_EQ(absent.error().code, ErrorCode::not_found);
    auto no_file = llamapp::hub_pull(HubRef{"test/gated", "other.gguf"}, options);
    ASSERT_FALSE(no_file);
    EXPECT_EQ(no_file.error().code, ErrorCode::not_found);

    // With the hub out of reach, a cached model is answered from the cache and says so; an
    // uncached one is a network error.
    ::setenv("MODEL_ENDPOINT", "http://127.0.0.1:1/", 1);  // nothing listens on port 1
    auto cached = llamapp::hub_pull(HubRef{"test/gated"}, options);
    ASSERT_TRUE(cached) << cached.error().describe();
    EXPECT_FALSE(cached->hub_unreachable.empty());
    EXPECT_EQ(cached->path, with_token->path);
    auto unreachable = llamapp::hub_pull(HubRef{"test/elsewhere"}, options);
    ASSERT_FALSE(unreachable);
    EXPECT_EQ(unreachable.error().code, ErrorCode::network_error);
}

TEST_F(Hub, ARetryAfterIsWaitedOutAndAPersistentOneIsReported) {
    hub.add("test/busy", "b-Q8_0.gguf", "GGUF busy bytes");
    hub.throttle_next = 1;
    auto r = llamapp::hub_pull(HubRef{"test/busy"}, options);
    ASSERT_TRUE(r) << r.error().describe();
    hub.throttle_next = 1000;
    auto listing = llamapp::hub_list_files("test/busy", options);
    ASSERT_FALSE(listing);
    EXPECT_EQ(listing.error().code, ErrorCode::rate_limited);
    EXPECT_EQ(listing.error().context, "retry after 1 s");
}

// A hub that answers 5xx for a moment (a mirror restarting) is asked again after 1 and 2 s, as
// a transfer is: one retry policy for every request; one that keeps failing is reported.
TEST_F(Hub, AServerErrorIsTriedAgainAndAPersistentOneIsReported) {
    hub.add("test/restarting", "r-Q8_0.gguf", "GGUF restarting bytes");
    hub.fail_next = 2;
    auto listing = llamapp::hub_list_files("test/restarting", options);
    ASSERT_TRUE(listing) << listing.error().describe();
    EXPECT_EQ(hub.fail_next, 0);
    hub.fail_next = 3;
    auto failed = llamapp::hub_list_files("test/restarting", options);
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().code, ErrorCode::network_error);
    EXPECT_NE(failed.error().message.find("503"), std::string::npos) << failed.error().describe();
}

TEST_F(Hub, ATransferCutHalfWayResumesWhereItStopped) {
    std::string bytes(1 << 20, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
    hub.add("test/flaky", "f-Q8_0.gguf", bytes);
    hub.cut_next_transfers = 1;
    auto r = llamapp::hub_pull(HubRef{"test/flaky"}, options);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_EQ(bytes_of(r->path), bytes);
    EXPECT_GE(hub.range_requests, 1);
}

TEST_F(Hub, TwoPullsOfOneFileAtOnceTransferItOnce) {
    std::string bytes(4 << 20, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13);
    hub.add("test/twice", "t-Q8_0.gguf", bytes);
    llamapp::Result<llamapp::PulledModel> a = std::unexpected(llamapp::Error{}), b = a;
    std::thread first([&] { a = llamapp::hub_pull(HubRef{"test/twice"}, options); });
    std::thread second([&] { b = llamapp::hub_pull(HubRef{"test/twice"}, options); });
    first.join();
    second.join();
    ASSERT_TRUE(a) << a.error().describe();
    ASSERT_TRUE(b) << b.error().describe();
    EXPECT_EQ(a->path, b->path);
    EXPECT_EQ(bytes_of(a->path), bytes);
    EXPECT_EQ(hub.file_requests, 1);
    EXPECT_EQ(a->bytes_downloaded + b->bytes_downloaded, bytes.size());
}

TEST_F(Hub, ASplitModelPullsEveryPartAndRemovingItTakesThemAll) {
    for (int i = 1; i <= 3; ++i)
        hub.add("test/split", "big-Q8_0-0000" + std::to_string(i) + "-of-00003.gguf",
                "GGUF part " + std::to_string(i));
    hub.add("test/split", "small-Q4_K_M.gguf", "GGUF small");
    hub.add("test/split", "../../escape-Q4_K_M.gguf", "GGUF outside");  // never listed
    auto listing = llamapp::hub_list_files("test/split", options);
    ASSERT_TRUE(listing) << listing.error().describe();
    ASSERT_EQ(listing->models.size(), 2u);
    auto r = llamapp::hub_pull(HubRef{"test/split", "", "q8_0"}, options);
    ASSERT_TRUE(r) << r.error().describe();
    ASSERT_EQ(r->files.size(), 3u);
    EXPECT_EQ(r->path.filename(), "big-Q8_0-00001-of-00003.gguf");
    EXPECT_EQ(bytes_of(r->files[2]), "GGUF part 3");
    ASSERT_TRUE(llamapp::hub_pull(HubRef{"test/split"}, options));  // the default: Q4_K_M

    auto removed = llamapp::hub_remove(HubRef{"test/split", "", "Q8_0"});
    ASSERT_TRUE(removed) << removed.error().describe();
    EXPECT_EQ(*removed, 3);
    for (const auto& f : r->files) EXPECT_FALSE(fs::exists(f));
    // Other tests of this process may have filled the cache too.
    const auto cached_here = [] {
        std::vector<std::string> files;
        for (const auto& c : llamapp::hub_cached_models())
            if (c.ref.repo == "test/split") files.push_back(c.ref.file);
        return files;
    };
    EXPECT_EQ(cached_here(), std::vector<std::string>{"small-Q4_K_M.gguf"});
    ASSERT_TRUE(llamapp::hub_remove(HubRef{"test/split"}));
    EXPECT_TRUE(cached_here().empty());
    EXPECT_FALSE(llamapp::hub_remove(HubRef{"test/split"}));
}

TEST_F(Hub, SearchListsMatchingRepositories) {
    hub.add("someone/tiny-GGUF", "t-Q8_0.gguf", "GGUF t");
    hub.add("someone/tiny-GGUF", "t-F16-00001-of-00002.gguf", "GGUF a");
    hub.add("someone/tiny-GGUF", "t-F16-00002-of-00002.gguf", "GGUF b");
    hub.add("someone/tiny-GGUF", "mmproj-t-F16.gguf", "GGUF p");
    hub.add("someone/other", "o-Q8_0.gguf", "GGUF o");
    auto hits = llamapp::hub_search("tiny", 10, options);
    ASSERT_TRUE(hits) << hits.error().describe();
    ASSERT_EQ(hits->size(), 1u);
    EXPECT_EQ((*hits)[0].repo, "someone/tiny-GGUF");
    EXPECT_EQ((*hits)[0].downloads, 7u);
    // The model files a ref can choose: part 1 of the split set, no projector.
    std::vector<std::string> models;
    for (const auto& m : (*hits)[0].models) models.push_back(m.quant + "/" + m.path);
    EXPECT_EQ(models,
              (std::vector<std::string>{"F16/t-F16-00001-of-00002.gguf", "Q8_0/t-Q8_0.gguf"}));
    auto bad = llamapp::hub_search("tiny", 0, options);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
}

// A hub model handed to the manager: add() looks in the cache only; the first load pulls it,
// listed as loading (downloading, with progress) meanwhile; a later manager finds it cached.
TEST_F(Hub, AManagerPullsAHubModelOnItsFirstLoadAndFindsItInTheCacheAfterwards) {
    const fs::path stories = llamapp::test::shared_model("stories260K.gguf");
    hub.add_file("test/managed", "stories260K-Q8_0.gguf", stories);
    llamapp::ModelSpec spec;
    spec.id = "test/managed:Q8_0";
    spec.hub = HubRef{"test/managed", "", "Q8_0"};
    spec.source = "hub";
    spec.engine.context.n_ctx = 256;
    spec.engine.context.n_seq_max = 1;
    spec.engine.context.n_threads = 1;
    llamapp::ModelManagerOptions mo;
    mo.hub = options;
    auto manager = llamapp::ModelManager::create(mo);
    ASSERT_TRUE(manager) << manager.error().describe();
    ASSERT_TRUE((*manager)->add(spec));
    auto before = (*manager)->find(spec.id);
    ASSERT_TRUE(before);
    EXPECT_EQ(before->status, llamapp::ModelStatus::unloaded);
    EXPECT_TRUE(before->path.empty());
    EXPECT_TRUE(before->capabilities.generate);
    EXPECT_EQ(hub.api_calls, 0);

    hub.hold_next_transfer();
    std::optional<llamapp::Result<llamapp::ModelLease>> lease;
    std::thread first([&] { lease = (*manager)->acquire(spec.id); });
    std::optional<llamapp::ModelListing> during;
    for (int i = 0; i < 6000 && !during; ++i) {
        auto now = (*manager)->find(spec.id);
        if (hub.transfer_held() && now && now->downloading && now->progress > 0)
            during = *now;
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    hub.release_transfer();
    first.join();
    ASSERT_TRUE(during) << "the pull was never seen in progress";
    EXPECT_EQ(during->status, llamapp::ModelStatus::loading);
    EXPECT_LT(during->progress, 1.0f);
    ASSERT_TRUE(*lease) << (*lease).error().describe();
    auto after = (*manager)->find(spec.id);
    ASSERT_TRUE(after);
    EXPECT_EQ(after->status, llamapp::ModelStatus::ready);
    EXPECT_FALSE(after->downloading);
    EXPECT_EQ(after->architecture, "llama");
    EXPECT_TRUE(after->path.string().starts_with(hub_cache_dir().string()));
    EXPECT_EQ(bytes_of(after->path), bytes_of(stories));
    lease.reset();
    manager->reset();

    const int calls = hub.api_calls;
    auto second = llamapp::ModelManager::create(mo);
    ASSERT_TRUE(second);
    ASSERT_TRUE((*second)->add(spec));
    EXPECT_EQ((*second)->find(spec.id)->path, after->path);
    EXPECT_EQ((*second)->find(spec.id)->architecture, "llama");
    EXPECT_TRUE((*second)->acquire(spec.id));
    EXPECT_EQ(hub.api_calls, calls);
    EXPECT_EQ(hub.file_requests, 1);

    // A pull that fails leaves the model failed with the hub's error; the others still serve.
    llamapp::ModelSpec missing = spec;
    missing.id = "test/missing";
    missing.hub = HubRef{"test/missing"};
    ASSERT_TRUE((*second)->add(missing));
    auto refused = (*second)->acquire(missing.id);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::model_unavailable);
    auto failed = (*second)->find(missing.id);
    ASSERT_TRUE(failed && failed->error);
    EXPECT_EQ(failed->status, llamapp::ModelStatus::failed);
    EXPECT_EQ(failed->error->code, ErrorCode::not_found);
    EXPECT_TRUE((*second)->acquire(spec.id));
}

}  // namespace
