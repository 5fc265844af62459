// The hub module's shared pieces: its JSON API calls with typed errors, and file-name rules.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/hub.hpp"

namespace llamapp::detail {

// GET <endpoint><path> as JSON. 401/403 → unauthorized, 404 → not_found, 429 → rate_limited
// (waits out a Retry-After of up to 10 s twice first), other failures → network_error (after
// three tries when the connection fails). Errors name `what` (the repository), not the path.
[[nodiscard]] Result<nlohmann::json> hub_get_json(const std::string& path, const std::string& what,
                                                  const HubOptions& options);

// A refusal by the hub (any status but 200) as a typed error: 401/403 unauthorized, 404
// not_found, 429 rate_limited (naming `retry_after`), others network_error with `detail`.
Error hub_status_error(int status, std::string_view detail, const std::string& what,
                       long retry_after);

// The endpoint with a trailing '/', as llama.cpp's downloads compute it.
std::string hub_endpoint();

std::string upper(std::string_view s);

// Waits `seconds`, checking for cancellation every 100 ms; false when cancelled.
bool wait_for_retry(long seconds, const HubOptions& options);

// The one retry policy of every request to the hub: a connection error (status 0), a 5xx, a 408
// or a 429 is tried again after 1, 2, 4 ... s, up to `tries` in all, unless cancelled meanwhile.
struct HubRetry {
    int tries;
    static bool worth_retrying(int status) {
        return status <= 0 || status >= 500 || status == 408 || status == 429;
    }
    // After failed try number `done` (from 1) that got `status`: waits, and whether to try again.
    bool again(int done, int status, const HubOptions& options) const {
        return done < tries && worth_retrying(status) && wait_for_retry(1L << (done - 1), options);
    }
};
// A listing or a HEAD: a mirror restarting, a proxy's hiccup.
inline constexpr HubRetry request_retry{3};
// A file's transfer, each try resuming what arrived: a broken or stalled connection, a peer that
// closes after a redirect.
inline constexpr HubRetry transfer_retry{4};

// "Q4_K_M" from ".../Model-Q4_K_M.gguf" or "model.q8_0-00001-of-00003.gguf", else "".
std::string quant_of(std::string_view path);

struct SplitName {
    std::string prefix;  // the path without "-00001-of-00003.gguf"
    int part = 1;
    int count = 1;
};
SplitName split_of(std::string_view path);

// A GGUF a reference can choose: not a projector, imatrix or draft sidecar; part 1 of a split.
bool is_model_file(std::string_view path);

// Every part of the model whose part 1 is `first`, in order; fails when a part is missing.
[[nodiscard]] Result<std::vector<HubFile>> parts_of(const HubFile& first,
                                                    const HubRepoFiles& listing);

// Fills `models` and each file's quant and split count from `files`.
void classify_files(HubRepoFiles& listing);

// The cache's folder for a repository: "models--owner--name".
std::string repo_folder(std::string_view repo);

// --- proxies (hub_proxy.cpp) ---

struct HubProxy {
    std::string host;
    int port = 0;
    std::string user;  // basic authentication, from user:password@ in the proxy's URL
    std::string password;
    std::vector<std::string> no_proxy;  // NO_PROXY's entries, checked again per request
};

// The host of an http(s) URL.
std::string url_host(std::string_view url);

// The proxy requests to `url` go through: https_proxy / HTTPS_PROXY for https URLs, http_proxy
// / HTTP_PROXY for http ones, then all_proxy / ALL_PROXY; none when unset or when NO_PROXY
// names the host. Errors: invalid_argument (a proxy that is not http://, a bad port), naming
// the variable.
[[nodiscard]] Result<std::optional<HubProxy>> hub_proxy_for(
    std::string_view url, const std::function<std::string(const char*)>& env);
[[nodiscard]] Result<std::optional<HubProxy>> hub_proxy_for(std::string_view url);

}  // namespace llamapp::detail
