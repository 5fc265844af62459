// Internal: a wire protocol as the HTTP layer sees it: the routes it registers and the shape of
// its errors. A route knows its protocol, so an error is written in the shape of the protocol
// whose route it came from, never chosen by looking at the path.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_error.hpp"

namespace llamapp::detail {

enum class Method { get, post, del };

struct RouteOptions {
    bool open = false;  // answered without an API key (liveness probes)
};

class Protocol;

// Where protocols register their routes (the Router). Called before the server listens.
class Routes {
  public:
    virtual ~Routes() = default;
    virtual void add(const Protocol& owner, Method method, const std::string& pattern,
                     httplib::Server::Handler handler, RouteOptions options = {}) = 0;
    // The POST routes registered so far, by path (the prediction route dispatches to them).
    virtual std::map<std::string, httplib::Server::Handler> post_routes() const = 0;
};

class Protocol {
  public:
    virtual ~Protocol() = default;
    virtual std::string_view name() const = 0;
    // The body of an error answered on one of its routes. By default OpenAI's shape, which
    // llama-server and llamapp's own routes share.
    virtual nlohmann::json error_body(const HttpError& e) const { return e.body(); }
    // Path prefixes it answers for where no route matches, so that a client of the protocol
    // reads an unknown route's 404 in its own shape (Ollama's "/api/").
    virtual std::vector<std::string> path_prefixes() const { return {}; }
    virtual void register_routes(Routes& routes) = 0;
};

// A protocol's registrations, each tagged with the protocol.
class ProtocolRoutes {
  public:
    ProtocolRoutes(Routes& routes, const Protocol& owner) : routes_(routes), owner_(owner) {}
    void get(const std::string& pattern, httplib::Server::Handler handler,
             RouteOptions options = {}) {
        routes_.add(owner_, Method::get, pattern, std::move(handler), options);
    }
    void post(const std::string& pattern, httplib::Server::Handler handler) {
        routes_.add(owner_, Method::post, pattern, std::move(handler));
    }
    void del(const std::string& pattern, httplib::Server::Handler handler) {
        routes_.add(owner_, Method::del, pattern, std::move(handler));
    }
    Routes& all() { return routes_; }

  private:
    Routes& routes_;
    const Protocol& owner_;
};

}  // namespace llamapp::detail
