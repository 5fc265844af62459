#include "server/common/model_pulls.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "llamapp/hub.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

json PullEvent::to_json() const {
    json out = {{"model", model}, {"event", event}};
    if (!data.is_null()) out["data"] = data;
    return out;
}

bool PullListener::next(PullEvent& event, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return closed_ || !events_.empty(); });
    if (events_.empty()) return false;
    event = std::move(events_.front());
    events_.pop_front();
    return true;
}

bool PullListener::closed() const {
    std::lock_guard lock(mutex_);
    return closed_ && events_.empty();
}

void PullListener::push(const PullEvent& event) {
    std::lock_guard lock(mutex_);
    events_.push_back(event);
    changed_.notify_all();
}

void PullListener::close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    changed_.notify_all();
}

ModelPulls::ModelPulls(ModelManager& models, ModelSpec defaults)
    : models_(models), defaults_(std::move(defaults)) {}

ModelPulls::~ModelPulls() {
    stop();
}

Result<void> ModelPulls::start(const HubRef& ref) {
    const std::string name = ref.to_string();
    std::lock_guard lock(mutex_);
    if (stopping_) return fail(ErrorCode::shutting_down, "the server is stopping");
    // Only the hub model itself counts as pulled: a name that some other model holds (an alias,
    // a file the operator named so) must not pass for it.
    if (auto known = models_.find(name); known && (known->id != name || !known->hub))
        return fail(ErrorCode::invalid_argument,
                    fmt::format("'{}' names {} on this server, not that hub model; delete it "
                                "before pulling",
                                name,
                                known->id != name ? fmt::format("an alias of '{}'", known->id)
                                                  : std::string("a model file")),
                    name);
    if (models_.find(name) || std::find(pulling_.begin(), pulling_.end(), name) != pulling_.end())
        return fail(ErrorCode::already_exists,
                    "the model '" + name + "' exists already or is being pulled", name);
    pulling_.push_back(name);
    threads_.emplace_back([this, ref] { run(ref); });
    return {};
}

std::shared_ptr<PullListener> ModelPulls::listen() {
    auto listener = std::make_shared<PullListener>();
    std::lock_guard lock(mutex_);
    if (stopping_) listener->close();
    std::erase_if(listeners_, [](const auto& l) { return l.expired(); });
    listeners_.push_back(listener);
    return listener;
}

void ModelPulls::stop() {
    std::vector<std::thread> threads;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();  // each pull polls stopping_ between chunks
    std::lock_guard lock(mutex_);
    for (const auto& l : listeners_)
        if (auto listener = l.lock()) listener->close();
    listeners_.clear();
}

void ModelPulls::broadcast(const PullEvent& event) {
    std::lock_guard lock(mutex_);
    for (const auto& l : listeners_)
        if (auto listener = l.lock()) listener->push(event);
}

void ModelPulls::run(HubRef ref) {
    const std::string name = ref.to_string();
    HubOptions hub = models_.options().hub;
    // A progress event per file at most every 100 ms, and its last one: enough for a progress
    // bar, few enough for a slow client.
    std::mutex progress_mutex;
    auto last_sent = std::chrono::steady_clock::time_point{};
    hub.on_progress = [&](const HubProgress& p) {
        const auto now = std::chrono::steady_clock::now();
        {
            std::lock_guard lock(progress_mutex);
            if (!p.done && now - last_sent < std::chrono::milliseconds(100)) return;
            last_sent = now;
        }
        json file = {{"done", p.downloaded}, {"total", p.total}};
        broadcast({name, "download_progress", {{"progress", {{p.file, std::move(file)}}}}, {}});
    };
    hub.cancelled = [this] {
        std::lock_guard lock(mutex_);
        return stopping_;
    };
    auto pulled = hub_pull(ref, hub);
    Result<void> added = pulled ? Result<void>{} : std::unexpected(pulled.error());
    if (pulled) {
        ModelSpec spec = defaults_;
        spec.id = name;
        spec.aliases.clear();
        spec.hub = ref;
        spec.path = pulled->path;
        spec.source = "hub";
        added = models_.add(std::move(spec));
    }
    {
        std::lock_guard lock(mutex_);
        std::erase(pulling_, name);
    }
    if (added)
        broadcast({name, "download_finished", nullptr, {}});
    else
        broadcast({name, "download_failed", {{"error", added.error().describe()}}, added.error()});
}

}  // namespace llamapp::detail
