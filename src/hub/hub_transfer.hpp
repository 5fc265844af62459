// Internal: llama.cpp's cache entries computed from our listing, and downloads through a proxy
// beside llama.cpp's downloader (which has no proxy setting). Uses llama.cpp's cache types, so
// only the hub's own sources include it.
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
// finalized), resuming partial files.
[[nodiscard]] Result<void> transfer_through_proxy(const std::vector<hf_cache::hf_file>& entries,
                                                  const std::vector<HubFile>& parts,
                                                  const HubOptions& options, const HubProxy& proxy);

}  // namespace llamapp::detail
