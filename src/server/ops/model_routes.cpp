// Models over HTTP: GET /v1/models, and the operator's POST /models/load (progress as SSE on
// request), POST /models/unload, GET /models/{id} and DELETE /models?model= (a model pulled from
// the hub: forgotten and its files deleted), and llama-server's POST /models (pull a hub model
// without loading it) with GET /models/sse.
#include <fmt/core.h>

#include <thread>

#include "llamapp/hub.hpp"
#include "server/ops/operator_routes.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

json capabilities_json(const ModelCapabilities& c) {
    json out = json::array();
    if (c.generate) out.push_back("completion");
    if (c.generate) out.push_back("chat");
    if (c.embed) out.push_back(c.rerank ? "rerank" : "embedding");
    return out;
}

std::int64_t unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// OpenAI's model object, with llamapp's fields beside it.
json model_json(const ModelListing& m) {
    json footprint = json::object();
    if (m.footprint)
        for (const auto& d : m.footprint->devices) footprint[d.device] = d.total();
    json meta = {{"architecture", m.architecture},
                 {"source", m.source},
                 {"n_ctx", m.n_ctx},
                 {"slots", m.slots},
                 {"footprint_bytes", std::move(footprint)},
                 {"active_requests", m.active_requests},
                 {"keep_alive_seconds",
                  m.keep_alive.count() < 0 ? json(nullptr) : json(m.keep_alive.count() / 1000.0)}};
    if (m.status == ModelStatus::loading) {
        meta["progress"] = m.progress;
        meta["stage"] = m.downloading ? "downloading" : "loading";
    }
    if (m.status == ModelStatus::ready) meta["idle_seconds"] = m.idle_seconds;
    if (m.expires_at) meta["expires_at"] = unix_seconds(*m.expires_at);
    // Every name the model answers to, as llama-server lists them.
    json names = json::array({m.id});
    for (const std::string& a : m.aliases) names.push_back(a);
    json out = {{"id", m.id},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "llamapp"},
                {"status", to_string(m.status)},
                {"aliases", std::move(names)},
                {"tags", m.tags},
                {"capabilities", capabilities_json(m.capabilities)},
                {"meta", std::move(meta)}};
    if (m.error)
        out["error"] = {{"code", to_string(m.error->code)}, {"message", m.error->describe()}};
    return out;
}

std::string required_model(const json& body) {
    const json* v = optional_field(body, "model");
    if (!v)
        throw HttpException{invalid("model", "'model' is required", "missing_required_parameter")};
    return string_field(*v, "model");
}

}  // namespace

void OperatorRoutes::list_models(httplib::Response& res) const {
    json data = json::array();
    for (const ModelListing& m : state_.models.list()) data.push_back(model_json(m));
    res.set_content(dump(json{{"object", "list"}, {"data", std::move(data)}}), "application/json");
}

void OperatorRoutes::add_model_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    // OpenAI's list, and llama-server's (a router's) under its own name.
    for (const char* path : {"/v1/models", "/models"})
        on.get(path, [this](Req, Res res) { list_models(res); });
    on.get("/models/sse", [this](Req, Res res) { pull_events(res); });  // before /models/{id}
    on.post("/models", [this](Req req, Res res) { pull_model(req, res); });
    on.get(R"(/models/(.+))", [this](Req req, Res res) {
        auto found = state_.models.find(req.matches[1].str());
        if (!found) throw HttpException{model_error(found.error())};
        res.set_content(dump(model_json(*found)), "application/json");
    });
    on.post("/models/load", [this](Req req, Res res) { load_model(req, res); });
    on.del("/models", [this](Req req, Res res) { delete_model(req, res); });
    on.post("/models/unload", [this](Req req, Res res) {
        const json body = parse_body(req.body);
        const std::string name = required_model(body);
        std::optional<std::chrono::milliseconds> grace;
        if (const json* v = optional_field(body, "grace_seconds")) {
            if (!v->is_number() || v->get<double>() < 0 || v->get<double>() > 3600)
                throw HttpException{invalid("grace_seconds", "must be a number in [0, 3600]")};
            grace = std::chrono::milliseconds(static_cast<long long>(v->get<double>() * 1000));
        }
        if (auto ok = state_.models.unload(name, grace); !ok)
            throw HttpException{model_error(ok.error())};
        res.set_content(dump(model_json(*state_.models.find(name))), "application/json");
    });
}

// As llama-server's router deletes a model of its cache: only a model from the hub, whose files
// go with it. {"success": true}.
void OperatorRoutes::delete_model(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.has_param("model") ? req.get_param_value("model") : "";
    if (name.empty())
        throw HttpException{invalid("model", "?model= is required", "missing_required_parameter")};
    auto listed = state_.models.find(name);
    if (!listed) throw HttpException{model_error(listed.error())};
    if (!listed->hub) {
        throw HttpException{invalid(
            "model",
            fmt::format("the model '{}' was not pulled from the hub, so it has no files to delete; "
                        "POST /models/unload unloads it",
                        listed->id))};
    }
    state_.forget_pulled(*listed);
    res.set_content(dump(json{{"success", true}}), "application/json");
}

// {"success": true} once the pull started; its progress and end are events of GET /models/sse.
void OperatorRoutes::pull_model(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::string name = required_model(body);
    auto ref = parse_model_ref(name);
    if (!ref) throw HttpException{http_error(ref.error(), "model")};
    if (ref->kind != ModelRefKind::hub)
        throw HttpException{invalid("model", fmt::format("'{}' is not a hub reference "
                                                         "(owner/name or owner/name:QUANT)",
                                                         name))};
    if (auto ok = state_.pulls.start(ref->hub); !ok)
        throw HttpException{http_error(ok.error(), "model")};
    res.set_content(dump(json{{"success", true}}), "application/json");
}

// Server-sent events of the pulls, from the moment of subscribing, until the server drains.
void OperatorRoutes::pull_events(httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [listener = state_.pulls.listen()](std::size_t, httplib::DataSink& sink) {
            PullEvent event;
            while (!listener->next(event, std::chrono::milliseconds(500))) {
                if (listener->closed()) {
                    sink.done();
                    return true;
                }
                if (!sink.is_writable()) return false;  // the client went away
            }
            const std::string out = "data: " + dump(event.to_json()) + "\n\n";
            return sink.write(out.data(), out.size());
        });
}

// 202 with the model's listing; with "stream": true, SSE events of its listing while it loads,
// the last one ready or failed.
void OperatorRoutes::load_model(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::string name = required_model(body);
    bool stream = false;
    if (const json* v = optional_field(body, "stream")) {
        if (!v->is_boolean()) throw HttpException{invalid("stream", "must be a boolean")};
        stream = v->get<bool>();
    }
    if (auto ok = state_.models.load(name); !ok) throw HttpException{model_error(ok.error())};
    if (!stream) {
        res.status = 202;
        res.set_content(dump(model_json(*state_.models.find(name))), "application/json");
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto last = std::make_shared<std::string>();
    res.set_chunked_content_provider(
        "text/event-stream", [this, name, last](std::size_t, httplib::DataSink& sink) {
            // A load reports progress a few times a second; polling at that rate loses nothing
            // a client shows.
            for (;;) {
                auto now = state_.models.find(name);
                if (!now) {
                    sink.done();
                    return true;
                }
                const std::string event = "data: " + dump(model_json(*now)) + "\n\n";
                const bool done = now->status != ModelStatus::loading;
                if (event != *last || done) {
                    *last = event;
                    if (!sink.write(event.data(), event.size())) return false;
                    if (done) sink.done();
                    return true;
                }
                if (!sink.is_writable()) return false;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        });
}

}  // namespace llamapp::detail
