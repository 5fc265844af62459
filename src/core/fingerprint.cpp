#include "llamapp/fingerprint.hpp"

#include "core/file_digest.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace llamapp {
namespace {

namespace fs = std::filesystem;

struct DigestDeleter {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using Digest = std::unique_ptr<EVP_MD_CTX, DigestDeleter>;

std::string to_hex(const unsigned char* bytes, unsigned n) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(n * 2, '0');
    for (unsigned i = 0; i < n; ++i) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    return out;
}

Digest new_digest(const EVP_MD* algorithm = EVP_sha256()) {
    Digest d(EVP_MD_CTX_new());
    if (d && EVP_DigestInit_ex(d.get(), algorithm, nullptr) != 1) d.reset();
    return d;
}

std::string finish(EVP_MD_CTX* d) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(d, out, &n);
    return to_hex(out, n);
}

// The digest of `prefix` and then the file's bytes, read in chunks.
Result<std::string> stream_digest(const fs::path& path, const EVP_MD* algorithm,
                                  std::string_view prefix) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return fail(ErrorCode::io_error, "cannot open the file", path.string());
    Digest d = new_digest(algorithm);
    if (!d) return fail(ErrorCode::internal, "the OpenSSL digest is unavailable");
    EVP_DigestUpdate(d.get(), prefix.data(), prefix.size());
    std::vector<char> buffer(1 << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        if (in.gcount() > 0)
            EVP_DigestUpdate(d.get(), buffer.data(), static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) return fail(ErrorCode::io_error, "reading the file failed", path.string());
    return finish(d.get());
}

using CacheKey = std::tuple<std::string, std::uintmax_t, fs::file_time_type::rep>;
std::mutex g_cache_mutex;
std::map<CacheKey, std::string> g_cache;

}  // namespace

std::string sha256_hex(std::string_view bytes) {
    Digest d = new_digest();
    EVP_DigestUpdate(d.get(), bytes.data(), bytes.size());
    return finish(d.get());
}

Result<std::string> file_sha256(const fs::path& path) {
    std::error_code ec;
    const fs::path canonical = fs::canonical(path, ec);
    if (ec)
        return fail(ErrorCode::file_not_found, "cannot fingerprint a missing file", path.string());
    const auto size = fs::file_size(canonical, ec);
    if (ec) return fail(ErrorCode::io_error, "cannot read the file size", path.string());
    const auto mtime = fs::last_write_time(canonical, ec);
    if (ec) return fail(ErrorCode::io_error, "cannot read the file time", path.string());
    const CacheKey key{canonical.string(), size, mtime.time_since_epoch().count()};
    {
        std::lock_guard lock(g_cache_mutex);
        if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
    }
    // Hash outside the lock: two threads may hash the same file once each, which is harmless.
    auto hex = stream_digest(canonical, EVP_sha256(), {});
    if (!hex) return hex;
    std::lock_guard lock(g_cache_mutex);
    g_cache[key] = *hex;
    return hex;
}

namespace detail {

Result<std::string> file_git_blob_id(const fs::path& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return fail(ErrorCode::io_error, "cannot read the file size", path.string());
    const std::string header = "blob " + std::to_string(size);
    return stream_digest(path, EVP_sha1(), std::string_view(header.c_str(), header.size() + 1));
}

}  // namespace detail

}  // namespace llamapp
