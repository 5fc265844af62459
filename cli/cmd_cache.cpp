// `llamapp cache`: look after a KV snapshot directory while no server uses it (a running server
// has the same operations at GET /cache, POST /cache/clear and POST /cache/prune).
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

// "90", "90s", "15m", "12h", "7d".
Result<std::chrono::seconds> parse_duration(const std::string& text) {
    const auto bad = [&] {
        return fail(ErrorCode::invalid_argument,
                    "a duration is a number of seconds, optionally with s, m, h or d", text);
    };
    std::int64_t n = -1;
    const char* end = text.data() + text.size();
    auto [rest, ec] = std::from_chars(text.data(), end, n);
    if (ec != std::errc{} || n < 0 || end - rest > 1) return bad();
    std::int64_t unit = 1;
    if (rest != end) {
        switch (*rest) {
            case 's':
                unit = 1;
                break;
            case 'm':
                unit = 60;
                break;
            case 'h':
                unit = 3600;
                break;
            case 'd':
                unit = 86400;
                break;
            default:
                return bad();
        }
    }
    if (n > (std::int64_t{1} << 40) / unit) return bad();
    return std::chrono::seconds{n * unit};
}

// Paths and session names need not be UTF-8: replaced, never thrown on.
void print_json(const nlohmann::json& j) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

nlohmann::json entry_json(const KvEntryInfo& e) {
    return {{"id", e.id},
            {"tokens", e.tokens.size()},
            {"bytes", e.payload_bytes},
            {"hits", e.hits},
            {"reason", to_string(e.reason)},
            {"session", e.session},
            {"created_ms", e.created_ms},
            {"last_used_ms", e.last_used_ms}};
}

std::string age(std::uint64_t unix_ms) {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const double s =
        std::max<double>(0, static_cast<double>(now) - static_cast<double>(unix_ms)) / 1000.0;
    if (s < 120) return fmt::format("{:.0f}s", s);
    if (s < 7200) return fmt::format("{:.0f}m", s / 60);
    if (s < 172800) return fmt::format("{:.0f}h", s / 3600);
    return fmt::format("{:.0f}d", s / 86400);
}

struct CacheCommandFlags {
    std::string action = "stats";
    std::string directory;
    std::string unused_for;
    bool json = false;
    std::string log_level = "warning";
};

void list_entries(const std::vector<KvEntryInfo>& entries, bool json) {
    if (json) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& e : entries) out.push_back(entry_json(e));
        print_json(out);
        return;
    }
    std::printf("%-16s %8s %11s %6s %-8s %9s  %s\n", "id", "tokens", "size", "hits", "reason",
                "last use", "session");
    for (const auto& e : entries) {
        std::printf("%-16s %8zu %11s %6llu %-8s %9s  %s\n", e.id.substr(0, 16).c_str(),
                    e.tokens.size(), human_bytes(e.payload_bytes).c_str(),
                    static_cast<unsigned long long>(e.hits),
                    std::string(to_string(e.reason)).c_str(),
                    (age(e.last_used_ms) + " ago").c_str(), e.session.c_str());
    }
}

void print_stats(const KvStore& s, const std::string& directory, bool json) {
    const KvTierStats tier = s.stats().tiers.at(0);
    std::uint64_t oldest = 0;
    for (const auto& e : s.entries())
        if (oldest == 0 || e.last_used_ms < oldest) oldest = e.last_used_ms;
    if (json) {
        // The keys of GET /cache's tiers, plus the directory and the least recent use.
        print_json({{"directory", directory},
                    {"entries", tier.entries},
                    {"bytes", tier.bytes},
                    {"corrupt_files", tier.corrupt_files},
                    {"oldest_use_ms", oldest}});
        return;
    }
    std::printf("directory        %s\nentries          %zu\nsize             %s\n",
                directory.c_str(), tier.entries, human_bytes(tier.bytes).c_str());
    if (oldest) std::printf("least recent use %s ago\n", age(oldest).c_str());
    if (tier.corrupt_files)
        std::printf("removed          %llu damaged files\n",
                    static_cast<unsigned long long>(tier.corrupt_files));
}

int run_cache(const CacheCommandFlags& flags) {
    LogLevel level = LogLevel::warning;
    parse_log_level(flags.log_level, level);
    set_log_level(level);
    std::chrono::seconds unused_for{0};
    if (flags.action == "prune") {
        if (flags.unused_for.empty())
            return report({ErrorCode::invalid_argument, "prune needs --unused-for", {}});
        auto d = parse_duration(flags.unused_for);
        if (!d) return report(d.error());
        unused_for = *d;
    } else if (!flags.unused_for.empty()) {
        return report({ErrorCode::invalid_argument, "--unused-for goes with prune only", {}});
    }
    if (!std::filesystem::is_directory(flags.directory))
        return report({ErrorCode::file_not_found, "no such directory", flags.directory});
    // Opening checks every header: damaged files and crash leftovers go now.
    KvStoreOptions options;
    options.ram_bytes = 0;
    options.directories.push_back({"disk", flags.directory, 0});
    auto store = KvStore::open(std::move(options));
    if (!store) return report(store.error());
    KvStore& s = **store;
    if (flags.action == "clear" || flags.action == "prune") {
        const std::size_t removed = flags.action == "clear" ? s.clear() : s.prune(unused_for);
        if (flags.json)
            print_json({{"removed", removed}});
        else
            std::printf("removed %zu %s\n", removed, removed == 1 ? "entry" : "entries");
    } else if (flags.action == "list") {
        list_entries(s.entries(), flags.json);
    } else {
        print_stats(s, flags.directory, flags.json);
    }
    return 0;
}

}  // namespace

Runner add_cache_command(CLI::App& app) {
    auto flags = std::make_shared<CacheCommandFlags>();
    CLI::App* cmd = app.add_subcommand(
        "cache", "show, list, prune or clear a KV snapshot directory (stop the server using it)");
    cmd->add_option("action", flags->action, "stats (default), list, prune or clear")
        ->check(CLI::IsMember({"stats", "list", "prune", "clear"}));
    cmd->add_option("--cache-disk", flags->directory, "the directory given to serve or run")
        ->required();
    cmd->add_option("--unused-for", flags->unused_for,
                    "prune: remove entries unused for this long (90s, 15m, 12h, 7d)");
    cmd->add_flag("--json", flags->json, "print JSON");
    cmd->add_option("--log-level", flags->log_level, "debug, info, warning, error or none")
        ->check(CLI::IsMember({"debug", "info", "warning", "error", "none"}));
    return [flags]() -> int { return run_cache(*flags); };
}

}  // namespace llamapp::cli
