// ModelManager: the models a process knows, by id, loaded and unloaded while the others serve,
// under a memory budget per device.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llamapp/chat.hpp"
#include "llamapp/embedder.hpp"
#include "llamapp/engine.hpp"
#include "llamapp/error.hpp"
#include "llamapp/footprint.hpp"
#include "llamapp/hub.hpp"
#include "llamapp/kv_store.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/model.hpp"

namespace llamapp {

// unloaded: known, not in memory. A failed model stays failed until it is loaded again.
enum class ModelStatus { unloaded, loading, ready, failed, unloading };
std::string_view to_string(ModelStatus status);

struct ModelCapabilities {
    bool generate = false;  // completions (and chat: a model without a template gets ChatML)
    bool embed = false;     // computes embeddings (through the lease's embedder())
    bool rerank = false;    // a reranker: its Embedder gives relevance scores, not vectors
};

// What a request that leaves a field out gets: llama-server's --temp, --top-k, -n and the rest,
// set for the whole server or, in a presets file, per model.
struct RequestDefaults {
    SamplingParams sampling;  // its grammar, schema and tool calls are the request's alone
    int max_tokens = -1;      // -1: as many as the server's limit allows (llama-server's -n)
    // Chat: whether the template is asked to think (llama-server's --reasoning on|off); unset:
    // the template's own default.
    std::optional<bool> enable_thinking;
    bool split_reasoning = true;  // llama-server's --reasoning-format: deepseek (true) or none
    // Chat: a last message from the assistant is continued, not answered (llama-server's
    // --prefill-assistant); a request's continue_final_message says so explicitly.
    bool prefill_assistant = true;
    // Chat: variables every request's template gets (name -> JSON value as text; llama-server's
    // --chat-template-kwargs, --reasoning-effort, --reasoning-preserve); a request's own
    // chat_template_kwargs replace them by name.
    std::map<std::string, std::string> template_variables;
};

struct ModelSpec {
    std::string id;  // the name requests use: letters, digits and ._-:/ (at most 128)
    std::vector<std::string> aliases;
    std::vector<std::string> tags;  // informational, listed (llama-server's --tags)
    std::filesystem::path path;     // the GGUF, or the first part of a split set
    // A model from the Hugging Face hub. With `path` empty, add() looks for it in the hub cache
    // and, when it is not there, its first load pulls it (the progress is the load's).
    std::optional<HubRef> hub;
    std::string source;    // where it came from, for listings (a path, "models-dir", "hub")
    ModelOptions model;    // `progress` is the manager's
    EngineOptions engine;  // `kv_store`, `metrics` and the model label are the manager's
    // A draft model (-md), loaded with the model into engine.speculative.draft.model and
    // counted in its footprint.
    std::filesystem::path draft_path;
    ModelOptions draft_model;
    std::string chat_template;  // Jinja overriding the model's (empty: the model's, or ChatML)
    TemplateRenderer template_renderer = TemplateRenderer::jinja;
    RequestDefaults defaults;
    // What the GGUF says unless set: a model that pools (an embedding model) embeds and does
    // not generate; any other generates and embeds too. A generative model's embedding context
    // (compute buffers for a whole input) is made at the first embedding request and counted
    // in its footprint from then on; `embed` true makes it at load, false refuses embeddings
    // (of a generative model: an embedding model always embeds).
    std::optional<bool> generate;
    std::optional<bool> embed;
    // Idle time before an unload; negative = never. Unset: the manager's.
    std::optional<std::chrono::milliseconds> keep_alive;
};

struct ModelListing {
    std::string id;
    std::vector<std::string> aliases;
    std::vector<std::string> tags;
    std::filesystem::path path;
    std::string source;
    std::optional<HubRef> hub;    // a model from the Hugging Face hub
    std::string architecture;     // from the GGUF header
    std::uint64_t file_size = 0;  // of the GGUF (the first part of a split set)
    std::uint64_t n_params = 0;   // weights in that file
    std::string quantization;     // llama-quantize's name of general.file_type ("Q4_K_M")
    ModelStatus status = ModelStatus::unloaded;
    float progress = 0;          // of a load in flight, in [0, 1]
    bool downloading = false;    // loading, and still pulling its files (progress is the pull's)
    std::optional<Error> error;  // why it failed (or why the last load was refused)
    ModelCapabilities capabilities;
    std::optional<Footprint> footprint;  // estimated at the first load
    int n_ctx = 0;                       // tokens per sequence, once loaded
    int slots = 0;                       // configured (the engine's once loaded)
    std::size_t max_queued_requests = 0;
    int active_requests = 0;  // leases held
    std::chrono::milliseconds keep_alive{-1};
    double idle_seconds = 0;  // since the last lease ended (ready models)
    // When an idle ready model will be unloaded; unset while in use or kept forever.
    std::optional<std::chrono::system_clock::time_point> expires_at;
};

struct ModelManagerOptions {
    std::shared_ptr<KvStore> kv_store;         // one store for all models (entries are per model)
    std::shared_ptr<MetricsRegistry> metrics;  // null = a new registry; engines label model=<id>
    std::size_t max_models = 0;                // most resident at once (loading included); 0 = any
    std::chrono::milliseconds keep_alive{-1};  // default idle time before an unload; < 0 = never
    // What requests still running get when their model is unloaded, before they are cancelled.
    std::chrono::milliseconds unload_grace{10 * 1000};
    // Bytes the models may take per device (host_device or a GPU's name). A device not named
    // gets what was available on it when the manager was created, less `memory_reserve`.
    std::map<std::string, std::uint64_t, std::less<>> memory_budget;
    std::uint64_t memory_reserve = 256ull << 20;
    // Unload least recently used idle models when a load would not fit, instead of refusing.
    bool unload_idle_to_fit = false;
    std::size_t max_waiting = 64;  // requests waiting for one model to load; more get queue_full
    // acquire() loads a known model that is not loaded (llama-server's --models-autoload).
    // false: it refuses instead, and only load() loads.
    bool load_on_request = true;
    // Token and offline mode for pulls of hub models; their progress and cancellation are the
    // manager's.
    HubOptions hub;
};

namespace detail {
struct LoadedModel;
struct ManagerState;
}  // namespace detail

class ModelManager;

// Keeps a ready model in memory while held: idle unloading waits for the last lease, and an
// explicit unload lets its requests run for the grace period. Move-only; any thread.
class ModelLease {
  public:
    ModelLease(ModelLease&&) noexcept;
    ModelLease& operator=(ModelLease&&) noexcept;
    ModelLease(const ModelLease&) = delete;
    ModelLease& operator=(const ModelLease&) = delete;
    ~ModelLease();

    const std::string& id() const;
    const Model& model() const;
    Engine& engine() const;  // only when capabilities().generate
    const ModelCapabilities& capabilities() const;
    const RequestDefaults& defaults() const;
    // The chat template, or null with the reason in chat_template_error().
    const ChatTemplate* chat_template() const;
    const std::string& chat_template_error() const;
    // The model's Embedder. A generative model's is made at the first call, once its embedding
    // context fits the memory budget (idle models are unloaded for it when the manager may);
    // calls meanwhile wait for that one. Errors: unsupported_operation (the model does not
    // embed), insufficient_memory, those of estimate_footprint.
    [[nodiscard]] Result<Embedder*> embedder() const;

  private:
    friend class ModelManager;
    ModelLease(std::shared_ptr<detail::ManagerState> manager,
               std::shared_ptr<detail::LoadedModel> loaded, bool counts_as_use = true);
    void release();
    std::shared_ptr<detail::ManagerState> manager_;
    std::shared_ptr<detail::LoadedModel> loaded_;
    bool counts_as_use_ = true;  // its end restarts the keep-alive
};

// Thread-safe. Loads run on threads of their own, so a load never blocks serving the other
// models or other lifecycle calls. Names are ids or aliases; an empty name is the default model.
class ModelManager {
  public:
    [[nodiscard]] static Result<std::unique_ptr<ModelManager>> create(
        ModelManagerOptions options = {});
    // Unloads every model (no grace), waiting for their leases, and joins the manager's threads:
    // release every lease first, on other threads too.
    ~ModelManager();

    // Makes a model known (not loaded). A file whose header is not a loadable GGUF is still
    // listed, as failed with the reason. A hub model is looked for in the cache only (no
    // network); until it is pulled it has no path, and it is taken to generate unless its spec
    // says otherwise. Errors: invalid_argument (a bad id), already_exists (the id or an alias
    // is taken).
    [[nodiscard]] Result<void> add(ModelSpec spec);
    // Unloads it if needed and forgets it. Errors: not_found.
    [[nodiscard]] Result<void> remove(const std::string& name);
    // Another name for a model, as Ollama's copy makes one: a plain name[:tag], never a path or
    // a hub reference. Errors: not_found, invalid_argument (not a plain name), already_exists
    // (a model or an alias has that name).
    [[nodiscard]] Result<void> add_alias(const std::string& name, const std::string& alias);
    // Forgets an alias; the model keeps its other names. Errors: not_found (no such alias).
    [[nodiscard]] Result<void> remove_alias(const std::string& alias);
    // The model an empty name means; the first one added until set. Errors: not_found.
    [[nodiscard]] Result<void> set_default(const std::string& name);

    // Starts a load and returns. The footprint is estimated first and checked against the
    // budget. A hub model not in the cache is pulled first on the load's thread, and whatever
    // fails after that (the pull, the estimate, the budget) is the model's error, seen by
    // acquire() and listings. Errors: not_found, already_exists (loading or ready), busy
    // (unloading), insufficient_memory (naming the device, bytes required and available),
    // queue_full (max_models reached and nothing idle may be unloaded).
    [[nodiscard]] Result<void> load(const std::string& name);
    // A lease on a ready model, loading it first if it is known but unloaded, and waiting while
    // it loads (until `deadline`). `keep_alive` is the idle time after this use, as Ollama's
    // per-request keep_alive is; unset, the model's own applies again. Errors: not_found,
    // model_unavailable (its load failed), timeout, queue_full (too many waiting),
    // unsupported_operation (not loaded, and the options say not to load on request), those of
    // load().
    [[nodiscard]] Result<ModelLease> acquire(
        const std::string& name,
        std::chrono::steady_clock::time_point deadline =
            std::chrono::steady_clock::time_point::max(),
        std::optional<std::chrono::milliseconds> keep_alive = std::nullopt);
    // Stops admitting work to it, lets its requests run for `grace` (unset: the manager's),
    // cancels the rest and frees weights and contexts before returning. Errors: not_found,
    // busy (not loaded: unloaded, loading, failed or already unloading).
    [[nodiscard]] Result<void> unload(
        const std::string& name, std::optional<std::chrono::milliseconds> grace = std::nullopt);

    // Unloads every ready model (what runs gets `grace`), as a server's drain does.
    void unload_all(std::chrono::milliseconds grace);
    // A lease only when the model is ready now, for reads (health, /props): loads nothing, and
    // its end does not restart the keep-alive, so that polling never keeps a model awake.
    std::optional<ModelLease> acquire_if_ready(const std::string& name);

    std::vector<ModelListing> list() const;
    [[nodiscard]] Result<ModelListing> find(const std::string& name) const;
    // The budget per device and what the resident models take of it.
    struct DeviceBudget {
        std::string device;
        std::uint64_t budget = 0;
        std::uint64_t reserved = 0;
    };
    std::vector<DeviceBudget> budgets() const;
    MetricsRegistry& metrics() const;
    const std::shared_ptr<KvStore>& kv_store() const;
    const ModelManagerOptions& options() const;

  private:
    explicit ModelManager(std::shared_ptr<detail::ManagerState> state);
    std::shared_ptr<detail::ManagerState> state_;
};

// A keep-alive as Ollama spells it: seconds ("300", "-1" = forever) or a number with a unit,
// "500ms", "30s", "5m", "2h". Errors: invalid_argument.
[[nodiscard]] Result<std::chrono::milliseconds> parse_keep_alive(std::string_view text);

// The models of a directory: one per GGUF file (a split set by its first part,
// "-00001-of-0000N.gguf"; multimodal projectors, mmproj*, skipped), named after the file, and one
// per subdirectory holding exactly one model, named after the subdirectory. Each spec is a copy
// of `defaults` with its id, path and source ("models-dir"); characters an id cannot hold become
// '-'. Sorted by id. Errors: file_not_found, invalid_argument (not a directory), io_error.
[[nodiscard]] Result<std::vector<ModelSpec>> scan_models_dir(const std::filesystem::path& dir,
                                                             const ModelSpec& defaults = {});

}  // namespace llamapp
