// Proxies from the environment, read as curl and the hub's own tools read them, and the HTTP
// client setup every hub request shares.
#include <fmt/core.h>
#include <httplib.h>

#include <cctype>
#include <cstdlib>

#include "hub/hub_http.hpp"
#include "llamapp/backend.hpp"

namespace llamapp::detail {
namespace {

std::string first_set(const std::function<std::string(const char*)>& env,
                      std::initializer_list<const char*> names, std::string* which) {
    for (const char* n : names) {
        std::string v = env(n);
        if (!v.empty()) {
            *which = n;
            return v;
        }
    }
    return {};
}

std::vector<std::string> split_list(std::string_view text) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        std::string_view item = text.substr(at, comma - at);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (!item.empty()) out.emplace_back(item);
        at = comma + 1;
    }
    return out;
}

// "%40" → "@", as a URL's user and password are written.
std::string percent_decoded(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() &&
            std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

// NO_PROXY's rule for names: "*" is every host; "example.com" and ".example.com" are that host
// and its subdomains; a ":port" is ignored here (the request's own check, in httplib, has it).
bool bypassed(std::string_view host, const std::vector<std::string>& no_proxy) {
    for (std::string entry : no_proxy) {
        if (entry == "*") return true;
        if (const std::size_t colon = entry.rfind(':'); colon != std::string::npos &&
                                                        entry.find(']') == std::string::npos &&
                                                        entry.find(':') == colon)
            entry.resize(colon);
        while (!entry.empty() && (entry.front() == '.' || entry.front() == '*')) entry.erase(0, 1);
        if (entry.empty()) continue;
        if (host == entry) return true;
        if (host.size() > entry.size() && host.ends_with(entry) &&
            host[host.size() - entry.size() - 1] == '.')
            return true;
    }
    return false;
}

}  // namespace

std::string url_host(std::string_view url) {
    const std::size_t scheme = url.find("://");
    std::string_view rest = scheme == std::string_view::npos ? url : url.substr(scheme + 3);
    rest = rest.substr(0, rest.find('/'));
    if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos)
        rest.remove_prefix(at + 1);
    if (rest.starts_with('[')) return std::string(rest.substr(1, rest.find(']') - 1));
    return std::string(rest.substr(0, rest.find(':')));
}

Result<std::optional<HubProxy>> hub_proxy_for(std::string_view url,
                                              const std::function<std::string(const char*)>& env) {
    const bool https = url.starts_with("https://");
    std::string which;
    const std::string value =
        https ? first_set(env, {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}, &which)
              : first_set(env, {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}, &which);
    if (value.empty()) return std::nullopt;
    std::string no;
    HubProxy proxy;
    proxy.no_proxy = split_list(first_set(env, {"no_proxy", "NO_PROXY"}, &no));
    if (bypassed(url_host(url), proxy.no_proxy)) return std::nullopt;
    std::string_view rest = value;
    if (const std::size_t scheme = rest.find("://"); scheme != std::string_view::npos) {
        if (rest.substr(0, scheme) != "http")
            return fail(ErrorCode::invalid_argument,
                        fmt::format("only http:// proxies are supported, not {}://",
                                    rest.substr(0, scheme)),
                        which);
        rest.remove_prefix(scheme + 3);
    }
    rest = rest.substr(0, rest.find('/'));
    if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
        const std::string_view auth = rest.substr(0, at);
        const std::size_t colon = auth.find(':');
        proxy.user = percent_decoded(auth.substr(0, colon));
        if (colon != std::string_view::npos)
            proxy.password = percent_decoded(auth.substr(colon + 1));
        rest.remove_prefix(at + 1);
    }
    proxy.host = url_host(rest);
    const std::size_t port_at = rest.starts_with('[') ? rest.find("]:") : rest.rfind(':');
    proxy.port = 1080;  // curl's default for a proxy without a port
    if (port_at != std::string_view::npos) {
        const std::string digits(rest.substr(port_at + (rest.starts_with('[') ? 2 : 1)));
        char* end = nullptr;
        const long port = std::strtol(digits.c_str(), &end, 10);
        if (digits.empty() || *end != '\0' || port < 1 || port > 65535)
            return fail(ErrorCode::invalid_argument, "the proxy's port is not a number 1-65535",
                        which);
        proxy.port = static_cast<int>(port);
    }
    if (proxy.host.empty())
        return fail(ErrorCode::invalid_argument, "the proxy names no host", which);
    return proxy;
}

Result<std::optional<HubProxy>> hub_proxy_for(std::string_view url) {
    return hub_proxy_for(url, [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v ? v : "");
    });
}

std::pair<std::string, std::string> split_url(std::string_view url) {
    const std::size_t scheme = url.find("://");
    const std::size_t slash = url.find('/', scheme == std::string_view::npos ? 0 : scheme + 3);
    if (slash == std::string_view::npos) return {std::string(url), "/"};
    return {std::string(url.substr(0, slash)), std::string(url.substr(slash))};
}

void configure_hub_client(httplib::Client& client, const std::optional<HubProxy>& proxy,
                          std::chrono::seconds read_timeout) {
    if (proxy) {
        client.set_proxy(proxy->host, proxy->port);
        if (!proxy->user.empty()) client.set_proxy_basic_auth(proxy->user, proxy->password);
        if (!proxy->no_proxy.empty()) client.set_no_proxy(proxy->no_proxy);
    }
    client.set_follow_location(true);
    client.set_connection_timeout(std::chrono::seconds(10));
    client.set_read_timeout(read_timeout);
}

httplib::Headers hub_headers(const HubOptions& options) {
    httplib::Headers headers{{"User-Agent", "llamapp/" + llama_build_info()}};
    if (!options.token.empty()) headers.emplace("Authorization", "Bearer " + options.token);
    return headers;
}

}  // namespace llamapp::detail
