// Internal: the HTTP front of the server: its listeners, the route table (each route tagged with
// its protocol), and what runs around every route: CORS, the access policy, the API key, drain,
// errors in the route's protocol's shape, and the access log.
// Routes are registered before the listeners start; afterwards the table is only read, from the
// listeners' threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "llamapp/server.hpp"
#include "server/http/access_log.hpp"
#include "server/http/access_policy.hpp"
#include "server/http/connection.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

class Router final : public Routes {
  public:
    // `draining`: once set, POST requests are refused with 503. `threads`: per listener.
    Router(const ServerOptions& options, const std::atomic<bool>& draining, std::size_t threads);

    // False when the TLS certificate or key cannot be used.
    bool valid() const { return http_->is_valid(); }
    void add(const Protocol& owner, Method method, const std::string& pattern,
             httplib::Server::Handler handler, RouteOptions options = {}) override;
    std::map<std::string, httplib::Server::Handler> post_routes() const override;

    // The first listener, bound to `host` at `port` (0: any free port); returns the port, 0 when
    // the address cannot be bound.
    int bind_first(const std::string& host, int port);
    bool bind_unix_socket(const std::string& path);
    // A listener on `host` at the first listener's port with every route. False when the
    // address cannot be bound.
    bool listen_also(const std::string& host, int port);
    // Serves until stopped; false when the first listener stopped unexpectedly.
    bool listen();
    void stop();

  private:
    struct Route {
        Method method;
        std::string pattern;
        httplib::Server::Handler handler;
        const Protocol* owner;
        RouteOptions options;
    };
    // A listener without routes: TLS (httplib's SSLServer, its own connection loop) when a
    // certificate is configured, else a Listener (connection.hpp).
    std::unique_ptr<httplib::Server> make_listener();
    // Threads, limits, socket options, then logging, CORS, auth, drain and the error shapes
    // around every route.
    void configure(httplib::Server& listener);
    void install(httplib::Server& listener, const Route& route) const;
    ConnectionLimits connection_limits() const;
    // The route a path belongs to (any method), or null.
    const Route* route_of(const std::string& path) const;
    // The protocol whose shape an error on `path` takes: its route's, else the protocol that
    // claims the path's prefix, else null (OpenAI's shape).
    const Protocol* protocol_of(const std::string& path) const;
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req,
                                               httplib::Response& res) const;
    void answer_protocol_error(const httplib::Request& req, httplib::Response& res) const;
    void send_error(const httplib::Request& req, httplib::Response& res,
                    const HttpError& error) const;
    bool authorized(const httplib::Request& req) const;

    const ServerOptions& options_;
    const std::atomic<bool>& draining_;
    std::size_t threads_;
    AccessPolicy access_;  // Host, Origin and Content-Type rules (SECURITY.md)
    // SHA-256 (hex) of each API key; a key given as "sha256:HEX" is its digest already, so that
    // a key file need not hold the keys themselves.
    std::vector<std::string> api_key_digests_;
    std::vector<Route> routes_;
    std::unordered_map<std::string, std::size_t> exact_routes_;  // path -> first route
    // Each protocol's claimed path prefixes (Protocol::path_prefixes), taken at its first route.
    std::vector<std::pair<std::string, const Protocol*>> prefixes_;
    std::unique_ptr<httplib::Server> http_ = make_listener();
    // The listeners of the other addresses of a comma-separated host: each serves every route.
    std::vector<std::unique_ptr<httplib::Server>> more_listeners_;
};

}  // namespace llamapp::detail
