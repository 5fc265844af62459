// Pulls of hub models that a client starts over HTTP (llama-server's POST /models), each on a
// thread of its own, and their events for whoever listens (GET /models/sse).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "llamapp/model_manager.hpp"

namespace llamapp::detail {

// An event in llama-server's shape: {"model", "event", "data"?}; `event` is download_progress,
// download_finished or download_failed.
struct PullEvent {
    std::string model;
    std::string event;
    nlohmann::json data;         // null: none
    std::optional<Error> error;  // download_failed: why
    nlohmann::json to_json() const;
};

// What one listener has not read yet. Thread-safe.
class PullListener {
  public:
    // The next event, waiting up to `timeout`; false on a timeout or once closed and empty.
    bool next(PullEvent& event, std::chrono::milliseconds timeout);
    bool closed() const;

  private:
    friend class ModelPulls;
    void push(const PullEvent& event);
    void close();

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<PullEvent> events_;
    bool closed_ = false;
};

// Thread-safe. A finished pull adds the model to the manager (named by its reference, with
// `defaults` for everything else), so that requests and /models/load find it.
class ModelPulls {
  public:
    ModelPulls(ModelManager& models, ModelSpec defaults);
    ModelPulls(const ModelPulls&) = delete;
    ModelPulls& operator=(const ModelPulls&) = delete;
    ~ModelPulls();  // stop()

    // Starts pulling `ref` and returns. Errors: already_exists (a known model or a pull in
    // flight of that name), shutting_down.
    [[nodiscard]] Result<void> start(const HubRef& ref);
    // Events from now on, until stop().
    std::shared_ptr<PullListener> listen();
    // Cancels the pulls in flight, waits for their threads and closes every listener.
    void stop();

  private:
    void run(HubRef ref);
    void broadcast(const PullEvent& event);

    ModelManager& models_;
    const ModelSpec defaults_;
    std::mutex mutex_;
    std::vector<std::string> pulling_;  // names of the pulls in flight
    std::vector<std::thread> threads_;
    std::vector<std::weak_ptr<PullListener>> listeners_;
    bool stopping_ = false;
};

}  // namespace llamapp::detail
