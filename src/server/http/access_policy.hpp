// Internal: what a request must satisfy before any route runs, beyond its API key (SECURITY.md).
// Decisions only, over the request's headers: no I/O.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/server.hpp"
#include "server/http/http_error.hpp"

namespace llamapp::detail {

// localhost, a name under .localhost, 127.0.0.0/8 or ::1 (bracketed or not).
bool loopback_name(std::string_view host);

// The token of an Authorization header in the Bearer scheme, whose name is case-insensitive
// (RFC 9110, 11.1); empty when it is another scheme or has no token.
std::string bearer_token(std::string_view authorization);

// The SHA-256 digests (lower-case hex) that requests' API keys are compared with: a key's, or
// the digest itself when given as "sha256:<64 hex>" (a key file need not hold the key).
std::vector<std::string> key_digests(const std::vector<std::string>& keys);

// Model loads and pulls, deletions, copies, cache and slot actions: what changes the server for
// every client rather than answering one.
bool operator_route(const std::string& method, const std::string& path);

// The addresses of a comma-separated host (llama-server's --host).
std::vector<std::string> listen_addresses(const std::string& host);

class AccessPolicy {
  public:
    explicit AccessPolicy(const ServerOptions& options);

    // Why `req` is refused before routing (403 for its Host or Origin, 415 for a body that is not
    // JSON), or nothing.
    std::optional<HttpError> refuse(const httplib::Request& req) const;
    // Whether a browser page of `origin` may read replies (the CORS headers are sent).
    bool cors_allowed(const std::string& origin) const;

  private:
    std::optional<HttpError> refuse_host(const httplib::Request& req) const;
    std::optional<HttpError> refuse_origin(const httplib::Request& req) const;

    const ServerOptions& options_;
    bool check_host_;  // listening on loopback addresses only, and not told to take any Host
};

}  // namespace llamapp::detail
