#include "kvstore/entry_file.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "llamapp/fingerprint.hpp"

namespace llamapp::detail {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "entry files are little-endian");

namespace {

constexpr char magic[8] = {'L', 'L', 'P', 'P', 'K', 'V', 'C', '1'};
constexpr std::size_t usage_offset = 64;
constexpr std::uint64_t usage_seed = 0x6b76635573616765ull;  // "kvcUsage"
// Bounds on what a header may claim, so a corrupt length never drives a huge allocation.
constexpr std::uint32_t max_meta_bytes = 256u << 20;

template <typename T>
void put(std::vector<std::uint8_t>& out, std::size_t at, T v) {
    std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(const std::uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

void append_string(std::vector<std::uint8_t>& out, const std::string& s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    const auto* len = reinterpret_cast<const std::uint8_t*>(&n);
    out.insert(out.end(), len, len + sizeof n);
    out.insert(out.end(), s.begin(), s.end());
}

struct Reader {
    const std::uint8_t* p;
    const std::uint8_t* end;
    bool ok = true;
    std::string string() {
        if (end - p < 4) return ok = false, std::string{};
        const auto n = get<std::uint32_t>(p);
        p += 4;
        if (static_cast<std::uint64_t>(end - p) < n) return ok = false, std::string{};
        std::string s(reinterpret_cast<const char*>(p), n);
        p += n;
        return s;
    }
};

std::uint64_t header_checksum(const std::uint8_t* fixed, std::span<const std::uint8_t> meta) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, fixed, 56);
    XXH3_64bits_update(st, meta.data(), meta.size());
    const std::uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

std::uint64_t usage_checksum(std::uint64_t last_used, std::uint64_t hits) {
    std::uint64_t both[2] = {last_used, hits};
    return XXH3_64bits_withSeed(both, sizeof both, usage_seed);
}

struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

// none, short_file when the file ends first, io when the read fails (EIO: the disk, not the
// entry, is at fault).
EntryDefect read_exact(int fd, void* out, std::size_t n, off_t at) {
    auto* p = static_cast<std::uint8_t*>(out);
    while (n > 0) {
        const ssize_t got = ::pread(fd, p, n, at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return EntryDefect::io;
        if (got == 0) return EntryDefect::short_file;
        p += got;
        at += got;
        n -= static_cast<std::size_t>(got);
    }
    return EntryDefect::none;
}

bool write_all(int fd, std::span<const std::uint8_t> bytes) {
    const std::uint8_t* p = bytes.data();
    std::size_t n = bytes.size();
    while (n > 0) {
        const ssize_t put_n = ::write(fd, p, n);
        if (put_n < 0 && errno == EINTR) continue;
        if (put_n <= 0) return false;
        p += put_n;
        n -= static_cast<std::size_t>(put_n);
    }
    return true;
}

ParsedHeader refuse(EntryDefect d, std::string detail = {}) {
    ParsedHeader out;
    out.defect = d;
    out.detail = std::move(detail);
    return out;
}

// A file that cannot be opened: gone (another process evicted it) is no entry any more; any
// other failure is the disk's, and the entry stays.
ParsedHeader refuse_open() {
    return refuse(errno == ENOENT ? EntryDefect::short_file : EntryDefect::io,
                  std::strerror(errno));
}

// A failed read_exact: the system's reason when the read itself failed.
ParsedHeader refuse_read(EntryDefect d) {
    return refuse(d, d == EntryDefect::io ? std::strerror(errno) : "");
}

// Reads and checks everything but the payload bytes; leaves the descriptor for the payload.
ParsedHeader parse(int fd, const fs::path& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return refuse(EntryDefect::io, std::strerror(errno));
    std::uint8_t fixed[entry_fixed_bytes];
    if (static_cast<std::uint64_t>(st.st_size) < entry_fixed_bytes)
        return refuse(EntryDefect::short_file);
    if (const EntryDefect d = read_exact(fd, fixed, sizeof fixed, 0); d != EntryDefect::none)
        return refuse_read(d);
    if (std::memcmp(fixed, magic, sizeof magic) != 0) return refuse(EntryDefect::magic);
    if (get<std::uint32_t>(fixed + 8) != entry_format_version)
        return refuse(EntryDefect::version,
                      fmt::format("version {}", get<std::uint32_t>(fixed + 8)));
    const auto meta_bytes = get<std::uint32_t>(fixed + 12);
    if (meta_bytes > max_meta_bytes ||
        entry_fixed_bytes + meta_bytes > static_cast<std::uint64_t>(st.st_size))
        return refuse(EntryDefect::short_file);
    std::vector<std::uint8_t> meta(meta_bytes);
    if (const EntryDefect d = read_exact(fd, meta.data(), meta.size(), entry_fixed_bytes);
        d != EntryDefect::none)
        return refuse_read(d);
    if (header_checksum(fixed, meta) != get<std::uint64_t>(fixed + 56))
        return refuse(EntryDefect::header_checksum);

    ParsedHeader out;
    EntryHeader& h = out.header;
    h.payload_bytes = get<std::uint64_t>(fixed + 16);
    h.payload_checksum = get<std::uint64_t>(fixed + 24);
    const auto n_tokens = get<std::uint32_t>(fixed + 32);
    h.kept_from = get<std::int32_t>(fixed + 36);
    h.reason = static_cast<SaveReason>(get<std::uint32_t>(fixed + 40));
    h.created_ms = get<std::uint64_t>(fixed + 48);
    h.last_used_ms = get<std::uint64_t>(fixed + 64);
    h.hits = get<std::uint64_t>(fixed + 72);
    // The usage block is rewritten in place while readers may be reading the file; a torn or
    // damaged one only loses the usage (the key and payload have checksums of their own).
    if (usage_checksum(h.last_used_ms, h.hits) != get<std::uint64_t>(fixed + 80)) {
        h.last_used_ms = h.created_ms;
        h.hits = 0;
    }

    Reader r{meta.data(), meta.data() + meta.size()};
    h.ns_id = r.string();
    h.key.model_fingerprint = r.string();
    h.key.layout = r.string();
    h.key.adapters = r.string();
    h.key.scope = r.string();
    h.session = r.string();
    h.id = r.string();
    if (!r.ok || static_cast<std::uint64_t>(r.end - r.p) != std::uint64_t{n_tokens} * 4)
        return refuse(EntryDefect::malformed);
    h.tokens.resize(n_tokens);
    std::memcpy(h.tokens.data(), r.p, std::size_t{n_tokens} * 4);

    // The key is replayed, not trusted: namespace, content address and file name must agree.
    if (h.key.id() != h.ns_id || entry_id(h.ns_id, h.tokens) != h.id ||
        path.stem().string() != h.id)
        return refuse(EntryDefect::key_mismatch);
    if (h.file_bytes() != static_cast<std::uint64_t>(st.st_size))
        return refuse(EntryDefect::size_mismatch,
                      fmt::format("{} bytes, header says {}", st.st_size, h.file_bytes()));
    return out;
}

}  // namespace

std::uint64_t EntryHeader::file_bytes() const {
    std::uint64_t meta = tokens.size() * sizeof(Token);
    for (const std::string* s :
         {&ns_id, &key.model_fingerprint, &key.layout, &key.adapters, &key.scope, &session, &id})
        meta += 4 + s->size();
    return entry_fixed_bytes + meta + payload_bytes;
}

std::string entry_id(const std::string& ns_id, std::span<const Token> tokens) {
    std::string bytes = ns_id;
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
    return sha256_hex(bytes);
}

std::uint64_t payload_checksum(std::span<const std::uint8_t> payload) {
    return XXH3_64bits(payload.data(), payload.size());
}

std::vector<std::uint8_t> encode_header(const EntryHeader& h) {
    std::vector<std::uint8_t> meta;
    for (const std::string* s : {&h.ns_id, &h.key.model_fingerprint, &h.key.layout, &h.key.adapters,
                                 &h.key.scope, &h.session, &h.id})
        append_string(meta, *s);
    const auto* tok = reinterpret_cast<const std::uint8_t*>(h.tokens.data());
    meta.insert(meta.end(), tok, tok + h.tokens.size() * sizeof(Token));

    std::vector<std::uint8_t> out(entry_fixed_bytes, 0);
    std::memcpy(out.data(), magic, sizeof magic);
    put(out, 8, entry_format_version);
    put(out, 12, static_cast<std::uint32_t>(meta.size()));
    put(out, 16, h.payload_bytes);
    put(out, 24, h.payload_checksum);
    put(out, 32, static_cast<std::uint32_t>(h.tokens.size()));
    put(out, 36, h.kept_from);
    put(out, 40, static_cast<std::uint32_t>(h.reason));
    put(out, 48, h.created_ms);
    put(out, 56, header_checksum(out.data(), meta));
    put(out, 64, h.last_used_ms);
    put(out, 72, h.hits);
    put(out, 80, usage_checksum(h.last_used_ms, h.hits));
    out.insert(out.end(), meta.begin(), meta.end());
    return out;
}

std::string_view to_string(EntryDefect d) {
    switch (d) {
        case EntryDefect::none:
            return "none";
        case EntryDefect::io:
            return "unreadable";
        case EntryDefect::short_file:
            return "truncated";
        case EntryDefect::magic:
            return "wrong magic";
        case EntryDefect::version:
            return "unsupported version";
        case EntryDefect::header_checksum:
            return "header checksum mismatch";
        case EntryDefect::malformed:
            return "malformed header";
        case EntryDefect::key_mismatch:
            return "key does not match";
        case EntryDefect::size_mismatch:
            return "file size does not match";
        case EntryDefect::payload_checksum:
            return "payload checksum mismatch";
    }
    return "unknown";
}

ParsedHeader read_header(const fs::path& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return refuse_open();
    return parse(fd.fd, path);
}

ParsedHeader read_entry(const fs::path& path, Bytes& payload) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return refuse_open();
    ParsedHeader parsed = parse(fd.fd, path);
    if (parsed.defect != EntryDefect::none) return parsed;
    const EntryHeader& h = parsed.header;
    payload.resize(h.payload_bytes);
    const auto at = static_cast<off_t>(h.file_bytes() - h.payload_bytes);
    if (const EntryDefect d = read_exact(fd.fd, payload.data(), payload.size(), at);
        d != EntryDefect::none)
        return refuse_read(d);
    if (payload_checksum(payload) != h.payload_checksum)
        return refuse(EntryDefect::payload_checksum);
    return parsed;
}

fs::path entry_path(const fs::path& directory, const std::string& id) {
    return directory / (id + entry_extension);
}

bool is_orphaned_temp(const fs::path& path) {
    const std::string name = path.filename().string();
    const auto at = name.find(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos) return false;
    const std::string rest = name.substr(at + 5);
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0) return true;
    // A live writer in another process (two servers sharing a directory) keeps its files.
    return pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

Result<void> publish_entry(const fs::path& directory, const EntryHeader& header,
                           std::span<const std::uint8_t> payload) {
    static std::atomic<std::uint64_t> counter{0};
    const fs::path final_path = entry_path(directory, header.id);
    const fs::path temp =
        directory / fmt::format(".{}.tmp.{}.{}", header.id, ::getpid(), counter.fetch_add(1));
    const auto io_fail = [&](const char* what) {
        const int e = errno;
        ::unlink(temp.c_str());
        return fail(ErrorCode::io_error, fmt::format("{}: {}", what, std::strerror(e)),
                    final_path.string());
    };
    {
        Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
        if (fd.fd < 0) return io_fail("cannot create the temporary file");
        if (!write_all(fd.fd, encode_header(header)) || !write_all(fd.fd, payload))
            return io_fail("cannot write the entry");
        if (::fdatasync(fd.fd) != 0) return io_fail("fdatasync failed");
    }
    // link() creates the final name atomically or fails with EEXIST; rename() would replace a
    // file another writer published and a reader may be verifying.
    if (::link(temp.c_str(), final_path.c_str()) != 0) {
        if (errno != EEXIST) return io_fail("cannot publish the entry");
        const ParsedHeader existing = read_header(final_path);
        if (existing.defect != EntryDefect::none ||
            existing.header.payload_checksum != header.payload_checksum) {
            // Not the same verified entry: replace it atomically.
            if (::rename(temp.c_str(), final_path.c_str()) != 0)
                return io_fail("cannot replace a damaged entry");
        }
    }
    ::unlink(temp.c_str());
    Fd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.fd >= 0) ::fsync(dir.fd);
    return {};
}

void update_usage(const fs::path& path, std::uint64_t last_used_ms, std::uint64_t hits) {
    std::vector<std::uint8_t> block(24);
    put(block, 0, last_used_ms);
    put(block, 8, hits);
    put(block, 16, usage_checksum(last_used_ms, hits));
    Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.fd < 0) return;
    // One 24-byte write inside the first sector: not torn in practice, and a reader that sees
    // a torn one only loses the usage (see parse).
    [[maybe_unused]] const ssize_t n =
        ::pwrite(fd.fd, block.data(), block.size(), static_cast<off_t>(usage_offset));
}

std::uint64_t unix_ms_now() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

std::string KvNamespace::id() const {
    std::string material;
    for (const std::string* s : {&model_fingerprint, &layout, &adapters, &scope}) {
        material += std::to_string(s->size());
        material += ':';
        material += *s;
    }
    return sha256_hex(material);
}

}  // namespace llamapp::detail
