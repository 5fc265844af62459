// llamapp-gen-model: writes a random-weight GGUF model with realistic shapes and a real tokenizer.
//
// The weights are noise, but everything else is genuine: the tokenizer (copied verbatim from a
// vocab GGUF), the hyperparameter keys and the tensor layout llama.cpp expects for the chosen
// architecture. That makes the output usable for tests, benchmarks and demos without shipping
// multi-hundred-megabyte checkpoints.

#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

// jamba is the hybrid family: Mamba layers and attention layers (without RoPE) in one stack.
enum class Arch { llama, qwen3, gemma2, mamba, jamba };

// How a tensor's values are drawn. Most tensors are plain noise; the few that are not would make
// the model numerically degenerate (e.g. zero norms kill the signal, positive Mamba A explodes).
enum class Init { normal, ones, zeros, ssm_a, ssm_dt_bias };

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
    Init init = Init::normal;
    bool matmul = false;  // only matmul weights take --type; the rest stay F32
    float stdev = 0.02f;
};

struct Shape {
    int n_embd = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int n_ff = 0;
    int n_ctx = 0;
    int sliding_window = 0;
};

struct Options {
    Arch arch = Arch::llama;
    std::string vocab;
    std::string out;
    std::string preset = "tiny";
    std::string type = "f16";
    std::string chat_template_file;
    std::string name;
    uint64_t seed = 42;
    Shape shape;
    // A Qwen3-style reranker: rank pooling over the last token and a two-label ("yes", "no")
    // classifier head, whose softmax llama.cpp takes as the score.
    bool reranker = false;
    // Not random: this model's weights, quantized to `type` (a draft model for speculation).
    std::string quantize_from;
};

// Mamba-1 constants: every released checkpoint uses these, and llama.cpp only supports an
// expansion factor of 2.
constexpr int kSsmConv = 4;
constexpr int kSsmState = 16;

int ssm_dt_rank(int n_embd) {
    return (n_embd + 15) / 16;
}

// jamba: every second layer attends (layer 1, 3, ...); the others are Mamba layers.
bool jamba_attends(int il) {
    return il % 2 == 1;
}

std::string arch_name(Arch a) {
    switch (a) {
        case Arch::llama:
            return "llama";
        case Arch::qwen3:
            return "qwen3";
        case Arch::gemma2:
            return "gemma2";
        case Arch::mamba:
            return "mamba";
        case Arch::jamba:
            return "jamba";
    }
    return "?";
}

Shape preset_shape(const std::string& preset) {
    // Head size 16/32/64 keeps rope and flash-attention kernels on their common paths.
    if (preset == "tiny") return {64, 2, 4, 2, 128, 512, 128};
    if (preset == "demo") return {256, 4, 8, 4, 768, 2048, 512};
    return {768, 12, 12, 4, 2048, 2048, 512};  // bench125m
}

// FNV-1a: a stable per-tensor seed, so a tensor's values do not depend on the order of tensors
// or on the standard library's std::hash.
uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h = (h ^ c) * 1099511628211ull;
    }
    return h;
}

std::string blk(int il, const char* suffix) {
    return fmt::format("blk.{}.{}", il, suffix);
}

std::vector<TensorSpec> build_tensors(Arch arch, const Shape& s, int64_t n_vocab, bool reranker) {
    const int64_t E = s.n_embd;
    std::vector<TensorSpec> t;
    auto mat = [&](std::string name, int64_t in, int64_t out, float stdev = 0.02f) {
        t.push_back({std::move(name), {in, out}, Init::normal, true, stdev});
    };
    auto vec = [&](std::string name, std::vector<int64_t> ne, Init init) {
        t.push_back({std::move(name), std::move(ne), init, false, 0.02f});
    };

    mat("token_embd.weight", E, n_vocab);
    vec("output_norm.weight", {E}, Init::ones);
    // gemma2 always ties the output to the embedding. The others get a separate head: with tied
    // random weights a shallow model mostly echoes its input token, and the untied head is also
    // what makes bench125m land at ~125M parameters.
    if (arch != Arch::gemma2) {
        mat("output.weight", E, n_vocab);
    }
    if (reranker) mat("cls.output.weight", E, 2, 0.1f);

    // GPT-2 style: shrink the residual-branch outputs so activations do not grow with depth.
    const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(s.n_layer));

    for (int il = 0; il < s.n_layer; ++il) {
        vec(blk(il, "attn_norm.weight"), {E}, Init::ones);
        if (arch == Arch::mamba || (arch == Arch::jamba && !jamba_attends(il))) {
            const int64_t d_inner = 2 * E;
            const int64_t dt_rank = ssm_dt_rank(s.n_embd);
            mat(blk(il, "ssm_in.weight"), E, 2 * d_inner);
            // The conv kernel is consumed by ggml_ssm_conv, which wants F32 (llama-quantize
            // never quantizes it either).
            t.push_back(
                {blk(il, "ssm_conv1d.weight"), {kSsmConv, d_inner}, Init::normal, false, 0.5f});
            vec(blk(il, "ssm_conv1d.bias"), {d_inner}, Init::zeros);
            mat(blk(il, "ssm_x.weight"), d_inner, dt_rank + 2 * kSsmState);
            mat(blk(il, "ssm_dt.weight"), dt_rank, d_inner,
                1.0f / std::sqrt(static_cast<float>(dt_rank)));
            vec(blk(il, "ssm_dt.bias"), {d_inner}, Init::ssm_dt_bias);
            vec(blk(il, "ssm_a"), {kSsmState, d_inner}, Init::ssm_a);
            vec(blk(il, "ssm_d"), {d_inner}, Init::ones);
            mat(blk(il, "ssm_out.weight"), d_inner, E, out_std);
            if (arch == Arch::mamba) continue;  // Mamba layers have no FFN
            vec(blk(il, "ssm_dt_norm.weight"), {dt_rank}, Init::ones);
            vec(blk(il, "ssm_b_norm.weight"), {kSsmState}, Init::ones);
            vec(blk(il, "ssm_c_norm.weight"), {kSsmState}, Init::ones);
        } else {
            const int64_t head_dim = E / s.n_head;
            const int64_t n_q = head_dim * s.n_head;
            const int64_t n_kv = head_dim * s.n_head_kv;
            mat(blk(il, "attn_q.weight"), E, n_q);
            mat(blk(il, "attn_k.weight"), E, n_kv);
            mat(blk(il, "attn_v.weight"), E, n_kv);
            mat(blk(il, "attn_output.weight"), n_q, E, out_std);
            if (arch == Arch::qwen3) {
                vec(blk(il, "attn_q_norm.weight"), {head_dim}, Init::ones);
                vec(blk(il, "attn_k_norm.weight"), {head_dim}, Init::ones);
            }
            if (arch == Arch::gemma2) {
                vec(blk(il, "post_attention_norm.weight"), {E}, Init::ones);
            }
        }
        vec(blk(il, "ffn_norm.weight"), {E}, Init::ones);
        mat(blk(il, "ffn_gate.weight"), E, s.n_ff);
        mat(blk(il, "ffn_up.weight"), E, s.n_ff);
        mat(blk(il, "ffn_down.weight"), s.n_ff, E, out_std);
        if (arch == Arch::gemma2) {
            vec(blk(il, "post_ffw_norm.weight"), {E}, Init::ones);
        }
    }
    return t;
}

ggml_type weight_type(const std::string& type) {
    if (type == "f32") return GGML_TYPE_F32;
    if (type == "f16") return GGML_TYPE_F16;
    if (type == "q8_0") return GGML_TYPE_Q8_0;
    return GGML_TYPE_Q4_0;
}

llama_ftype file_type(const std::string& type) {
    if (type == "f32") return LLAMA_FTYPE_ALL_F32;
    if (type == "f16") return LLAMA_FTYPE_MOSTLY_F16;
    if (type == "q8_0") return LLAMA_FTYPE_MOSTLY_Q8_0;
    return LLAMA_FTYPE_MOSTLY_Q4_0;
}

ggml_type tensor_type(const TensorSpec& t, ggml_type wtype) {
    if (!t.matmul) return GGML_TYPE_F32;
    // Quantized rows must be whole blocks; F16 is the closest type without that constraint.
    if (t.ne[0] % ggml_blck_size(wtype) != 0) return GGML_TYPE_F16;
    return wtype;
}

struct GgufDeleter {
    void operator()(gguf_context* c) const { gguf_free(c); }
};
struct GgmlDeleter {
    void operator()(ggml_context* c) const { ggml_free(c); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;
using GgmlPtr = std::unique_ptr<ggml_context, GgmlDeleter>;

// Copies one KV pair. gguf has no "copy this key" call, and gguf_set_kv would also drag in the
// vocab file's general.* keys, so dispatch on the stored type.
void copy_kv(gguf_context* dst, const gguf_context* src, int64_t id) {
    const char* key = gguf_get_key(src, id);
    switch (gguf_get_kv_type(src, id)) {
        case GGUF_TYPE_UINT8:
            gguf_set_val_u8(dst, key, gguf_get_val_u8(src, id));
            break;
        case GGUF_TYPE_INT8:
            gguf_set_val_i8(dst, key, gguf_get_val_i8(src, id));
            break;
        case GGUF_TYPE_UINT16:
            gguf_set_val_u16(dst, key, gguf_get_val_u16(src, id));
            break;
        case GGUF_TYPE_INT16:
            gguf_set_val_i16(dst, key, gguf_get_val_i16(src, id));
            break;
        case GGUF_TYPE_UINT32:
            gguf_set_val_u32(dst, key, gguf_get_val_u32(src, id));
            break;
        case GGUF_TYPE_INT32:
            gguf_set_val_i32(dst, key, gguf_get_val_i32(src, id));
            break;
        case GGUF_TYPE_FLOAT32:
            gguf_set_val_f32(dst, key, gguf_get_val_f32(src, id));
            break;
        case GGUF_TYPE_UINT64:
            gguf_set_val_u64(dst, key, gguf_get_val_u64(src, id));
            break;
        case GGUF_TYPE_INT64:
            gguf_set_val_i64(dst, key, gguf_get_val_i64(src, id));
            break;
        case GGUF_TYPE_FLOAT64:
            gguf_set_val_f64(dst, key, gguf_get_val_f64(src, id));
            break;
        case GGUF_TYPE_BOOL:
            gguf_set_val_bool(dst, key, gguf_get_val_bool(src, id));
            break;
        case GGUF_TYPE_STRING:
            gguf_set_val_str(dst, key, gguf_get_val_str(src, id));
            break;
        case GGUF_TYPE_ARRAY: {
            const gguf_type at = gguf_get_arr_type(src, id);
            const size_t n = gguf_get_arr_n(src, id);
            if (at == GGUF_TYPE_STRING) {
                std::vector<const char*> strs(n);
                for (size_t i = 0; i < n; ++i) strs[i] = gguf_get_arr_str(src, id, i);
                gguf_set_arr_str(dst, key, strs.data(), n);
            } else if (at == GGUF_TYPE_ARRAY) {
                throw std::runtime_error(fmt::format("nested array in vocab key '{}'", key));
            } else {
                gguf_set_arr_data(dst, key, at, gguf_get_arr_data(src, id), n);
            }
            break;
        }
        default:
            throw std::runtime_error(fmt::format("unsupported type for vocab key '{}'", key));
    }
}

// Returns the vocabulary size, which fixes the embedding and output shapes.
int64_t copy_tokenizer(gguf_context* dst, const std::string& vocab_path) {
    gguf_init_params params{};
    params.no_alloc = true;
    params.ctx = nullptr;
    GgufPtr src(gguf_init_from_file(vocab_path.c_str(), params));
    if (!src) {
        throw std::runtime_error(fmt::format("cannot read vocab GGUF '{}'", vocab_path));
    }
    const int64_t tokens = gguf_find_key(src.get(), "tokenizer.ggml.tokens");
    if (tokens < 0 || gguf_get_kv_type(src.get(), tokens) != GGUF_TYPE_ARRAY ||
        gguf_get_arr_type(src.get(), tokens) != GGUF_TYPE_STRING) {
        throw std::runtime_error(
            fmt::format("'{}' has no tokenizer.ggml.tokens string array", vocab_path));
    }
    for (int64_t i = 0; i < gguf_get_n_kv(src.get()); ++i) {
        if (std::string_view(gguf_get_key(src.get(), i)).starts_with("tokenizer.")) {
            copy_kv(dst, src.get(), i);
        }
    }
    return static_cast<int64_t>(gguf_get_arr_n(src.get(), tokens));
}

void set_hparams(gguf_context* g, const Options& o, const std::string& arch) {
    const Shape& s = o.shape;
    auto key = [&](const char* k) { return arch + "." + k; };
    auto u32 = [&](const char* k, int v) {
        gguf_set_val_u32(g, key(k).c_str(), static_cast<uint32_t>(v));
    };
    auto f32 = [&](const char* k, float v) { gguf_set_val_f32(g, key(k).c_str(), v); };

    u32("context_length", s.n_ctx);
    u32("embedding_length", s.n_embd);
    u32("block_count", s.n_layer);
    if (o.arch == Arch::mamba || o.arch == Arch::jamba) {
        u32("ssm.conv_kernel", kSsmConv);
        u32("ssm.inner_size", 2 * s.n_embd);
        u32("ssm.state_size", kSsmState);
        u32("ssm.time_step_rank", ssm_dt_rank(s.n_embd));
    }
    if (o.arch == Arch::mamba) {
        // Mamba has no attention or FFN; llama.cpp's converter writes zeros for these keys.
        u32("feed_forward_length", 0);
        u32("attention.head_count", 0);
        gguf_set_val_bool(g, key("ssm.dt_b_c_rms").c_str(), false);
        f32("attention.layer_norm_rms_epsilon", 1e-5f);
        return;
    }
    const int head_dim = s.n_embd / s.n_head;
    u32("feed_forward_length", s.n_ff);
    u32("attention.head_count", s.n_head);
    if (o.arch == Arch::jamba) {
        // Per layer: a Mamba layer has no KV heads, which is how llama.cpp tells them apart.
        std::vector<uint32_t> kv(static_cast<size_t>(s.n_layer));
        for (int il = 0; il < s.n_layer; ++il)
            kv[static_cast<size_t>(il)] =
                jamba_attends(il) ? static_cast<uint32_t>(s.n_head_kv) : 0;
        gguf_set_arr_data(g, key("attention.head_count_kv").c_str(), GGUF_TYPE_UINT32, kv.data(),
                          kv.size());
    } else {
        u32("attention.head_count_kv", s.n_head_kv);
    }
    u32("attention.key_length", head_dim);
    u32("attention.value_length", head_dim);
    if (o.arch != Arch::jamba) u32("rope.dimension_count", head_dim);  // jamba has no RoPE
    switch (o.arch) {
        case Arch::llama:
            f32("attention.layer_norm_rms_epsilon", 1e-5f);
            f32("rope.freq_base", 10000.0f);
            break;
        case Arch::qwen3:
            f32("attention.layer_norm_rms_epsilon", 1e-6f);
            f32("rope.freq_base", 1000000.0f);
            break;
        case Arch::gemma2:
            // Values from the released Gemma 2 configs.
            f32("attention.layer_norm_rms_epsilon", 1e-6f);
            f32("rope.freq_base", 10000.0f);
            u32("attention.sliding_window", s.sliding_window);
            f32("attn_logit_softcapping", 50.0f);
            f32("final_logit_softcapping", 30.0f);
            break;
        case Arch::jamba:
            f32("attention.layer_norm_rms_epsilon", 1e-6f);
            break;
        case Arch::mamba:
            break;
    }
}

// Fills `dst` with the next `n` values of a tensor; `index` is the position of dst[0] within the
// tensor, needed by the initialisers whose value depends on the element's coordinates.
void fill_values(const TensorSpec& t, std::mt19937_64& rng, float* dst, int64_t index, int64_t n) {
    switch (t.init) {
        case Init::ones:
            std::fill_n(dst, n, 1.0f);
            return;
        case Init::zeros:
            std::fill_n(dst, n, 0.0f);
            return;
        case Init::ssm_a:
            // Mamba stores A = -exp(A_log) with A_log = log(1..d_state): negative for decay.
            for (int64_t i = 0; i < n; ++i) dst[i] = -static_cast<float>((index + i) % t.ne[0] + 1);
            return;
        case Init::ssm_dt_bias: {
            // inverse softplus of dt ~ log-uniform[1e-3, 0.1], as in Mamba's reference init.
            std::uniform_real_distribution<float> u(std::log(1e-3f), std::log(0.1f));
            for (int64_t i = 0; i < n; ++i) {
                const float dt = std::exp(u(rng));
                dst[i] = dt + std::log(-std::expm1(-dt));
            }
            return;
        }
        case Init::normal: {
            std::normal_distribution<float> d(0.0f, t.stdev);
            for (int64_t i = 0; i < n; ++i) dst[i] = d(rng);
            return;
        }
    }
}

std::string g_tmp_path;  // set before the handlers are installed, never changed afterwards

extern "C" void on_signal(int sig) {
    // unlink is async-signal-safe; a partial temp file is useless, and --out is never touched.
    if (!g_tmp_path.empty()) unlink(g_tmp_path.c_str());
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

struct FileCloser {
    void operator()(FILE* f) const { std::fclose(f); }
};

void write_all(FILE* f, const void* data, size_t n) {
    if (n != 0 && std::fwrite(data, 1, n, f) != n) {
        throw std::runtime_error(fmt::format("write failed: {}", std::strerror(errno)));
    }
}

// Streams the tensor data chunk by chunk so that peak memory stays small even for a 150k-token
// embedding, and so that only one pass over the random numbers is needed.
void write_tensors(FILE* f, const std::vector<TensorSpec>& specs,
                   const std::vector<ggml_type>& types, uint64_t seed, size_t alignment) {
    constexpr int64_t kChunkElems = 1 << 22;
    std::vector<float> buf;
    std::vector<uint8_t> qbuf;
    const std::vector<uint8_t> zeros(alignment, 0);
    for (size_t i = 0; i < specs.size(); ++i) {
        const TensorSpec& t = specs[i];
        const int64_t row = t.ne[0];
        int64_t rows = 1;
        for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
        const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / row);
        std::mt19937_64 rng(seed ^ fnv1a(t.name));
        size_t written = 0;
        for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
            const int64_t nr = std::min(rows_per_chunk, rows - r0);
            buf.resize(static_cast<size_t>(nr * row));
            fill_values(t, rng, buf.data(), r0 * row, nr * row);
            const size_t nbytes = ggml_row_size(types[i], row) * static_cast<size_t>(nr);
            if (types[i] == GGML_TYPE_F32) {
                write_all(f, buf.data(), nbytes);
            } else if (types[i] == GGML_TYPE_F16) {
                qbuf.resize(nbytes);
                ggml_fp32_to_fp16_row(buf.data(), reinterpret_cast<ggml_fp16_t*>(qbuf.data()),
                                      nr * row);
                write_all(f, qbuf.data(), nbytes);
            } else {
                qbuf.resize(nbytes);
                ggml_quantize_chunk(types[i], buf.data(), qbuf.data(), 0, nr, row, nullptr);
                write_all(f, qbuf.data(), nbytes);
            }
            written += nbytes;
        }
        // gguf places every tensor at an aligned offset; the padding is part of the file.
        write_all(f, zeros.data(), (alignment - written % alignment) % alignment);
    }
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(fmt::format("cannot read chat template '{}'", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void validate(const Options& o) {
    const Shape& s = o.shape;
    auto fail = [](const std::string& msg) { throw CLI::ValidationError(msg); };
    if (o.vocab.empty() == o.quantize_from.empty()) fail("give one of --vocab and --quantize-from");
    if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_ctx <= 0) {
        fail("--n-embd, --n-layer and --n-ctx must be positive");
    }
    if (o.reranker && o.arch != Arch::qwen3) fail("--reranker needs --arch qwen3");
    if (o.arch == Arch::mamba) return;  // no attention or FFN shapes to check
    if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0) {
        fail("--n-head, --n-head-kv and --n-ff must be positive");
    }
    if (s.n_embd % s.n_head != 0) {
        fail(fmt::format("--n-embd {} is not a multiple of --n-head {}", s.n_embd, s.n_head));
    }
    if (s.n_head % s.n_head_kv != 0) {
        fail(fmt::format("--n-head {} is not a multiple of --n-head-kv {}", s.n_head, s.n_head_kv));
    }
    if ((s.n_embd / s.n_head) % 2 != 0) {
        fail(fmt::format("head size {} (n_embd / n_head) must be even for RoPE",
                         s.n_embd / s.n_head));
    }
    if (o.arch == Arch::gemma2 && s.sliding_window <= 0) fail("--sliding-window must be positive");
}

int64_t count_params(const std::vector<TensorSpec>& specs) {
    int64_t n = 0;
    for (const auto& t : specs) {
        int64_t e = 1;
        for (int64_t d : t.ne) e *= d;
        n += e;
    }
    return n;
}

void generate(const Options& o) {
    GgufPtr g(gguf_init_empty());
    const std::string arch = arch_name(o.arch);
    gguf_set_val_str(g.get(), "general.architecture", arch.c_str());
    const std::string name =
        o.name.empty() ? fmt::format("random-{}-{}-{}", arch, o.preset, o.type) : o.name;
    gguf_set_val_str(g.get(), "general.name", name.c_str());
    gguf_set_val_u32(g.get(), "general.file_type", static_cast<uint32_t>(file_type(o.type)));
    gguf_set_val_u32(g.get(), "general.quantization_version", GGML_QNT_VERSION);
    set_hparams(g.get(), o, arch);

    const int64_t n_vocab = copy_tokenizer(g.get(), o.vocab);
    if (!o.chat_template_file.empty()) {
        const std::string tmpl = read_text_file(o.chat_template_file);
        gguf_set_val_str(g.get(), "tokenizer.chat_template", tmpl.c_str());
    }

    if (o.reranker) {
        gguf_set_val_u32(g.get(), (arch + ".pooling_type").c_str(), 4);  // LLAMA_POOLING_TYPE_RANK
        const char* labels[] = {"yes", "no"};
        gguf_set_arr_str(g.get(), (arch + ".classifier.output_labels").c_str(), labels, 2);
        // The prompt of a query and a document, as llama-server's /rerank fills it in.
        gguf_set_val_str(g.get(), "tokenizer.chat_template.rerank",
                         "<|im_start|>user\nQuery: {query}\nDocument: {document}\nRelevant?"
                         "<|im_end|>\n<|im_start|>assistant\n");
    }
    const std::vector<TensorSpec> specs = build_tensors(o.arch, o.shape, n_vocab, o.reranker);
    const ggml_type wtype = weight_type(o.type);
    std::vector<ggml_type> types;
    // Metadata only: the no_alloc context just gives gguf_add_tensor real ggml_tensor headers.
    ggml_init_params ip{};
    ip.mem_size = ggml_tensor_overhead() * (specs.size() + 1);
    ip.no_alloc = true;
    GgmlPtr meta(ggml_init(ip));
    for (const auto& t : specs) {
        types.push_back(tensor_type(t, wtype));
        ggml_tensor* tensor =
            ggml_new_tensor(meta.get(), types.back(), static_cast<int>(t.ne.size()), t.ne.data());
        ggml_set_name(tensor, t.name.c_str());
        gguf_add_tensor(g.get(), tensor);
    }

    // Write beside --out and rename at the end: rename is atomic within a directory, so --out
    // either keeps its old content or holds a complete model.
    g_tmp_path = fmt::format("{}.tmp.{}", o.out, getpid());
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    try {
        std::unique_ptr<FILE, FileCloser> f(std::fopen(g_tmp_path.c_str(), "wb"));
        if (!f) {
            throw std::runtime_error(
                fmt::format("cannot create '{}': {}", g_tmp_path, std::strerror(errno)));
        }
        std::vector<uint8_t> header(gguf_get_meta_size(g.get()));
        gguf_get_meta_data(g.get(), header.data());
        write_all(f.get(), header.data(), header.size());
        write_tensors(f.get(), specs, types, o.seed, gguf_get_alignment(g.get()));
        if (std::fflush(f.get()) != 0 || fsync(fileno(f.get())) != 0) {
            throw std::runtime_error(fmt::format("flush failed: {}", std::strerror(errno)));
        }
        f.reset();
        if (std::rename(g_tmp_path.c_str(), o.out.c_str()) != 0) {
            throw std::runtime_error(
                fmt::format("cannot rename to '{}': {}", o.out, std::strerror(errno)));
        }
    } catch (...) {
        unlink(g_tmp_path.c_str());
        throw;
    }
    fmt::print("wrote {}: {} {} ({} layers, n_embd {}, vocab {}), {:.1f}M params, type {}\n", o.out,
               arch, o.preset, o.shape.n_layer, o.shape.n_embd, n_vocab,
               static_cast<double>(count_params(specs)) / 1e6, o.type);
}

}  // namespace

// A copy of another model with its weights quantized by llama.cpp (tensors whose rows do not
// fit the type's blocks keep a type that fits, as llama-quantize does).
void quantize(const Options& o) {
    llama_model_quantize_params q = llama_model_quantize_default_params();
    q.ftype = o.type == "f32"    ? LLAMA_FTYPE_ALL_F32
              : o.type == "f16"  ? LLAMA_FTYPE_MOSTLY_F16
              : o.type == "q8_0" ? LLAMA_FTYPE_MOSTLY_Q8_0
                                 : LLAMA_FTYPE_MOSTLY_Q4_0;
    q.nthread = 1;
    // Its per-tensor fallbacks read as warnings in every build's log; a failure still throws.
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    if (llama_model_quantize(o.quantize_from.c_str(), o.out.c_str(), &q) != 0)
        throw std::runtime_error("llama.cpp could not quantize " + o.quantize_from);
}

int main(int argc, char** argv) {
    Options o;
    CLI::App app{
        "Generate a random-weight GGUF model with a real tokenizer.\n"
        "Shape flags left unset take their value from --preset:\n"
        "  tiny      n_embd 64,  2 layers,  4 heads, 2 kv heads, ff 128,  ctx 512,  swa 128\n"
        "  demo      n_embd 256, 4 layers,  8 heads, 4 kv heads, ff 768,  ctx 2048, swa 512\n"
        "  bench125m n_embd 768, 12 layers, 12 heads, 4 kv heads, ff 2048, ctx 2048, swa 512"};
    std::string arch = "llama";
    app.add_option("--arch", arch,
                   "Architecture (mamba is the recurrent family, jamba the hybrid one)")
        ->check(CLI::IsMember({"llama", "qwen3", "gemma2", "mamba", "jamba"}))
        ->capture_default_str();
    app.add_option("--vocab", o.vocab, "GGUF file whose tokenizer.* keys are copied");
    app.add_option("--quantize-from", o.quantize_from,
                   "Instead of random weights: this model's, quantized to --type");
    app.add_option("--out", o.out, "Output GGUF path")->required();
    app.add_option("--preset", o.preset, "Shape defaults; explicit shape flags override")
        ->check(CLI::IsMember({"tiny", "demo", "bench125m"}))
        ->capture_default_str();
    Shape& s = o.shape;
    // Remember each shape flag so that only the ones left unset take the preset value.
    const std::vector<std::pair<CLI::Option*, int Shape::*>> shape_opts = {
        {app.add_option("--n-embd", s.n_embd, "Embedding size"), &Shape::n_embd},
        {app.add_option("--n-layer", s.n_layer, "Number of blocks"), &Shape::n_layer},
        {app.add_option("--n-head", s.n_head, "Attention heads"), &Shape::n_head},
        {app.add_option("--n-head-kv", s.n_head_kv, "KV heads (GQA)"), &Shape::n_head_kv},
        {app.add_option("--n-ff", s.n_ff, "Feed-forward size"), &Shape::n_ff},
        {app.add_option("--n-ctx", s.n_ctx, "Training context length"), &Shape::n_ctx},
        {app.add_option("--sliding-window", s.sliding_window, "SWA window (gemma2)"),
         &Shape::sliding_window},
    };
    app.add_option("--type", o.type, "Type of the 2-D weight matrices")
        ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Random seed")->capture_default_str();
    app.add_option("--chat-template-file", o.chat_template_file,
                   "Jinja file stored as tokenizer.chat_template (overrides the vocab's)");
    app.add_option("--name", o.name, "general.name (default: derived from the options)");
    app.add_flag("--reranker", o.reranker,
                 "qwen3 only: a reranker (rank pooling, a yes/no classifier head, a rerank "
                 "prompt template)");

    try {
        app.parse(argc, argv);
        o.arch = arch == "qwen3"    ? Arch::qwen3
                 : arch == "gemma2" ? Arch::gemma2
                 : arch == "mamba"  ? Arch::mamba
                 : arch == "jamba"  ? Arch::jamba
                                    : Arch::llama;
        const Shape preset = preset_shape(o.preset);
        for (const auto& [opt, field] : shape_opts) {
            if (opt->count() == 0) s.*field = preset.*field;
        }
        validate(o);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    try {
        const auto t0 = std::chrono::steady_clock::now();
        if (o.quantize_from.empty())
            generate(o);
        else
            quantize(o);
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        fmt::print("done in {:.2f} s\n", dt.count());
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return 0;
}
