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

GgufEntry entry_of(const gguf_context* ctx, std::int64_t id) {
    GgufEntry e{.key = gguf_get_key(ctx, id)};
    const gguf_type type = gguf_get_kv_type(ctx, id);
    switch (type) {
        case GGUF_TYPE_STRING:
            e.text = gguf_get_val_str(ctx, id);
            break;
        case GGUF_TYPE_ARRAY:
            e.kind = GgufEntry::Kind::array;
            e.length = gguf_get_arr_n(ctx, id);
            break;
        case GGUF_TYPE_BOOL:
            e.kind = GgufEntry::Kind::boolean;
            e.integer = gguf_get_val_bool(ctx, id) ? 1 : 0;
            break;
        case GGUF_TYPE_FLOAT32:
            e.kind = GgufEntry::Kind::real;
            e.real = gguf_get_val_f32(ctx, id);
            break;
        case GGUF_TYPE_FLOAT64:
            e.kind = GgufEntry::Kind::real;
            e.real = gguf_get_val_f64(ctx, id);
            break;
        default:
            e.kind = GgufEntry::Kind::integer;
            e.integer = int_value(ctx, e.key).value_or(0);
    }
    return e;
}

// What the header's keys say about the model, and all of them.
void read_keys(const gguf_context* ctx, GgufSummary& summary) {
    for (std::int64_t i = 0; i < gguf_get_n_kv(ctx); ++i) {
        GgufEntry e = entry_of(ctx, i);
        if (e.key == "general.architecture" && e.kind == GgufEntry::Kind::string)
            summary.architecture = e.text;
        if (e.key == "general.name" && e.kind == GgufEntry::Kind::string) summary.name = e.text;
        if (e.key == "tokenizer.chat_template") summary.has_chat_template = true;
        if (e.key == "general.file_type" && e.kind == GgufEntry::Kind::integer)
            summary.file_type = static_cast<int>(e.integer);
        summary.metadata.push_back(std::move(e));
    }
}

}  // namespace

std::string file_type_name(int file_type) {
    // llama_ftype's values (llama.h), named as llama-quantize names them.
    static constexpr std::pair<int, const char*> names[] = {
        {0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
        {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
        {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
        {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
        {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
        {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
        {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4"}};
    for (const auto& [value, name] : names)
        if (value == file_type) return name;
    return "unknown";
}

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
        const ggml_type type = gguf_get_tensor_type(ctx, i);
        if (const std::size_t unit = ggml_type_size(type); unit > 0)
            summary.n_params += gguf_get_tensor_size(ctx, i) / unit *
                                static_cast<std::uint64_t>(ggml_blck_size(type));
    }
    if (data_end > summary.file_size) {
        return fail(ErrorCode::invalid_model_file,
                    "GGUF file is truncated: tensor data ends past the end of the file",
                    path.string() + ": needs " + std::to_string(data_end) + " bytes, has " +
                        std::to_string(summary.file_size));
    }
    read_keys(ctx, summary);
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
