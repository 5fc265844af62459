#include "llamapp/context.hpp"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "../src/llama-ext.h"  // llama.cpp's staging API: the devices a model was placed on
#include "core/context_state.hpp"
#include "core/internals.hpp"
#include "core/llama_params.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"

namespace llamapp {

namespace {

struct KvTypeName {
    KvType type;
    std::string_view name;
    ggml_type ggml;
};
constexpr KvTypeName kv_types[] = {
    {KvType::f32, "f32", GGML_TYPE_F32},          {KvType::f16, "f16", GGML_TYPE_F16},
    {KvType::bf16, "bf16", GGML_TYPE_BF16},       {KvType::q8_0, "q8_0", GGML_TYPE_Q8_0},
    {KvType::q4_0, "q4_0", GGML_TYPE_Q4_0},       {KvType::q4_1, "q4_1", GGML_TYPE_Q4_1},
    {KvType::iq4_nl, "iq4_nl", GGML_TYPE_IQ4_NL}, {KvType::q5_0, "q5_0", GGML_TYPE_Q5_0},
    {KvType::q5_1, "q5_1", GGML_TYPE_Q5_1},
};

ggml_type to_ggml(KvType t) {
    for (const auto& k : kv_types) {
        if (k.type == t) return k.ggml;
    }
    return GGML_TYPE_F16;
}

bool is_quantized(KvType t) {
    return t != KvType::f32 && t != KvType::f16 && t != KvType::bf16;
}

constexpr std::int64_t max_n_ctx = 1 << 24;

Result<void> range(std::int64_t value, std::int64_t lo, std::int64_t hi, const char* option) {
    if (value >= lo && value <= hi) return {};
    return fail(ErrorCode::invalid_argument,
                fmt::format("{} must be between {} and {}", option, lo, hi),
                fmt::format("{}={}", option, value));
}

bool model_pools(const ModelInfo& info) {
    auto it = info.metadata.find(info.architecture + ".pooling_type");
    return it != info.metadata.end() && it->second != "0";
}

}  // namespace

namespace detail {

Result<void> validate_context_options(const ModelInfo& info, const ContextOptions& o) {
    if (info.vocab_only) {
        return fail(ErrorCode::unsupported_operation, "a vocab-only model cannot run a context",
                    info.path.string());
    }
    if (o.n_ctx != 0) {
        if (auto r = range(o.n_ctx, 8, max_n_ctx, "n_ctx"); !r) return r;
    }
    if (auto r = range(o.n_batch, 1, 1 << 20, "n_batch"); !r) return r;
    if (auto r = range(o.n_ubatch, 1, o.n_batch, "n_ubatch"); !r) return r;
    if (auto r = range(o.n_seq_max, 1, static_cast<std::int64_t>(llama_max_parallel_sequences()),
                       "n_seq_max");
        !r)
        return r;
    if (o.embeddings && o.n_ubatch < o.n_seq_max) {
        return fail(ErrorCode::invalid_argument,
                    fmt::format("an embedding context needs n_ubatch ({}) >= n_seq_max ({})",
                                o.n_ubatch, o.n_seq_max),
                    "n_ubatch");
    }
    if (auto r = range(o.n_threads, 0, 1024, "n_threads"); !r) return r;
    if (auto r = range(o.n_threads_batch, 0, 1024, "n_threads_batch"); !r) return r;
    if (o.decode_timeout.count() < 0) {
        return fail(ErrorCode::invalid_argument, "decode_timeout must be >= 0", "decode_timeout");
    }
    if (is_quantized(o.type_v) && o.flash_attn == FlashAttention::off) {
        return fail(ErrorCode::invalid_argument, "a quantized V cache needs flash attention",
                    "type_v");
    }
    // Refuse a KV cache that cannot fit in physical memory before trying to allocate it.
    const std::int64_t n_ctx = o.n_ctx == 0 ? info.n_ctx_train : o.n_ctx;
    if (info.n_head > 0 && !info.is_recurrent) {
        const double n_embd_kv = static_cast<double>(info.n_embd) / info.n_head * info.n_head_kv;
        const double bytes_per = ggml_type_size(to_ggml(o.type_k)) /
                                     static_cast<double>(ggml_blck_size(to_ggml(o.type_k))) +
                                 ggml_type_size(to_ggml(o.type_v)) /
                                     static_cast<double>(ggml_blck_size(to_ggml(o.type_v)));
        const double kv_bytes = static_cast<double>(n_ctx) * info.n_layer * n_embd_kv * bytes_per;
        const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                           static_cast<double>(sysconf(_SC_PAGE_SIZE));
        if (ram > 0 && kv_bytes > ram) {
            return fail(
                ErrorCode::out_of_memory,
                fmt::format("the KV cache for n_ctx={} needs about {:.1f} GiB, more than this "
                            "machine's {:.1f} GiB",
                            n_ctx, kv_bytes / (1 << 30), ram / (1 << 30)),
                "n_ctx");
        }
    }
    return {};
}

}  // namespace detail

namespace {

bool abort_callback(void* data) {
    auto* guard = static_cast<detail::AbortGuard*>(data);
    for (const auto* slot : {&guard->token, &guard->stop}) {
        const CancellationToken* token = slot->load(std::memory_order_acquire);
        if (token && token->cancelled()) return true;
    }
    const std::int64_t deadline = guard->deadline_ns.load(std::memory_order_relaxed);
    if (deadline != 0 && std::chrono::steady_clock::now().time_since_epoch().count() > deadline) {
        guard->timed_out.store(true, std::memory_order_relaxed);
        return true;
    }
    return false;
}

}  // namespace

namespace detail {

llama_context_params context_params(const ModelInfo& info, const ContextOptions& options) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    llama_context_params p = llama_context_default_params();
    p.n_ctx = static_cast<uint32_t>(options.n_ctx);
    p.n_batch = static_cast<uint32_t>(options.n_batch);
    p.n_ubatch = static_cast<uint32_t>(options.n_ubatch);
    p.n_seq_max = static_cast<uint32_t>(options.n_seq_max);
    // llama.cpp reserves an embedding graph for n_ubatch / n_seq_max tokens per sequence, and its
    // pooling then aborts (GGML_ASSERT in build_pooling) unless the division is exact.
    if (options.embeddings) p.n_ubatch -= p.n_ubatch % p.n_seq_max;
    p.n_threads = options.n_threads > 0 ? options.n_threads : hw;
    p.n_threads_batch = options.n_threads_batch > 0 ? options.n_threads_batch : p.n_threads;
    p.flash_attn_type = options.flash_attn == FlashAttention::on    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                        : options.flash_attn == FlashAttention::off ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                    : LLAMA_FLASH_ATTN_TYPE_AUTO;
    p.type_k = to_ggml(options.type_k);
    p.type_v = to_ggml(options.type_v);
    p.offload_kqv = options.offload_kqv;
    // Packed embedding batches came out wrong for every sequence but the first with per-sequence
    // KV streams (checked on the pinned tree); the cache is cleared per batch, so unified costs
    // nothing.
    p.kv_unified = options.kv_unified || options.embeddings;
    p.embeddings = options.embeddings;
    p.no_perf = true;
    switch (options.pooling) {
        case Pooling::model_default:
            // A causal LM has no pooling of its own; mean pooling makes embed() useful anyway.
            p.pooling_type = options.embeddings && !model_pools(info)
                                 ? LLAMA_POOLING_TYPE_MEAN
                                 : LLAMA_POOLING_TYPE_UNSPECIFIED;
            break;
        case Pooling::none:
            p.pooling_type = LLAMA_POOLING_TYPE_NONE;
            break;
        case Pooling::mean:
            p.pooling_type = LLAMA_POOLING_TYPE_MEAN;
            break;
        case Pooling::cls:
            p.pooling_type = LLAMA_POOLING_TYPE_CLS;
            break;
        case Pooling::last:
            p.pooling_type = LLAMA_POOLING_TYPE_LAST;
            break;
    }
    return p;
}

}  // namespace detail

Result<KvType> parse_kv_type(std::string_view name) {
    for (const auto& k : kv_types) {
        if (k.name == name) return k.type;
    }
    return fail(ErrorCode::invalid_argument, "unknown KV cache type '" + std::string(name) + "'",
                "allowed: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1");
}

std::string_view to_string(KvType type) {
    for (const auto& k : kv_types) {
        if (k.type == type) return k.name;
    }
    return "f16";
}

Result<Pooling> parse_pooling(std::string_view name) {
    if (name == "default" || name.empty()) return Pooling::model_default;
    if (name == "none") return Pooling::none;
    if (name == "mean") return Pooling::mean;
    if (name == "cls") return Pooling::cls;
    if (name == "last") return Pooling::last;
    return fail(ErrorCode::invalid_argument, "unknown pooling '" + std::string(name) + "'",
                "allowed: default, none, mean, cls, last");
}

namespace detail {

Result<void> ContextState::decode(const llama_batch& batch, const CancellationToken* cancel,
                                  std::chrono::steady_clock::time_point deadline,
                                  const CancellationToken* stop) {
    using Clock = std::chrono::steady_clock;
    if (options.decode_timeout.count() > 0) {
        deadline = std::min(deadline, Clock::now() + options.decode_timeout);
    }
    abort.token.store(cancel, std::memory_order_release);
    abort.stop.store(stop, std::memory_order_release);
    abort.deadline_ns.store(
        deadline == Clock::time_point::max() ? 0 : deadline.time_since_epoch().count(),
        std::memory_order_relaxed);
    abort.timed_out.store(false, std::memory_order_relaxed);
    const int rc = llama_decode(ctx.get(), batch);
    abort.token.store(nullptr, std::memory_order_release);
    abort.stop.store(nullptr, std::memory_order_release);
    abort.deadline_ns.store(0, std::memory_order_relaxed);
    // A lost RPC server: what this decode read back is void, whatever llama.cpp returned.
    if (auto lost = model_state(model).rpc.lost()) {
        return fail(ErrorCode::device_lost,
                    "the RPC server holding part of the model went away; reload the model", *lost);
    }
    switch (rc) {
        case 0:
            return {};
        case 1:
            return fail(ErrorCode::context_overflow, "no room left in the KV cache for this batch",
                        fmt::format("n_ctx={}", llama_n_ctx(ctx.get())));
        case 2:
            if (abort.timed_out.load(std::memory_order_relaxed)) {
                return fail(ErrorCode::timeout, "decoding took longer than its time budget");
            }
            return fail(ErrorCode::cancelled, "decoding was cancelled");
        case -1:
            return fail(ErrorCode::invalid_argument, "llama.cpp rejected the batch");
        default:
            return fail(ErrorCode::decode_failed,
                        fmt::format("llama_decode failed with code {}", rc));
    }
}

void avoid_lavapipe_flash_attention(llama_context_params& params, const ContextOptions& options,
                                    std::span<const std::string> descriptions) {
    if (options.flash_attn != FlashAttention::automatic || is_quantized(options.type_v)) return;
    for (const std::string& d : descriptions)
        if (d.starts_with("llvmpipe")) params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
}

}  // namespace detail

Context::Context(std::unique_ptr<detail::ContextState> state) : state_(std::move(state)) {}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

Result<Context> Context::create(const Model& model, const ContextOptions& options) {
    const ModelInfo& info = model.info();
    if (auto ok = detail::validate_context_options(info, options); !ok)
        return std::unexpected(ok.error());

    auto state = std::make_unique<detail::ContextState>(model, options);
    llama_context_params p = detail::context_params(info, options);
    const llama_model* placed = detail::model_state(model).model.get();
    std::vector<std::string> devices;
    for (int i = 0; i < llama_model_n_devices(placed); ++i)
        devices.emplace_back(ggml_backend_dev_description(llama_model_get_device(placed, i)));
    detail::avoid_lavapipe_flash_attention(p, options, devices);
    p.abort_callback = abort_callback;
    p.abort_callback_data = &state->abort;

    detail::LogCapture capture;
    llama_context* raw = nullptr;
    try {
        raw = llama_init_from_model(detail::model_state(model).model.get(), p);
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_argument,
                    std::string("llama.cpp refused the context: ") + e.what());
    }
    if (!raw) {
        const std::string why = capture.errors();
        if (why.find("alloc") != std::string::npos || why.find("memory") != std::string::npos) {
            return fail(ErrorCode::out_of_memory,
                        "not enough memory for the context: " + capture.last_error());
        }
        return fail(ErrorCode::invalid_argument,
                    "llama.cpp refused the context options: " + capture.last_error());
    }
    state->ctx.reset(raw);
    state->sequences = detail::SequenceMemory(raw, p.kv_unified);
    auto pool = [](int n) {
        ggml_threadpool_params params = ggml_threadpool_params_default(n);
        return detail::Threadpool(ggml_threadpool_new(&params));
    };
    state->threads = pool(p.n_threads);
    if (p.n_threads_batch != p.n_threads) state->threads_batch = pool(p.n_threads_batch);
    if (state->threads) {
        llama_attach_threadpool(
            raw, state->threads.get(),
            state->threads_batch ? state->threads_batch.get() : state->threads.get());
    }
    state->can_trim = !info.is_recurrent && !info.is_hybrid;
    return Context(std::move(state));
}

const Model& Context::model() const {
    return state_->model;
}
int Context::n_ctx() const {
    return static_cast<int>(llama_n_ctx(state_->ctx.get()));
}
int Context::n_batch() const {
    return static_cast<int>(llama_n_batch(state_->ctx.get()));
}
const ContextOptions& Context::options() const {
    return state_->options;
}
Result<void> Context::clear() {
    if (state_->busy) {
        return fail(ErrorCode::unsupported_operation,
                    "cannot clear the cache while a generation runs");
    }
    state_->forget();
    return {};
}

}  // namespace llamapp
