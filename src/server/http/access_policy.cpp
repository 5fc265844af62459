#include "server/http/access_policy.hpp"

#include <fmt/core.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "llamapp/fingerprint.hpp"
#include "server/http/header_text.hpp"

namespace llamapp::detail {

namespace {

// The name of a Host value ("name:port", "[v6]:port").
std::string_view host_name(std::string_view host) {
    if (host.starts_with('[')) return host.substr(0, host.find(']') + 1);
    const std::size_t colon = host.rfind(':');
    return colon != std::string_view::npos && host.find(':') == colon ? host.substr(0, colon)
                                                                      : host;
}

bool has_body(const httplib::Request& req) {
    if (req.has_header("Transfer-Encoding")) return true;
    const std::string length = req.get_header_value("Content-Length");
    return !length.empty() && length.find_first_not_of('0') != std::string::npos;
}

// JSON, under any of its names: application/json or a structured type like
// application/merge-patch+json, with any parameters.
bool json_type(std::string_view content_type) {
    const std::string type =
        lower_case(trim_blanks(content_type.substr(0, content_type.find(';'))));
    return type == "application/json" ||
           (type.starts_with("application/") && type.ends_with("+json"));
}

// A page of the server itself: its Origin names the host the request was sent to.
bool same_origin(const httplib::Request& req) {
    const std::string origin = req.get_header_value("Origin");
    const std::size_t scheme_end = origin.find("://");
    return scheme_end != std::string::npos &&
           lower_case(origin.substr(scheme_end + 3)) == lower_case(req.get_header_value("Host"));
}

}  // namespace

std::vector<std::string> key_digests(const std::vector<std::string>& keys) {
    std::vector<std::string> out;
    for (const std::string& key : keys) {
        const std::string_view hex =
            std::string_view(key).substr(std::min<std::size_t>(7, key.size()));
        const bool hashed = key.starts_with("sha256:") && hex.size() == 64 &&
                            hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
        std::string digest = hashed ? std::string(hex) : sha256_hex(key);
        out.push_back(lower_case(digest));
    }
    return out;
}

bool loopback_name(std::string_view host) {
    const std::string name = lower_case(host);
    if (name == "localhost" || name.ends_with(".localhost") || name == "::1" || name == "[::1]")
        return true;
    in_addr v4{};
    return inet_pton(AF_INET, name.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::string bearer_token(std::string_view authorization) {
    authorization = trim_blanks(authorization);
    constexpr std::string_view scheme = "bearer";
    if (authorization.size() <= scheme.size() ||
        lower_case(authorization.substr(0, scheme.size())) != scheme ||
        (authorization[scheme.size()] != ' ' && authorization[scheme.size()] != '\t'))
        return {};
    return std::string(trim_blanks(authorization.substr(scheme.size())));
}

bool operator_route(const std::string& method, const std::string& path) {
    if (method == "GET" || method == "HEAD" || method == "OPTIONS") return false;
    return path.starts_with("/cache/") || path == "/models" || path.starts_with("/models/") ||
           path.starts_with("/slots/") || path == "/api/pull" || path == "/api/delete" ||
           path == "/api/copy";
}

std::vector<std::string> listen_addresses(const std::string& host) {
    std::vector<std::string> out;
    std::size_t from = 0;
    while (from <= host.size()) {
        const std::size_t comma = std::min(host.find(',', from), host.size());
        const std::string_view one = trim_blanks(std::string_view(host).substr(from, comma - from));
        if (!one.empty()) out.emplace_back(one);
        from = comma + 1;
    }
    return out;
}

AccessPolicy::AccessPolicy(const ServerOptions& options) : options_(options) {
    const auto& allowed = options.allowed_hosts;
    const auto hosts = listen_addresses(options.host);
    check_host_ = options.unix_socket.empty() && !hosts.empty() &&
                  std::all_of(hosts.begin(), hosts.end(), loopback_name) &&
                  std::find(allowed.begin(), allowed.end(), "*") == allowed.end();
}

bool AccessPolicy::cors_allowed(const std::string& origin) const {
    const auto& allowed = options_.cors_origins;
    return std::find(allowed.begin(), allowed.end(), origin) != allowed.end() ||
           std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
}

std::optional<HttpError> AccessPolicy::refuse(const httplib::Request& req) const {
    if (auto no = refuse_host(req)) return no;
    if (auto no = refuse_origin(req)) return no;
    // A browser page may send text/plain or a form to any address without asking first (no
    // CORS preflight); a body parsed as JSON whatever its type would let it drive the server.
    // But browsers send Origin with every POST (fetch, XHR and forms alike), so a body that
    // comes without one, or from the server's own origin, is no cross-site form: it is parsed as
    // JSON whatever its label, as `curl -d '{...}'` (labelled a form) in Ollama's docs needs.
    if (has_body(req) && req.has_header("Content-Type") &&
        !json_type(req.get_header_value("Content-Type")) && req.has_header("Origin") &&
        !same_origin(req))
        return protocol_error(
            415, "unsupported_media_type",
            fmt::format("the body must be JSON (Content-Type: application/json), not {}",
                        req.get_header_value("Content-Type")));
    return std::nullopt;
}

// DNS rebinding: a page of evil.example whose name turns into 127.0.0.1 reaches a server on
// loopback as its own origin, but its requests still name evil.example as the Host.
std::optional<HttpError> AccessPolicy::refuse_host(const httplib::Request& req) const {
    if (!check_host_ || !req.has_header("Host")) return std::nullopt;  // HTTP/1.0 sends none
    const std::string name = lower_case(host_name(req.get_header_value("Host")));
    if (loopback_name(name)) return std::nullopt;
    for (const std::string& allowed : options_.allowed_hosts)
        if (lower_case(allowed) == name) return std::nullopt;
    return protocol_error(403, "host_not_allowed",
                          fmt::format("a server on a loopback address answers only to loopback "
                                      "names, not Host \"{}\"; allow it with --allowed-hosts",
                                      name));
}

// A page of another origin can send requests without a preflight (simple requests). Replies it
// may not read could still start work or change state, so they are refused outright; operator
// routes need their origin named, "*" is not enough.
std::optional<HttpError> AccessPolicy::refuse_origin(const httplib::Request& req) const {
    if (!req.has_header("Origin") || req.method == "OPTIONS" || same_origin(req))
        return std::nullopt;
    const std::string origin = req.get_header_value("Origin");
    const auto& allowed = options_.cors_origins;
    const bool named = std::find(allowed.begin(), allowed.end(), origin) != allowed.end();
    if (named || (cors_allowed(origin) && !operator_route(req.method, req.path)))
        return std::nullopt;
    return protocol_error(
        403, "origin_not_allowed",
        !cors_allowed(origin)
            ? fmt::format("requests from the browser origin \"{}\" are refused; allow it with "
                          "--cors-origin",
                          origin)
            : fmt::format("{} {} changes the server for every client: it takes requests from a "
                          "browser origin only when --cors-origin names it, not *",
                          req.method, req.path));
}

}  // namespace llamapp::detail
