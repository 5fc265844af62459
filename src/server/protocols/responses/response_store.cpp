#include "server/protocols/responses/response_store.hpp"

namespace llamapp::detail {

namespace {

std::size_t size_of(const StoredResponse& r) {
    std::size_t n = r.response.dump().size();
    for (const ChatMessage& m : r.conversation) {
        n += m.role.size() + m.content.size() + m.reasoning_content.size() + m.name.size() +
             m.tool_call_id.size();
        for (const ToolCall& c : m.tool_calls)
            n += c.id.size() + c.name.size() + c.arguments.size();
    }
    return n;
}

}  // namespace

ResponseStore::ResponseStore(ResponseStoreLimits limits, std::function<Clock::time_point()> now)
    : limits_(limits), now_(std::move(now)) {}

void ResponseStore::put(const std::string& id, StoredResponse r) {
    const std::size_t bytes = size_of(r);
    std::lock_guard lock(mutex_);
    const auto now = now_();
    expire(now);
    if (auto it = by_id_.find(id); it != by_id_.end()) {
        bytes_ -= it->second->bytes;
        order_.erase(it->second);
        by_id_.erase(it);
    }
    if (bytes > limits_.max_bytes || limits_.max_responses == 0) return;
    while (!order_.empty() &&
           (order_.size() + 1 > limits_.max_responses || bytes_ + bytes > limits_.max_bytes))
        drop_front();
    order_.push_back({id, std::make_shared<const StoredResponse>(std::move(r)), bytes, now});
    by_id_[id] = std::prev(order_.end());
    bytes_ += bytes;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
    std::lock_guard lock(mutex_);
    expire(now_());
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second->response;
}

bool ResponseStore::erase(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return false;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    by_id_.erase(it);
    return true;
}

std::size_t ResponseStore::size() {
    std::lock_guard lock(mutex_);
    expire(now_());
    return order_.size();
}

void ResponseStore::drop_front() {
    bytes_ -= order_.front().bytes;
    by_id_.erase(order_.front().id);
    order_.pop_front();
}

// Entries are in the order they were stored, so the expired ones are a prefix.
void ResponseStore::expire(Clock::time_point now) {
    while (!order_.empty() && now - order_.front().stored >= limits_.max_age) drop_front();
}

}  // namespace llamapp::detail
