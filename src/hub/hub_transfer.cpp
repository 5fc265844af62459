// Downloads through a proxy. llama.cpp's downloader opens its own connections with no proxy
// setting, so behind a proxy this path stands in for it: the same cache layout and temporary
// names (so either resumes the other's partial file), a Range resume, three attempts.
#include <fmt/core.h>
#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "hub/hub_http.hpp"
#include "hub/hub_transfer.hpp"

namespace llamapp::detail {
namespace {

namespace fs = std::filesystem;

constexpr int attempts = 3;

bool cancelled(const HubOptions& options) {
    return options.cancelled && options.cancelled();
}

// One attempt: appends to the partial file from where it ends. `error` is set when retrying
// cannot help (a 4xx refusal, the disk, a cancel).
bool attempt_fetch(httplib::Client& client, const std::string& target,
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
        return false;
    }
    httplib::Headers h = headers;
    if (have) h.emplace("Range", fmt::format("bytes={}-", have));
    HubProgress p{part.path, have, part.size};
    std::uint64_t reported = have;
    int status = 0;
    auto res = client.Get(
        target, h,
        [&](const httplib::Response& r) {
            status = r.status;
            if (r.status == 200 && have) {  // the range was not honoured: start over
                out.close();
                out.open(partial, std::ios::binary | std::ios::trunc);
                p.downloaded = 0;
            }
            return r.status == 200 || r.status == 206;
        },
        [&](const char* data, std::size_t n) {
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
    if (error) return false;
    if (status >= 400 && status < 500) {  // a refusal; a server's 5xx may pass on a retry
        error = hub_status_error(status, "", part.path, 1);
        return false;
    }
    return res && (part.size == 0 || fs::file_size(partial, ec) == part.size);
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

Result<void> transfer_through_proxy(const std::vector<hf_cache::hf_file>& entries,
                                    const std::vector<HubFile>& parts, const HubOptions& options,
                                    const HubProxy& proxy) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const hf_cache::hf_file& e = entries[i];
        if (e.local_path == e.final_path) continue;  // in the cache already
        const auto [origin, target] = split_url(e.url);
        httplib::Client client(origin);
        configure_hub_client(client, proxy, std::chrono::seconds(60));
        const httplib::Headers headers = hub_headers(options);
        const fs::path partial = partial_download(e);
        std::error_code ec;
        fs::create_directories(partial.parent_path(), ec);
        bool done = false;
        for (int a = 0; a < attempts && !done; ++a) {
            if (a) std::this_thread::sleep_for(std::chrono::seconds(1));
            std::optional<Error> error;
            done = attempt_fetch(client, target, headers, partial, parts[i], options, error);
            if (error) return std::unexpected(*error);
        }
        if (!done)
            return fail(ErrorCode::network_error,
                        fmt::format("the download broke off {} times through the proxy {}:{}",
                                    attempts, proxy.host, proxy.port),
                        parts[i].path);
        fs::rename(partial, e.local_path, ec);
        if (ec) return fail(ErrorCode::io_error, ec.message(), e.local_path);
        if (options.on_progress)
            options.on_progress(
                HubProgress{parts[i].path, parts[i].size, parts[i].size, false, true});
    }
    return {};
}

}  // namespace llamapp::detail
