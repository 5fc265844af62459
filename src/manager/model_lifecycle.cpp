// The lifecycle of a managed model: estimate and admit, load on a worker, unload, reap the idle.
#include <fmt/core.h>

#include <algorithm>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/gguf_probe.hpp"
#include "core/log_internal.hpp"
#include "manager/manager_state.hpp"

namespace llamapp::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The embedding context a loaded model gets: inputs as long as a sequence of the engine, up to
// a bound that keeps its compute buffers modest.
constexpr std::int64_t max_embedding_ctx = 8192;

EmbedderOptions embedder_options(std::int64_t n_ctx_seq, const ContextOptions& engine) {
    EmbedderOptions o;
    o.context.n_ctx = std::min(n_ctx_seq > 0 ? n_ctx_seq : max_embedding_ctx, max_embedding_ctx);
    o.context.n_batch = o.context.n_ctx;
    o.context.n_ubatch = o.context.n_ctx;
    o.context.n_threads = engine.n_threads;
    o.context.n_threads_batch = engine.n_threads_batch;
    o.context.pooling = engine.pooling;  // --pooling: the embedder's, not the engine's
    return o;
}

std::int64_t n_ctx_seq(const EngineOptions& o) {
    const std::int64_t n = o.context.n_ctx;
    return o.unified_kv() || n == 0 ? n : n / std::max<std::int64_t>(1, o.context.n_seq_max);
}

bool resident(ModelStatus s) {
    return s == ModelStatus::loading || s == ModelStatus::ready || s == ModelStatus::unloading;
}

// An embedding model's embedder, or a generative model's when its spec asks for it at load; any
// other generative model that embeds makes it at the first request (embedder_of).
bool embeds_from_load(const ModelEntry& e) {
    return e.capabilities.embed && (!e.capabilities.generate || e.spec.embed.value_or(false));
}

// The engine's context and, for a model that embeds from its load, the embedder's (whose weights
// are shared).
Result<Footprint> estimate(const ModelEntry& e, const ModelOptions& model, ContextOptions context) {
    context.kv_unified = e.spec.engine.unified_kv();
    auto f = estimate_footprint(e.spec.path, model, context);
    if (!f) return f;
    if (!e.spec.draft_path.empty()) {
        ContextOptions twin = context;  // DraftModel::create's context
        twin.kv_unified = true;
        twin.type_k = e.spec.engine.speculative.draft.type_k;
        twin.type_v = e.spec.engine.speculative.draft.type_v;
        auto d = estimate_footprint(e.spec.draft_path, e.spec.draft_model, twin);
        if (!d) return d;
        *f += *d;
    }
    if (!embeds_from_load(e)) return f;
    auto g =
        estimate_embedder(e.spec.path, model, embedder_options(n_ctx_seq(e.spec.engine), context));
    if (!g) return std::unexpected(g.error());
    *f += *g;
    return f;
}

}  // namespace

void read_header(ModelEntry& e) {
    ModelCapabilities c{true, true};  // a hub model not pulled yet: until its header says
    if (!e.spec.path.empty()) {
        if (auto header = probe_gguf(e.spec.path); header) {
            e.architecture = header->architecture;
            e.file_size = header->file_size;
            e.n_params = header->n_params;
            e.quantization = file_type_name(header->file_type);
            c.generate = !header->pools;
            c.rerank = header->ranks;
        } else {
            e.status = ModelStatus::failed;
            e.error = header.error();
        }
    }
    if (e.spec.generate) c.generate = *e.spec.generate;
    if (e.spec.embed && c.generate) c.embed = *e.spec.embed;  // an embedding model always embeds
    e.capabilities = c;
}

ModelEntry* ManagerState::find(const std::string& name) {
    return const_cast<ModelEntry*>(std::as_const(*this).find(name));
}

const ModelEntry* ManagerState::find(const std::string& name) const {
    const std::string* id = &name;
    if (name.empty()) id = &default_id;
    if (auto a = aliases.find(*id); a != aliases.end()) id = &a->second;
    if (auto it = entries.find(*id); it != entries.end()) return it->second.get();
    return find_by_other_spelling(name);
}

// The names llamapp prints elsewhere for a model: Ollama's ("hf.co/owner/name:tag", "x:latest"),
// `ls`'s (the file or the tag of a cached hub model), whatever the model's id spells.
const ModelEntry* ManagerState::find_by_other_spelling(const std::string& name) const {
    if (name.ends_with(":latest")) {
        const std::string plain = name.substr(0, name.size() - 7);
        if (auto it = entries.find(plain); it != entries.end()) return it->second.get();
        if (auto a = aliases.find(plain); a != aliases.end()) return find(a->second);
    }
    auto ref = parse_model_ref(name);
    if (!ref || ref->kind != ModelRefKind::hub) return nullptr;
    const ModelEntry* found = nullptr;
    for (const auto& [id, e] : entries) {
        if (!e->spec.hub || !hub_ref_names(ref->hub, *e->spec.hub, e->spec.path)) continue;
        if (found) return nullptr;  // two models answer to it: the name is not one of them
        found = e.get();
    }
    return found;
}

std::optional<Footprint> ManagerState::resident_footprint(const ModelEntry& e) const {
    std::optional<Footprint> f = e.footprint;
    if (f && e.embedder_footprint) *f += *e.embedder_footprint;
    return f;
}

std::chrono::milliseconds ManagerState::keep_alive(const ModelEntry& e) const {
    if (e.keep_alive) return *e.keep_alive;
    if (e.spec.keep_alive) return *e.spec.keep_alive;
    return options.keep_alive;
}

ModelListing ManagerState::listing(const ModelEntry& e) const {
    ModelListing l;
    l.id = e.spec.id;
    l.aliases = e.spec.aliases;
    l.file_size = e.file_size;
    l.n_params = e.n_params;
    l.quantization = e.quantization;
    l.tags = e.spec.tags;
    l.path = e.spec.path;
    l.source = e.spec.source;
    l.hub = e.spec.hub;
    l.architecture = e.architecture;
    l.status = e.status;
    l.progress = e.progress;
    l.downloading = e.downloading;
    l.error = e.error;
    l.capabilities = e.capabilities;
    l.footprint = resident_footprint(e);
    l.active_requests = e.leases;
    l.keep_alive = keep_alive(e);
    l.slots = e.spec.engine.slots();
    l.max_queued_requests = e.spec.engine.max_queued_requests;
    if (e.loaded && e.loaded->engine) {
        l.n_ctx = e.loaded->engine->n_ctx();
        l.slots = e.loaded->engine->stats().slots;
    }
    if (e.status == ModelStatus::ready && e.leases == 0) {
        const auto idle = Clock::now() - e.last_used;
        l.idle_seconds = std::chrono::duration<double>(idle).count();
        if (l.keep_alive.count() >= 0)
            l.expires_at = std::chrono::system_clock::now() +
                           std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               l.keep_alive - idle);
    }
    return l;
}

std::vector<ResidentModel> ManagerState::resident_models(const ModelEntry* except) const {
    std::vector<ResidentModel> out;
    for (const auto& [id, e] : entries) {
        if (e.get() == except || !resident(e->status) || !e->footprint) continue;
        out.push_back({id, *resident_footprint(*e),
                       e->status == ModelStatus::ready && e->leases == 0, e->last_used});
    }
    return out;
}

Result<void> ManagerState::start_load(std::unique_lock<std::mutex>& lock, ModelEntry& e) {
    if (stopping) return fail(ErrorCode::shutting_down, "the model manager is stopping");
    if (e.status == ModelStatus::loading || e.status == ModelStatus::ready)
        return fail(ErrorCode::already_exists, "the model is loaded or loading", e.spec.id);
    if (e.status == ModelStatus::unloading)
        return fail(ErrorCode::busy, "the model is being unloaded", e.spec.id);
    const ModelStatus before = e.status;
    e.status = ModelStatus::loading;  // no second load starts while this one estimates
    e.progress = 0;
    e.error.reset();
    std::thread worker;
    if (e.spec.path.empty() && e.spec.hub) {
        // A hub model not pulled yet: its footprint and the budget wait for the file.
        e.downloading = true;
        changed.notify_all();
        worker = std::thread([this, &e] { pull_and_load(e); });
    } else {
        auto evict = admit(lock, e, before);
        if (!evict) return std::unexpected(evict.error());
        worker = std::thread([this, &e, evict = std::move(*evict)] { run_load(e, evict); });
    }
    std::thread previous = std::exchange(e.worker, std::move(worker));
    lock.unlock();
    if (previous.joinable()) previous.join();  // it finished: the entry was not loading
    lock.lock();
    return {};
}

Result<std::vector<ModelEntry*>> ManagerState::admit(std::unique_lock<std::mutex>& lock,
                                                     ModelEntry& e, ModelStatus before) {
    if (!e.footprint) {
        // The placement fitted to free device memory first (ModelOptions::fit), then measured;
        // the spec takes the fitted placement, which the load then uses.
        ModelOptions model = e.spec.model;
        ContextOptions context = e.spec.engine.context;
        lock.unlock();
        auto fitted = fit_to_free_memory(e.spec.path, model, context);
        Result<Footprint> f = fitted ? estimate(e, model, context)
                                     : Result<Footprint>(std::unexpected(fitted.error()));
        lock.lock();
        if (f) {
            e.spec.model = std::move(model);
            e.spec.engine.context.n_ctx = context.n_ctx;
        }
        if (!f) {
            e.status = ModelStatus::failed;
            e.error = f.error();
            changed.notify_all();
            return std::unexpected(f.error());
        }
        e.footprint = std::move(*f);
    }
    const std::vector<ResidentModel> others = resident_models(&e);
    const RoomDecision room = make_room(
        {&budgets, &others, &*e.footprint, options.max_models, options.unload_idle_to_fit});
    if (!room.fits) {
        e.status = before == ModelStatus::failed ? ModelStatus::unloaded : before;
        e.error = room_error(e.spec.id, room, options.max_models);
        changed.notify_all();
        return std::unexpected(*e.error);
    }
    std::vector<ModelEntry*> evict;
    for (const auto& id : room.unload) {
        ModelEntry* victim = entries.at(id).get();
        victim->status = ModelStatus::unloading;
        evict.push_back(victim);
        log(LogLevel::info, "models: unloading idle '{}' to make room for '{}'", id, e.spec.id);
    }
    resident_gauge->add(1);
    changed.notify_all();
    return evict;
}

void ManagerState::pull_and_load(ModelEntry& e) {
    // Bytes per file (several download at once), under the manager's lock.
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> files;
    int logged_tenths = -1;
    HubOptions o = options.hub;
    o.on_progress = [&](const HubProgress& p) {
        std::lock_guard lock(mutex);
        files[p.file] = {p.downloaded, p.total};
        std::uint64_t done = 0, total = 0;
        for (const auto& [name, bytes] : files) {
            done += bytes.first;
            total += bytes.second;
        }
        if (total == 0) return;
        e.progress = static_cast<float>(static_cast<double>(done) / static_cast<double>(total));
        if (const int tenths = static_cast<int>(e.progress * 10); tenths != logged_tenths) {
            logged_tenths = tenths;
            log(LogLevel::info, "models: '{}' pulling: {}% of {} MiB", e.spec.id, tenths * 10,
                total >> 20);
        }
    };
    o.cancelled = [this] {
        std::lock_guard lock(mutex);
        return stopping;
    };
    log(LogLevel::info, "models: '{}' is not in the hub cache: pulling {}", e.spec.id,
        e.spec.hub->to_string());
    auto pulled = hub_pull(*e.spec.hub, o);
    std::unique_lock lock(mutex);
    e.downloading = false;
    e.progress = 0;
    if (pulled && stopping)
        pulled = fail(ErrorCode::shutting_down, "the model manager is stopping");
    if (!pulled) {
        e.status = ModelStatus::failed;
        e.error = pulled.error();
        log(LogLevel::warning, "models: '{}' could not be pulled: {}", e.spec.id,
            pulled.error().describe());
        changed.notify_all();
        return;
    }
    if (!pulled->hub_unreachable.empty())
        log(LogLevel::warning, "models: '{}' is the cached copy: {}", e.spec.id,
            pulled->hub_unreachable);
    e.spec.path = pulled->path;
    read_header(e);
    if (e.status == ModelStatus::failed) {
        changed.notify_all();
        return;
    }
    auto evict = admit(lock, e, ModelStatus::unloaded);
    if (!evict) return;
    lock.unlock();
    run_load(e, std::move(*evict));
}

void ManagerState::run_load(ModelEntry& e, std::vector<ModelEntry*> evict) {
    for (ModelEntry* victim : evict) finish_unload(*victim, std::chrono::milliseconds{0});
    const auto started = Clock::now();
    auto loaded = build(e);
    std::lock_guard lock(mutex);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (loaded) {
        e.loaded = std::move(*loaded);
        e.status = ModelStatus::ready;
        e.progress = 1;
        e.last_used = Clock::now();
        log(LogLevel::info, "models: '{}' ready in {:.2f} s", e.spec.id, seconds);
    } else {
        e.status = ModelStatus::failed;
        e.error = loaded.error();
        resident_gauge->add(-1);
        log(LogLevel::warning, "models: '{}' failed to load: {}", e.spec.id,
            loaded.error().describe());
    }
    changed.notify_all();
}

Result<std::shared_ptr<LoadedModel>> ManagerState::build(ModelEntry& e) {
    ModelOptions mo = e.spec.model;
    mo.progress = [this, &e](float p) {
        std::lock_guard lock(mutex);
        e.progress = p;
        return !stopping;
    };
    auto model = Model::load(e.spec.path, mo);
    if (!model) return std::unexpected(model.error());
    std::optional<Model> draft;
    if (!e.spec.draft_path.empty()) {
        auto d = Model::load(e.spec.draft_path, e.spec.draft_model);
        if (!d) {
            Error error = d.error();
            error.message = "the draft model: " + error.message;
            return std::unexpected(std::move(error));
        }
        draft = std::move(*d);
    }
    auto loaded = std::make_shared<LoadedModel>(e.spec.id, std::move(*model));
    loaded->capabilities = e.capabilities;
    loaded->defaults = e.spec.defaults;
    if (loaded->capabilities.generate) {
        EngineOptions eo = e.spec.engine;
        eo.kv_store = options.kv_store;
        eo.metrics = metrics;
        eo.metric_labels.emplace_back("model", e.spec.id);
        if (draft) eo.speculative.draft.model = std::move(draft);
        auto engine = Engine::create(loaded->model, std::move(eo));
        if (!engine) return std::unexpected(engine.error());
        loaded->engine.emplace(std::move(*engine));
        auto t = ChatTemplate::create(loaded->model, e.spec.chat_template, MissingTemplate::chatml,
                                      e.spec.template_renderer);
        if (t) {
            loaded->chat_template.emplace(std::move(*t));
        } else {
            if (!e.spec.chat_template.empty()) return std::unexpected(t.error());
            loaded->chat_template_error = t.error().describe();
            log(LogLevel::warning, "models: '{}' has no usable chat template, chat is off: {}",
                e.spec.id, loaded->chat_template_error);
        }
    }
    if (loaded->capabilities.embed) {
        const std::int64_t n = loaded->engine ? loaded->engine->n_ctx() : n_ctx_seq(e.spec.engine);
        EmbedderOptions eo = embedder_options(n, e.spec.engine.context);
        if (!embeds_from_load(e)) {
            loaded->embedder_on_demand = std::move(eo);
            return loaded;
        }
        auto embedder = Embedder::create(loaded->model, std::move(eo));
        if (!embedder) return std::unexpected(embedder.error());
        loaded->embedder.emplace(std::move(*embedder));
    }
    return loaded;
}

void ManagerState::finish_unload(ModelEntry& e, std::chrono::milliseconds grace) {
    std::shared_ptr<LoadedModel> loaded;
    {
        std::lock_guard lock(mutex);
        loaded = e.loaded;
    }
    // New acquires already wait. Holders of a lease may still submit during the grace (a request
    // between choosing its model and submitting would otherwise be refused as shutting down);
    // once they are done, or the grace is over, the engine refuses new work and cancels what
    // still runs (saving what its policy says).
    const auto until = Clock::now() + grace;
    {
        std::unique_lock lock(mutex);
        changed.wait_until(lock, until, [&] { return e.leases == 0; });
    }
    const auto left =
        std::max(std::chrono::milliseconds{0},
                 std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
    if (loaded && loaded->engine) loaded->engine->shutdown(left);
    std::string fingerprint;
    if (loaded && options.kv_store)
        if (auto f = loaded->model.fingerprint(); f) fingerprint = std::move(*f);
    {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return e.leases == 0; });
        e.loaded.reset();
    }
    loaded.reset();  // the last reference: weights, contexts and threads go here, unlocked
#ifdef __GLIBC__
    // glibc keeps what the decode threads' arenas freed; hand it back, so that an unloaded
    // model's memory leaves the process rather than waiting for a reuse that may never come.
    malloc_trim(0);
#endif
    if (!fingerprint.empty()) {
        options.kv_store->flush();  // the shutdown's saves land first: then none is missed
        options.kv_store->release_ram(fingerprint);
    }
    std::lock_guard lock(mutex);
    e.status = ModelStatus::unloaded;
    e.progress = 0;
    e.embedder_footprint.reset();
    resident_gauge->add(-1);
    log(LogLevel::info, "models: '{}' unloaded", e.spec.id);
    changed.notify_all();
}

void ManagerState::release(const std::string& id, bool counts_as_use) {
    std::lock_guard lock(mutex);
    auto it = entries.find(id);
    if (it == entries.end()) return;
    --it->second->leases;
    if (counts_as_use) it->second->last_used = Clock::now();
    changed.notify_all();
}

// Unloads ready models once idle for their keep-alive; sleeps until the next one is due.
void ManagerState::reap_idle() {
    std::unique_lock lock(mutex);
    while (!stopping) {
        const auto now = Clock::now();
        auto next = Clock::time_point::max();
        std::vector<ModelEntry*> due;
        for (auto& [id, e] : entries) {
            const auto ka = keep_alive(*e);
            if (e->status != ModelStatus::ready || e->leases > 0 || ka.count() < 0) continue;
            const auto at = e->last_used + ka;
            if (at <= now) {
                e->status = ModelStatus::unloading;
                due.push_back(e.get());
            } else {
                next = std::min(next, at);
            }
        }
        if (!due.empty()) {
            lock.unlock();
            for (ModelEntry* e : due) finish_unload(*e, std::chrono::milliseconds{0});
            lock.lock();
            continue;
        }
        if (next == Clock::time_point::max()) {
            changed.wait(lock);
        } else {
            changed.wait_until(lock, next);
        }
    }
}

void ManagerState::shutdown() {
    std::vector<ModelEntry*> ready;
    {
        std::lock_guard lock(mutex);
        stopping = true;  // loads in flight are cancelled at their next progress report
        changed.notify_all();
    }
    if (reaper.joinable()) reaper.join();
    for (auto& [id, e] : entries)
        if (e->worker.joinable()) e->worker.join();
    {
        std::lock_guard lock(mutex);
        for (auto& [id, e] : entries) {
            if (e->status != ModelStatus::ready) continue;
            e->status = ModelStatus::unloading;
            ready.push_back(e.get());
        }
    }
    for (ModelEntry* e : ready) finish_unload(*e, std::chrono::milliseconds{0});
}

}  // namespace llamapp::detail
