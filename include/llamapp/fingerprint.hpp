// File fingerprints: streamed SHA-256, cached per path + size + mtime.
#pragma once

#include <filesystem>
#include <string>

#include "llamapp/error.hpp"

namespace llamapp {

// Lower-case hex SHA-256 of a file. The first call reads the file in chunks; later calls for
// the same path, size and modification time return the cached value. Thread-safe.
[[nodiscard]] Result<std::string> file_sha256(const std::filesystem::path& path);

// SHA-256 of a byte string (lower-case hex).
std::string sha256_hex(std::string_view bytes);

}  // namespace llamapp
