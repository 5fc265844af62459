// Pulling from the hub into llama.cpp's cache layout (hub_transfer.cpp downloads) with a digest
// check before a file enters the cache; the cache's listing and removal.
#include <fcntl.h>
#include <fmt/core.h>
#include <hf-cache.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "core/file_digest.hpp"
#include "core/gguf_probe.hpp"
#include "hub/hub_internal.hpp"
#include "hub/hub_transfer.hpp"
#include "llamapp/fingerprint.hpp"

namespace llamapp {
namespace {

namespace fs = std::filesystem;

bool env_true(const char* name) {
    const char* v = std::getenv(name);
    if (!v) return false;
    const std::string s(v);
    return s == "1" || s == "true" || s == "TRUE" || s == "yes" || s == "on" || s == "ON";
}

// Fails closed: no digest, another size or other bytes delete the download. A file that cannot
// be read (EIO) is kept: its bytes may be right, and the next pull checks them again.
Result<void> verify(const HubFile& expected, const fs::path& blob) {
    std::error_code ec;
    const auto size = fs::file_size(blob, ec);
    Result<std::string> digest = fail(ErrorCode::checksum_mismatch, "");
    if (expected.digest.size() == 64)
        digest = file_sha256(blob);
    else if (expected.digest.size() == 40)
        digest = detail::file_git_blob_id(blob);
    if (!digest && digest.error().code == ErrorCode::io_error)
        return fail(ErrorCode::io_error,
                    fmt::format("cannot read the download to check its digest ({}); it is kept "
                                "for the next pull to check again",
                                digest.error().describe()),
                    expected.path);
    std::string why;
    if (ec)
        why = "the download is missing";
    else if (expected.size && size != expected.size)
        why = fmt::format("{} bytes arrived where the hub lists {}", size, expected.size);
    else if (expected.digest.empty())
        why = "the hub lists no digest for it";
    else if (!digest)
        why = digest.error().describe();
    else if (*digest != expected.digest)
        why = fmt::format("its digest is {} where the hub lists {}", *digest, expected.digest);
    if (why.empty()) return {};
    fs::remove(blob, ec);
    return fail(ErrorCode::checksum_mismatch, fmt::format("{}; the file was deleted", why),
                expected.path);
}

std::string mebibytes(std::uint64_t bytes) {
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// Bytes still to arrive for the files not in the cache yet, what a partial download holds
// counted as arrived.
std::uint64_t bytes_to_transfer(const std::vector<hf_cache::hf_file>& entries,
                                const std::vector<HubFile>& parts) {
    std::uint64_t need = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].local_path == entries[i].final_path) continue;
        std::error_code ec;
        const std::uint64_t have = fs::file_size(detail::partial_download(entries[i]), ec);
        need += parts[i].size - std::min<std::uint64_t>(ec ? 0 : have, parts[i].size);
    }
    return need;
}

// Refuses a pull the disk cannot hold before a byte is transferred.
Result<void> check_space(std::uint64_t need, const fs::path& dir) {
    std::error_code ec;
    const fs::space_info space = fs::space(dir, ec);
    if (ec || need <= space.available) return {};
    return fail(ErrorCode::io_error,
                fmt::format("the download needs {} more and the disk has {} free", mebibytes(need),
                            mebibytes(space.available)),
                dir.string());
}

// A cache that cannot take a write (a full or read-only disk) fails a pull before it starts, with
// the disk's reason: otherwise the first write it breaks, llama.cpp's cache listing, would be
// reported as a listing that changed.
Result<void> check_writable(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path probe = dir / fmt::format(".llamapp-write-probe-{}", ::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    std::optional<std::string> why;
    if (fd < 0) {
        why = std::strerror(errno);
    } else {
        const char byte = 0;
        if (::write(fd, &byte, 1) != 1) why = std::strerror(errno);
        ::close(fd);
        fs::remove(probe, ec);
    }
    if (!why) return {};
    return fail(ErrorCode::io_error, fmt::format("cannot write to the hub cache: {}", *why),
                dir.string());
}

// What the cache holds per repository: its files as a listing, and where each one is.
struct CachedRepo {
    HubRepoFiles listing;
    std::map<std::string, fs::path> location;
};

std::map<std::string, CachedRepo> cached_repos(const std::string& repo = {}) {
    std::map<std::string, CachedRepo> repos;
    for (const hf_cache::hf_file& f : hf_cache::get_cached_files(repo)) {
        std::error_code ec;
        CachedRepo& r =
            repos.try_emplace(f.repo_id, CachedRepo{HubRepoFiles{f.repo_id}, {}}).first->second;
        r.listing.files.push_back(HubFile{f.path, fs::file_size(f.final_path, ec)});
        r.location[f.path] = f.final_path;
    }
    for (auto& [name, r] : repos) detail::classify_files(r.listing);
    return repos;
}

// One pull of a repository at a time across processes (and threads): the second waits, then
// finds the first one's files in the cache instead of writing into the same temporary file.
class PullLock {
  public:
    static Result<PullLock> take(const std::string& repo) {
        const fs::path dir = hub_cache_dir() / ".locks";
        std::error_code ec;
        fs::create_directories(dir, ec);
        const fs::path path = dir / (detail::repo_folder(repo) + ".llamapp.lock");
        const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (fd < 0) return fail(ErrorCode::io_error, "cannot open the pull lock", path.string());
        if (::flock(fd, LOCK_EX) != 0) {
            ::close(fd);
            return fail(ErrorCode::io_error, "cannot lock the pull lock", path.string());
        }
        return PullLock(fd);
    }
    PullLock(PullLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    PullLock& operator=(PullLock&&) = delete;
    ~PullLock() {
        if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }

  private:
    explicit PullLock(int fd) : fd_(fd) {}
    int fd_;
};

// A ref resolved from the cache alone.
Result<PulledModel> pull_from_cache(const HubRef& ref) {
    auto repos = cached_repos(ref.repo);
    if (repos.empty())
        return fail(ErrorCode::not_found, "the repository is not in the cache", ref.to_string());
    const CachedRepo& r = repos.begin()->second;
    auto chosen = hub_choose_file(ref, r.listing);
    if (!chosen) return std::unexpected(chosen.error());
    auto parts = detail::parts_of(*chosen, r.listing);
    if (!parts) return std::unexpected(parts.error());
    PulledModel pulled{ref};
    for (const HubFile& p : *parts) {
        pulled.files.push_back(r.location.at(p.path));
        pulled.bytes += p.size;
    }
    pulled.path = pulled.files.front();
    return pulled;
}

}  // namespace

namespace detail {

std::string repo_folder(std::string_view repo) {
    std::string folder = "models--" + std::string(repo);
    for (std::size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/'))
        folder.replace(at, 1, "--");
    return folder;
}

}  // namespace detail

fs::path hub_cache_dir() {
    return hf_cache::get_cache_path();
}

HubOptions hub_options_from_environment() {
    HubOptions o;
    if (const char* t = std::getenv("HF_TOKEN")) o.token = t;
    o.offline = env_true("HF_HUB_OFFLINE") || env_true("LLAMA_OFFLINE");
    return o;
}

Result<PulledModel> hub_pull(const HubRef& ref, const HubOptions& options) {
    if (options.offline) return pull_from_cache(ref);
    if (auto ok = check_writable(hub_cache_dir()); !ok) return std::unexpected(ok.error());
    auto listing = hub_list_files(ref.repo, options);
    if (!listing && listing.error().code == ErrorCode::network_error) {
        // The hub cannot be reached: what the cache holds is what Ollama would run.
        auto cached = pull_from_cache(ref);
        if (!cached) return std::unexpected(listing.error());
        cached->hub_unreachable = listing.error().describe();
        return cached;
    }
    if (!listing) return std::unexpected(listing.error());
    auto chosen = hub_choose_file(ref, *listing);
    if (!chosen) return std::unexpected(chosen.error());
    auto parts = detail::parts_of(*chosen, *listing);
    if (!parts) return std::unexpected(parts.error());
    auto proxy = detail::hub_proxy_for(detail::hub_endpoint());
    if (!proxy) return std::unexpected(proxy.error());
    auto lock = PullLock::take(ref.repo);
    if (!lock) return std::unexpected(lock.error());
    // The entries come from our listing, not llama.cpp's (which leaves out a token it does not
    // take for a hub token, so that a gated repository's listing would fail half way).
    auto entries = detail::cache_entries_of(*listing, *parts);
    if (!entries) return std::unexpected(entries.error());
    if (auto ok = check_space(bytes_to_transfer(*entries, *parts), hub_cache_dir()); !ok)
        return std::unexpected(ok.error());
    auto sent = detail::transfer_files(*entries, *parts, options, *proxy, ref.to_string());
    if (!sent) return std::unexpected(sent.error());

    PulledModel pulled{ref};
    for (std::size_t i = 0; i < entries->size(); ++i) {
        const auto& e = (*entries)[i];
        if (e.local_path != e.final_path) {
            if (auto ok = verify((*parts)[i], e.local_path); !ok)
                return std::unexpected(ok.error());
            pulled.bytes_downloaded += (*parts)[i].size;
            try {
                hf_cache::finalize_file(e);
            } catch (const std::exception& ex) {
                return fail(ErrorCode::io_error, ex.what(), e.final_path);
            }
        }
        pulled.files.push_back(e.final_path);
        pulled.bytes += (*parts)[i].size;
    }
    pulled.path = pulled.files.front();
    return pulled;
}

std::vector<CachedModel> hub_cached_models() {
    std::vector<CachedModel> out;
    for (const auto& [repo, r] : cached_repos()) {
        for (const HubFile& m : r.listing.models) {
            // A split model with a part missing is not loadable.
            if (!detail::parts_of(m, r.listing)) continue;
            CachedModel c{HubRef{repo, m.path}, r.location.at(m.path), m.model_bytes};
            std::error_code ec;
            c.modified = fs::last_write_time(c.path, ec);
            c.quant = m.quant;
            if (auto header = detail::probe_gguf(c.path)) c.architecture = header->architecture;
            out.push_back(std::move(c));
        }
    }
    return out;
}

Result<int> hub_remove(const HubRef& ref) {
    const auto cached = hf_cache::get_cached_files(ref.repo);
    if (cached.empty())
        return fail(ErrorCode::not_found, "the repository is not in the cache", ref.repo);
    if (ref.file.empty() && ref.quant.empty()) {
        if (!hf_cache::remove_cached_repo(ref.repo))
            return fail(ErrorCode::io_error, "the repository could not be removed", ref.repo);
        return static_cast<int>(cached.size());
    }
    auto pulled = pull_from_cache(ref);
    if (!pulled) return std::unexpected(pulled.error());
    // Snapshot entries are links into blobs/; a blob goes when no other entry links to it.
    std::set<fs::path> keep;
    std::error_code ec;
    const std::set<fs::path> going(pulled->files.begin(), pulled->files.end());
    for (const auto& f : cached)
        if (!going.contains(f.final_path)) keep.insert(fs::weakly_canonical(f.final_path, ec));
    int removed = 0;
    for (const fs::path& f : pulled->files) {
        const fs::path target = fs::weakly_canonical(f, ec);
        if (fs::remove(f, ec)) ++removed;
        if (target != f && !keep.contains(target)) fs::remove(target, ec);
    }
    return removed;
}

}  // namespace llamapp
