// Options shared by the CLI subcommands, with llama.cpp's flag names where they exist.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "llamapp/llamapp.hpp"

namespace llamapp::cli {

struct CommonFlags {
    std::string model_path;
    std::vector<std::string> model_paths;  // serve: -m may be given several times
    std::vector<std::string> hf_refs;      // -hf: hub references, pulled before loading
    std::string hf_file;                   // -hff: the file of the one -hf repository
    bool offline = false;                  // hub references resolve from the cache only
    // llama.cpp's own lines stay quiet by default: failures are reported as one error line.
    std::string log_level = "none";
    bool verbose = false;  // -v: debug
    int verbosity = -1;    // -lv N, llama.cpp's threshold (0-1 error ... 4 debug); -1 unset
    bool log_disable = false;
    int n_gpu_layers = -1;
    // Placement, with llama-server's flags: -dev, -sm, -ts, -mg; --rpc registers remote devices
    // for the whole process, --list-devices prints them all and exits.
    std::vector<std::string> devices;
    std::string split_mode = "layer";
    std::vector<float> tensor_split;
    int main_gpu = 0;
    std::vector<std::string> rpc;
    bool list_devices = false;
    std::string fit = "on";                 // --fit: fit_to_free_memory before loading
    std::vector<std::uint64_t> fit_target;  // MiB to leave free per device (one: every device)
    std::uint32_t fit_ctx = 4096;
    bool no_mmap = false;
    std::string load_mode = "auto";  // llama.cpp's --load-mode
};

struct ContextFlags {
    std::int64_t n_ctx = 2048;
    std::int64_t n_batch = 2048;
    std::int64_t n_ubatch = 512;
    int threads = 0;
    int threads_batch = 0;
    std::string flash_attn = "auto";
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    bool kv_offload = true;  // -nkvo: the KV cache stays in host memory when layers are offloaded
};

// The KV store's tiers, with llama-server's name for the RAM quota.
struct CacheFlags {
    std::int64_t ram_mib = 1024;     // 0 turns the RAM tier off; -1: no limit
    std::string disk_dir;            // empty: no disk tier
    std::uint64_t disk_max_mib = 0;  // 0: no quota
    int min_tokens = SavePolicy{}.min_tokens;
};

// llama.cpp's sampling flags; SamplingParams' defaults are theirs.
struct SamplingFlags {
    SamplingParams params;
    std::int64_t seed = -1;
    std::vector<std::string> dry_sequence_breakers;  // "none" clears the default ones
    std::string grammar;
    std::string grammar_file;
    std::string json_schema;
};

void add_common(CLI::App& app, CommonFlags& flags, bool several_models = false);
// Applies --log-level.
void apply_log_level(const CommonFlags& flags);
// The demo model the build makes, used when no model is given, announced on stderr; an error
// saying what to pass when there is none.
Result<std::filesystem::path> demo_model();
ModelOptions model_options(const CommonFlags& flags);
// --rpc: the remote devices joined to this process (network_error naming a server that does not
// answer). Before any model loads.
[[nodiscard]] Result<void> connect_rpc(const CommonFlags& flags);
// Every device, one line each (`llamapp devices`, --list-devices).
void print_devices();
// -dev, -sm, -ts and -mg (a preset section takes them too).
void add_placement(CLI::App& app, CommonFlags& flags);
void add_context(CLI::App& app, ContextFlags& flags);
void add_sampling(CLI::App& app, SamplingFlags& flags);
// --grammar, --grammar-file and --json-schema (a CLI run's; a server's requests bring theirs).
void add_constraints(CLI::App& app, SamplingFlags& flags);
void add_cache(CLI::App& app, CacheFlags& flags);

// Rewrites llama.cpp's multi-letter single-dash flags (-ngl, -ctk, ...) to long forms CLI11
// knows (normalize_flag), reversed as CLI11 parses them.
std::vector<std::string> normalize_args(int argc, char** argv);

// The -hf references, --hf-file naming the file of the one repository given.
[[nodiscard]] Result<std::vector<std::string>> hub_refs(const CommonFlags& flags);

// Applies the log level, resolves the default demo model and loads the model (with a progress
// bar on a terminal). Prints the demo banner when the demo model is used.
Result<Model> load_model(const CommonFlags& flags, bool vocab_only = false);
// The same, its placement fitted (--fit) for a context made with `context`.
Result<Model> load_model(const CommonFlags& flags, const ContextFlags& context);
Result<ContextOptions> context_options(const ContextFlags& flags);
Result<SamplingParams> sampling_params(const SamplingFlags& flags);
Result<std::shared_ptr<KvStore>> open_kv_store(const CacheFlags& flags);

// Defined in cmd_hub.cpp. A model argument names a hub model when it is no existing path and
// reads as a hub reference.
std::optional<HubRef> hub_model_ref(const std::string& text);
// A model argument as a file: an existing path as it is, a hub reference pulled into the hub
// cache (with progress on stderr) and its path returned.
Result<std::filesystem::path> resolve_model(const std::string& text, bool offline);
// The environment's token and offline mode, `offline` forcing it; `progress` draws a bar.
HubOptions hub_options(bool offline, bool progress);

// Reads a whole file; errors name the option that pointed at it.
Result<std::string> read_text_file(const std::string& path, const char* option);

// "1.50 MiB".
std::string human_bytes(std::uint64_t bytes);

// "error: <message> (<context>)" on stderr; returns the exit code for an error.
int report(const Error& error);

}  // namespace llamapp::cli
