// Internal: file digests beside the public SHA-256 fingerprint.
#pragma once

#include <filesystem>
#include <string>

#include "llamapp/error.hpp"

namespace llamapp::detail {

// The git blob id of a file (SHA-1 over "blob <size>\0" and the bytes), as the hub lists it for
// files outside LFS. Lower-case hex; not cached.
[[nodiscard]] Result<std::string> file_git_blob_id(const std::filesystem::path& path);

}  // namespace llamapp::detail
