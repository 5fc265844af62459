#include "core/gguf_probe.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <system_error>

#include "core/log_internal.hpp"
#include "gguf.h"

namespace llamapp::detail {

namespace fs = std::filesystem;

namespace {

// An integer key of any GGUF integer type (the largest element for arrays).
std::optional<std::int64_t> int_value(const gguf_context* ctx, const std::string& key) {
    const std::int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0) return std::nullopt;
    auto scalar = [&](gguf_type type, const void* p) -> std::optional<std::int64_t> {
        switch (type) {
            case GGUF_TYPE_UINT8:
                return *static_cast<const std::uint8_t*>(p);
            case GGUF_TYPE_INT8:
                return *static_cast<const std::int8_t*>(p);
            case GGUF_TYPE_UINT16:
                return *static_cast<const std::uint16_t*>(p);
            case GGUF_TYPE_INT16:
                return *static_cast<const std::int16_t*>(p);
            case GGUF_TYPE_UINT32:
                return *static_cast<const std::uint32_t*>(p);
            case GGUF_TYPE_INT32:
                return *static_cast<const std::int32_t*>(p);
            case GGUF_TYPE_UINT64:
                return static_cast<std::int64_t>(
                    std::min<std::uint64_t>(*static_cast<const std::uint64_t*>(p), INT64_MAX));
            case GGUF_TYPE_INT64:
                return *static_cast<const std::int64_t*>(p);
            default:
                return std::nullopt;
        }
    };
    const gguf_type type = gguf_get_kv_type(ctx, id);
    if (type != GGUF_TYPE_ARRAY) return scalar(type, gguf_get_val_data(ctx, id));
    const gguf_type elem = gguf_get_arr_type(ctx, id);
    std::size_t size = 0;
    switch (elem) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_INT8:
            size = 1;
            break;
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_INT16:
            size = 2;
            break;
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_INT32:
            size = 4;
            break;
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT64:
            size = 8;
            break;
        default:
            break;  // not an integer array (gguf_get_arr_data would assert on strings)
    }
    std::optional<std::int64_t> best;
    if (size == 0) return best;
    const auto* data = static_cast<const char*>(gguf_get_arr_data(ctx, id));
    for (std::size_t i = 0; i < gguf_get_arr_n(ctx, id); ++i) {
        auto v = scalar(elem, data + i * size);
        if (v && (!best || *v > *best)) best = v;
    }
    return best;
}

// Hyperparameters llama.cpp asserts on instead of rejecting (llama-model.cpp load_hparams).
Result<void> check_hparams(const gguf_context* ctx, const std::string& arch, const fs::path& path) {
    auto bad = [&](const std::string& what) {
        return fail(ErrorCode::invalid_model_file, "GGUF hyperparameters are invalid: " + what,
                    path.string());
    };
    const auto layers = int_value(ctx, arch + ".block_count");
    if (layers && (*layers <= 0 || *layers > 512)) return bad("block_count must be in [1, 512]");
    const auto nextn = int_value(ctx, arch + ".nextn_predict_layers");
    if (nextn && layers && (*nextn < 0 || *nextn > *layers))
        return bad("nextn_predict_layers > block_count");
    const auto experts = int_value(ctx, arch + ".expert_count").value_or(0);
    const auto used = int_value(ctx, arch + ".expert_used_count").value_or(0);
    if (experts < 0 || experts > 1024) return bad("expert_count must be in [0, 1024]");
    if (used < 0 || used > experts) return bad("expert_used_count > expert_count");
    return {};
}

}  // namespace

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
    if (const std::int64_t k = gguf_find_key(ctx, "general.name");
        k >= 0 && gguf_get_kv_type(ctx, k) == GGUF_TYPE_STRING)
        summary.name = gguf_get_val_str(ctx, k);
    summary.has_chat_template = gguf_find_key(ctx, "tokenizer.chat_template") >= 0;
    if (!summary.architecture.empty()) {
        const auto pooling = int_value(ctx, summary.architecture + ".pooling_type");
        summary.pools = pooling && *pooling > 0;
        summary.ranks = pooling && *pooling == 4;  // LLAMA_POOLING_TYPE_RANK
        if (auto ok = check_hparams(ctx, summary.architecture, path); !ok)
            return std::unexpected(ok.error());
    }
    return summary;
}

}  // namespace llamapp::detail
