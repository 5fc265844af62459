// A generative model's embedder, made at its first embedding request: the embedding context is
// estimated and given room in the memory budget first, so a model that never embeds never pays
// for one.
#include <fmt/core.h>

#include "core/log_internal.hpp"
#include "manager/manager_state.hpp"

namespace llamapp::detail {

namespace {

Error no_room_for_embedder(const std::string& id, const RoomDecision& d) {
    constexpr double mib = 1 << 20;
    return Error{ErrorCode::insufficient_memory,
                 fmt::format("computing embeddings with '{}' needs a context of {:.1f} MiB more "
                             "on {}, and {:.1f} MiB are available",
                             id, d.required / mib, d.device, d.available / mib),
                 fmt::format("{}: embedding context: {} requires {} bytes, {} available", id,
                             d.device, d.required, d.available)};
}

}  // namespace

Result<Footprint> estimate_embedder(const std::filesystem::path& path, ModelOptions model,
                                    const EmbedderOptions& embedder) {
    model.progress = nullptr;
    ContextOptions context = embedder.context;
    context.embeddings = true;
    auto f = estimate_footprint(path, model, context);
    if (!f) return f;
    for (DeviceFootprint& d : f->devices) d.weights = 0;  // the model's, shared
    return f;
}

Result<Embedder*> ManagerState::embedder_of(LoadedModel& m) {
    std::lock_guard made(m.embedder_mutex);  // a second caller waits for the first one's
    if (m.embedder) return &*m.embedder;
    if (!m.embedder_on_demand)
        return fail(ErrorCode::unsupported_operation, "the model does not compute embeddings",
                    m.id);
    auto reserved = reserve_embedder(m.id, *m.embedder_on_demand);
    if (!reserved) return std::unexpected(reserved.error());
    auto embedder = Embedder::create(m.model, *m.embedder_on_demand);
    if (!embedder) {
        std::lock_guard lock(mutex);
        entries.at(m.id)->embedder_footprint.reset();
        changed.notify_all();
        return std::unexpected(embedder.error());
    }
    m.embedder.emplace(std::move(*embedder));
    log(LogLevel::info,
        "models: '{}' computes embeddings now, on a context of {} tokens ({:.1f} MiB)", m.id,
        m.embedder_on_demand->context.n_ctx, static_cast<double>(reserved->total()) / (1 << 20));
    return &*m.embedder;
}

// The caller holds a lease on the model, so its entry stays while this runs.
Result<Footprint> ManagerState::reserve_embedder(const std::string& id, const EmbedderOptions& o) {
    std::filesystem::path path;
    ModelOptions model;
    {
        std::lock_guard lock(mutex);
        const ModelEntry& e = *entries.at(id);
        path = e.spec.path;
        model = e.spec.model;
    }
    auto wanted = estimate_embedder(path, std::move(model), o);
    if (!wanted) return wanted;
    std::unique_lock lock(mutex);
    ModelEntry& e = *entries.at(id);
    const std::vector<ResidentModel> resident = resident_models(nullptr);
    const RoomDecision room =
        make_room({&budgets, &resident, &*wanted, 0, options.unload_idle_to_fit});
    if (!room.fits) return std::unexpected(no_room_for_embedder(id, room));
    std::vector<ModelEntry*> evict;
    for (const auto& victim_id : room.unload) {
        ModelEntry* victim = entries.at(victim_id).get();
        victim->status = ModelStatus::unloading;
        evict.push_back(victim);
        log(LogLevel::info, "models: unloading idle '{}' to make room for the embeddings of '{}'",
            victim_id, id);
    }
    e.embedder_footprint = *wanted;
    changed.notify_all();
    lock.unlock();
    for (ModelEntry* victim : evict) finish_unload(*victim, std::chrono::milliseconds{0});
    return wanted;
}

}  // namespace llamapp::detail
