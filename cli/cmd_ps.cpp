// `llamapp ps` and `llamapp stop`: the models a running server holds, with their memory and idle
// time (as `ollama ps` shows them, from its GET /v1/models), and unloading one of them (POST
// /models/unload).
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "options.hpp"
#include "server_client.hpp"

namespace llamapp::cli {

namespace {

using json = nlohmann::json;

struct PsFlags {
    ServerAddress server;
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

int ps(const PsFlags& f) {
    auto body = ask_server(f.server, "/v1/models");
    if (!body) return report(body.error());
    if (!body->contains("data") || !(*body)["data"].is_array())
        return report(Error{ErrorCode::io_error, "the server's model list has no data"});
    if (f.json_out) {
        std::printf("%s\n", (*body)["data"].dump(2).c_str());
        return 0;
    }
    std::printf("%-28s %-10s %10s %7s %6s %8s\n", "ID", "STATUS", "MEMORY", "CONTEXT", "SLOTS",
                "IDLE");
    int shown = 0;
    for (const json& m : (*body)["data"]) {
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

struct StopFlags {
    ServerAddress server;
    std::string model;
    double grace_seconds = -1;
};

// As `ollama stop`: quiet when the model was unloaded.
int stop(const StopFlags& f) {
    json body = {{"model", f.model}};
    if (f.grace_seconds >= 0) body["grace_seconds"] = f.grace_seconds;
    auto unloaded = ask_server(f.server, "/models/unload", &body);
    return unloaded ? 0 : report(unloaded.error());
}

}  // namespace

Runner add_ps(CLI::App& app) {
    auto flags = std::make_shared<PsFlags>();
    CLI::App* cmd = app.add_subcommand("ps", "the models a running server has loaded");
    add_server_flags(*cmd, flags->server);
    cmd->add_flag("--all", flags->all, "list known models that are not loaded too");
    cmd->add_flag("--json", flags->json_out, "print the server's model objects");
    return [flags]() -> int { return ps(*flags); };
}

Runner add_stop(CLI::App& app) {
    auto flags = std::make_shared<StopFlags>();
    CLI::App* cmd = app.add_subcommand("stop", "unload a model from a running server");
    cmd->add_option("model", flags->model, "the model, by any name ps or ls shows")->required();
    add_server_flags(*cmd, flags->server);
    cmd->add_option("--grace", flags->grace_seconds,
                    "seconds its requests in flight may finish (default: the server's)")
        ->check(CLI::Range(0.0, 3600.0));
    return [flags]() -> int { return stop(*flags); };
}

}  // namespace llamapp::cli
