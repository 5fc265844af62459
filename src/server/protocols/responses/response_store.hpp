// Internal: the responses a /v1/responses client asked to keep (store: true), so that a later
// request continues one by previous_response_id. Bounded by count, bytes and age; the oldest
// go first.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "llamapp/chat.hpp"

namespace llamapp::detail {

struct StoredResponse {
    nlohmann::json response;                // as it was answered (GET /v1/responses/{id})
    std::vector<ChatMessage> conversation;  // input and output, without the instructions
    nlohmann::json input_items;             // the request's input (GET .../input_items)
};

struct ResponseStoreLimits {
    std::size_t max_responses = 1024;
    std::size_t max_bytes = std::size_t{64} << 20;
    std::chrono::seconds max_age{3600};
};

// Thread-safe: every handler thread may put, get and erase.
class ResponseStore {
  public:
    using Clock = std::chrono::steady_clock;
    explicit ResponseStore(ResponseStoreLimits limits,
                           std::function<Clock::time_point()> now = Clock::now);

    // Keeps `r`, dropping the oldest responses until the limits hold again. A response larger
    // than max_bytes alone is not kept.
    void put(const std::string& id, StoredResponse r);
    // Null when the id was never stored, was erased, expired or was pushed out.
    std::shared_ptr<const StoredResponse> get(const std::string& id);
    bool erase(const std::string& id);
    std::size_t size();

  private:
    struct Entry {
        std::string id;
        std::shared_ptr<const StoredResponse> response;
        std::size_t bytes = 0;
        Clock::time_point stored;
    };
    void drop_front();
    void expire(Clock::time_point now);

    ResponseStoreLimits limits_;
    std::function<Clock::time_point()> now_;
    std::mutex mutex_;
    std::list<Entry> order_;  // oldest first
    std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
    std::size_t bytes_ = 0;
};

}  // namespace llamapp::detail
