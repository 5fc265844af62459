// Internal: the manager's table of models and the lifecycle that moves them between states.
//
// Locking: one mutex guards the table; it is never held across a load, an estimate, an engine
// shutdown or a destructor, so those run while other calls proceed. `changed` is notified on
// every status or lease change; waiters (acquire, unload, the idle reaper) re-check their own
// condition.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "llamapp/model_manager.hpp"
#include "manager/memory_budget.hpp"

namespace llamapp::detail {

struct LoadedModel {
    LoadedModel(std::string model_id, Model m) : id(std::move(model_id)), model(std::move(m)) {}

    std::string id;
    Model model;
    std::optional<Engine> engine;
    std::optional<ChatTemplate> chat_template;
    std::string chat_template_error;
    ModelCapabilities capabilities;
    RequestDefaults defaults;
    // A generative model's embedder is made at the first request for it (embedder_on_demand
    // says how); embedder_mutex guards both and is held while it is made.
    std::mutex embedder_mutex;
    std::optional<Embedder> embedder;
    std::optional<EmbedderOptions> embedder_on_demand;
};

struct ModelEntry {
    ModelSpec spec;
    std::string architecture;
    std::uint64_t file_size = 0, n_params = 0;
    std::string quantization;
    ModelCapabilities capabilities;
    ModelStatus status = ModelStatus::unloaded;
    std::optional<Error> error;
    std::shared_ptr<LoadedModel> loaded;  // ready and unloading
    std::optional<Footprint> footprint;   // estimated at the first load
    // The embedding context a generative model made on demand, while it is loaded.
    std::optional<Footprint> embedder_footprint;
    float progress = 0;
    bool downloading = false;
    int leases = 0;
    std::size_t waiting = 0;
    std::chrono::steady_clock::time_point last_used;
    std::optional<std::chrono::milliseconds> keep_alive;  // from the last request that set one
    std::thread worker;                                   // the last load's thread
};

// The memory an embedder's context takes beside the model's weights (which it shares).
Result<Footprint> estimate_embedder(const std::filesystem::path& path, ModelOptions model,
                                    const EmbedderOptions& embedder);

// Architecture and capabilities from the GGUF header (failed with the reason when it is not a
// model), the spec's overrides applied.
void read_header(ModelEntry& e);

struct ManagerState : std::enable_shared_from_this<ManagerState> {
    ModelManagerOptions options;
    std::shared_ptr<MetricsRegistry> metrics;
    std::map<std::string, std::uint64_t, std::less<>> budgets;
    Gauge* resident_gauge = nullptr;

    mutable std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::unique_ptr<ModelEntry>, std::less<>> entries;
    std::map<std::string, std::string, std::less<>> aliases;  // alias → id
    std::string default_id;
    bool stopping = false;
    std::thread reaper;

    ModelEntry* find(const std::string& name);  // lock held
    const ModelEntry* find(const std::string& name) const;
    const ModelEntry* find_by_other_spelling(const std::string& name) const;
    std::chrono::milliseconds keep_alive(const ModelEntry& e) const;
    // What a loaded model takes now: its footprint and an embedding context made on demand.
    std::optional<Footprint> resident_footprint(const ModelEntry& e) const;
    ModelListing listing(const ModelEntry& e) const;

    // Loading, ready and unloading models with a footprint, but `except` (lock held).
    std::vector<ResidentModel> resident_models(const ModelEntry* except) const;

    // With the lock held (it is released around the estimate). On success the entry is
    // loading and a worker thread finishes the load (a hub model without a file pulls first).
    Result<void> start_load(std::unique_lock<std::mutex>& lock, ModelEntry& e);
    // The entry is loading. Estimates its footprint (the lock released) and checks the budget;
    // returns the idle models to unload first. On failure the entry is `before` again, or
    // failed when the estimate failed, with the error.
    Result<std::vector<ModelEntry*>> admit(std::unique_lock<std::mutex>& lock, ModelEntry& e,
                                           ModelStatus before);
    void run_load(ModelEntry& e, std::vector<ModelEntry*> evict);
    // The worker of a hub model not yet pulled: pull, read its header, admit, load.
    void pull_and_load(ModelEntry& e);
    Result<std::shared_ptr<LoadedModel>> build(ModelEntry& e);
    // The entry is unloading; without the lock. Returns once its memory is freed.
    void finish_unload(ModelEntry& e, std::chrono::milliseconds grace);
    // The embedder of a loaded model a lease holds, made on its first call (model_embedder.cpp).
    Result<Embedder*> embedder_of(LoadedModel& m);
    // Estimates the embedding context `o` describes and takes room for it in the budget
    // (unloading idle models first when the options say so); without the lock.
    Result<Footprint> reserve_embedder(const std::string& id, const EmbedderOptions& o);
    // A lease ended; one that counts as use restarts the model's keep-alive.
    void release(const std::string& id, bool counts_as_use);
    void reap_idle();
    void shutdown();
};

}  // namespace llamapp::detail
