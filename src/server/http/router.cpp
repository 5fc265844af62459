#include "server/http/router.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <thread>

#include "core/log_internal.hpp"
#include "llamapp/fingerprint.hpp"

namespace llamapp::detail {

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

// A pattern's ":name" segment matches any one segment of the path.
bool pattern_matches(std::string_view pattern, std::string_view path) {
    while (!pattern.empty() && !path.empty()) {
        const std::size_t p_end = std::min(pattern.find('/', 1), pattern.size());
        const std::size_t s_end = std::min(path.find('/', 1), path.size());
        const std::string_view p = pattern.substr(0, p_end), s = path.substr(0, s_end);
        if (!p.starts_with("/:") && p != s) return false;
        pattern.remove_prefix(p_end);
        path.remove_prefix(s_end);
    }
    return pattern.empty() && path.empty();
}

}  // namespace

std::string& pending_log_fields() {
    thread_local std::string fields;
    return fields;
}

void access_log(const std::string& method, const std::string& path, int status, std::size_t bytes,
                const std::string& id, const std::string& fields) {
    log(LogLevel::info, "http {}{}method={} path={} status={} bytes={}{}{}",
        id.empty() ? "" : "id=", id.empty() ? "" : id + " ", method, path, status, bytes,
        fields.empty() ? "" : " ", fields);
}

Router::Router(const ServerOptions& options, const std::atomic<bool>& draining, std::size_t threads)
    : options_(options),
      draining_(draining),
      threads_(threads),
      access_(options),
      api_key_digests_(key_digests(options.api_keys)) {
    if (valid()) configure(*http_);
}

void Router::add(const Protocol& owner, Method method, const std::string& pattern,
                 httplib::Server::Handler handler, RouteOptions options) {
    const bool first_of_owner = std::none_of(routes_.begin(), routes_.end(),
                                             [&](const Route& r) { return r.owner == &owner; });
    if (first_of_owner)
        for (std::string& prefix : owner.path_prefixes()) prefixes_.emplace_back(prefix, &owner);
    routes_.push_back({method, pattern, std::move(handler), &owner, options});
    if (pattern.find(':') == std::string::npos) exact_routes_.emplace(pattern, routes_.size() - 1);
    install(*http_, routes_.back());
}

std::map<std::string, httplib::Server::Handler> Router::post_routes() const {
    std::map<std::string, httplib::Server::Handler> out;
    for (const Route& r : routes_)
        if (r.method == Method::post) out.emplace(r.pattern, r.handler);
    return out;
}

void Router::install(httplib::Server& listener, const Route& route) const {
    switch (route.method) {
        case Method::get:
            listener.Get(route.pattern, route.handler);
            break;
        case Method::post:
            listener.Post(route.pattern, route.handler);
            break;
        case Method::del:
            listener.Delete(route.pattern, route.handler);
            break;
    }
}

const Router::Route* Router::route_of(const std::string& path) const {
    if (const auto it = exact_routes_.find(path); it != exact_routes_.end())
        return &routes_[it->second];
    for (const Route& r : routes_)
        if (r.pattern.find(':') != std::string::npos && pattern_matches(r.pattern, path)) return &r;
    return nullptr;
}

const Protocol* Router::protocol_of(const std::string& path) const {
    if (const Route* r = route_of(path)) return r->owner;
    for (const auto& [prefix, owner] : prefixes_)
        if (path.starts_with(prefix)) return owner;
    return nullptr;
}

void Router::send_error(const httplib::Request& req, httplib::Response& res,
                        const HttpError& error) const {
    res.status = error.status;
    if (error.status == 429) res.set_header("Retry-After", "1");
    if (error.status == 503) res.set_header("Retry-After", "5");
    const Protocol* protocol = protocol_of(req.path);
    res.set_content(dump(protocol ? protocol->error_body(error) : error.body()),
                    "application/json");
}

bool Router::authorized(const httplib::Request& req) const {
    if (api_key_digests_.empty()) return true;
    // Authorization: Bearer KEY, or Anthropic's (and llama-server's) X-Api-Key: KEY.
    const std::string header = req.get_header_value("Authorization");
    const std::string given =
        header.empty() ? req.get_header_value("X-Api-Key") : bearer_token(header);
    if (given.empty()) return false;
    // Digests of equal length, each compared whole: the time taken says nothing about which key
    // came close, or how long it is.
    const std::string digest = sha256_hex(given);
    bool known = false;
    for (const std::string& key : api_key_digests_)
        known = constant_time_equal(digest, key) || known;
    return known;
}

// CORS, the API key and drain, before any route runs.
httplib::Server::HandlerResponse Router::pre_route(const httplib::Request& req,
                                                   httplib::Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && access_.cors_allowed(origin)) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        if (req.method == "OPTIONS") {
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
        }
    }
    if (auto refused = access_.refuse(req)) {
        send_error(req, res, *refused);
        return httplib::Server::HandlerResponse::Handled;
    }
    const Route* route = route_of(req.path);
    if (!(route && route->options.open) && !authorized(req)) {
        send_error(req, res,
                   protocol_error(401, "invalid_api_key",
                                  "a valid API key is required (Authorization: Bearer ...)"));
        return httplib::Server::HandlerResponse::Handled;
    }
    if (draining_ && req.method == "POST") {
        send_error(req, res, draining_error());
        return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
}

ConnectionLimits Router::connection_limits() const {
    ConnectionLimits limits;
    limits.read_timeout = options_.read_timeout;
    limits.max_body_bytes = options_.max_body_bytes;
    return limits;
}

std::unique_ptr<httplib::Server> Router::make_listener() {
    if (!options_.ssl_cert_file.empty())
        return std::make_unique<httplib::SSLServer>(options_.ssl_cert_file.c_str(),
                                                    options_.ssl_key_file.c_str());
    return std::make_unique<Listener>(
        connection_limits(), [this](const httplib::Request& req, httplib::Response& res) {
            answer_protocol_error(req, res);
            access_log(req.method, req.path, res.status, res.body.size(), "", "");
        });
}
// Anything httplib answers itself (unknown route, body too large, bad framing) gets the same
// JSON shape.
void Router::answer_protocol_error(const httplib::Request& req, httplib::Response& res) const {
    if (!res.body.empty()) return;
    // httplib answers 400 for any body it could not read; one that stopped arriving is a 408.
    if (res.status == 400 && body_stalled()) res.status = 408;
    if (res.status == 404) {
        send_error(req, res,
                   protocol_error(404, "unknown_route",
                                  fmt::format("no route {} {}", req.method, req.path)));
    } else if (res.status == 413) {
        send_error(
            req, res,
            protocol_error(413, "body_too_large",
                           fmt::format("the body exceeds {} bytes", options_.max_body_bytes)));
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
                                  fmt::format("the request stopped arriving: its head must come "
                                              "within {0} ms, and its body may pause {0} ms",
                                              options_.read_timeout.count())));
    } else {
        send_error(req, res,
                   protocol_error(res.status, "bad_request",
                                  "the request could not be read: bad framing (each line of "
                                  "the head ends in CRLF; a body is framed by one Content-Length "
                                  "or chunks), or a body that ended before its Content-Length"));
    }
}

void Router::configure(httplib::Server& listener) {
    // All started up front: httplib adds a thread only when none is idle at the moment a
    // connection is queued, so a burst can strand connections behind long requests.
    listener.new_task_queue = [threads = threads_] {
        return new httplib::ThreadPool(threads, threads);
    };
    listener.set_payload_max_length(options_.max_body_bytes);
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
    listener.set_logger([](const httplib::Request& req, const httplib::Response& res) {
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

int Router::bind_first(const std::string& host, int port) {
    if (port == 0) return std::max(http_->bind_to_any_port(host), 0);
    return http_->bind_to_port(host, port) ? port : 0;
}

bool Router::bind_unix_socket(const std::string& path) {
    http_->set_address_family(AF_UNIX);
    return http_->bind_to_port(path, 80);
}

bool Router::listen_also(const std::string& host, int port) {
    auto listener = make_listener();
    configure(*listener);
    for (const Route& r : routes_) install(*listener, r);
    if (!listener->bind_to_port(host, port)) return false;
    more_listeners_.push_back(std::move(listener));
    return true;
}

bool Router::listen() {
    std::vector<std::thread> others;
    for (auto& l : more_listeners_)
        others.emplace_back([listener = l.get()] { listener->listen_after_bind(); });
    const bool served = http_->listen_after_bind();
    stop();
    for (std::thread& t : others) t.join();
    return served;
}

void Router::stop() {
    http_->stop();
    for (auto& l : more_listeners_) l->stop();
}

}  // namespace llamapp::detail
