// `llamapp ps`: the models a running server holds, with their memory and idle time (as `ollama
// ps` shows them), read from its GET /v1/models.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "llama_flags.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

using json = nlohmann::json;

struct PsFlags {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    bool all = false;
    bool json_out = false;
};

std::string idle_text(const json& meta) {
    if (!meta.contains("idle_seconds")) return "-";
    if (meta.value("active_requests", 0) > 0) return "in use";
    const double s = meta["idle_seconds"].get<double>();
    return s < 120 ? fmt::format("{:.0f}s", s) : fmt::format("{:.0f}m", s / 60);
}

std::string footprint_text(const json& meta) {
    std::uint64_t bytes = 0;
    const json devices = meta.value("footprint_bytes", json::object());
    for (const auto& [device, b] : devices.items())
        if (b.is_number_unsigned()) bytes += b.get<std::uint64_t>();
    return bytes == 0 ? "-" : human_bytes(bytes);
}

// Where to reach a server listening on `host`: its first address, and loopback for a wildcard.
std::string address_of(const std::string& host) {
    std::string first = host.substr(0, host.find(','));
    if (first.empty() || first == "0.0.0.0") return "127.0.0.1";
    if (first == "::" || first == "[::]") return "::1";
    return first;
}

int ps(const PsFlags& f) {
    httplib::Client client(address_of(f.host), f.port);
    client.set_connection_timeout(std::chrono::seconds(5));
    // serve takes a comma list of keys; any one of them opens the server.
    if (!f.api_key.empty()) client.set_bearer_token_auth(f.api_key.substr(0, f.api_key.find(',')));
    auto r = client.Get("/v1/models");
    if (!r)
        return report(
            Error{ErrorCode::io_error, "no server answered", fmt::format("{}:{}", f.host, f.port)});
    const json body = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !body.contains("data")) {
        const std::string why = body.is_object() && body.contains("error")
                                    ? body["error"].value("message", "")
                                    : r->body.substr(0, 200);
        return report(
            Error{ErrorCode::io_error, fmt::format("the server answered {}", r->status), why});
    }
    if (f.json_out) {
        std::printf("%s\n", body["data"].dump(2).c_str());
        return 0;
    }
    std::printf("%-28s %-10s %10s %7s %6s %8s\n", "ID", "STATUS", "MEMORY", "CONTEXT", "SLOTS",
                "IDLE");
    int shown = 0;
    for (const json& m : body["data"]) {
        const std::string status = m.value("status", "");
        const bool resident = status == "ready" || status == "loading" || status == "unloading";
        if (!resident && !f.all) continue;
        const json meta = m.value("meta", json::object());
        std::printf("%-28s %-10s %10s %7d %6d %8s\n", m.value("id", "").c_str(), status.c_str(),
                    footprint_text(meta).c_str(), meta.value("n_ctx", 0), meta.value("slots", 0),
                    idle_text(meta).c_str());
        ++shown;
    }
    if (shown == 0) std::printf("(no model is loaded; --all lists the known ones)\n");
    return 0;
}

}  // namespace

Runner add_ps(CLI::App& app) {
    auto flags = std::make_shared<PsFlags>();
    CLI::App* cmd = app.add_subcommand("ps", "the models a running server has loaded");
    // serve's flags and environment (LLAMA_ARG_HOST, LLAMA_ARG_PORT, LLAMA_API_KEY): a shell
    // that started the server with them finds it without repeating them.
    add_llama_option(*cmd, "--host", flags->host, "the server's address")->capture_default_str();
    add_llama_option(*cmd, "--port", flags->port, "the server's port")->capture_default_str();
    add_llama_option(*cmd, "--api-key", flags->api_key, "the server's API key");
    cmd->add_flag("--all", flags->all, "list known models that are not loaded too");
    cmd->add_flag("--json", flags->json_out, "print the server's model objects");
    return [flags]() -> int { return ps(*flags); };
}

}  // namespace llamapp::cli
