// Remote devices over ggml's RPC backend: registering servers (the client side) and serving this
// process's devices (`llamapp rpc-server`).
#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <mutex>
#include <set>
#include <thread>

#include "core/log_internal.hpp"
#include "core/rpc_internal.hpp"
#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "llamapp/backend.hpp"

namespace llamapp {
namespace {

// "host:port" as ggml's RPC client parses it (at the first ':'), with a port it can use.
Result<void> check_endpoint(const std::string& endpoint) {
    const auto colon = endpoint.find(':');
    int port = 0;
    const char* first = endpoint.data() + (colon == std::string::npos ? 0 : colon + 1);
    const char* last = endpoint.data() + endpoint.size();
    const auto [end, ec] = std::from_chars(first, last, port);
    if (colon == 0 || colon == std::string::npos ||
        endpoint.find(':', colon + 1) != std::string::npos || ec != std::errc() || end != last ||
        port < 1 || port > 65535) {
        return fail(ErrorCode::invalid_argument,
                    "an RPC server is named host:port (an IPv4 address or a host name, and a port "
                    "from 1 to 65535)",
                    endpoint);
    }
    return {};
}

std::mutex registered_mutex;
std::set<std::string> registered;  // endpoints whose devices are registered with ggml

}  // namespace

Result<std::vector<DeviceInfo>> add_rpc_servers(std::span<const std::string> endpoints) {
    ensure_backend();
    for (const std::string& e : endpoints)
        if (auto ok = check_endpoint(e); !ok) return std::unexpected(ok.error());
    std::lock_guard lock(registered_mutex);
    // Every endpoint is asked first: nothing is registered unless all of them answer.
    std::vector<std::pair<std::string, ggml_backend_reg_t>> answered;
    for (const std::string& e : endpoints) {
        if (registered.contains(e) ||
            std::ranges::find(answered, e, &decltype(answered)::value_type::first) !=
                answered.end())
            continue;
        detail::LogCapture capture;
        const std::uint64_t failures = ggml_backend_rpc_failures(e.c_str());
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(e.c_str());
        if (!reg) {
            const bool unreachable = ggml_backend_rpc_failures(e.c_str()) != failures;
            std::string why = capture.first_error();
            if (why.empty()) why = unreachable ? "no answer" : "it has no devices";
            return fail(ErrorCode::network_error,
                        unreachable ? fmt::format("cannot use the RPC server at {}: {}", e, why)
                                    : fmt::format("the RPC server at {} offers no devices", e),
                        e);
        }
        answered.emplace_back(e, reg);
    }
    std::vector<DeviceInfo> added;
    for (auto& [endpoint, reg] : answered) {
        ggml_backend_register(reg);
        registered.insert(endpoint);
    }
    for (DeviceInfo& d : list_devices()) {
        if (d.backend != "RPC") continue;
        for (const auto& a : answered)
            if (d.description == a.first) added.push_back(d);
    }
    return added;
}

Result<void> run_rpc_server(const RpcServerOptions& options) {
    ensure_backend();
    if (options.host.empty() || options.host.find(':') != std::string::npos)
        return fail(ErrorCode::invalid_argument, "an IPv4 address or host name to listen on",
                    "host=" + options.host);
    if (options.port < 1 || options.port > 65535)
        return fail(ErrorCode::invalid_argument, "a port from 1 to 65535",
                    "port=" + std::to_string(options.port));
    if (options.threads < 0)
        return fail(ErrorCode::invalid_argument, "threads must be >= 0 (0: all cores)",
                    "threads=" + std::to_string(options.threads));
    std::vector<ggml_backend_dev_t> devices;
    for (const std::string& name : options.devices) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
        if (!dev || ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)) == std::string("RPC"))
            return fail(ErrorCode::invalid_argument,
                        "no such local device (`llamapp devices` lists them)", name);
        devices.push_back(dev);
    }
    if (devices.empty()) {  // the first GPU, else the CPU, as llama.cpp's rpc-server chooses
        ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU);
        if (!dev) dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU);
        if (!dev) dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (!dev) return fail(ErrorCode::internal, "no device to serve");
        devices.push_back(dev);
    }
    std::string cache;
    if (!options.cache_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(options.cache_dir, ec);
        if (ec)
            return fail(ErrorCode::io_error,
                        "cannot create the RPC cache directory: " + ec.message(),
                        options.cache_dir.string());
        cache = options.cache_dir.string();
    }
    const unsigned threads = options.threads > 0
                                 ? static_cast<unsigned>(options.threads)
                                 : std::max(1u, std::thread::hardware_concurrency());
    const std::string endpoint = fmt::format("{}:{}", options.host, options.port);
    // Returns only when it cannot listen (ggml logs why).
    detail::LogCapture capture;
    ggml_backend_rpc_start_server(endpoint.c_str(), cache.empty() ? nullptr : cache.c_str(),
                                  threads, devices.size(), devices.data());
    std::string why = capture.first_error();
    return fail(ErrorCode::io_error,
                "the RPC server stopped" + (why.empty() ? std::string() : ": " + why), endpoint);
}

namespace detail {

RpcWatch::RpcWatch(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {
    for (const std::string& e : endpoints_)
        failures_.push_back(ggml_backend_rpc_failures(e.c_str()));
}

std::optional<std::string> RpcWatch::lost() const {
    for (std::size_t i = 0; i < endpoints_.size(); ++i)
        if (ggml_backend_rpc_failures(endpoints_[i].c_str()) != failures_[i]) return endpoints_[i];
    return std::nullopt;
}

}  // namespace detail
}  // namespace llamapp
