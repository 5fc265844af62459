#include "llamapp/model.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/gguf_probe.hpp"
#include "core/llama_params.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "core/rpc_internal.hpp"
#include "llamapp/backend.hpp"
#include "llamapp/fingerprint.hpp"

namespace llamapp {
namespace {

llama_split_mode to_llama(SplitMode m) {
    switch (m) {
        case SplitMode::none:
            return LLAMA_SPLIT_MODE_NONE;
        case SplitMode::layer:
            return LLAMA_SPLIT_MODE_LAYER;
        case SplitMode::row:
            return LLAMA_SPLIT_MODE_ROW;
        case SplitMode::tensor:
            return LLAMA_SPLIT_MODE_TENSOR;
    }
    return LLAMA_SPLIT_MODE_LAYER;
}

}  // namespace

namespace detail {

namespace {

bool names_no_device(const ModelOptions& o) {
    return o.devices.size() == 1 && o.devices.front() == "none";
}

// The devices named, checked the way llama.cpp's --device is: offload devices only, each once.
Result<void> validate_devices(const std::vector<std::string>& names) {
    if (names.size() == 1 && names.front() == "none") return {};
    std::string known;
    for (const DeviceInfo& d : offload_devices()) known += (known.empty() ? "" : ", ") + d.name;
    for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string& name = names[i];
        ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
        if (name == "none" || !dev || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU ||
            ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_ACCEL) {
            return fail(ErrorCode::invalid_argument,
                        fmt::format("{} is not a device layers can be placed on (this process has: "
                                    "{}; \"none\" alone keeps every layer on the CPU)",
                                    name, known.empty() ? "none" : known),
                        "devices");
        }
        if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), name) !=
            names.begin() + static_cast<std::ptrdiff_t>(i))
            return fail(ErrorCode::invalid_argument, "a device is named twice", name);
    }
    return {};
}

}  // namespace

Result<void> validate_model_options(const ModelOptions& o) {
    if (o.n_gpu_layers < -1) {
        return fail(ErrorCode::invalid_argument, "n_gpu_layers must be -1 (all) or >= 0",
                    "n_gpu_layers=" + std::to_string(o.n_gpu_layers));
    }
    if (auto ok = validate_devices(o.devices); !ok) return ok;
    const std::size_t n_offload = placement_device_count(o);
    if (o.main_gpu < 0 || (n_offload > 0 && static_cast<std::size_t>(o.main_gpu) >= n_offload) ||
        (n_offload == 0 && o.main_gpu != 0)) {
        return fail(
            ErrorCode::invalid_argument, "main_gpu is not a valid device index",
            "main_gpu=" + std::to_string(o.main_gpu) + ", devices=" + std::to_string(n_offload));
    }
    if (o.tensor_split.size() > n_offload || o.tensor_split.size() > llama_max_devices()) {
        return fail(ErrorCode::invalid_argument,
                    "tensor_split has more entries than offload devices",
                    "tensor_split size=" + std::to_string(o.tensor_split.size()) +
                        ", devices=" + std::to_string(n_offload));
    }
    for (float share : o.tensor_split) {
        if (!std::isfinite(share) || share < 0) {
            return fail(ErrorCode::invalid_argument, "tensor_split entries must be finite and >= 0",
                        "tensor_split");
        }
    }
    if (o.use_mlock && !llama_supports_mlock()) {
        return fail(ErrorCode::invalid_argument, "use_mlock is not supported on this system",
                    "use_mlock");
    }
    return {};
}

std::size_t placement_device_count(const ModelOptions& options) {
    if (names_no_device(options)) return 0;
    return options.devices.empty() ? offload_device_count() : options.devices.size();
}

llama_model_params model_params(const ModelOptions& options, ModelParamsStorage& storage) {
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = options.n_gpu_layers;
    params.split_mode = to_llama(options.split_mode);
    params.main_gpu = options.main_gpu;
    storage.split.assign(llama_max_devices(), 0.0f);
    std::copy(options.tensor_split.begin(), options.tensor_split.end(), storage.split.begin());
    params.tensor_split = options.tensor_split.empty() ? nullptr : storage.split.data();
    storage.devices.clear();
    if (!options.devices.empty()) {
        if (!names_no_device(options))
            for (const std::string& name : options.devices)
                storage.devices.push_back(ggml_backend_dev_by_name(name.c_str()));
        storage.devices.push_back(nullptr);
        params.devices = storage.devices.data();
    }
    if (options.use_mmap) {
        params.load_mode = options.use_mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP;
    } else {
        params.load_mode = options.use_mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE;
    }
    params.vocab_only = options.vocab_only;
    return params;
}

std::vector<DeviceInfo> placement_devices(const ModelOptions& options) {
    if (names_no_device(options) || options.n_gpu_layers == 0 || options.vocab_only) return {};
    if (options.devices.empty()) return offload_devices();
    std::vector<DeviceInfo> named;
    for (DeviceInfo& d : list_devices())
        if (std::find(options.devices.begin(), options.devices.end(), d.name) !=
            options.devices.end())
            named.push_back(std::move(d));
    return named;
}

std::vector<std::string> rpc_endpoints(const ModelOptions& options) {
    std::vector<std::string> endpoints;
    for (const DeviceInfo& d : placement_devices(options))
        if (d.backend == "RPC" &&
            std::find(endpoints.begin(), endpoints.end(), d.description) == endpoints.end())
            endpoints.push_back(d.description);
    return endpoints;
}

}  // namespace detail

namespace {

// Adapts llama.cpp's progress reports to the documented contract: monotone, in [0, 1].
struct ProgressState {
    const std::function<bool(float)>* user;
    float last = 0.0f;
    bool cancelled = false;
};

bool progress_trampoline(float value, void* data) {
    auto* state = static_cast<ProgressState*>(data);
    if (!std::isfinite(value)) return true;
    value = std::clamp(value, 0.0f, 1.0f);
    // 1.0 is reported by load() itself once loading has really finished.
    value = std::min(value, std::nextafter(1.0f, 0.0f));
    if (value < state->last) return true;
    state->last = value;
    if (!(*state->user)(value)) {
        state->cancelled = true;
        return false;
    }
    return true;
}

std::string meta_string(const llama_model* model, const char* key) {
    char buf[512];
    const int n = llama_model_meta_val_str(model, key, buf, sizeof buf);
    return n >= 0 ? std::string(buf, std::min<std::size_t>(n, sizeof buf - 1)) : std::string();
}

ModelInfo introspect(const llama_model* model, const llama_vocab* vocab,
                     const std::filesystem::path& path, const detail::GgufSummary& summary,
                     bool vocab_only) {
    ModelInfo info;
    info.path = path;
    info.file_size = summary.file_size;
    info.architecture = summary.architecture;
    if (summary.file_type >= 0) info.quantization = detail::file_type_name(summary.file_type);
    info.embedder = summary.pools;
    info.reranker = summary.ranks;
    info.name = meta_string(model, "general.name");
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    info.description = desc;
    // A vocab-only load has no tensors to count; the file's header does.
    info.n_params = vocab_only ? summary.n_params : llama_model_n_params(model);
    info.tensor_bytes = llama_model_size(model);
    info.n_ctx_train = llama_model_n_ctx_train(model);
    info.n_embd = llama_model_n_embd(model);
    info.n_embd_out = llama_model_n_embd_out(model);
    info.n_layer = llama_model_n_layer(model);
    if (!vocab_only && info.n_layer > 0) {
        // Per-layer hyperparameters are not loaded for a vocab-only model (llama.cpp asserts).
        info.n_head = llama_model_n_head(model);
        info.n_head_kv = llama_model_n_head_kv(model);
        info.sliding_window = llama_model_n_swa(model);
    }
    info.n_vocab = llama_vocab_n_tokens(vocab);
    info.is_recurrent = llama_model_is_recurrent(model);
    info.is_hybrid = llama_model_is_hybrid(model);
    info.has_encoder = llama_model_has_encoder(model);
    info.vocab_only = vocab_only;
    if (const char* tmpl = llama_model_chat_template(model, nullptr)) info.chat_template = tmpl;
    if (const char* tmpl = llama_model_chat_template(model, "rerank")) info.rerank_template = tmpl;

    const int n_meta = llama_model_meta_count(model);
    std::vector<char> key(256), value(4096);
    for (int i = 0; i < n_meta; ++i) {
        int nk = llama_model_meta_key_by_index(model, i, key.data(), key.size());
        int nv = llama_model_meta_val_str_by_index(model, i, value.data(), value.size());
        if (nk < 0 || nv < 0) continue;
        if (static_cast<std::size_t>(nv) >= value.size()) {
            value.resize(nv + 1);
            nv = llama_model_meta_val_str_by_index(model, i, value.data(), value.size());
        }
        info.metadata.emplace(std::string(key.data(), std::min<std::size_t>(nk, key.size() - 1)),
                              std::string(value.data(), nv));
    }

    SpecialTokens& s = info.special;
    s.bos = llama_vocab_bos(vocab);
    s.eos = llama_vocab_eos(vocab);
    s.eot = llama_vocab_eot(vocab);
    s.sep = llama_vocab_sep(vocab);
    s.nl = llama_vocab_nl(vocab);
    s.pad = llama_vocab_pad(vocab);
    s.fim_prefix = llama_vocab_fim_pre(vocab);
    s.fim_suffix = llama_vocab_fim_suf(vocab);
    s.fim_middle = llama_vocab_fim_mid(vocab);
    s.add_bos = llama_vocab_get_add_bos(vocab);
    s.add_eos = llama_vocab_get_add_eos(vocab);
    s.add_sep = llama_vocab_get_add_sep(vocab);
    return info;
}

// Why llama.cpp returned no model, from what it logged while trying.
Error load_failure(const std::filesystem::path& path, const detail::GgufSummary& summary,
                   const ModelOptions& options, const detail::LogCapture& capture, bool cancelled) {
    if (cancelled) {
        return Error{ErrorCode::load_cancelled, "model load cancelled by the progress callback",
                     path.string()};
    }
    const std::string why = capture.errors();
    if (why.find("unknown model architecture") != std::string::npos) {
        return Error{ErrorCode::unsupported_model,
                     "unsupported model architecture '" + summary.architecture + "'",
                     path.string()};
    }
    if (why.find("alloc") != std::string::npos || why.find("out of memory") != std::string::npos) {
        return Error{ErrorCode::out_of_memory, "not enough memory to load the model",
                     path.string()};
    }
    if (summary.n_tensors == 0 && !options.vocab_only) {
        return Error{ErrorCode::invalid_model_file,
                     "the file has no weights (a vocabulary-only GGUF); load it with vocab_only",
                     path.string()};
    }
    const std::string first = capture.first_error();
    return Error{ErrorCode::invalid_model_file,
                 first.empty() ? "llama.cpp could not load the model"
                               : "llama.cpp could not load the model: " + first,
                 path.string()};
}

}  // namespace

Result<Model> Model::load(const std::filesystem::path& path, const ModelOptions& options) {
    ensure_backend();
    if (auto ok = detail::validate_model_options(options); !ok) return std::unexpected(ok.error());
    auto summary = detail::probe_gguf(path);
    if (!summary) return std::unexpected(summary.error());
    // Refused from the header, before llama.cpp reads any weights (checked again after loading,
    // by capability, for architectures added to llama.cpp later).
    const std::string& arch = summary->architecture;
    if (arch == "t5")
        return fail(ErrorCode::unsupported_model, "encoder-decoder models are not supported", arch);
    if (arch == "dream" || arch == "llada" || arch == "llada-moe" || arch == "rnd1")
        return fail(ErrorCode::unsupported_model, "diffusion models are not supported", arch);

    detail::ModelParamsStorage storage;
    llama_model_params params = detail::model_params(options, storage);
    // Watched from before the load: a server lost while the weights go out voids them too.
    detail::RpcWatch rpc(detail::rpc_endpoints(options));
    ProgressState progress{&options.progress};
    if (options.progress) {
        params.progress_callback = progress_trampoline;
        params.progress_callback_user_data = &progress;
    }

    detail::LogCapture capture;
    llama_model* raw = nullptr;
    try {
        raw = llama_model_load_from_file(path.c_str(), params);
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_model_file,
                    std::string("llama.cpp failed to load the model: ") + e.what(), path.string());
    }
    if (!raw)
        return std::unexpected(load_failure(path, *summary, options, capture, progress.cancelled));
    auto state = std::make_shared<detail::ModelState>();
    state->model.reset(raw);
    if (auto lost = rpc.lost()) {
        return fail(ErrorCode::device_lost,
                    "the RPC server the model was being placed on went away during the load",
                    *lost);
    }
    state->rpc = std::move(rpc);
    state->vocab = llama_model_get_vocab(raw);

    if (llama_model_has_encoder(raw) && llama_model_has_decoder(raw)) {
        return fail(ErrorCode::unsupported_model, "encoder-decoder models are not supported",
                    summary->architecture);
    }
    if (llama_vocab_type(state->vocab) == LLAMA_VOCAB_TYPE_NONE) {
        return fail(ErrorCode::unsupported_model, "the model has no tokenizer", path.string());
    }
    if (llama_model_is_diffusion(raw)) {
        return fail(ErrorCode::unsupported_model, "diffusion models are not supported",
                    summary->architecture);
    }
    state->info = introspect(raw, state->vocab, path, *summary, options.vocab_only);
    if (options.progress && !options.progress(1.0f)) {
        return fail(ErrorCode::load_cancelled, "model load cancelled by the progress callback",
                    path.string());
    }
    return Model(std::move(state));
}

std::string parameter_count_text(std::uint64_t n_params) {
    constexpr std::pair<double, const char*> units[] = {
        {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (const auto& [unit, suffix] : units) {
        if (static_cast<double>(n_params) < unit) continue;
        const double v = static_cast<double>(n_params) / unit;
        const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
        return fmt::format("{:.{}f}{}", v, decimals, suffix);
    }
    return std::to_string(n_params);
}

const ModelInfo& Model::info() const {
    return state_->info;
}

Tokenizer Model::tokenizer() const {
    return Tokenizer(state_);
}

Result<std::string> Model::fingerprint() const {
    return file_sha256(state_->info.path);
}

}  // namespace llamapp
