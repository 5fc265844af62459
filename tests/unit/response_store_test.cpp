// The store behind previous_response_id: what it keeps, for how long, and what it drops first.
#include <gtest/gtest.h>

#include <thread>

#include "server/protocols/responses/response_store.hpp"

using namespace llamapp;
using namespace llamapp::detail;
using namespace std::chrono_literals;

namespace {

StoredResponse response(const std::string& text) {
    return {{{"output_text", text}}, {{.role = "user", .content = text}}};
}

struct FakeClock {
    ResponseStore::Clock::time_point now{};
    std::function<ResponseStore::Clock::time_point()> fn() {
        return [this] { return now; };
    }
};

}  // namespace

TEST(ResponseStore, KeepsWhatItWasGivenUntilErased) {
    ResponseStore store({});
    store.put("a", response("first"));
    auto got = store.get("a");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->response["output_text"], "first");
    ASSERT_EQ(got->conversation.size(), 1u);
    EXPECT_EQ(got->conversation[0].content, "first");
    EXPECT_FALSE(store.get("b"));
    EXPECT_TRUE(store.erase("a"));
    EXPECT_FALSE(store.erase("a"));
    EXPECT_FALSE(store.get("a"));
}

TEST(ResponseStore, TheOldestGoFirstOverTheCount) {
    ResponseStore store({.max_responses = 2});
    store.put("a", response("1"));
    store.put("b", response("2"));
    store.put("c", response("3"));
    EXPECT_FALSE(store.get("a"));
    EXPECT_TRUE(store.get("b"));
    EXPECT_TRUE(store.get("c"));
    EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, TheOldestGoFirstOverTheBytes) {
    const std::string big(400, 'x');
    ResponseStore store({.max_bytes = 1000});
    store.put("a", response(big));
    store.put("b", response(big));  // two of about 830 bytes do not fit in 1000
    EXPECT_FALSE(store.get("a"));
    EXPECT_TRUE(store.get("b"));
    store.put("huge", response(std::string(2000, 'y')));  // larger than the whole store
    EXPECT_FALSE(store.get("huge"));
    EXPECT_TRUE(store.get("b"));  // and it pushed nothing out
}

TEST(ResponseStore, ResponsesExpireAtTheirAge) {
    FakeClock clock;
    ResponseStore store({.max_age = 60s}, clock.fn());
    store.put("a", response("1"));
    clock.now += 30s;
    store.put("b", response("2"));
    clock.now += 29s;
    EXPECT_TRUE(store.get("a"));
    clock.now += 1s;  // a is 60 s old
    EXPECT_FALSE(store.get("a"));
    EXPECT_TRUE(store.get("b"));
    clock.now += 30s;
    EXPECT_FALSE(store.get("b"));
    EXPECT_EQ(store.size(), 0u);
}

TEST(ResponseStore, StoringAnIdAgainReplacesIt) {
    ResponseStore store({.max_responses = 2});
    store.put("a", response("1"));
    store.put("a", response("2"));
    store.put("b", response("3"));
    EXPECT_EQ(store.size(), 2u);
    EXPECT_EQ(store.get("a")->response["output_text"], "2");
}

TEST(ResponseStore, ZeroResponsesKeepsNone) {
    ResponseStore store({.max_responses = 0});
    store.put("a", response("1"));
    EXPECT_FALSE(store.get("a"));
}

// Handler threads share one store (run under ThreadSanitizer too).
TEST(ResponseStore, ThreadsPutGetAndEraseAtOnce) {
    ResponseStore store({.max_responses = 64});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&store, t] {
            for (int i = 0; i < 200; ++i) {
                const std::string id = std::to_string(t) + "-" + std::to_string(i);
                store.put(id, response(id));
                if (auto got = store.get(id)) {
                    EXPECT_EQ(got->conversation[0].content, id);
                }
                if (i % 3 == 0) store.erase(id);
            }
        });
    for (auto& th : threads) th.join();
    EXPECT_LE(store.size(), 64u);
}
