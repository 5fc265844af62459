// The hub commands: `pull`, `ls`, `rm` and `search`, and the resolution of a model argument
// that is a hub reference (run, info, embed, tokenize and serve take one where they take a file).
#include <fmt/core.h>
#include <log.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>

#include "commands.hpp"
#include "llamapp/hub.hpp"
#include "llamapp/model_manager.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace fs = std::filesystem;

namespace {

// Progress on stderr: a redrawn line on a terminal, otherwise one line per file at each 10%.
class ProgressPrinter {
  public:
    ProgressPrinter() {
        // llama.cpp's downloader writes its own lines (retries, failures) straight to stderr,
        // which would break into the redrawn line; the pull's own error says what went wrong.
        if (tty_) common_log_set_verbosity_thold(-1);
    }
    void operator()(const HubProgress& p) {
        std::lock_guard lock(mutex_);
        if (p.cached) {
            if (p.done) std::fprintf(stderr, "%s: already in the cache\n", p.file.c_str());
            return;
        }
        const int percent = p.total ? static_cast<int>(p.downloaded * 100 / p.total) : 0;
        if (tty_) {
            std::fprintf(stderr, "\r%s %3d%% %s / %s   ", p.file.c_str(), percent,
                         human_bytes(p.downloaded).c_str(), human_bytes(p.total).c_str());
            if (p.done) std::fprintf(stderr, "\n");
        } else {
            int& last = decile_.try_emplace(p.file, -1).first->second;
            const int decile = percent / 10;
            if (decile > last) {
                std::fprintf(stderr, "%s: %d%% of %s\n", p.file.c_str(), decile * 10,
                             human_bytes(p.total).c_str());
                last = decile;
            }
        }
        std::fflush(stderr);
    }

  private:
    std::mutex mutex_;
    const bool tty_ = isatty(STDERR_FILENO);
    std::map<std::string, int> decile_;  // the last tenth printed per file
};

void say_when_cached_copy(const PulledModel& pulled) {
    if (!pulled.hub_unreachable.empty())
        std::fprintf(stderr, "%s: the cached copy (%s; --offline does not try the hub)\n",
                     pulled.ref.to_string().c_str(), pulled.hub_unreachable.c_str());
}

Result<HubRef> repo_ref(const std::string& text) {
    auto ref = parse_model_ref(text);
    if (!ref) return std::unexpected(ref.error());
    if (ref->kind == ModelRefKind::name)
        return fail(ErrorCode::invalid_argument,
                    fmt::format("'{}' is not a hub repository: a hub reference is "
                                "owner/name[:QUANT]; `llamapp search {}` lists repositories",
                                text, ref->name.substr(0, ref->name.find(':'))),
                    text);
    if (ref->kind != ModelRefKind::hub)
        return fail(ErrorCode::invalid_argument, "a hub reference is owner/name[:file-or-quant]",
                    text);
    return ref->hub;
}

struct HubFlags {
    std::string ref;
    bool offline = false;
    int limit = 20;
    std::string models_dir;
};

int pull(const HubFlags& f) {
    auto ref = repo_ref(f.ref);
    if (!ref) return report(ref.error());
    auto pulled = hub_pull(*ref, hub_options(f.offline, true));
    if (!pulled) return report(pulled.error());
    say_when_cached_copy(*pulled);
    std::printf("%s\n", pulled->path.c_str());
    std::fprintf(stderr, "%s: %s in %zu file(s), %s downloaded\n", ref->to_string().c_str(),
                 human_bytes(pulled->bytes).c_str(), pulled->files.size(),
                 human_bytes(pulled->bytes_downloaded).c_str());
    return 0;
}

std::string when(std::filesystem::file_time_type t) {
    const std::time_t tt = std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(t));
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", std::localtime(&tt));
    return text;
}

// "owner/name:Q8_0" when no other cached file of the repository has that tag, as `ps` and the
// server's lists show a model pulled by its tag; else "owner/name:file.gguf".
std::string listed_name(const CachedModel& m, const std::vector<CachedModel>& all) {
    const auto same_tag = [&](const CachedModel& o) {
        return o.ref.repo == m.ref.repo && o.quant == m.quant;
    };
    if (m.quant.empty() || std::count_if(all.begin(), all.end(), same_tag) > 1)
        return m.ref.to_string();
    return HubRef{m.ref.repo, {}, m.quant}.to_string();
}

// The hub cache's models, and a models directory's when given.
int list_local(const HubFlags& f) {
    const char* row = "%-56s %10s %8s %-10s %-6s %s\n";
    std::printf(row, "NAME", "SIZE", "QUANT", "ARCH", "SOURCE", "MODIFIED");
    int shown = 0;
    const std::vector<CachedModel> cached = hub_cached_models();
    for (const CachedModel& m : cached) {
        std::printf(row, listed_name(m, cached).c_str(), human_bytes(m.bytes).c_str(),
                    m.quant.empty() ? "-" : m.quant.c_str(),
                    m.architecture.empty() ? "?" : m.architecture.c_str(), "hub",
                    when(m.modified).c_str());
        ++shown;
    }
    if (!f.models_dir.empty()) {
        auto specs = scan_models_dir(f.models_dir, ModelSpec{});
        if (!specs) return report(specs.error());
        // The manager reads each header when a model is added; nothing is loaded.
        auto manager = ModelManager::create(ModelManagerOptions{});
        if (!manager) return report(manager.error());
        for (ModelSpec& s : *specs) (void)(*manager)->add(std::move(s));
        for (const ModelListing& m : (*manager)->list()) {
            std::error_code ec;
            std::printf(row, m.id.c_str(), human_bytes(fs::file_size(m.path, ec)).c_str(), "-",
                        m.architecture.empty() ? "?" : m.architecture.c_str(), "dir",
                        when(fs::last_write_time(m.path, ec)).c_str());
            ++shown;
        }
    }
    if (shown == 0) std::printf("(no model: the hub cache is %s)\n", hub_cache_dir().c_str());
    return 0;
}

int remove(const HubFlags& f) {
    auto ref = repo_ref(f.ref);
    if (!ref) return report(ref.error());
    auto n = hub_remove(*ref);
    if (!n) return report(n.error());
    std::printf("removed %d file(s) of %s\n", *n, ref->to_string().c_str());
    return 0;
}

// "Q4_K_M Q8_0 (+1 more)": what a ref can name, quant tags where the names carry them.
std::string model_files(const std::vector<HubFile>& models) {
    if (models.empty()) return "-";
    std::vector<std::string> names;
    for (const HubFile& m : models) {
        const std::string name = m.quant.empty() ? m.path : m.quant;
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    constexpr std::size_t shown = 6;
    std::string out;
    for (std::size_t i = 0; i < std::min(names.size(), shown); ++i)
        out += (i ? " " : "") + names[i];
    if (names.size() > shown) out += fmt::format(" (+{} more)", names.size() - shown);
    return out;
}

int search(const HubFlags& f) {
    auto hits = hub_search(f.ref, f.limit, hub_options(f.offline, false));
    if (!hits) return report(hits.error());
    std::printf("%-52s %10s %6s  %s\n", "REPOSITORY", "DOWNLOADS", "LIKES", "GGUF FILES");
    for (const HubSearchHit& h : *hits)
        std::printf("%-52s %10llu %6llu  %s\n", h.repo.c_str(),
                    static_cast<unsigned long long>(h.downloads),
                    static_cast<unsigned long long>(h.likes), model_files(h.models).c_str());
    if (hits->empty()) std::printf("(no GGUF repository matches)\n");
    return 0;
}

int list_remote(const HubFlags& f) {
    auto ref = repo_ref(f.ref);
    if (!ref) return report(ref.error());
    auto listing = hub_list_files(ref->repo, hub_options(f.offline, false));
    if (!listing) return report(listing.error());
    std::printf("%-60s %10s %8s %6s\n", "FILE", "SIZE", "QUANT", "PARTS");
    for (const HubFile& m : listing->models)
        std::printf("%-60s %10s %8s %6d\n", m.path.c_str(), human_bytes(m.model_bytes).c_str(),
                    m.quant.empty() ? "-" : m.quant.c_str(), m.split_count);
    return 0;
}

}  // namespace

HubOptions hub_options(bool offline, bool progress) {
    HubOptions o = hub_options_from_environment();
    if (offline) o.offline = true;
    if (progress) {
        auto printer = std::make_shared<ProgressPrinter>();
        o.on_progress = [printer](const HubProgress& p) { (*printer)(p); };
    }
    return o;
}

std::optional<HubRef> hub_model_ref(const std::string& text) {
    std::error_code ec;
    if (fs::exists(text, ec)) return std::nullopt;
    auto ref = parse_model_ref(text);
    if (!ref || ref->kind != ModelRefKind::hub) return std::nullopt;
    return ref->hub;
}

Result<fs::path> resolve_model(const std::string& text, bool offline) {
    auto ref = hub_model_ref(text);
    if (!ref) return fs::path(text);
    auto pulled = hub_pull(*ref, hub_options(offline, true));
    if (!pulled) return std::unexpected(pulled.error());
    say_when_cached_copy(*pulled);
    return pulled->path;
}

Runner add_hub_commands(CLI::App& app) {
    auto flags = std::make_shared<HubFlags>();
    CLI::App* p = app.add_subcommand("pull", "download a model from the Hugging Face hub");
    p->add_option("ref", flags->ref, "owner/repo, owner/repo:QUANT or owner/repo:file.gguf")
        ->required();
    p->add_flag("--offline", flags->offline, "only resolve from the cache");
    CLI::App* l = app.add_subcommand("ls", "the models in the hub cache, or a repository's files");
    l->alias("list");  // Ollama's name for it
    l->add_option("repo", flags->ref, "owner/repo: list its GGUF files on the hub instead");
    l->add_option("--models-dir", flags->models_dir, "list a models directory's models too");
    CLI::App* r = app.add_subcommand("rm", "remove a model (or a whole repository) from the cache");
    r->add_option("ref", flags->ref, "owner/repo, owner/repo:QUANT or owner/repo:file.gguf")
        ->required();
    CLI::App* s = app.add_subcommand("search", "GGUF repositories on the hub matching a query");
    s->add_option("query", flags->ref, "words of the repository's name")->required();
    s->add_option("--limit", flags->limit, "at most this many")->capture_default_str();
    return [flags, p, l, r, s]() -> int {
        if (p->parsed()) return pull(*flags);
        if (l->parsed()) return flags->ref.empty() ? list_local(*flags) : list_remote(*flags);
        if (r->parsed()) return remove(*flags);
        if (s->parsed()) return search(*flags);
        return 1;
    };
}

}  // namespace llamapp::cli
