// The HTTP server (cpp-httplib, vendored by the llama.cpp tree): routes, authentication, CORS,
// OpenAI-shaped errors, access log, drain.
#include <fmt/core.h>

#include <algorithm>
#include <thread>

#include "core/log_internal.hpp"
#include "llamapp/fingerprint.hpp"
#include "server/access_policy.hpp"
#include "server/server_state.hpp"

namespace llamapp {

using json = nlohmann::json;
using namespace detail;

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

// Liveness probes: the health routes, and Ollama's root and version, which its clients ask
// before anything else.
bool public_route(const std::string& path) {
    return path == "/health" || path == "/v1/health" || path == "/health/live" ||
           path == "/health/ready" || path == "/" || path == "/api/version";
}

}  // namespace

Server::Server(std::unique_ptr<ServerState> state) : state_(std::move(state)) {}
Server::~Server() {
    if (state_) state_->stop_listening();
}

Result<std::unique_ptr<Server>> Server::create(ModelManager& models, ServerOptions options) {
    if (options.port < 0 || options.port > 65535)
        return fail(ErrorCode::invalid_argument, "port must be in [0, 65535]", "port");
    if (options.max_body_bytes < 1024)
        return fail(ErrorCode::invalid_argument, "must be >= 1024", "max_body_bytes");
    if (options.max_prompt_tokens < 0 || options.max_tokens < 0 || options.max_stop_strings < 0)
        return fail(ErrorCode::invalid_argument, "limits must be >= 0", "max_tokens");
    auto state = std::make_unique<ServerState>(models, options);
    ServerState& s = *state;
    // A connection waits for a thread before anything reads its request, where no queue bound,
    // deadline or disconnect check can see it: enough threads for every slot, the whole engine
    // queue (whose overflow then gets its 429) and headroom for health checks and metrics.
    // Counted over the models known now, loaded or not, up to a bound a process can start.
    std::size_t capacity = 0;
    for (const ModelListing& m : models.list())
        if (m.capabilities.generate)
            capacity += static_cast<std::size_t>(m.slots) + m.max_queued_requests;
    s.http_threads = options.http_threads > 0 ? static_cast<std::size_t>(options.http_threads)
                                              : std::min<std::size_t>(capacity, 1024) + 16;
    if (!s.http->is_valid())
        return fail(ErrorCode::invalid_argument, "cannot use the TLS certificate or key",
                    options.ssl_cert_file.string());
    s.configure(*s.http);
    s.register_routes();
    return std::unique_ptr<Server>(new Server(std::move(state)));
}

Result<void> Server::bind() {
    ServerState& s = *state_;
    if (!s.options.unix_socket.empty()) {
        s.http->set_address_family(AF_UNIX);
        if (!s.http->bind_to_port(s.options.unix_socket, 80))
            return fail(ErrorCode::io_error, "cannot listen on the unix socket",
                        s.options.unix_socket);
        return {};
    }
    // llama-server's comma-separated host: every address at the same port (the first one's
    // when the port is 0).
    const std::vector<std::string> hosts = listen_addresses(s.options.host);
    if (hosts.empty()) return fail(ErrorCode::invalid_argument, "no address to listen on", "host");
    if (s.options.port == 0) {
        s.port = s.http->bind_to_any_port(hosts.front());
        if (s.port < 0) s.port = 0;
    } else if (s.http->bind_to_port(hosts.front(), s.options.port)) {
        s.port = s.options.port;
    }
    if (s.port == 0)
        return fail(ErrorCode::io_error, "cannot listen on the address (is the port taken?)",
                    fmt::format("{}:{}", hosts.front(), s.options.port));
    for (std::size_t i = 1; i < hosts.size(); ++i) {
        if (!s.listen_also(hosts[i])) {
            s.stop_listening();
            return fail(ErrorCode::io_error, "cannot listen on the address (is the port taken?)",
                        fmt::format("{}:{}", hosts[i], s.port));
        }
    }
    return {};
}

Result<void> Server::listen() {
    ServerState& s = *state_;
    std::vector<std::thread> others;
    for (auto& l : s.more_listeners)
        others.emplace_back([listener = l.get()] { listener->listen_after_bind(); });
    const bool served = s.http->listen_after_bind();
    s.stop_listening();
    for (std::thread& t : others) t.join();
    if (!served) return fail(ErrorCode::io_error, "the listener stopped unexpectedly");
    return {};
}

int Server::port() const {
    return state_->port;
}

std::vector<std::string> Server::urls() const {
    std::vector<std::string> out;
    if (!state_->options.unix_socket.empty()) return out;
    const char* scheme = state_->options.ssl_cert_file.empty() ? "http" : "https";
    for (const std::string& host : listen_addresses(state_->options.host))
        out.push_back(host.find(':') != std::string::npos
                          ? fmt::format("{}://[{}]:{}", scheme, host, state_->port)
                          : fmt::format("{}://{}:{}", scheme, host, state_->port));
    return out;
}

void Server::drain() {
    ServerState& s = *state_;
    std::call_once(s.drained, [&] {
        s.draining = true;
        log(LogLevel::info, "server: draining ({} requests in flight)", s.in_flight.load());
        s.pulls.stop();  // ends the pulls and the streams of their events
        const auto until = std::chrono::steady_clock::now() + s.options.drain_grace;
        while (s.in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        // Cancels what is left; their streams end with an error event; entries are saved.
        s.models.unload_all(std::chrono::milliseconds{0});
        while (s.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        s.stop_listening();
    });
}

namespace detail {

HttpError draining_error() {
    return http_error(Error{ErrorCode::shutting_down, "the server is shutting down", {}}, "",
                      "draining");
}

bool anthropic_route(const std::string& path) {
    return path == "/v1/messages" || path.starts_with("/v1/messages/");
}

bool ollama_route(const std::string& path) {
    return path == "/" || path.starts_with("/api/");
}

void ServerState::send_error(const httplib::Request& req, httplib::Response& res,
                             const HttpError& error) const {
    res.status = error.status;
    if (error.status == 429) res.set_header("Retry-After", "1");
    if (error.status == 503) res.set_header("Retry-After", "5");
    nlohmann::json body;
    if (anthropic_route(req.path)) {
        body = error.anthropic_body();
    } else if (ollama_route(req.path)) {
        body = error.ollama_body();
    } else {
        body = error.body();
    }
    res.set_content(dump(body), "application/json");
}

bool ServerState::authorized(const httplib::Request& req) const {
    if (api_key_digests.empty()) return true;
    // Authorization: Bearer KEY, or Anthropic's (and llama-server's) X-Api-Key: KEY.
    const std::string header = req.get_header_value("Authorization");
    const std::string given =
        header.empty() ? req.get_header_value("X-Api-Key") : bearer_token(header);
    if (given.empty()) return false;
    // Digests of equal length, each compared whole: the time taken says nothing about which key
    // came close, or how long it is.
    const std::string digest = sha256_hex(given);
    bool known = false;
    for (const std::string& key : api_key_digests)
        known = constant_time_equal(digest, key) || known;
    return known;
}

std::string& pending_log_fields() {
    thread_local std::string fields;
    return fields;
}

void ServerState::access_log(const std::string& method, const std::string& path, int status,
                             std::size_t bytes, const std::string& id,
                             const std::string& fields) const {
    log(LogLevel::info, "http {}{}method={} path={} status={} bytes={}{}{}",
        id.empty() ? "" : "id=", id.empty() ? "" : id + " ", method, path, status, bytes,
        fields.empty() ? "" : " ", fields);
}

// CORS, the API key and drain, before any route runs.
httplib::Server::HandlerResponse ServerState::pre_route(const httplib::Request& req,
                                                        httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && access.cors_allowed(origin)) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        if (req.method == "OPTIONS") {
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
        }
    }
    if (auto refused = access.refuse(req)) {
        send_error(req, res, *refused);
        return httplib::Server::HandlerResponse::Handled;
    }
    if (!public_route(req.path) && !authorized(req)) {
        send_error(req, res,
                   protocol_error(401, "invalid_api_key",
                                  "a valid API key is required (Authorization: Bearer ...)"));
        return httplib::Server::HandlerResponse::Handled;
    }
    if (draining && req.method == "POST") {
        send_error(req, res, draining_error());
        return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
}

ConnectionLimits ServerState::connection_limits() const {
    ConnectionLimits limits;
    limits.read_timeout = options.read_timeout;
    return limits;
}

std::unique_ptr<httplib::Server> ServerState::make_listener() {
    if (!options.ssl_cert_file.empty())
        return std::make_unique<httplib::SSLServer>(options.ssl_cert_file.c_str(),
                                                    options.ssl_key_file.c_str());
    return std::make_unique<Listener>(
        connection_limits(), [this](const httplib::Request& req, httplib::Response& res) {
            answer_protocol_error(req, res);
            access_log(req.method, req.path, res.status, res.body.size(), "", "");
        });
}

// Anything httplib answers itself (unknown route, body too large, bad framing) gets the same
// JSON shape.
void ServerState::answer_protocol_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
        send_error(req, res,
                   protocol_error(404, "unknown_route",
                                  fmt::format("no route {} {}", req.method, req.path)));
    } else if (res.status == 413) {
        send_error(
            req, res,
            protocol_error(413, "body_too_large",
                           fmt::format("the body exceeds {} bytes", options.max_body_bytes)));
    } else if (res.status == 414) {
        send_error(req, res,
                   protocol_error(414, "request_line_too_long",
                                  fmt::format("the request line exceeds {} bytes",
                                              ConnectionLimits{}.max_request_line)));
    } else if (res.status == 431) {
        const ConnectionLimits limits;
        send_error(req, res,
                   protocol_error(431, "headers_too_large",
                                  fmt::format("the headers exceed {} bytes a line, {} lines or "
                                              "{} bytes in all",
                                              limits.max_header_line, limits.max_headers,
                                              limits.max_head_bytes)));
    } else if (res.status == 408) {
        send_error(req, res,
                   protocol_error(408, "request_timeout",
                                  fmt::format("the request did not arrive within {} ms",
                                              options.read_timeout.count())));
    } else {
        send_error(req, res,
                   protocol_error(res.status, "bad_request",
                                  fmt::format("the request could not be read: bad framing, or a "
                                              "body shorter than its Content-Length (a body may "
                                              "pause {} ms)",
                                              options.read_timeout.count())));
    }
}

void ServerState::configure(httplib::Server& listener) {
    // All started up front: httplib adds a thread only when none is idle at the moment a
    // connection is queued, so a burst can strand connections behind long requests.
    listener.new_task_queue = [threads = http_threads] {
        return new httplib::ThreadPool(threads, threads);
    };
    listener.set_payload_max_length(options.max_body_bytes);
    const ConnectionLimits limits = connection_limits();  // the TLS listener's too
    listener.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(
        std::max(limits.read_timeout, std::chrono::milliseconds{1000})));
    listener.set_write_timeout(
        std::chrono::duration_cast<std::chrono::seconds>(limits.write_timeout));
    // Streamed tokens are small writes; Nagle would hold each until the previous one is acked.
    listener.set_tcp_nodelay(true);
    // SO_REUSEADDR, not httplib's SO_REUSEPORT: a restart may bind while the last run's
    // connections linger in TIME_WAIT, but a second server on a port in use fails, instead of
    // splitting that port's connections with the first.
    listener.set_socket_options(
        [](socket_t sock) { httplib::set_socket_opt(sock, SOL_SOCKET, SO_REUSEADDR, 1); });
    listener.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        record_status(res.status);
        std::string fields = std::exchange(pending_log_fields(), {});
        // A streamed reply (SSE or NDJSON, with its request id) writes its own line at its end.
        const std::string type = res.get_header_value("Content-Type");
        if ((type == "text/event-stream" || type == "application/x-ndjson") &&
            res.has_header("X-Request-Id"))
            return;
        access_log(req.method, req.path, res.status, res.body.size(),
                   res.get_header_value("X-Request-Id"), fields);
    });
    listener.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        return pre_route(req, res);
    });
    listener.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        answer_protocol_error(req, res);
    });
    listener.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            HttpError e = http_error(Error{ErrorCode::internal, "internal error", {}});
            try {
                std::rethrow_exception(ep);
            } catch (const HttpException& h) {
                e = h.error;
            } catch (const std::exception& x) {
                e.message = x.what();
            } catch (...) {
            }
            send_error(req, res, e);
        });
}

// Ready while not draining and no loaded model's queue is full; the models say which are ready.
void ServerState::health(httplib::Response& res) const {
    int slots = 0, busy = 0;
    std::size_t queued = 0;
    bool full = false;
    json listed = json::array();
    for (const ModelListing& m : models.list()) {
        listed.push_back({{"id", m.id}, {"status", to_string(m.status)}});
        auto lease = models.acquire_if_ready(m.id);
        if (!lease || !lease->capabilities().generate) continue;
        const EngineStats st = lease->engine().stats();
        slots += st.slots;
        busy += st.busy_slots;
        queued += st.queued_requests;
        full = full || st.queued_requests >= st.max_queued_requests;
    }
    const bool ready = !draining && !full;
    json body = {{"status", ready ? "ok" : (draining ? "draining" : "busy")},
                 {"slots", slots},
                 {"busy_slots", busy},
                 {"queued_requests", queued},
                 {"models", std::move(listed)}};
    if (auto lease = models.acquire_if_ready(""); lease && lease->capabilities().generate)
        body["prefix_reuse"] = lease->engine().reuse_modes().describe();
    res.status = ready ? 200 : 503;
    res.set_content(dump(body), "application/json");
}

void ServerState::route(Method method, const std::string& pattern,
                        httplib::Server::Handler handler) {
    routes.push_back({method, pattern, handler});
    switch (method) {
        case Method::get:
            http->Get(pattern, std::move(handler));
            break;
        case Method::post:
            http->Post(pattern, std::move(handler));
            break;
        case Method::del:
            http->Delete(pattern, std::move(handler));
            break;
    }
}

void ServerState::post(const std::string& path, httplib::Server::Handler handler) {
    post_routes.emplace(path, handler);
    route(Method::post, path, std::move(handler));
}

bool ServerState::listen_also(const std::string& host) {
    auto listener = make_listener();
    configure(*listener);
    for (const Route& r : routes) {
        if (r.method == Method::get) listener->Get(r.pattern, r.handler);
        if (r.method == Method::post) listener->Post(r.pattern, r.handler);
        if (r.method == Method::del) listener->Delete(r.pattern, r.handler);
    }
    if (!listener->bind_to_port(host, port)) return false;
    more_listeners.push_back(std::move(listener));
    return true;
}

void ServerState::stop_listening() {
    http->stop();
    for (auto& l : more_listeners) l->stop();
}

void ServerState::register_routes() {
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    get("/health", [this](Req, Res res) { health(res); });
    get("/health/ready", [this](Req, Res res) { health(res); });
    get("/v1/health", [this](Req, Res res) { health(res); });
    get("/health/live",
        [](Req, Res res) { res.set_content(R"({"status":"ok"})", "application/json"); });
    get("/v1/models", [this](Req, Res res) { list_models(res); });
    // llama-server's clients read the process start from a header of /metrics.
    get("/metrics", [this, started = unix_now()](Req, Res res) {
        res.set_header("Process-Start-Time-Unix", std::to_string(started));
        std::string text = models.metrics().prometheus_text();
        if (store && &store->metrics() != &models.metrics())
            text += store->metrics().prometheus_text();
        res.set_content(text, "text/plain; version=0.0.4");
    });
    for (const char* path : {"/v1/embeddings", "/embeddings"})
        post(path, [this](Req req, Res res) { embeddings(req, res, false); });
    post("/embedding", [this](Req req, Res res) { embeddings(req, res, true); });
    for (const char* path : {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"})
        post(path, [this](Req req, Res res) { rerank(req, res); });
    post("/v1/completions", [this](Req req, Res res) { generate(req, res, false); });
    post("/v1/chat/completions", [this](Req req, Res res) { generate(req, res, true); });
    // llama-server's unprefixed names (its /completions is the native route).
    post("/chat/completions", [this](Req req, Res res) { generate(req, res, true); });
    get("/models", [this](Req, Res res) { list_models(res); });
    register_native_routes();
    register_anthropic_routes();
    register_responses_routes();
    register_cache_routes();
    register_model_routes();
    register_ollama_routes();
    if (!options.health_route.empty())
        get(options.health_route, [this](Req, Res res) { health(res); });
    register_predict_route();  // last: it dispatches to the routes above
}

}  // namespace detail
}  // namespace llamapp
