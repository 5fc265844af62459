// Internal: llama.cpp's cache entries computed from our listing, and the downloads into them.
// Uses llama.cpp's cache types, so only the hub's own sources include it.
#pragma once

#include <hf-cache.h>

#include <filesystem>
#include <vector>

#include "hub/hub_internal.hpp"

namespace llamapp::detail {

// Where a download of `entry` is written until it completes: llama.cpp's name, so that either
// downloader resumes the other's partial file.
std::filesystem::path partial_download(const hf_cache::hf_file& entry);

// llama.cpp's cache entries for `parts` at `listing.commit`, computed without asking the hub
// again; the commit is recorded as refs/main, as llama.cpp records it.
[[nodiscard]] Result<std::vector<hf_cache::hf_file>> cache_entries_of(
    const HubRepoFiles& listing, const std::vector<HubFile>& parts);
// Downloads the entries not in the cache yet into their blob paths (not verified, not
// finalized), in parallel, resuming partial files; through `proxy` when there is one. A try
// that receives nothing for options.stall_timeout is broken off and tried again (transfer_retry).
// `what` names the pull in errors.
[[nodiscard]] Result<void> transfer_files(const std::vector<hf_cache::hf_file>& entries,
                                          const std::vector<HubFile>& parts,
                                          const HubOptions& options,
                                          const std::optional<HubProxy>& proxy,
                                          const std::string& what);

}  // namespace llamapp::detail
