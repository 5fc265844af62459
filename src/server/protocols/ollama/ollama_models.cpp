// Ollama's model routes over the manager: /api/tags, /api/ps, /api/show, /api/pull (from the
// Hugging Face hub, through ModelPulls), /api/delete, /api/copy (an alias) and /api/version.
// The root's "Ollama is running" is the server's (ops/home_route.cpp).
#include <fmt/core.h>

#include <chrono>
#include <system_error>

#include "core/gguf_probe.hpp"
#include "llamapp/fingerprint.hpp"
#include "server/protocols/ollama/ollama.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// The Ollama release whose API these routes follow; clients compare it to decide which fields
// they may send.
constexpr const char* ollama_api_version = "0.12.0";

bool has_tag(const std::string& name) {
    const auto slash = name.rfind('/');
    return name.find(':', slash == std::string::npos ? 0 : slash) != std::string::npos;
}

std::chrono::system_clock::time_point modified(const ModelListing& m) {
    std::error_code ec;
    const auto t = std::filesystem::last_write_time(m.path, ec);
    if (m.path.empty() || ec) return {};
    return std::chrono::file_clock::to_sys(t);
}

// An identity of the file as it is now (path, size, modification time), not a hash of its
// bytes: hashing gigabytes on a listing would stall it.
std::string digest(const ModelListing& m) {
    const auto since = modified(m).time_since_epoch().count();
    return sha256_hex(fmt::format("{}\n{}\n{}", m.path.string(), m.file_size, since));
}

json details_json(const ModelListing& m) {
    return {{"parent_model", ""},
            {"format", "gguf"},
            {"family", m.architecture},
            {"families", m.architecture.empty() ? json(nullptr) : json::array({m.architecture})},
            {"parameter_size", parameter_count_text(m.n_params)},
            {"quantization_level", m.quantization}};
}

json tag_json(const ModelListing& m) {
    const std::string name = ollama_name(m);
    return {{"name", name},        {"model", name},       {"modified_at", rfc3339(modified(m))},
            {"size", m.file_size}, {"digest", digest(m)}, {"details", details_json(m)}};
}

json ps_json(const ModelListing& m) {
    json out = tag_json(m);
    out.erase("modified_at");
    std::uint64_t size = 0, vram = 0;
    if (m.footprint)
        for (const DeviceFootprint& d : m.footprint->devices) {
            size += d.total();
            if (d.device != host_device) vram += d.total();
        }
    using namespace std::chrono;
    system_clock::time_point expires = system_clock::time_point::max();  // kept forever
    if (m.expires_at)
        expires = *m.expires_at;
    else if (m.keep_alive.count() >= 0)  // in use: its idle time starts when the last one ends
        expires = system_clock::now() + m.keep_alive;
    out["size"] = size;
    out["size_vram"] = vram;
    out["expires_at"] = expires == system_clock::time_point::max()
                            ? std::string("9999-12-31T23:59:59Z")
                            : rfc3339(expires);
    out["context_length"] = m.n_ctx;
    return out;
}

// A GGUF value as JSON; arrays (token lists, per-layer settings) are left out as Ollama leaves
// them out, by null.
json metadata_value(const GgufEntry& e) {
    switch (e.kind) {
        case GgufEntry::Kind::string:
            return e.text;
        case GgufEntry::Kind::integer:
            return e.integer;
        case GgufEntry::Kind::real:
            return e.real;
        case GgufEntry::Kind::boolean:
            return e.integer != 0;
        case GgufEntry::Kind::array:
            break;
    }
    return nullptr;
}

// What the model can do, as Ollama names it; tools and thinking are read from the template's
// text, insert from fill-in-the-middle tokens
// (a model not loaded: from the GGUF's FIM token keys, which not every GGUF has).
json show_capabilities(const ModelListing& m, const std::string& tmpl, bool fim) {
    json out = json::array();
    if (m.capabilities.generate) out.push_back("completion");
    // As Ollama lists them: a model made for embeddings (a generative one computes them too).
    if (m.capabilities.embed && !m.capabilities.generate) out.push_back("embedding");
    const TemplateFeatures features = template_features(tmpl);
    if (m.capabilities.generate && features.tools) out.push_back("tools");
    if (m.capabilities.generate && features.thinking) out.push_back("thinking");
    if (fim && m.capabilities.generate) out.push_back("insert");
    return out;
}

// The progress of one pull as Ollama's objects: {"status"} and, per file,
// {"status", "digest", "total", "completed"} (the file's name stands in for a blob digest).
json pull_status(const PullEvent& e) {
    if (e.event == "download_finished") return {{"status", "success"}};
    if (e.event == "download_failed") return {{"error", e.data.value("error", "the pull failed")}};
    json out = json::object();
    for (const auto& [file, p] : e.data["progress"].items())
        out = {{"status", "pulling " + file},
               {"digest", file},
               {"total", p["total"]},
               {"completed", p["done"]}};
    return out;
}

// A name without what Ollama adds to ours: the hub's host and an implied ":latest".
std::string without_ollama_parts(std::string name) {
    for (const char* host : {"hf.co/", "huggingface.co/"})
        if (name.starts_with(host)) name.erase(0, std::string_view(host).size());
    if (name.ends_with(":latest")) name.resize(name.size() - 7);
    return name;
}

HubRef pull_ref(const json& body) {
    auto ref = parse_model_ref(without_ollama_parts(body["name"].get<std::string>()));
    if (!ref) throw HttpException{http_error(ref.error(), "model")};
    if (ref->kind != ModelRefKind::hub)
        throw HttpException{
            invalid("model", fmt::format("'{}' is not a Hugging Face model: pull takes "
                                         "hf.co/owner/repo or hf.co/owner/repo:QUANT",
                                         body["name"].get<std::string>()))};
    return ref->hub;
}

}  // namespace

std::string ollama_name(const ModelListing& m) {
    std::string name = m.hub ? "hf.co/" + m.id : m.id;
    return has_tag(name) ? name : name + ":latest";
}

void OllamaProtocol::tags(httplib::Response& res) const {
    json list = json::array();
    for (const ModelListing& m : state_.models.list()) {
        list.push_back(tag_json(m));
        // Each other name (a copy, an --alias) is listed as Ollama lists a copy: a model of its
        // own name with the same file.
        for (const std::string& alias : m.aliases) {
            ModelListing named = m;
            named.id = alias;
            named.hub.reset();
            list.push_back(tag_json(named));
        }
    }
    res.set_content(dump(json{{"models", std::move(list)}}), "application/json");
}

void OllamaProtocol::ps(httplib::Response& res) const {
    json list = json::array();
    for (const ModelListing& m : state_.models.list())
        if (m.status == ModelStatus::ready) list.push_back(ps_json(m));
    res.set_content(dump(json{{"models", std::move(list)}}), "application/json");
}

void OllamaProtocol::show(const httplib::Request& req, httplib::Response& res) const {
    const json body = body_of(req);
    auto m = state_.models.find(body["model"].get<std::string>());
    if (!m) throw HttpException{model_error(m.error())};
    json info = json::object();
    std::string tmpl;
    bool fim = false;
    if (!m->path.empty()) {
        auto header = probe_gguf(m->path);
        if (!header) throw HttpException{http_error(header.error(), "model")};
        for (const GgufEntry& e : header->metadata) {
            info[e.key] = metadata_value(e);
            if (e.key == "tokenizer.chat_template") tmpl = e.text;
            if (e.key == "tokenizer.ggml.fim_pre_token_id") fim = true;
        }
        info["general.parameter_count"] = m->n_params;
    }
    // A loaded model knows better: the template it renders (an override included) and the
    // fill-in-the-middle tokens llama.cpp found in its vocabulary.
    if (auto lease = state_.models.acquire_if_ready(m->id)) {
        if (const ChatTemplate* t = lease->chat_template()) tmpl = t->source();
        const SpecialTokens& special = lease->model().info().special;
        fim = special.fim_prefix != no_token && special.fim_suffix != no_token &&
              special.fim_middle != no_token;
    }
    json out = {
        {"modelfile", fmt::format("# llamapp serves this model from\nFROM {}\n", m->path.string())},
        {"parameters", ""},
        {"template", tmpl},
        {"details", details_json(*m)},
        {"model_info", std::move(info)},
        {"capabilities", show_capabilities(*m, tmpl, fim)},
        {"modified_at", rfc3339(modified(*m))}};
    res.set_content(dump(out), "application/json");
}

// Streamed (the default): NDJSON progress objects until {"status": "success"} or {"error"}.
// Whole: {"status": "success"} once the pull is done, or the error.
void OllamaProtocol::pull(const httplib::Request& req, httplib::Response& res) {
    const json body = body_of(req);
    bool stream = true;
    if (const json* v = optional_field(body, "stream")) stream = bool_field(*v, "stream");
    const HubRef ref = pull_ref(body);
    const std::string name = ref.to_string();
    auto listener = state_.pulls.listen();  // before the start: no event is missed
    if (auto started = state_.pulls.start(ref); !started) {
        if (started.error().code != ErrorCode::already_exists)
            throw HttpException{http_error(started.error(), "model")};
        auto known = state_.models.find(name);
        // Configured but never pulled: its first load pulls it.
        if (known && known->path.empty())
            throw HttpException{invalid(
                "model", fmt::format("'{}' is configured on this server and is pulled when it is "
                                     "first loaded",
                                     body["name"].get<std::string>()))};
        if (!known) return follow_pull(req, res, listener, name, stream);  // a pull in flight
        // Pulled already: as Ollama answers a pull of a model it has.
        if (!stream) {
            res.set_content(dump(json{{"status", "success"}}), "application/json");
            return;
        }
        res.set_content(dump(json{{"status", "pulling manifest"}}) + "\n" +
                            dump(json{{"status", "success"}}) + "\n",
                        "application/x-ndjson");
        return;
    }
    follow_pull(req, res, listener, name, stream);
}

// The events of the pull of `name`: streamed as Ollama's progress objects, or awaited.
void OllamaProtocol::follow_pull(const httplib::Request& req, httplib::Response& res,
                                 std::shared_ptr<PullListener> listener, const std::string& name,
                                 bool stream) const {
    if (!stream) {
        PullEvent e;
        for (;;) {
            if (!listener->next(e, std::chrono::milliseconds(500))) {
                if (listener->closed()) throw HttpException{draining_error()};
                if (req.is_connection_closed()) return;  // the pull goes on without this client
                continue;
            }
            if (e.model != name || e.event == "download_progress") continue;
            if (e.error) throw HttpException{http_error(*e.error, "model")};
            res.set_content(dump(json{{"status", "success"}}), "application/json");
            return;
        }
    }
    auto opened = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "application/x-ndjson", [listener, name, opened](std::size_t, httplib::DataSink& sink) {
            std::string out;
            if (!std::exchange(*opened, true))
                out = dump(json{{"status", "pulling manifest"}}) + "\n";
            PullEvent e;
            while (out.empty()) {
                if (listener->next(e, std::chrono::milliseconds(500))) {
                    if (e.model != name) continue;
                    const json status = pull_status(e);
                    if (!status.empty()) out = dump(status) + "\n";
                    if (e.event != "download_progress") {
                        sink.write(out.data(), out.size());
                        sink.done();
                        return true;
                    }
                } else if (listener->closed()) {
                    out = dump(json{{"error", "the server is shutting down"}}) + "\n";
                    sink.write(out.data(), out.size());
                    sink.done();
                    return true;
                } else if (!sink.is_writable()) {
                    return false;  // the pull goes on; only this client left
                }
            }
            return sink.write(out.data(), out.size());
        });
}

// A hub model is forgotten and its files deleted; an alias (a copy) is forgotten. Other models
// are the operator's files, which no client deletes.
void OllamaProtocol::remove(const httplib::Request& req, httplib::Response& res) {
    const json body = body_of(req);
    const std::string name = body["model"].get<std::string>();
    auto m = state_.models.find(name);
    if (!m) throw HttpException{model_error(m.error())};
    if (name != m->id) {
        if (auto ok = state_.models.remove_alias(name); ok) {
            res.status = 200;  // no body, as Ollama answers
            return;
        }
    }
    if (!m->hub)
        throw HttpException{invalid(
            "model", fmt::format("'{}' is a file of the server's configuration, not a pulled "
                                 "model; only pulled models and copies are deleted",
                                 ollama_name(*m)))};
    state_.forget_pulled(*m);
    res.status = 200;
}

// A copy is another name for the same model: the weights are shared, as Ollama shares blobs.
void OllamaProtocol::copy(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::string source = required_string(body, "source", "source");
    std::string destination = required_string(body, "destination", "destination");
    destination = without_ollama_parts(destination);
    if (auto ok = state_.models.add_alias(source, destination); !ok) {
        const char* param = ok.error().code == ErrorCode::not_found ? "source" : "destination";
        throw HttpException{http_error(ok.error(), param)};
    }
    res.status = 200;
}

void OllamaProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    on.get("/api/version",
           [](Req, Res res) {
               res.set_content(dump(json{{"version", ollama_api_version}}), "application/json");
           },
           {.open = true});
    on.get("/api/tags", [this](Req, Res res) { tags(res); });
    on.get("/api/ps", [this](Req, Res res) { ps(res); });
    on.post("/api/show", [this](Req req, Res res) { show(req, res); });
    on.post("/api/chat", [this](Req req, Res res) { generate(req, res, true); });
    on.post("/api/generate", [this](Req req, Res res) { generate(req, res, false); });
    on.post("/api/embed", [this](Req req, Res res) { embed(req, res, false); });
    on.post("/api/embeddings", [this](Req req, Res res) { embed(req, res, true); });
    on.post("/api/pull", [this](Req req, Res res) { pull(req, res); });
    on.del("/api/delete", [this](Req req, Res res) { remove(req, res); });
    on.post("/api/copy", [this](Req req, Res res) { copy(req, res); });
}

nlohmann::json OllamaProtocol::error_body(const HttpError& e) const {
    if (e.param.empty() || e.message.find(e.param) != std::string::npos)
        return {{"error", e.message}};
    return {{"error", e.param + ": " + e.message}};
}

}  // namespace llamapp::detail
