// The HTTP server: the shared services (ServerState), the HTTP front (Router) and the protocols
// that register their routes on it.
#include <fmt/core.h>

#include <algorithm>
#include <thread>

#include "core/log_internal.hpp"
#include "server/common/server_state.hpp"
#include "server/http/router.hpp"
#include "server/protocols/registry.hpp"

namespace llamapp {

namespace detail {

namespace {

// A connection waits for a thread before anything reads its request, where no queue bound,
// deadline or disconnect check can see it: enough threads for every slot, the whole engine
// queue (whose overflow then gets its 429) and headroom for health checks and metrics.
// Counted over the models known now, loaded or not, up to a bound a process can start.
std::size_t http_threads(const ModelManager& models, const ServerOptions& options) {
    if (options.http_threads > 0) return static_cast<std::size_t>(options.http_threads);
    std::size_t capacity = 0;
    for (const ModelListing& m : models.list())
        if (m.capabilities.generate)
            capacity += static_cast<std::size_t>(m.slots) + m.max_queued_requests;
    return std::min<std::size_t>(capacity, 1024) + 16;
}

}  // namespace

struct ServerCore {
    ServerCore(ModelManager& models, const ServerOptions& options)
        : state(models, options),
          router(state.options, state.draining, http_threads(models, state.options)) {}

    ServerState state;
    Router router;
    std::vector<std::unique_ptr<Protocol>> protocols;
    int port = 0;
    std::once_flag drained;
};

}  // namespace detail

using namespace detail;

Server::Server(std::unique_ptr<ServerCore> core) : core_(std::move(core)) {}
Server::~Server() {
    if (core_) core_->router.stop();
}

Result<std::unique_ptr<Server>> Server::create(ModelManager& models, ServerOptions options) {
    if (options.port < 0 || options.port > 65535)
        return fail(ErrorCode::invalid_argument, "port must be in [0, 65535]", "port");
    if (options.max_body_bytes < 1024)
        return fail(ErrorCode::invalid_argument, "must be >= 1024", "max_body_bytes");
    if (options.max_prompt_tokens < 0 || options.max_tokens < 0 || options.max_stop_strings < 0)
        return fail(ErrorCode::invalid_argument, "limits must be >= 0", "max_tokens");
    auto core = std::make_unique<ServerCore>(models, std::move(options));
    if (!core->router.valid())
        return fail(ErrorCode::invalid_argument, "cannot use the TLS certificate or key",
                    core->state.options.ssl_cert_file.string());
    core->protocols = make_protocols(core->state);
    for (const auto& protocol : core->protocols) protocol->register_routes(core->router);
    return std::unique_ptr<Server>(new Server(std::move(core)));
}

Result<void> Server::bind() {
    ServerCore& c = *core_;
    const ServerOptions& options = c.state.options;
    if (!options.unix_socket.empty()) {
        if (!c.router.bind_unix_socket(options.unix_socket))
            return fail(ErrorCode::io_error, "cannot listen on the unix socket",
                        options.unix_socket);
        return {};
    }
    // llama-server's comma-separated host: every address at the same port (the first one's
    // when the port is 0).
    const std::vector<std::string> hosts = listen_addresses(options.host);
    if (hosts.empty()) return fail(ErrorCode::invalid_argument, "no address to listen on", "host");
    c.port = c.router.bind_first(hosts.front(), options.port);
    if (c.port == 0)
        return fail(ErrorCode::io_error, "cannot listen on the address (is the port taken?)",
                    fmt::format("{}:{}", hosts.front(), options.port));
    for (std::size_t i = 1; i < hosts.size(); ++i) {
        if (!c.router.listen_also(hosts[i], c.port)) {
            c.router.stop();
            return fail(ErrorCode::io_error, "cannot listen on the address (is the port taken?)",
                        fmt::format("{}:{}", hosts[i], c.port));
        }
    }
    return {};
}

Result<void> Server::listen() {
    if (!core_->router.listen())
        return fail(ErrorCode::io_error, "the listener stopped unexpectedly");
    return {};
}

int Server::port() const {
    return core_->port;
}

std::vector<std::string> Server::urls() const {
    std::vector<std::string> out;
    const ServerOptions& options = core_->state.options;
    if (!options.unix_socket.empty()) return out;
    const char* scheme = options.ssl_cert_file.empty() ? "http" : "https";
    for (const std::string& host : listen_addresses(options.host))
        out.push_back(host.find(':') != std::string::npos
                          ? fmt::format("{}://[{}]:{}", scheme, host, core_->port)
                          : fmt::format("{}://{}:{}", scheme, host, core_->port));
    return out;
}

void Server::set_loading(bool loading) {
    core_->state.loading = loading;
}

void Server::drain() {
    ServerCore& c = *core_;
    ServerState& s = c.state;
    std::call_once(c.drained, [&] {
        s.draining = true;
        log(LogLevel::info, "server: draining ({} requests in flight)", s.in_flight.load());
        s.pulls.stop();  // ends the pulls and the streams of their events
        const auto until = std::chrono::steady_clock::now() + s.options.drain_grace;
        while (s.in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        // Cancels what is left; their streams end with an error event; entries are saved.
        s.models.unload_all(std::chrono::milliseconds{0});
        while (s.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        c.router.stop();
    });
}

}  // namespace llamapp
