// The hub's JSON API: search and file listings, with the hub's answers turned into typed errors.
#include <fmt/core.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "hub/hub_http.hpp"

namespace llamapp {
namespace detail {
namespace {

constexpr int max_waits = 2;
constexpr long max_wait_seconds = 10;

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

long retry_after_seconds(const httplib::Result& res) {
    const std::string v = res->get_header_value("Retry-After");
    char* end = nullptr;
    const long s = std::strtol(v.c_str(), &end, 10);
    return end != v.c_str() && s >= 0 ? s : 1;
}

Result<nlohmann::json> answer(const httplib::Result& res, const std::string& what) {
    const int status = res->status;
    std::string detail = res->body.substr(0, 200);
    if (auto j = nlohmann::json::parse(res->body, nullptr, false);
        j.is_object() && j.contains("error") && j["error"].is_string())
        detail = j["error"].get<std::string>();
    if (status == 200) {
        auto j = nlohmann::json::parse(res->body, nullptr, false);
        if (j.is_discarded())
            return fail(ErrorCode::network_error, "the hub answered with malformed JSON", what);
        return j;
    }
    return std::unexpected(hub_status_error(status, detail, what, retry_after_seconds(res)));
}

}  // namespace

Error hub_status_error(int status, std::string_view detail, const std::string& what,
                       long retry_after) {
    if (status == 401 || status == 403)
        return Error{ErrorCode::unauthorized,
                     fmt::format("the hub refused access ({}): a gated or private repository "
                                 "needs HF_TOKEN set to a token that may read it, and a misspelt "
                                 "one answers the same",
                                 status),
                     what};
    if (status == 404) return Error{ErrorCode::not_found, "the hub has no such repository", what};
    if (status == 429)
        return Error{ErrorCode::rate_limited, "the hub asks to slow down",
                     fmt::format("retry after {} s", retry_after)};
    return Error{ErrorCode::network_error, fmt::format("the hub answered {}: {}", status, detail),
                 what};
}

std::string hub_endpoint() {
    std::string ep = env("MODEL_ENDPOINT");
    if (ep.empty()) ep = env("HF_ENDPOINT");
    if (ep.empty()) ep = "https://huggingface.co/";
    if (ep.back() != '/') ep += '/';
    return ep;
}

Result<nlohmann::json> hub_get_json(const std::string& path, const std::string& what,
                                    const HubOptions& options) {
    if (options.offline)
        return fail(ErrorCode::network_error, "offline: the hub is not asked", what);
    const std::string ep = hub_endpoint();
    const std::size_t scheme = ep.find("://");
    if (scheme == std::string::npos ||
        (ep.compare(0, scheme, "http") && ep.compare(0, scheme, "https")))
        return fail(ErrorCode::invalid_argument, "the hub endpoint is an http(s) URL", ep);
    auto proxy = hub_proxy_for(ep);
    if (!proxy) return std::unexpected(proxy.error());
    const auto [origin, base] = split_url(ep);
    httplib::Client client(origin);
    configure_hub_client(client, *proxy, std::chrono::seconds(30));
    httplib::Headers headers = hub_headers(options);
    headers.emplace("Accept", "application/json");
    const std::string target = base + path;
    int waits = 0;
    for (int tries = 1;; ++tries) {
        auto res = client.Get(target, headers);
        // A 429 with a short Retry-After is waited out below; a longer one is the caller's.
        const int status = res ? res->status : 0;
        const bool failed = !res || status >= 500 || status == 408;
        if (failed && request_retry.again(tries, status, options)) continue;
        if (!res) {
            if (options.cancelled && options.cancelled())
                return fail(ErrorCode::cancelled, "cancelled while waiting for the hub");
            return fail(ErrorCode::network_error,
                        fmt::format("the hub cannot be reached ({}; {} tries)",
                                    httplib::to_string(res.error()), tries),
                        ep);
        }
        if (res->status == 429 && waits < max_waits) {
            const long wait = retry_after_seconds(res);
            if (wait <= max_wait_seconds) {
                ++waits;
                if (!wait_for_retry(wait, options))
                    return fail(ErrorCode::cancelled, "cancelled while waiting for the hub");
                continue;
            }
        }
        return answer(res, what);
    }
}

bool wait_for_retry(long seconds, const HubOptions& options) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
        if (options.cancelled && options.cancelled()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

std::string quant_of(std::string_view path) {
    std::string stem = split_of(path).prefix;
    if (stem.size() > 5 && upper(stem.substr(stem.size() - 5)) == ".GGUF")
        stem.resize(stem.size() - 5);
    const std::size_t cut = stem.find_last_of("-./");
    const std::string tail = upper(cut == std::string::npos ? stem : stem.substr(cut + 1));
    const bool q = (tail.starts_with("Q") || tail.starts_with("IQ") || tail.starts_with("TQ")) &&
                   tail.find_first_of("0123456789") != std::string::npos;
    const bool f = tail == "F16" || tail == "F32" || tail == "BF16" || tail.starts_with("MXFP4");
    return q || f ? tail : "";
}

SplitName split_of(std::string_view path) {
    // "<prefix>-00001-of-00003.gguf"
    constexpr std::string_view tail = "-00001-of-00003.gguf";
    SplitName s{std::string(path)};
    if (path.size() <= tail.size()) return s;
    const std::string_view end = path.substr(path.size() - tail.size());
    const auto digits = [&](std::size_t at) {
        return std::all_of(end.begin() + at, end.begin() + at + 5,
                           [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    };
    if (end[0] != '-' || !digits(1) || end.substr(6, 4) != "-of-" || !digits(10) ||
        upper(end.substr(15)) != ".GGUF")
        return s;
    s.part = std::atoi(std::string(end.substr(1, 5)).c_str());
    s.count = std::atoi(std::string(end.substr(10, 5)).c_str());
    s.prefix = std::string(path.substr(0, path.size() - tail.size()));
    return s;
}

bool is_model_file(std::string_view path) {
    const std::string p = upper(path);
    if (!p.ends_with(".GGUF")) return false;
    const std::size_t slash = p.find_last_of('/');
    const std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
    for (const char* sidecar : {"MMPROJ", "IMATRIX"})
        if (base.find(sidecar) != std::string::npos) return false;
    for (const char* draft : {"MTP-", "EAGLE3-", "DFLASH-", "DSPARK-"})
        if (base.starts_with(draft)) return false;
    return split_of(path).part == 1;
}

void classify_files(HubRepoFiles& listing) {
    listing.models.clear();
    for (HubFile& f : listing.files) {
        f.quant = quant_of(f.path);
        f.split_count = split_of(f.path).count;
        if (is_model_file(f.path)) listing.models.push_back(f);
    }
    for (HubFile& m : listing.models)
        if (auto parts = parts_of(m, listing))
            for (const HubFile& p : *parts) m.model_bytes += p.size;
}

Result<std::vector<HubFile>> parts_of(const HubFile& first, const HubRepoFiles& listing) {
    const SplitName s = split_of(first.path);
    if (s.count <= 1) return std::vector<HubFile>{first};
    std::vector<HubFile> parts;
    for (int i = 1; i <= s.count; ++i) {
        const std::string name = fmt::format("{}-{:05d}-of-{:05d}.gguf", s.prefix, i, s.count);
        auto it = std::find_if(listing.files.begin(), listing.files.end(),
                               [&](const HubFile& f) { return upper(f.path) == upper(name); });
        if (it == listing.files.end())
            return fail(ErrorCode::not_found,
                        fmt::format("part {} of {} of the model is missing", i, s.count), name);
        parts.push_back(*it);
    }
    return parts;
}

}  // namespace detail

Result<std::vector<HubSearchHit>> hub_search(std::string_view query, int limit,
                                             const HubOptions& options) {
    if (limit < 1 || limit > 1000)
        return fail(ErrorCode::invalid_argument, "limit is 1 to 1000", std::to_string(limit));
    auto j = detail::hub_get_json(
        fmt::format(
            "api/models?search={}&filter=gguf&sort=downloads&direction=-1&limit={}&full=true",
            httplib::encode_query_component(std::string(query)), limit),
        std::string(query), options);
    if (!j) return std::unexpected(j.error());
    if (!j->is_array()) return fail(ErrorCode::network_error, "the hub's search is not a list");
    std::vector<HubSearchHit> hits;
    for (const auto& m : *j) {
        if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
        HubSearchHit h;
        h.repo = m["id"].get<std::string>();
        h.downloads = m.value("downloads", std::uint64_t{0});
        h.likes = m.value("likes", std::uint64_t{0});
        h.last_modified = m.value("lastModified", std::string());
        HubRepoFiles files{h.repo};
        for (const auto& sibling : m.value("siblings", nlohmann::json::array()))
            if (sibling.is_object() && sibling.contains("rfilename") &&
                sibling["rfilename"].is_string())
                files.files.push_back(HubFile{sibling["rfilename"].get<std::string>()});
        detail::classify_files(files);
        h.models = std::move(files.models);
        hits.push_back(std::move(h));
    }
    return hits;
}

namespace {

// A git object id (40 hex digits) or a SHA-256 (64).
bool hex_id(const std::string& s) {
    return (s.size() == 40 || s.size() == 64) &&
           s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

Result<HubRepoFiles> hub_list_files(std::string_view repo, const HubOptions& options) {
    auto ref = parse_model_ref(repo);
    if (!ref) return std::unexpected(ref.error());
    if (ref->kind != ModelRefKind::hub || !ref->hub.file.empty() || !ref->hub.quant.empty())
        return fail(ErrorCode::invalid_argument, "a repository is owner/name", std::string(repo));
    HubRepoFiles listing{std::string(repo)};
    auto refs =
        detail::hub_get_json(fmt::format("api/models/{}/refs", repo), listing.repo, options);
    if (!refs) return std::unexpected(refs.error());
    for (const auto& b : refs->value("branches", nlohmann::json::array())) {
        if (!b.is_object() || !b.contains("targetCommit") || !b["targetCommit"].is_string())
            continue;
        const bool main = b.value("name", std::string()) == "main";
        if (listing.commit.empty() || main) listing.commit = b["targetCommit"].get<std::string>();
        if (main) break;
    }
    if (listing.commit.empty())
        return fail(ErrorCode::not_found, "the repository has no branch", std::string(repo));
    // The commit and the digests become directory and file names in the cache.
    if (!hex_id(listing.commit))
        return fail(ErrorCode::network_error, "the hub named a commit that is not a hex id",
                    listing.commit.substr(0, 80));
    auto tree = detail::hub_get_json(
        fmt::format("api/models/{}/tree/{}?recursive=true", repo, listing.commit), listing.repo,
        options);
    if (!tree) return std::unexpected(tree.error());
    if (!tree->is_array())
        return fail(ErrorCode::network_error, "the hub's file list is not a list");
    for (const auto& item : *tree) {
        if (!item.is_object() || item.value("type", std::string()) != "file" ||
            !item.contains("path") || !item["path"].is_string())
            continue;
        HubFile f{item["path"].get<std::string>()};
        // A model file must be one a reference could name: nothing that climbs out of the cache.
        if (f.path.ends_with(".gguf")) {
            auto named = parse_model_ref(fmt::format("{}:{}", repo, f.path));
            if (!named || named->hub.file != f.path) continue;
        }
        const auto& lfs = item.contains("lfs") ? item["lfs"] : item;
        f.size = lfs.value("size", item.value("size", std::uint64_t{0}));
        f.digest = lfs.value("oid", item.value("oid", std::string()));
        if (!hex_id(f.digest)) continue;  // nothing to check the bytes against, or not a name
        listing.files.push_back(std::move(f));
    }
    detail::classify_files(listing);
    return listing;
}

Result<HubFile> hub_choose_file(const HubRef& ref, const HubRepoFiles& listing) {
    const auto& models = listing.models;
    if (!ref.file.empty()) {
        for (const HubFile& f : listing.files)
            if (f.path == ref.file) return f;
        return fail(ErrorCode::not_found, "the repository has no such file",
                    fmt::format("{}:{}", listing.repo, ref.file));
    }
    if (models.empty())
        return fail(ErrorCode::not_found, "the repository has no GGUF model file", listing.repo);
    const auto with_tag = [&](std::string_view tag) {
        std::vector<HubFile> out;
        const std::string t = detail::upper(tag);
        for (const HubFile& f : models)
            if (f.quant == t) out.push_back(f);
        return out;
    };
    if (ref.quant.empty()) {
        for (const char* preferred : {"Q4_K_M", "Q8_0"})
            if (auto found = with_tag(preferred); !found.empty()) return found.front();
        return models.front();
    }
    const std::vector<HubFile> found = with_tag(ref.quant);
    if (found.size() == 1) return found.front();
    std::string names;
    for (const HubFile& f : found.empty() ? models : found)
        names += (names.empty() ? "" : ", ") + f.path;
    if (found.empty())
        return fail(
            ErrorCode::not_found,
            fmt::format("no model file has the tag {}; the repository has: {}", ref.quant, names),
            listing.repo);
    return fail(ErrorCode::invalid_argument,
                fmt::format("the tag {} matches {} files: {}; name one as {}:<file>", ref.quant,
                            found.size(), names, listing.repo),
                listing.repo);
}

}  // namespace llamapp
