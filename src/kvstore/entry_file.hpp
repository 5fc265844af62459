// Internal: the self-describing entry file and its crash-safe publication.
//
// Layout (little-endian):
//   0  magic "LLPPKVC1"          8 bytes
//   8  u32 format version
//  12  u32 meta bytes (key strings + token ids)
//  16  u64 payload bytes
//  24  u64 payload checksum (XXH3-64)
//  32  u32 token count, 36 i32 kept_from, 40 u32 save reason, 44 u32 zero
//  48  u64 created (unix ms)
//  56  u64 header checksum (XXH3-64 of bytes 0..56 and the meta section)
//  64  u64 last used (unix ms), 72 u64 hits, 80 u64 checksum of 64..80
//      (rewritten in place on each hit, so it has its own checksum)
//  88  meta: u32-length-prefixed strings (namespace id, model fingerprint, layout, adapters,
//      scope, session, entry id), then the token ids as i32
//      payload: llama_state_seq data
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvstore/store_client.hpp"
#include "llamapp/error.hpp"

namespace llamapp::detail {

inline constexpr std::uint32_t entry_format_version = 1;
inline constexpr std::size_t entry_fixed_bytes = 88;
inline constexpr const char* entry_extension = ".kvc";

struct EntryHeader {
    KvNamespace key;
    std::string ns_id;
    std::string id;
    std::string session;
    std::vector<Token> tokens;
    std::uint64_t payload_bytes = 0;
    std::uint64_t payload_checksum = 0;
    std::int32_t kept_from = 0;
    SaveReason reason = SaveReason::put;
    std::uint64_t created_ms = 0;
    std::uint64_t last_used_ms = 0;
    std::uint64_t hits = 0;

    std::uint64_t file_bytes() const;
};

// SHA-256 over the namespace id and the token ids: the content address of an entry.
std::string entry_id(const std::string& ns_id, std::span<const Token> tokens);
std::uint64_t payload_checksum(std::span<const std::uint8_t> payload);

std::vector<std::uint8_t> encode_header(const EntryHeader& header);

// Why a file was refused; all of them mean "remove it and count it".
enum class EntryDefect {
    none,
    io,
    short_file,
    magic,
    version,
    header_checksum,
    malformed,
    key_mismatch,
    size_mismatch,
    payload_checksum
};
std::string_view to_string(EntryDefect defect);

struct ParsedHeader {
    EntryHeader header;
    EntryDefect defect = EntryDefect::none;
    std::string detail;
};

// Headers only (startup scan): checks magic, version, checksums, the key and the file size.
ParsedHeader read_header(const std::filesystem::path& path);
// Header and payload; the payload checksum and the key are verified as well.
ParsedHeader read_entry(const std::filesystem::path& path, Bytes& payload);

// Temp file in the same directory, fdatasync, link to the final name (an existing file with the
// same verified header is adopted), fsync of the directory.
Result<void> publish_entry(const std::filesystem::path& directory, const EntryHeader& header,
                           std::span<const std::uint8_t> payload);
// Rewrites last-used time and hit count in place (best effort).
void update_usage(const std::filesystem::path& path, std::uint64_t last_used_ms,
                  std::uint64_t hits);

std::filesystem::path entry_path(const std::filesystem::path& directory, const std::string& id);
// Temporary files are named ".<id>.tmp.<pid>.<n>"; those of dead processes are orphans.
bool is_orphaned_temp(const std::filesystem::path& path);

std::uint64_t unix_ms_now();

}  // namespace llamapp::detail
