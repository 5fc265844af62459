// Downloads of a pull's files: each on a thread of its own, into llama.cpp's cache layout and
// temporary names, each try resuming what arrived with a Range request. Ours rather than
// llama.cpp's downloader, which takes no proxy and waits 300 s on a connection that went quiet.
#include <fmt/core.h>
#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>

#include "hub/hub_http.hpp"
#include "hub/hub_transfer.hpp"

namespace llamapp::detail {
namespace {

namespace fs = std::filesystem;

bool cancelled(const HubOptions& options) {
    return options.cancelled && options.cancelled();
}

// How one try of a file ended.
struct Attempt {
    bool complete = false;
    int status = 0;        // the hub's answer; 0 when the connection failed or went quiet
    bool stalled = false;  // it failed after nothing arrived for the stall timeout
};

// One try: appends to the partial file from where it ends. `error` is set when trying again
// cannot help (a 4xx refusal, the disk, a cancel).
Attempt attempt_fetch(httplib::Client& client, const std::string& target,
                      const httplib::Headers& headers, const fs::path& partial, const HubFile& part,
                      const HubOptions& options, std::optional<Error>& error) {
    std::error_code ec;
    std::uint64_t have = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
    if (ec || have > part.size) have = 0;
    std::ofstream out(partial, std::ios::binary | (have ? std::ios::app : std::ios::trunc));
    if (!out) {
        error = Error{ErrorCode::io_error,
                      fmt::format("cannot write the download: {}", std::strerror(errno)),
                      partial.string()};
        return {};
    }
    httplib::Headers h = headers;
    if (have) h.emplace("Range", fmt::format("bytes={}-", have));
    HubProgress p{part.path, have, part.size};
    std::uint64_t reported = have;
    Attempt a;
    auto last_heard = std::chrono::steady_clock::now();
    auto res = client.Get(
        target, h,
        [&](const httplib::Response& r) {
            a.status = r.status;
            if (r.status == 200 && have) {  // the range was not honoured: start over
                out.close();
                out.open(partial, std::ios::binary | std::ios::trunc);
                p.downloaded = 0;
            }
            return r.status == 200 || r.status == 206;
        },
        [&](const char* data, std::size_t n) {
            last_heard = std::chrono::steady_clock::now();
            out.write(data, static_cast<std::streamsize>(n));
            if (!out) {
                error = Error{ErrorCode::io_error,
                              fmt::format("cannot write the download: {}", std::strerror(errno)),
                              partial.string()};
                return false;
            }
            p.downloaded += n;
            if (options.on_progress && p.downloaded - reported >= part.size / 100 + 1) {
                reported = p.downloaded;
                options.on_progress(p);
            }
            return !cancelled(options);
        });
    out.close();
    if (cancelled(options)) error = Error{ErrorCode::cancelled, "the pull was cancelled"};
    if (error) return a;
    if (a.status >= 400 && a.status < 500) {  // a refusal; a server's 5xx may pass on a retry
        error = hub_status_error(a.status, "the download was refused", part.path, 1);
        return a;
    }
    if (!res) {
        a.status = 0;
        // httplib reports a read that timed out as any failed read: the clock tells them apart.
        a.stalled = std::chrono::steady_clock::now() - last_heard >= options.stall_timeout * 9 / 10;
    }
    a.complete =
        res && a.status / 100 == 2 && (part.size == 0 || fs::file_size(partial, ec) == part.size);
    return a;
}

// Why a file did not arrive after `tries` tries, the last of which ended as `last`.
Error transfer_error(const Attempt& last, int tries, const HubOptions& options,
                     const fs::path& partial, const std::string& what) {
    if (last.status >= 500) return hub_status_error(last.status, "the download failed", what, 1);
    std::error_code ec;
    const std::string kept = fs::file_size(partial, ec) > 0 && !ec
                                 ? "; what arrived is kept for the next pull to resume"
                                 : "";
    const std::string why = last.stalled
                                ? fmt::format("the download stalled: nothing arrived for {} s",
                                              options.stall_timeout.count())
                                : "the connection to the hub broke";
    return Error{ErrorCode::network_error, fmt::format("{} ({} tries){}", why, tries, kept), what};
}

// One file into its blob path, each try resuming what arrived.
Result<void> transfer_file(const hf_cache::hf_file& e, const HubFile& part,
                           const HubOptions& options, const std::optional<HubProxy>& proxy,
                           const std::string& what) {
    const auto [origin, target] = split_url(e.url);
    httplib::Client client(origin);
    configure_hub_client(client, proxy, options.stall_timeout);
    const httplib::Headers headers = hub_headers(options);
    const fs::path partial = partial_download(e);
    std::error_code ec;
    fs::create_directories(partial.parent_path(), ec);
    for (int tries = 1;; ++tries) {
        std::optional<Error> error;
        const Attempt a = attempt_fetch(client, target, headers, partial, part, options, error);
        if (error) return std::unexpected(*error);
        if (a.complete) break;
        if (!transfer_retry.again(tries, a.status, options)) {
            if (cancelled(options))
                return fail(ErrorCode::cancelled, "the pull was cancelled", what);
            return std::unexpected(transfer_error(a, tries, options, partial, what));
        }
    }
    fs::rename(partial, e.local_path, ec);
    if (ec) return fail(ErrorCode::io_error, ec.message(), e.local_path);
    if (options.on_progress)
        options.on_progress(HubProgress{part.path, part.size, part.size, false, true});
    return {};
}

}  // namespace

fs::path partial_download(const hf_cache::hf_file& entry) {
    return entry.local_path + ".downloadInProgress";
}

Result<std::vector<hf_cache::hf_file>> cache_entries_of(const HubRepoFiles& listing,
                                                        const std::vector<HubFile>& parts) {
    const fs::path repo_dir = hub_cache_dir() / repo_folder(listing.repo);
    std::error_code ec;
    fs::create_directories(repo_dir / "refs", ec);
    std::ofstream ref(repo_dir / "refs" / "main", std::ios::trunc);
    ref << listing.commit;
    if (ec || !ref.flush())
        return fail(ErrorCode::io_error, "cannot record the revision in the cache",
                    (repo_dir / "refs").string());
    std::vector<hf_cache::hf_file> out;
    for (const HubFile& p : parts) {
        hf_cache::hf_file f;
        f.repo_id = listing.repo;
        f.path = p.path;
        f.oid = p.digest;
        f.url =
            fmt::format("{}{}/resolve/{}/{}", hub_endpoint(), listing.repo, listing.commit, p.path);
        f.final_path = (repo_dir / "snapshots" / listing.commit / p.path).string();
        f.local_path = !p.digest.empty() && !fs::exists(f.final_path, ec)
                           ? (repo_dir / "blobs" / p.digest).string()
                           : f.final_path;
        out.push_back(std::move(f));
    }
    return out;
}

Result<void> transfer_files(const std::vector<hf_cache::hf_file>& entries,
                            const std::vector<HubFile>& parts, const HubOptions& options,
                            const std::optional<HubProxy>& proxy, const std::string& what) {
    std::vector<std::future<Result<void>>> running;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].local_path == entries[i].final_path) continue;  // in the cache already
        running.push_back(std::async(std::launch::async, [&, i] {
            return transfer_file(entries[i], parts[i], options, proxy, what);
        }));
    }
    Result<void> outcome;
    for (auto& r : running)
        if (auto ok = r.get(); !ok && outcome) outcome = std::move(ok);
    return outcome;
}

}  // namespace llamapp::detail
