#include "options.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "llama_flags.hpp"

namespace llamapp::cli {

namespace fs = std::filesystem;

void add_common(CLI::App& app, CommonFlags& flags, bool several_models) {
    if (several_models)
        add_llama_option(app, "--model", flags.model_paths,
                         "GGUF model file, as ID=PATH to name it (repeatable; default: the demo "
                         "model the build makes, unless --models-dir is given)");
    else
        add_llama_option(app, "--model", flags.model_path,
                         "GGUF model file (default: the demo model the build makes)");
    add_llama_option(app, "--hf-repo", flags.hf_refs,
                     std::string("a model on the Hugging Face hub, owner/repo[:QUANT|:file.gguf] "
                                 "(-hf; pulled into the hub cache first") +
                         (several_models ? "; repeatable)" : ")"));
    add_llama_option(app, "--hf-file", flags.hf_file,
                     "the file of the --hf-repo repository to take (-hff; over its :QUANT)");
    add_llama_switch(app, "--offline", flags.offline,
                     "never ask the hub: references resolve from its cache (or HF_HUB_OFFLINE=1)");
    app.add_option("--log-level", flags.log_level, "debug, info, warning, error or none")
        ->check(CLI::IsMember({"debug", "info", "warning", "error", "none"}));
    add_llama_switch(app, "--verbose", flags.verbose, "log everything (--log-level debug)");
    add_llama_option(app, "--verbosity", flags.verbosity,
                     "llama.cpp's log threshold (-lv): 0-1 errors, 2 warnings, 3 info, 4 debug");
    add_llama_switch(app, "--log-disable", flags.log_disable, "no log lines (--log-level none)");
    add_llama_option(app, "--n-gpu-layers", flags.n_gpu_layers,
                     "layers to offload to GPUs (-ngl; -1, all or auto = all)")
        ->transform(CLI::Transformer({{"all", "-1"}, {"auto", "-1"}}));
    add_placement(app, flags);
    add_llama_option(app, "--rpc", flags.rpc,
                     "remote devices: llamapp rpc-server (or llama.cpp rpc-server) endpoints, "
                     "host:port,... (their protocol has no authentication: trusted networks only)")
        ->delimiter(',');
    add_llama_switch(app, "--list-devices", flags.list_devices,
                     "print the devices (with --rpc's) and exit");
    app.add_flag("--no-mmap", flags.no_mmap, "read the model into memory instead of mapping it");
    add_llama_option(app, "--load-mode", flags.load_mode,
                     "auto or mmap: map the model file; none: read it into memory; mlock or "
                     "mmap+mlock: the same, locked in RAM")
        ->check(CLI::IsMember({"auto", "mmap", "none", "mlock", "mmap+mlock"}));
}

void add_placement(CLI::App& app, CommonFlags& flags) {
    add_llama_option(app, "--device", flags.devices,
                     "devices for the layers, in order (-dev; names from `llamapp devices`; "
                     "none: the CPU only; default: every GPU and RPC device)")
        ->delimiter(',');
    add_llama_option(app, "--split-mode", flags.split_mode,
                     "how layers spread over several devices (-sm): none (main GPU only), layer, "
                     "row or tensor")
        ->check(CLI::IsMember({"none", "layer", "row", "tensor"}))
        ->capture_default_str();
    add_llama_option(app, "--tensor-split", flags.tensor_split,
                     "each device's share of the model, e.g. 3,1 (-ts)")
        ->delimiter(',');
    add_llama_option(app, "--fit", flags.fit,
                     "lower what -ngl and -ts leave unset (and a -c of 0) until the model fits "
                     "each device's free memory, less --fit-target: on or off")
        ->transform(CLI::Transformer({{"1", "on"}, {"true", "on"}, {"0", "off"}, {"false", "off"}}))
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    add_llama_option(app, "--fit-target", flags.fit_target,
                     "MiB each device keeps free under --fit, in device order (one value: every "
                     "device; default 1024)")
        ->delimiter(',');
    add_llama_option(app, "--fit-ctx", flags.fit_ctx,
                     "the least context --fit chooses for a -c of 0")
        ->capture_default_str();
    add_llama_option(
        app, "--main-gpu", flags.main_gpu,
        "the device (an index into the devices) that holds the model with -sm none (-mg)")
        ->capture_default_str();
}

void add_context(CLI::App& app, ContextFlags& flags) {
    add_llama_option(app, "--ctx-size", flags.n_ctx,
                     "context size in tokens (0 = the model's training length)")
        ->capture_default_str();
    add_llama_option(app, "--batch-size", flags.n_batch, "tokens per decode call")
        ->capture_default_str();
    add_llama_option(app, "--ubatch-size", flags.n_ubatch, "tokens per compute graph (-ub)")
        ->capture_default_str();
    add_llama_option(app, "--threads", flags.threads, "decode threads (0 = all cores)");
    add_llama_option(app, "--threads-batch", flags.threads_batch,
                     "prefill threads (-tb; 0 = same as -t)");
    add_llama_option(app, "--flash-attn", flags.flash_attn,
                     "flash attention: auto, on or off (-fa)")
        ->transform(CLI::Transformer({{"1", "on"}, {"true", "on"}, {"0", "off"}, {"false", "off"}}))
        ->check(CLI::IsMember({"auto", "on", "off"}));
    add_llama_option(app, "--cache-type-k", flags.cache_type_k, "KV cache type for K (-ctk)")
        ->capture_default_str();
    add_llama_option(app, "--cache-type-v", flags.cache_type_v, "KV cache type for V (-ctv)")
        ->capture_default_str();
    add_llama_switch(app, "--kv-offload", flags.kv_offload,
                     "keep the KV cache with the offloaded layers (default); --no-kv-offload "
                     "(-nkvo) keeps it in host memory");
}

void add_sampling(CLI::App& app, SamplingFlags& flags) {
    SamplingParams& p = flags.params;
    add_llama_option(app, "--temp", p.temperature, "temperature (0 = greedy)")
        ->capture_default_str();
    add_llama_option(app, "--top-k", p.top_k, "top-k (0 = off)")->capture_default_str();
    add_llama_option(app, "--top-p", p.top_p, "top-p (1 = off)")->capture_default_str();
    add_llama_option(app, "--min-p", p.min_p, "min-p (0 = off)")->capture_default_str();
    add_llama_option(app, "--typical", p.typical_p, "typical-p (1 = off)");
    add_llama_option(app, "--repeat-penalty", p.repeat_penalty, "repetition penalty (1 = off)");
    add_llama_option(app, "--repeat-last-n", p.penalty_last_n,
                     "tokens the penalties look back over (-1 = all)");
    add_llama_option(app, "--presence-penalty", p.presence_penalty, "presence penalty");
    add_llama_option(app, "--frequency-penalty", p.frequency_penalty, "frequency penalty");
    add_llama_option(app, "--dry-multiplier", p.dry_multiplier, "DRY penalty (0 = off)");
    add_llama_option(app, "--dry-base", p.dry_base, "DRY base");
    add_llama_option(app, "--dry-allowed-length", p.dry_allowed_length,
                     "longest repeat DRY leaves alone");
    add_llama_option(app, "--dry-penalty-last-n", p.dry_penalty_last_n,
                     "tokens DRY looks back over (-1 = all)");
    add_llama_option(app, "--dry-sequence-breaker", flags.dry_sequence_breakers,
                     "a DRY sequence breaker (repeatable; none = no breakers)");
    add_llama_option(app, "--xtc-probability", p.xtc_probability, "XTC probability (0 = off)");
    add_llama_option(app, "--xtc-threshold", p.xtc_threshold, "XTC threshold");
    add_llama_option(app, "--mirostat", p.mirostat, "Mirostat: 0 off, 1, or 2");
    add_llama_option(app, "--mirostat-lr", p.mirostat_eta, "Mirostat learning rate (eta)");
    add_llama_option(app, "--mirostat-ent", p.mirostat_tau, "Mirostat target entropy (tau)");
    add_llama_option(app, "--seed", flags.seed, "random seed (-1 = random)");
    add_llama_option(app, "--reasoning-budget", p.reasoning.tokens,
                     "tokens a chat reply may think for before its thinking block is closed "
                     "(-1 = no limit; a forced tool call or JSON reply gets a quarter of "
                     "max_tokens, at most 1024, when none is set)")
        ->capture_default_str();
    add_llama_option(app, "--reasoning-budget-message", p.reasoning.message,
                     "text put before the end of a thinking block the budget closes");
}

void add_constraints(CLI::App& app, SamplingFlags& flags) {
    add_llama_option(app, "--grammar", flags.grammar, "GBNF grammar constraining the output");
    add_llama_option(app, "--grammar-file", flags.grammar_file, "file with a GBNF grammar");
    add_llama_option(app, "--json-schema", flags.json_schema,
                     "JSON schema constraining the output");
}

std::vector<std::string> normalize_args(int argc, char** argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) args.push_back(normalize_flag(argv[i]));
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    return args;
}

Result<std::vector<std::string>> hub_refs(const CommonFlags& flags) {
    if (flags.hf_file.empty()) return flags.hf_refs;
    if (flags.hf_refs.size() != 1)
        return fail(ErrorCode::invalid_argument, "--hf-file names a file of one --hf-repo",
                    "--hf-file");
    const std::string& repo = flags.hf_refs.front();
    return std::vector<std::string>{repo.substr(0, repo.find(':')) + ":" + flags.hf_file};
}

namespace {

// LLAMAPP_DEMO_MODEL, else beside the binary as the build lays it out, else where this build
// wrote it (a binary copied elsewhere); the first that exists.
Result<fs::path> demo_model_path() {
    if (const char* env = std::getenv("LLAMAPP_DEMO_MODEL")) return fs::path(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const std::vector<fs::path> places = {exe.parent_path().parent_path() / "models" / "demo.gguf",
                                          LLAMAPP_BUILT_DEMO_MODEL};
    for (const fs::path& p : places)
        if (fs::exists(p, ec)) return p;
    return fail(ErrorCode::invalid_argument,
                "no model given, and no demo model where this binary looks for it: pass -m "
                "PATH, -hf owner/repo or a name from `llamapp ls`",
                places.front().string());
}

void draw_progress(float p) {
    const int width = 30;
    const int filled = static_cast<int>(p * width);
    std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "##############################",
                 width - filled, "", static_cast<int>(p * 100));
    if (p >= 1.0f) std::fprintf(stderr, "\r%*s\r", width + 20, "");
    std::fflush(stderr);
}

}  // namespace

void apply_log_level(const CommonFlags& flags) {
    LogLevel level;
    parse_log_level(flags.log_level, level);
    if (flags.verbosity >= 0)
        level = flags.verbosity <= 1   ? LogLevel::error
                : flags.verbosity == 2 ? LogLevel::warning
                : flags.verbosity == 3 ? LogLevel::info
                                       : LogLevel::debug;
    if (flags.verbose) level = LogLevel::debug;
    if (flags.log_disable) level = LogLevel::none;
    set_log_level(level);
}

Result<fs::path> demo_model() {
    auto path = demo_model_path();
    if (!path) return path;
    std::fprintf(stderr,
                 "llamapp: no model given, using the demo model %s\n"
                 "llamapp: it has RANDOM weights, so its text is gibberish; pass -m PATH to a "
                 "real GGUF.\n",
                 path->c_str());
    return path;
}

ModelOptions model_options(const CommonFlags& flags) {
    ModelOptions options;
    options.n_gpu_layers = flags.n_gpu_layers;
    options.devices = flags.devices;
    options.split_mode = flags.split_mode == "none"     ? SplitMode::none
                         : flags.split_mode == "row"    ? SplitMode::row
                         : flags.split_mode == "tensor" ? SplitMode::tensor
                                                        : SplitMode::layer;
    options.tensor_split = flags.tensor_split;
    options.main_gpu = flags.main_gpu;
    options.fit = flags.fit == "on";
    for (std::uint64_t mib : flags.fit_target) options.fit_margins.push_back(mib << 20);
    options.fit_min_ctx = flags.fit_ctx;
    const std::string& mode = flags.load_mode;
    options.use_mmap = !flags.no_mmap && (mode == "auto" || mode.starts_with("mmap"));
    options.use_mlock = mode.ends_with("mlock");
    return options;
}

Result<void> connect_rpc(const CommonFlags& flags) {
    if (flags.rpc.empty()) return {};
    auto added = add_rpc_servers(flags.rpc);
    if (!added) return std::unexpected(added.error());
    return {};
}

void print_devices() {
    for (const auto& d : list_devices()) {
        std::printf("%-10s %-12s %-8s %-32s", d.name.c_str(),
                    std::string(to_string(d.type)).c_str(), d.backend.c_str(),
                    d.description.c_str());
        if (d.memory_total > 0) {
            std::printf(" %.1f/%.1f GiB free", d.memory_free / 1073741824.0,
                        d.memory_total / 1073741824.0);
        }
        std::printf("\n");
    }
    std::string order;
    for (const auto& d : offload_devices()) order += (order.empty() ? "" : ", ") + d.name;
    std::printf("layers go to: %s\n",
                order.empty() ? "the CPU only" : (order + ", then the CPU").c_str());
}

namespace {

Result<Model> load_fitted(const CommonFlags& flags, bool vocab_only, const ContextFlags* context) {
    apply_log_level(flags);
    if (auto ok = connect_rpc(flags); !ok) return std::unexpected(ok.error());
    std::string given = flags.model_path;
    auto refs = hub_refs(flags);
    if (!refs) return std::unexpected(refs.error());
    if (!refs->empty()) {
        if (!given.empty() || refs->size() > 1)
            return fail(ErrorCode::invalid_argument, "one model: -m or -hf, once", "-hf");
        given = refs->front();
    }
    fs::path path;
    if (given.empty()) {
        auto demo = demo_model();
        if (!demo) return std::unexpected(demo.error());
        path = *demo;
    } else {
        auto resolved = resolve_model(given, flags.offline);
        if (!resolved) return std::unexpected(resolved.error());
        path = *resolved;
    }
    ModelOptions options = model_options(flags);
    options.vocab_only = vocab_only;
    if (context) {
        auto fitted = context_options(*context);
        if (!fitted) return std::unexpected(fitted.error());
        if (auto ok = fit_to_free_memory(path, options, *fitted); !ok)
            return std::unexpected(ok.error());
    }
    if (isatty(STDOUT_FILENO) && isatty(STDERR_FILENO)) {
        options.progress = [](float p) {
            draw_progress(p);
            return true;
        };
    }
    return Model::load(path, options);
}

}  // namespace

Result<Model> load_model(const CommonFlags& flags, bool vocab_only) {
    return load_fitted(flags, vocab_only, nullptr);
}

Result<Model> load_model(const CommonFlags& flags, const ContextFlags& context) {
    return load_fitted(flags, false, &context);
}

Result<ContextOptions> context_options(const ContextFlags& flags) {
    ContextOptions o;
    o.n_ctx = flags.n_ctx;
    o.n_batch = flags.n_batch;
    o.n_ubatch = std::min(flags.n_ubatch, flags.n_batch);
    o.n_threads = flags.threads;
    o.n_threads_batch = flags.threads_batch;
    o.flash_attn = flags.flash_attn == "on"    ? FlashAttention::on
                   : flags.flash_attn == "off" ? FlashAttention::off
                                               : FlashAttention::automatic;
    auto k = parse_kv_type(flags.cache_type_k);
    if (!k) return std::unexpected(k.error());
    auto v = parse_kv_type(flags.cache_type_v);
    if (!v) return std::unexpected(v.error());
    o.type_k = *k;
    o.type_v = *v;
    o.offload_kqv = flags.kv_offload;
    return o;
}

Result<std::string> read_text_file(const std::string& path, const char* option) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return fail(ErrorCode::file_not_found, "cannot read file",
                    std::string(option) + "=" + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void add_cache(CLI::App& app, CacheFlags& flags) {
    add_llama_option(app, "--cache-ram", flags.ram_mib,
                     "RAM tier of the KV snapshot store, in MiB (0 = off, -1 = no limit)")
        ->capture_default_str();
    app.add_option("--cache-disk", flags.disk_dir,
                   "directory of the persistent KV snapshot tier (survives restarts)");
    app.add_option("--cache-disk-max", flags.disk_max_mib,
                   "byte quota of --cache-disk in MiB (0 = no quota)")
        ->capture_default_str();
    app.add_option("--cache-min-tokens", flags.min_tokens,
                   "shortest sequence worth saving (shorter ones are recomputed)")
        ->capture_default_str();
}

Result<std::shared_ptr<KvStore>> open_kv_store(const CacheFlags& flags) {
    constexpr std::uint64_t mib = 1ull << 20;
    constexpr std::int64_t most_mib = 1ll << 24;
    if (flags.ram_mib < -1 || flags.ram_mib > most_mib || flags.disk_max_mib > (1ull << 32))
        return fail(ErrorCode::invalid_argument, "cache quota out of range", "--cache-ram");
    KvStoreOptions options;
    options.ram_bytes =
        static_cast<std::uint64_t>(flags.ram_mib < 0 ? most_mib : flags.ram_mib) * mib;
    options.policy.min_tokens = flags.min_tokens;
    options.policy.prefill_min_tokens =
        std::max(options.policy.prefill_min_tokens, flags.min_tokens);
    if (!flags.disk_dir.empty())
        options.directories.push_back({"disk", flags.disk_dir, flags.disk_max_mib * mib});
    return KvStore::open(std::move(options));
}

Result<SamplingParams> sampling_params(const SamplingFlags& f) {
    SamplingParams p = f.params;
    if (f.seed < -1 || f.seed > 0xFFFFFFFFll) {
        return fail(ErrorCode::invalid_argument, "seed must be -1 or in [0, 4294967295]", "--seed");
    }
    p.seed = f.seed < 0 ? random_seed : static_cast<std::uint32_t>(f.seed);
    if (!f.dry_sequence_breakers.empty()) {
        p.dry_sequence_breakers.clear();
        for (const std::string& b : f.dry_sequence_breakers)
            if (b != "none") p.dry_sequence_breakers.push_back(b);
    }
    p.grammar = f.grammar;
    if (!f.grammar_file.empty()) {
        auto text = read_text_file(f.grammar_file, "--grammar-file");
        if (!text) return std::unexpected(text.error());
        p.grammar = *text;
    }
    p.json_schema = f.json_schema;
    if (auto ok = p.validate(); !ok) return std::unexpected(ok.error());
    return p;
}

std::string human_bytes(std::uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    return buf;
}

int report(const Error& error) {
    std::fprintf(stderr, "error: %s [%s]\n", error.describe().c_str(),
                 std::string(to_string(error.code)).c_str());
    return 1;
}

}  // namespace llamapp::cli
