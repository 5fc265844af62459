// Internal: how every HTTP request to the hub is made (hub_api.cpp's API calls, hub_transfer.cpp's
// downloads behind a proxy). Defined in hub_proxy.cpp.
#pragma once

#include <httplib.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "hub/hub_internal.hpp"

namespace llamapp::detail {

// "https://host:port" and "/path?query" of a URL.
std::pair<std::string, std::string> split_url(std::string_view url);

// The environment's proxy (if any), redirects followed, 10 s to connect, `read_timeout` to read.
void configure_hub_client(httplib::Client& client, const std::optional<HubProxy>& proxy,
                          std::chrono::seconds read_timeout);

// User-Agent and, with a token, its bearer header. They go with each request rather than as the
// client's defaults, which httplib does not carry over a redirect to the CDN.
httplib::Headers hub_headers(const HubOptions& options);

}  // namespace llamapp::detail
