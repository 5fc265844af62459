// `llamapp serve`'s flags, shared by the command and its presets file (serve_presets.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "llamapp/model_manager.hpp"
#include "llamapp/server.hpp"
#include "options.hpp"
#include "speculative_flags.hpp"

namespace llamapp::cli {

struct ServeFlags {
    CommonFlags common;
    ContextFlags context;
    CacheFlags cache;
    ServerOptions server;
    int slots = -1;  // llama-server's "auto": 4 slots sharing one cache
    std::size_t max_queue = 64;
    int min_prefill_rows = EngineOptions{}.min_prefill_rows;
    int prefill_chunk = EngineOptions{}.prefill_chunk;
    std::string batch_strategy = "decode_maximal";
    SpeculativeFlags speculative;
    SamplingFlags sampling;  // the defaults of a request that leaves a field out
    int n_predict = -1;
    std::vector<std::string> api_keys;  // --api-key: repeatable and comma lists
    std::string api_key_file;
    std::vector<std::string> cors_origins;  // --cors-origins, a comma list
    std::string chat_template;              // a template, or a built-in template's name
    std::string chat_template_file;
    bool jinja = true;
    std::string reasoning = "auto";         // on, off or auto
    std::string reasoning_format = "auto";  // none, deepseek or auto
    std::string chat_template_kwargs;       // a JSON object
    std::string reasoning_effort = "default";
    std::string reasoning_preserve;  // true, false, or empty: the template's default
    bool prefill_assistant = true;
    std::string pooling;
    std::vector<std::string> aliases;  // of the first -m model: its id, then further names
    std::vector<std::string> tags;
    int kv_unified = 0;  // 1 --kv-unified, -1 --no-kv-unified, 0 as llama-server: by --parallel
    bool deterministic = false;
    // llama-server flags llamapp takes and needs no action on: it always does what they ask.
    bool metrics = false, cont_batching = true, webui = false, backend_sampling = false;
    int sleep_idle_seconds = -1;
    int timeout_s = 600;
    int drain_grace_s = 30;
    double read_timeout_s = 10;
    std::string ssl_cert_file, ssl_key_file;
    int responses_ttl_s = 3600;
    std::string slot_save_path;  // POST /slots/{id}?action=...; the disk tier without --cache-disk
    std::string models_dir;
    std::string models_preset;
    std::size_t max_models = 0;
    bool models_autoload = true;
    std::string keep_alive = "-1";
    std::string memory_budget;
    bool unload_idle = false;
    // Embeddings from generative models: 0, on a context made at the first request; 1
    // (--embeddings), made at load; -1 (--no-embeddings), refused.
    int embeddings = 0;
};

// Registers the flags that shape one model (slots, queue, keep-alive, embeddings, template,
// prefill and batching); the context flags and -ngl are registered with the common ones.
void add_model_flags(CLI::App& cmd, ServeFlags& flags);

// A model spec with everything but its id and path, from the per-model flags.
[[nodiscard]] Result<ModelSpec> model_defaults(const ServeFlags& flags);
// `spec` without -md's draft: it drafts for the command line's models only; a preset's model, one
// found in --models-dir or pulled later may have another vocabulary.
ModelSpec without_draft(ModelSpec spec);

// --keep-alive, or llama-server's --sleep-idle-seconds when given.
std::string keep_alive_of(const ServeFlags& flags);

// A model argument into the spec: an existing path, or a hub reference the manager finds in the
// cache or pulls on the model's first load.
void set_model_source(ModelSpec& spec, const std::string& what);

struct KnownModel {
    ModelSpec spec;
    bool preload = false;          // loaded before the server listens
    bool from_models_dir = false;  // yields to another model of the same id
};

// The models of `flags.models_preset`: one per section, its keys llama-server's long flag
// names (without dashes) over the command line's per-model flags, `[*]` for every section.
[[nodiscard]] Result<std::vector<KnownModel>> preset_models(const ServeFlags& flags);

}  // namespace llamapp::cli
