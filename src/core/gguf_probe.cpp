#include "core/gguf_probe.hpp"

#include <cstring>
#include <fstream>
#include <system_error>

#include "core/log_internal.hpp"
#include "gguf.h"

namespace llamapp::detail {

namespace fs = std::filesystem;

Result<GgufSummary> probe_gguf(const fs::path& path) {
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) {
        return fail(ErrorCode::file_not_found, "model file does not exist", path.string());
    }
    if (fs::is_directory(status)) {
        return fail(ErrorCode::is_directory, "model path is a directory, not a file",
                    path.string());
    }
    if (!fs::is_regular_file(status)) {
        return fail(ErrorCode::invalid_model_file, "model path is not a regular file",
                    path.string());
    }
    GgufSummary summary;
    summary.file_size = fs::file_size(path, ec);
    if (ec) return fail(ErrorCode::io_error, "cannot read the model file size", path.string());

    {
        std::ifstream in(path, std::ios::binary);
        if (!in) return fail(ErrorCode::io_error, "cannot open the model file", path.string());
        char magic[4] = {};
        in.read(magic, sizeof magic);
        if (in.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
            return fail(
                ErrorCode::invalid_model_file,
                summary.file_size == 0 ? "model file is empty" : "not a GGUF file (bad magic)",
                path.string());
        }
    }

    LogCapture capture;
    gguf_init_params params{.no_alloc = true, .ctx = nullptr};
    gguf_context* ctx = gguf_init_from_file(path.c_str(), params);
    if (!ctx) {
        std::string why = capture.last_error();
        return fail(
            ErrorCode::invalid_model_file,
            why.empty() ? "GGUF header is corrupt or truncated" : "GGUF header is invalid: " + why,
            path.string());
    }
    struct Free {
        gguf_context* c;
        ~Free() { gguf_free(c); }
    } guard{ctx};

    summary.n_tensors = gguf_get_n_tensors(ctx);
    // Tensor data is not read with no_alloc; check that all of it lies inside the file.
    const std::uint64_t data_offset = gguf_get_data_offset(ctx);
    std::uint64_t data_end = data_offset;
    for (std::int64_t i = 0; i < summary.n_tensors; ++i) {
        const std::uint64_t end =
            data_offset + gguf_get_tensor_offset(ctx, i) + gguf_get_tensor_size(ctx, i);
        if (end > data_end) data_end = end;
    }
    if (data_end > summary.file_size) {
        return fail(ErrorCode::invalid_model_file,
                    "GGUF file is truncated: tensor data ends past the end of the file",
                    path.string() + ": needs " + std::to_string(data_end) + " bytes, has " +
                        std::to_string(summary.file_size));
    }
    const std::int64_t arch_key = gguf_find_key(ctx, "general.architecture");
    if (arch_key >= 0 && gguf_get_kv_type(ctx, arch_key) == GGUF_TYPE_STRING) {
        summary.architecture = gguf_get_val_str(ctx, arch_key);
    }
    return summary;
}

}  // namespace llamapp::detail
