#include "server/ops/operator_routes.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

void OperatorRoutes::health(httplib::Response& res) const {
    int slots = 0, busy = 0;
    std::size_t queued = 0;
    bool full = false;
    json listed = json::array();
    for (const ModelListing& m : state_.models.list()) {
        listed.push_back({{"id", m.id}, {"status", to_string(m.status)}});
        auto lease = state_.models.acquire_if_ready(m.id);
        if (!lease || !lease->capabilities().generate) continue;
        const EngineStats st = lease->engine().stats();
        slots += st.slots;
        busy += st.busy_slots;
        queued += st.queued_requests;
        full = full || st.queued_requests >= st.max_queued_requests;
    }
    const bool loading = state_.loading && !state_.draining;
    const bool ready = !state_.draining && !full && !loading;
    const char* status = ready ? "ok" : state_.draining ? "draining" : loading ? "loading" : "busy";
    json body = {{"status", status},
                 {"slots", slots},
                 {"busy_slots", busy},
                 {"queued_requests", queued},
                 {"models", std::move(listed)},
                 {"devices", devices_json()}};
    if (auto lease = state_.models.acquire_if_ready(""); lease && lease->capabilities().generate)
        body["prefix_reuse"] = lease->engine().reuse_modes().describe();
    res.status = ready ? 200 : 503;
    res.set_content(dump(body), "application/json");
}

void OperatorRoutes::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    // Liveness probes answer without a key; Ollama's clients probe the root.
    on.get("/", [this](Req req, Res res) { home(req, res); }, {.open = true});
    for (const char* path : {"/health", "/health/ready", "/v1/health"})
        on.get(path, [this](Req, Res res) { health(res); }, {.open = true});
    on.get("/health/live",
           [](Req, Res res) { res.set_content(R"({"status":"ok"})", "application/json"); },
           {.open = true});
    if (!state_.options.health_route.empty())
        on.get(state_.options.health_route, [this](Req, Res res) { health(res); });
    // llama-server's clients read the process start from a header of /metrics.
    on.get("/metrics", [this, started = unix_now()](Req, Res res) {
        res.set_header("Process-Start-Time-Unix", std::to_string(started));
        std::string text = state_.models.metrics().prometheus_text();
        if (state_.store && &state_.store->metrics() != &state_.models.metrics())
            text += state_.store->metrics().prometheus_text();
        res.set_content(text, "text/plain; version=0.0.4");
    });
    add_model_routes(routes);
    add_cache_routes(routes);
}

}  // namespace llamapp::detail
