// ModelManager's public calls and leases; the lifecycle itself is in model_lifecycle.cpp.
#include "llamapp/model_manager.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "llamapp/backend.hpp"
#include "manager/manager_state.hpp"

namespace llamapp {

using detail::ManagerState;
using detail::ModelEntry;

std::string_view to_string(ModelStatus status) {
    switch (status) {
        case ModelStatus::unloaded:
            return "unloaded";
        case ModelStatus::loading:
            return "loading";
        case ModelStatus::ready:
            return "ready";
        case ModelStatus::failed:
            return "failed";
        case ModelStatus::unloading:
            return "unloading";
    }
    return "unloaded";
}

namespace {

// Defaults every request of the model starts from: valid on their own, and unconstrained, since
// a grammar or a schema is a request's own choice.
Result<void> check_defaults(const RequestDefaults& d) {
    if (auto ok = d.sampling.validate(); !ok) return ok;
    const SamplingParams& s = d.sampling;
    if (!s.grammar.empty() || !s.json_schema.empty() || !s.reply_grammar.gbnf.empty())
        return fail(ErrorCode::invalid_argument, "request defaults cannot hold a grammar",
                    "defaults.sampling");
    if (d.max_tokens == 0 || d.max_tokens < -1)
        return fail(ErrorCode::invalid_argument, "max_tokens must be -1 or at least 1",
                    "defaults.max_tokens");
    return {};
}

Result<void> check_name(const std::string& name, const char* what) {
    const bool ok =
        !name.empty() && name.size() <= 128 &&
        std::all_of(name.begin(), name.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '/';
        });
    if (ok) return {};
    return fail(ErrorCode::invalid_argument,
                fmt::format("a model {} is 1 to 128 letters, digits and . _ - : /", what), name);
}

// Says which names would have worked, so a 404 is the last step to the right name. Lock held.
Error not_known(const ManagerState& s, const std::string& name) {
    constexpr std::size_t shown = 8;
    std::string known;
    std::size_t listed = 0;
    for (const auto& [id, entry] : s.entries) {
        if (listed == shown) break;
        known += fmt::format("{}'{}'", listed++ == 0 ? "" : ", ", id);
    }
    if (s.entries.size() > shown) known += fmt::format(" and {} more", s.entries.size() - shown);
    const std::string message =
        s.entries.empty()
            ? fmt::format("the model '{}' does not exist: this server has no models", name)
            : fmt::format("the model '{}' does not exist; known: {} (GET /v1/models lists them)",
                          name, known);
    return Error{ErrorCode::not_found, message, name};
}

}  // namespace

// --- leases ---

ModelLease::ModelLease(std::shared_ptr<ManagerState> manager,
                       std::shared_ptr<detail::LoadedModel> loaded, bool counts_as_use)
    : manager_(std::move(manager)), loaded_(std::move(loaded)), counts_as_use_(counts_as_use) {}
ModelLease::ModelLease(ModelLease&& o) noexcept
    : manager_(std::move(o.manager_)),
      loaded_(std::move(o.loaded_)),
      counts_as_use_(o.counts_as_use_) {}
ModelLease& ModelLease::operator=(ModelLease&& o) noexcept {
    if (this != &o) {
        release();
        manager_ = std::move(o.manager_);
        loaded_ = std::move(o.loaded_);
        counts_as_use_ = o.counts_as_use_;
    }
    return *this;
}
ModelLease::~ModelLease() {
    release();
}

void ModelLease::release() {
    if (!manager_) return;
    const std::string id = loaded_->id;
    loaded_.reset();  // before the count drops, so an unload that sees 0 holds the last reference
    std::exchange(manager_, nullptr)->release(id, counts_as_use_);
}

const std::string& ModelLease::id() const {
    return loaded_->id;
}
const Model& ModelLease::model() const {
    return loaded_->model;
}
Engine& ModelLease::engine() const {
    return *loaded_->engine;
}
const ModelCapabilities& ModelLease::capabilities() const {
    return loaded_->capabilities;
}
const RequestDefaults& ModelLease::defaults() const {
    return loaded_->defaults;
}
const ChatTemplate* ModelLease::chat_template() const {
    return loaded_->chat_template ? &*loaded_->chat_template : nullptr;
}
const std::string& ModelLease::chat_template_error() const {
    return loaded_->chat_template_error;
}
Result<Embedder*> ModelLease::embedder() const {
    return manager_->embedder_of(*loaded_);
}

// --- the manager ---

ModelManager::ModelManager(std::shared_ptr<ManagerState> state) : state_(std::move(state)) {}

ModelManager::~ModelManager() {
    state_->shutdown();
}

Result<std::unique_ptr<ModelManager>> ModelManager::create(ModelManagerOptions options) {
    if (options.unload_grace.count() < 0)
        return fail(ErrorCode::invalid_argument, "must be >= 0", "unload_grace");
    if (options.max_waiting == 0)
        return fail(ErrorCode::invalid_argument, "must be >= 1", "max_waiting");
    auto state = std::make_shared<ManagerState>();
    state->metrics = options.metrics ? options.metrics : std::make_shared<MetricsRegistry>();
    std::vector<std::string> devices{std::string(host_device)};
    for (const DeviceInfo& d : list_devices())
        if (d.type == DeviceType::gpu || d.type == DeviceType::integrated_gpu)
            devices.push_back(d.name);
    for (const auto& [device, bytes] : options.memory_budget) {
        if (std::find(devices.begin(), devices.end(), device) == devices.end())
            return fail(ErrorCode::invalid_argument,
                        fmt::format("a memory budget names no device of this process (it has: {})",
                                    fmt::join(devices, ", ")),
                        device);
    }
    for (const std::string& device : devices) {
        if (auto it = options.memory_budget.find(device); it != options.memory_budget.end()) {
            state->budgets[device] = it->second;
            continue;
        }
        const std::uint64_t free = available_memory(device);
        state->budgets[device] = free > options.memory_reserve ? free - options.memory_reserve : 0;
    }
    auto gauge =
        state->metrics->gauge("llamapp_models_resident", "models loading, ready or unloading");
    if (!gauge) return std::unexpected(gauge.error());
    state->resident_gauge = *gauge;
    state->options = std::move(options);
    state->reaper = std::thread([raw = state.get()] { raw->reap_idle(); });
    return std::unique_ptr<ModelManager>(new ModelManager(std::move(state)));
}

Result<void> ModelManager::add(ModelSpec spec) {
    if (auto ok = check_name(spec.id, "id"); !ok) return ok;
    for (const auto& a : spec.aliases)
        if (auto ok = check_name(a, "alias"); !ok) return ok;
    if (auto ok = check_defaults(spec.defaults); !ok) return ok;
    ManagerState& s = *state_;
    if (spec.hub && spec.path.empty()) {
        HubOptions cache_only = s.options.hub;
        cache_only.offline = true;
        if (auto cached = hub_pull(*spec.hub, cache_only)) spec.path = cached->path;
    }
    auto entry = std::make_unique<ModelEntry>();
    entry->spec = std::move(spec);
    // The header alone says whether the file can be a model at all, and what it can do.
    detail::read_header(*entry);
    std::lock_guard lock(s.mutex);
    std::vector<std::string> names = entry->spec.aliases;
    names.push_back(entry->spec.id);
    for (const auto& n : names)
        if (s.find(n))
            return fail(ErrorCode::already_exists, fmt::format("the model '{}' exists already", n),
                        n);
    for (const auto& a : entry->spec.aliases) s.aliases[a] = entry->spec.id;
    if (s.default_id.empty()) s.default_id = entry->spec.id;
    const std::string id = entry->spec.id;
    s.entries.emplace(id, std::move(entry));
    s.changed.notify_all();
    return {};
}

Result<void> ModelManager::remove(const std::string& name) {
    ManagerState& s = *state_;
    std::unique_lock lock(s.mutex);
    ModelEntry* e = s.find(name);
    if (!e) return std::unexpected(not_known(s, name));
    if (e->status == ModelStatus::loading || e->status == ModelStatus::unloading)
        return fail(ErrorCode::busy, "the model is loading or unloading", e->spec.id);
    if (e->status == ModelStatus::ready) {
        e->status = ModelStatus::unloading;
        lock.unlock();
        s.finish_unload(*e, s.options.unload_grace);
        lock.lock();
    }
    // A new load may have begun meanwhile; it keeps the entry.
    if (e->status != ModelStatus::unloaded && e->status != ModelStatus::failed)
        return fail(ErrorCode::busy, "the model was loaded again meanwhile", e->spec.id);
    std::thread worker = std::move(e->worker);
    const std::string id = e->spec.id;
    for (const auto& a : e->spec.aliases) s.aliases.erase(a);
    s.entries.erase(id);
    if (s.default_id == id) s.default_id = s.entries.empty() ? "" : s.entries.begin()->first;
    lock.unlock();
    if (worker.joinable()) worker.join();
    return {};
}

Result<void> ModelManager::add_alias(const std::string& name, const std::string& alias) {
    // A path or a hub reference would let a copy pass for a file or a pull it never made.
    if (auto ref = parse_model_ref(alias); !ref || ref->kind != ModelRefKind::name)
        return fail(ErrorCode::invalid_argument,
                    "an alias is a plain name: letters, digits, '.', '_' or '-', with at most "
                    "one ':tag'; never a path or a hub reference",
                    alias);
    std::lock_guard lock(state_->mutex);
    ModelEntry* e = state_->find(name);
    if (!e) return std::unexpected(not_known(*state_, name));
    if (state_->find(alias))
        return fail(ErrorCode::already_exists, fmt::format("the model '{}' exists already", alias),
                    alias);
    e->spec.aliases.push_back(alias);
    state_->aliases[alias] = e->spec.id;
    return {};
}

Result<void> ModelManager::remove_alias(const std::string& alias) {
    std::lock_guard lock(state_->mutex);
    auto it = state_->aliases.find(alias);
    if (it == state_->aliases.end())
        return fail(ErrorCode::not_found, fmt::format("'{}' is not an alias", alias), alias);
    if (auto e = state_->entries.find(it->second); e != state_->entries.end())
        std::erase(e->second->spec.aliases, alias);
    state_->aliases.erase(it);
    return {};
}

Result<void> ModelManager::set_default(const std::string& name) {
    std::lock_guard lock(state_->mutex);
    ModelEntry* e = state_->find(name);
    if (!e) return std::unexpected(not_known(*state_, name));
    state_->default_id = e->spec.id;
    return {};
}

Result<void> ModelManager::load(const std::string& name) {
    std::unique_lock lock(state_->mutex);
    ModelEntry* e = state_->find(name);
    if (!e) return std::unexpected(not_known(*state_, name));
    return state_->start_load(lock, *e);
}

Result<ModelLease> ModelManager::acquire(const std::string& name,
                                         std::chrono::steady_clock::time_point deadline,
                                         std::optional<std::chrono::milliseconds> keep_alive) {
    ManagerState& s = *state_;
    std::unique_lock lock(s.mutex);
    ModelEntry* e = s.find(name);
    if (!e) return std::unexpected(not_known(s, name));
    e->keep_alive = keep_alive;  // the last use decides, as Ollama's requests do
    for (;;) {
        switch (e->status) {
            case ModelStatus::ready:
                ++e->leases;
                return ModelLease(state_, e->loaded);
            case ModelStatus::failed:
                return fail(ErrorCode::model_unavailable,
                            fmt::format("the model '{}' failed to load: {}", e->spec.id,
                                        e->error ? e->error->describe() : "unknown error"),
                            e->spec.id);
            case ModelStatus::unloaded:
                if (!s.options.load_on_request)
                    return fail(ErrorCode::unsupported_operation,
                                fmt::format("the model '{}' is not loaded, and models are not "
                                            "loaded on request here: load it first",
                                            e->spec.id),
                                e->spec.id);
                if (auto ok = s.start_load(lock, *e); !ok) return std::unexpected(ok.error());
                continue;
            case ModelStatus::loading:
            case ModelStatus::unloading:
                break;
        }
        if (e->waiting >= s.options.max_waiting)
            return fail(
                ErrorCode::queue_full,
                fmt::format("{} requests are waiting for the model to load", s.options.max_waiting),
                e->spec.id);
        ++e->waiting;
        const bool in_time = s.changed.wait_until(lock, deadline, [&] {
            return s.stopping ||
                   (e->status != ModelStatus::loading && e->status != ModelStatus::unloading);
        });
        --e->waiting;
        if (s.stopping) return fail(ErrorCode::shutting_down, "the model manager is stopping");
        if (!in_time)
            return fail(ErrorCode::timeout, "the model did not finish loading in time", e->spec.id);
    }
}

Result<void> ModelManager::unload(const std::string& name,
                                  std::optional<std::chrono::milliseconds> grace) {
    ManagerState& s = *state_;
    std::unique_lock lock(s.mutex);
    ModelEntry* e = s.find(name);
    if (!e) return std::unexpected(not_known(s, name));
    if (e->status != ModelStatus::ready)
        return fail(ErrorCode::busy,
                    fmt::format("the model is {}, not ready", to_string(e->status)), e->spec.id);
    e->status = ModelStatus::unloading;
    s.changed.notify_all();
    lock.unlock();
    s.finish_unload(*e, grace.value_or(s.options.unload_grace));
    return {};
}

void ModelManager::unload_all(std::chrono::milliseconds grace) {
    std::vector<std::string> ready;
    {
        std::lock_guard lock(state_->mutex);
        for (const auto& [id, e] : state_->entries)
            if (e->status == ModelStatus::ready) ready.push_back(id);
    }
    for (const auto& id : ready) (void)unload(id, grace);  // busy: another unload got there first
}

std::optional<ModelLease> ModelManager::acquire_if_ready(const std::string& name) {
    std::lock_guard lock(state_->mutex);
    ModelEntry* e = state_->find(name);
    if (!e || e->status != ModelStatus::ready) return std::nullopt;
    ++e->leases;
    return ModelLease(state_, e->loaded, /*counts_as_use=*/false);
}

std::vector<ModelListing> ModelManager::list() const {
    std::lock_guard lock(state_->mutex);
    std::vector<ModelListing> out;
    for (const auto& [id, e] : state_->entries) out.push_back(state_->listing(*e));
    return out;
}

Result<ModelListing> ModelManager::find(const std::string& name) const {
    std::lock_guard lock(state_->mutex);
    const ModelEntry* e = state_->find(name);
    if (!e) return std::unexpected(not_known(*state_, name));
    return state_->listing(*e);
}

std::vector<ModelManager::DeviceBudget> ModelManager::budgets() const {
    std::lock_guard lock(state_->mutex);
    std::vector<DeviceBudget> out;
    for (const auto& [device, budget] : state_->budgets) {
        DeviceBudget b{device, budget, 0};
        for (const auto& [id, e] : state_->entries)
            if (e->footprint && e->status != ModelStatus::unloaded &&
                e->status != ModelStatus::failed)
                b.reserved += state_->resident_footprint(*e)->on(device);
        out.push_back(std::move(b));
    }
    return out;
}

MetricsRegistry& ModelManager::metrics() const {
    return *state_->metrics;
}

const std::shared_ptr<KvStore>& ModelManager::kv_store() const {
    return state_->options.kv_store;
}

const ModelManagerOptions& ModelManager::options() const {
    return state_->options;
}

}  // namespace llamapp
