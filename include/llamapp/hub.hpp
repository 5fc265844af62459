// The Hugging Face hub as a source of models: search, list a repository's GGUF files, pull one
// into the shared hub cache (the layout llama.cpp's -hf and huggingface_hub use, so each sees
// the other's downloads), list and remove what is cached.
//
// Where things are, read from the environment as llama.cpp reads it:
//   endpoint  MODEL_ENDPOINT, else HF_ENDPOINT, else https://huggingface.co/
//   cache     LLAMA_CACHE, else HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
//             (read once per process, on first use)
//   token     HF_TOKEN (see HubOptions)
//   offline   HF_HUB_OFFLINE=1 or LLAMA_OFFLINE=1
//
// Every downloaded file is checked against the digest the hub lists for it (SHA-256 for LFS
// files, the git blob id otherwise) before it enters the cache; a file without a digest, or
// one that does not match, is deleted and the pull fails. Threads: every call may run on any
// thread. Pulls of one repository take turns, across processes too (a lock file in the cache):
// the second finds the first one's files in the cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/model_ref.hpp"

namespace llamapp {

struct HubProgress {
    std::string file;              // path inside the repository
    std::uint64_t downloaded = 0;  // bytes of this file so far
    std::uint64_t total = 0;       // 0 while unknown
    bool cached = false;           // already in the cache: nothing was transferred
    bool done = false;             // the last report for this file
};

struct HubOptions {
    std::string token;     // sent as a bearer token; empty: anonymous
    bool offline = false;  // never touch the network: pulls resolve from the cache only
    // Called from download threads, several files at once; must be thread-safe and quick.
    std::function<void(const HubProgress&)> on_progress;
    // Polled between chunks; returning true stops the pull with ErrorCode::cancelled.
    std::function<bool()> cancelled;
    // A download that receives nothing this long is broken off and tried again from where it
    // stopped; after the last try the pull fails saying it stalled.
    std::chrono::seconds stall_timeout{30};
};

// HF_TOKEN and HF_HUB_OFFLINE / LLAMA_OFFLINE, as the hub's own tools read them.
HubOptions hub_options_from_environment();

struct HubFile {
    std::string path;        // inside the repository, e.g. "model-Q4_K_M.gguf"
    std::uint64_t size = 0;  // bytes
    std::string digest;      // LFS SHA-256 (64 hex digits) or git blob id (40); may be empty
    std::string quant;       // quantization tag read from the name ("Q4_K_M"), or empty
    int split_count = 1;     // > 1: part 1 of a model in several files (the others are listed)
    // In HubRepoFiles::models: the bytes of every part together (0 when a part is missing).
    std::uint64_t model_bytes = 0;
};

struct HubRepoFiles {
    std::string repo;
    std::string commit;           // the revision listed (branch main, else the first branch)
    std::vector<HubFile> files;   // every file, GGUF or not
    std::vector<HubFile> models;  // the GGUF model files a ref can choose: no projectors, part 1
};

struct HubSearchHit {
    std::string repo;
    std::uint64_t downloads = 0;
    std::uint64_t likes = 0;
    std::string last_modified;  // as the hub gives it (ISO 8601)
    // Its GGUF model files as HubRepoFiles::models lists them, without sizes or digests (a
    // search does not give them; hub_list_files does).
    std::vector<HubFile> models;
};

struct PulledModel {
    HubRef ref;
    std::filesystem::path path;  // the file to load (part 1 of a split model)
    std::vector<std::filesystem::path> files;
    std::uint64_t bytes = 0;             // on disk, all parts
    std::uint64_t bytes_downloaded = 0;  // 0 when everything was cached
    // Not empty: the hub could not be reached (this says why) and the cached copy was taken.
    std::string hub_unreachable;
};

struct CachedModel {
    HubRef ref;                  // repo plus file
    std::filesystem::path path;  // in the cache's snapshot folder
    std::uint64_t bytes = 0;
    std::filesystem::file_time_type modified;
    std::string quant;         // from the file name, may be empty
    std::string architecture;  // general.architecture from the GGUF header, empty if unreadable
};

std::filesystem::path hub_cache_dir();

// Repositories whose name matches `query`, GGUF ones only, most downloaded first, each with
// its model files.
[[nodiscard]] Result<std::vector<HubSearchHit>> hub_search(std::string_view query, int limit,
                                                           const HubOptions& options);

// A repository's files at its main branch, with sizes and digests.
[[nodiscard]] Result<HubRepoFiles> hub_list_files(std::string_view repo, const HubOptions& options);

// Which model file `ref` names among `listing.models`: the file itself, the one whose name has
// the quantization tag (case-insensitive), or with neither Q4_K_M, then Q8_0, then the first.
// A tag that matches several different models is an error listing them.
[[nodiscard]] Result<HubFile> hub_choose_file(const HubRef& ref, const HubRepoFiles& listing);

// Downloads what `ref` names (every part of a split model), verifies it and returns the path
// to load. Already cached files are not transferred again. Offline: resolves from the cache.
// When the hub cannot be reached, a model the cache holds is taken (PulledModel::hub_unreachable
// says so); a refusal (not found, unauthorized, rate limited) is never answered from the cache.
[[nodiscard]] Result<PulledModel> hub_pull(const HubRef& ref, const HubOptions& options);

// The cached model files, all repositories, part 1 only for split models.
std::vector<CachedModel> hub_cached_models();

// Removes a cached repository (a ref without file or tag) or the files a ref names, with blobs
// nothing else uses. Returns how many files went; 0 is not_found.
[[nodiscard]] Result<int> hub_remove(const HubRef& ref);

}  // namespace llamapp
