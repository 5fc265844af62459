#include "options.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace llamapp::cli {

namespace fs = std::filesystem;

void add_common(CLI::App& app, CommonFlags& flags, bool several_models) {
    if (several_models)
        app.add_option("-m,--model", flags.model_paths,
                       "GGUF model file, as ID=PATH to name it (repeatable; default: the demo "
                       "model the build makes, unless --models-dir is given)");
    else
        app.add_option("-m,--model", flags.model_path,
                       "GGUF model file (default: the demo model the build makes)");
    app.add_option("--hf-repo", flags.hf_refs,
                   std::string("a model on the Hugging Face hub, owner/repo[:QUANT|:file.gguf] "
                               "(-hf; pulled into the hub cache first") +
                       (several_models ? "; repeatable)" : ")"));
    app.add_flag("--offline", flags.offline,
                 "never ask the hub: references resolve from its cache (or HF_HUB_OFFLINE=1)");
    app.add_option("--log-level", flags.log_level, "debug, info, warning, error or none")
        ->check(CLI::IsMember({"debug", "info", "warning", "error", "none"}));
    app.add_option("--n-gpu-layers,--gpu-layers", flags.n_gpu_layers,
                   "layers to offload to GPUs (-ngl; -1 = all)");
    app.add_flag("--no-mmap", flags.no_mmap, "read the model into memory instead of mapping it");
}

void add_context(CLI::App& app, ContextFlags& flags) {
    app.add_option("-c,--ctx-size", flags.n_ctx,
                   "context size in tokens (0 = the model's training length)")
        ->capture_default_str();
    app.add_option("-b,--batch-size", flags.n_batch, "tokens per decode call")
        ->capture_default_str();
    app.add_option("--ubatch-size", flags.n_ubatch, "tokens per compute graph (-ub)")
        ->capture_default_str();
    app.add_option("-t,--threads", flags.threads, "decode threads (0 = all cores)");
    app.add_option("--threads-batch", flags.threads_batch, "prefill threads (-tb; 0 = same as -t)");
    app.add_option("--flash-attn", flags.flash_attn, "flash attention: auto, on or off (-fa)")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    app.add_option("--cache-type-k", flags.cache_type_k, "KV cache type for K (-ctk)")
        ->capture_default_str();
    app.add_option("--cache-type-v", flags.cache_type_v, "KV cache type for V (-ctv)")
        ->capture_default_str();
}

void add_sampling(CLI::App& app, SamplingFlags& flags) {
    app.add_option("--temp,--temperature", flags.temperature, "temperature (0 = greedy)")
        ->capture_default_str();
    app.add_option("--top-k", flags.top_k, "top-k (0 = off)")->capture_default_str();
    app.add_option("--top-p", flags.top_p, "top-p (1 = off)")->capture_default_str();
    app.add_option("--min-p", flags.min_p, "min-p (0 = off)")->capture_default_str();
    app.add_option("--typical", flags.typical_p, "typical-p (1 = off)");
    app.add_option("--repeat-penalty", flags.repeat_penalty, "repetition penalty (1 = off)");
    app.add_option("--repeat-last-n", flags.repeat_last_n,
                   "tokens the penalties look back over (-1 = all)");
    app.add_option("--presence-penalty", flags.presence_penalty, "presence penalty");
    app.add_option("--frequency-penalty", flags.frequency_penalty, "frequency penalty");
    app.add_option("--mirostat", flags.mirostat, "Mirostat: 0 off, 1, or 2");
    app.add_option("-s,--seed", flags.seed, "random seed (-1 = random)");
    app.add_option("--grammar", flags.grammar, "GBNF grammar constraining the output");
    app.add_option("--grammar-file", flags.grammar_file, "file with a GBNF grammar");
    app.add_option("-j,--json-schema", flags.json_schema, "JSON schema constraining the output");
}

std::vector<std::string> normalize_args(int argc, char** argv) {
    static const std::map<std::string, std::string> aliases = {
        {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
        {"-fa", "--flash-attn"},    {"-ub", "--ubatch-size"},   {"-tb", "--threads-batch"},
        {"-np", "--parallel"},      {"-hf", "--hf-repo"},
    };
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
        auto it = aliases.find(argv[i]);
        args.push_back(it != aliases.end() ? it->second : std::string(argv[i]));
    }
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    return args;
}

namespace {

fs::path demo_model_path() {
    if (const char* env = std::getenv("LLAMAPP_DEMO_MODEL")) return env;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return exe.parent_path().parent_path() / "models" / "demo.gguf";
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
    set_log_level(level);
}

fs::path demo_model(bool announce) {
    fs::path path = demo_model_path();
    if (announce)
        std::fprintf(stderr,
                     "llamapp: no model given, using the demo model %s\n"
                     "llamapp: it has RANDOM weights, so its text is gibberish; pass -m PATH to a "
                     "real GGUF.\n",
                     path.c_str());
    return path;
}

ModelOptions model_options(const CommonFlags& flags) {
    ModelOptions options;
    options.n_gpu_layers = flags.n_gpu_layers;
    options.use_mmap = !flags.no_mmap;
    return options;
}

Result<Model> load_model(const CommonFlags& flags, bool vocab_only) {
    apply_log_level(flags);
    std::string given = flags.model_path;
    if (!flags.hf_refs.empty()) {
        if (!given.empty() || flags.hf_refs.size() > 1)
            return fail(ErrorCode::invalid_argument, "one model: -m or -hf, once", "-hf");
        given = flags.hf_refs.front();
    }
    fs::path path;
    if (given.empty()) {
        path = demo_model(true);
    } else {
        auto resolved = resolve_model(given, flags.offline);
        if (!resolved) return std::unexpected(resolved.error());
        path = *resolved;
    }
    ModelOptions options = model_options(flags);
    options.vocab_only = vocab_only;
    if (isatty(STDOUT_FILENO) && isatty(STDERR_FILENO)) {
        options.progress = [](float p) {
            draw_progress(p);
            return true;
        };
    }
    return Model::load(path, options);
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
    app.add_option("--cache-ram", flags.ram_mib,
                   "RAM tier of the KV snapshot store, in MiB (0 = off)")
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

void add_draft(CLI::App& app, DraftFlags& flags) {
    app.add_option("--draft-tokens", flags.tokens,
                   "prompt-lookup speculation: tokens a stream may draft from its own history "
                   "per decode, each kept only if sampling picks it (0 = off)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--draft-match", flags.match,
                   "tokens that must repeat before --draft-tokens drafts what followed them")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--draft-batch-rows", flags.batch_rows,
                   "draft only while the streams' decode call holds at most this many rows "
                   "(streams + drafts; a CPU gains little beyond 4, a GPU can take more)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
}

void apply_draft(const DraftFlags& flags, EngineOptions& options) {
    options.draft_tokens = flags.tokens;
    options.draft_match = flags.match;
    options.draft_batch_rows = flags.batch_rows;
}

Result<std::shared_ptr<KvStore>> open_kv_store(const CacheFlags& flags) {
    constexpr std::uint64_t mib = 1ull << 20;
    if (flags.ram_mib > (1ull << 24) || flags.disk_max_mib > (1ull << 32))
        return fail(ErrorCode::invalid_argument, "cache quota out of range", "--cache-ram");
    KvStoreOptions options;
    options.ram_bytes = flags.ram_mib * mib;
    options.policy.min_tokens = flags.min_tokens;
    options.policy.prefill_min_tokens =
        std::max(options.policy.prefill_min_tokens, flags.min_tokens);
    if (!flags.disk_dir.empty())
        options.directories.push_back({"disk", flags.disk_dir, flags.disk_max_mib * mib});
    return KvStore::open(std::move(options));
}

Result<SamplingParams> sampling_params(const SamplingFlags& f) {
    SamplingParams p;
    p.temperature = f.temperature;
    p.top_k = f.top_k;
    p.top_p = f.top_p;
    p.min_p = f.min_p;
    p.typical_p = f.typical_p;
    p.repeat_penalty = f.repeat_penalty;
    p.penalty_last_n = f.repeat_last_n;
    p.presence_penalty = f.presence_penalty;
    p.frequency_penalty = f.frequency_penalty;
    p.mirostat = f.mirostat;
    if (f.seed < -1 || f.seed > 0xFFFFFFFFll) {
        return fail(ErrorCode::invalid_argument, "seed must be -1 or in [0, 4294967295]", "--seed");
    }
    p.seed = f.seed < 0 ? random_seed : static_cast<std::uint32_t>(f.seed);
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
