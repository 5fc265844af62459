// `llamapp serve`: the OpenAI-compatible HTTP server on the models given with -m and those of a
// models directory.
#include <fmt/core.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "llamapp/server.hpp"
#include "options.hpp"
#include "serve_flags.hpp"

namespace llamapp::cli {

// Flags that shape one model. On the command line they apply to every model; a section of
// the presets file sets them for its model.
void add_model_flags(CLI::App& cmd, ServeFlags& flags) {
    cmd.add_option("--parallel", flags.slots, "slots: requests decoded together (-np)")
        ->capture_default_str();
    cmd.add_option("--keep-alive", flags.keep_alive,
                   "unload a model idle this long: seconds, or 30s, 5m, 2h (-1 = never)")
        ->capture_default_str();
    cmd.add_flag("--embeddings,--embedding", flags.embeddings,
                 "serve /v1/embeddings with generative models too (embedding models always do); "
                 "each model then holds an embedding context as well");
    cmd.add_option("--chat-template-file", flags.chat_template_file,
                   "Jinja chat template to use instead of the model's");
    cmd.add_option("--max-queue", flags.max_queue, "requests waiting for a slot before 429")
        ->capture_default_str();
    cmd.add_option("--min-prefill-rows", flags.min_prefill_rows,
                   "widen short prompt chunks to this many tokens for the CPU's fast attention "
                   "kernel (0 = off)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd.add_option("--prefill-chunk", flags.prefill_chunk,
                   "most prompt tokens one sequence computes per decode call")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd.add_option("--batch-strategy", flags.batch_strategy,
                   "how a decode call is split between streams and prompts: decode_maximal, "
                   "prefill_priority, balanced or first_token_first")
        ->capture_default_str();
}

Result<ModelSpec> model_defaults(const ServeFlags& flags) {
    auto context = context_options(flags.context);
    if (!context) return std::unexpected(context.error());
    auto strategy = llamapp::batch_strategy(flags.batch_strategy);
    if (!strategy) return std::unexpected(strategy.error());
    ModelSpec s;
    s.model = model_options(flags.common);
    s.engine.context = *context;
    // -c is the whole cache, as in llama-server; on the unified cache any slot may use all.
    s.engine.context.n_seq_max = flags.slots;
    s.engine.max_queued_requests = flags.max_queue;
    s.engine.min_prefill_rows = flags.min_prefill_rows;
    s.engine.prefill_chunk = flags.prefill_chunk;
    s.engine.strategy = *strategy;
    apply_draft(flags.draft, s.engine);
    if (flags.embeddings) s.embed = true;
    if (!flags.chat_template_file.empty()) {
        auto text = read_text_file(flags.chat_template_file, "--chat-template-file");
        if (!text) return std::unexpected(text.error());
        s.chat_template = *text;
    }
    return s;
}

void set_model_source(ModelSpec& spec, const std::string& what) {
    spec.hub = hub_model_ref(what);
    if (spec.hub) {
        spec.source = "hub";  // the manager finds it in the cache or pulls it on its first load
    } else {
        spec.path = what;
        spec.source = "path";
    }
}

namespace {

void add_serve_options(CLI::App& cmd, ServeFlags& flags) {
    ServerOptions& s = flags.server;
    add_model_flags(cmd, flags);
    cmd.add_option("--host", s.host, "address to listen on")->capture_default_str();
    cmd.add_option("--port", s.port, "port (0 = any free port)")->capture_default_str();
    cmd.add_option("--unix-socket", s.unix_socket, "listen on a unix socket instead");
    cmd.add_option("--api-key", s.api_key, "require Authorization: Bearer KEY");
    cmd.add_option("--api-key-file", flags.api_key_file, "read the API key from a file");
    cmd.add_option("--alias", flags.alias,
                   "model id in the API of the first -m model (default: the file name)");
    cmd.add_option("--models-dir", flags.models_dir,
                   "serve the GGUF models of this directory too, loaded on first use");
    cmd.add_option("--models-preset", flags.models_preset,
                   "an INI file of models with their own flags, in llama-server's format");
    cmd.add_option("--max-models,--models-max", flags.max_models,
                   "most models resident at once (0 = no cap)")
        ->capture_default_str();
    cmd.add_option("--memory-budget", flags.memory_budget,
                   "RAM the models may take, e.g. 8G (default: what is available at start, "
                   "less 256M)");
    cmd.add_flag("--unload-idle", flags.unload_idle,
                 "unload least recently used idle models when a load would not fit");
    cmd.add_option("--cors-origin", s.cors_origins, "allow this browser origin (repeatable)");
    cmd.add_option("--max-body-bytes", s.max_body_bytes, "largest request body")
        ->capture_default_str();
    cmd.add_option("--max-prompt-tokens", s.max_prompt_tokens, "0 = the context size");
    cmd.add_option("--max-tokens", s.max_tokens, "largest max_tokens (0 = the context size)");
    cmd.add_option("--max-stop", s.max_stop_strings, "most stop strings per request")
        ->capture_default_str();
    cmd.add_option("--max-embedding-inputs", s.max_embedding_inputs,
                   "most inputs per embeddings request")
        ->capture_default_str();
    cmd.add_option("--timeout", flags.timeout_s, "per-request deadline in seconds")
        ->capture_default_str();
    cmd.add_option("--drain-grace", flags.drain_grace_s,
                   "seconds in-flight requests get to finish on SIGTERM")
        ->capture_default_str();
}

Result<ServerOptions> server_options(const ServeFlags& flags) {
    ServerOptions options = flags.server;
    if (!flags.api_key_file.empty()) {
        auto key = read_text_file(flags.api_key_file, "--api-key-file");
        if (!key) return std::unexpected(key.error());
        options.api_key = *key;
        while (!options.api_key.empty() &&
               (options.api_key.back() == '\n' || options.api_key.back() == '\r'))
            options.api_key.pop_back();
        // An empty key would mean no authentication at all: refuse rather than open up.
        if (options.api_key.empty())
            return fail(ErrorCode::invalid_argument, "the API key file is empty",
                        flags.api_key_file);
    }
    if (flags.timeout_s < 1 || flags.drain_grace_s < 0)
        return fail(ErrorCode::invalid_argument, "must be positive", "--timeout");
    options.request_timeout = std::chrono::seconds(flags.timeout_s);
    options.drain_grace = std::chrono::seconds(flags.drain_grace_s);
    return options;
}

// "8G", "512M", "64K" or bytes.
Result<std::uint64_t> parse_size(const std::string& text, const char* option) {
    std::size_t used = 0;
    double value = -1;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
    }
    const std::string unit = text.substr(std::min(used, text.size()));
    const double scale = unit.empty()                 ? 1
                         : unit == "K" || unit == "k" ? 1024.0
                         : unit == "M" || unit == "m" ? 1024.0 * 1024
                         : unit == "G" || unit == "g" ? 1024.0 * 1024 * 1024
                                                      : -1;
    if (value < 0 || scale < 0)
        return fail(ErrorCode::invalid_argument, "a size is bytes or a number with K, M or G",
                    std::string(option) + "=" + text);
    return static_cast<std::uint64_t>(value * scale);
}

Result<ModelManagerOptions> manager_options(const ServeFlags& flags,
                                            std::shared_ptr<KvStore> store) {
    ModelManagerOptions mo;
    mo.kv_store = std::move(store);
    mo.max_models = flags.max_models;
    mo.unload_idle_to_fit = flags.unload_idle;
    mo.unload_grace = std::chrono::seconds(flags.drain_grace_s);
    auto keep = parse_keep_alive(flags.keep_alive);
    if (!keep) return std::unexpected(keep.error());
    mo.keep_alive = *keep;
    mo.hub = hub_options(flags.common.offline, false);  // the manager logs a pull's progress
    if (!flags.memory_budget.empty()) {
        auto bytes = parse_size(flags.memory_budget, "--memory-budget");
        if (!bytes) return std::unexpected(bytes.error());
        mo.memory_budget[std::string(host_device)] = *bytes;
    }
    return mo;
}

// The -m and -hf models (ID=PATH names one; the first takes --alias), loaded before serving.
Result<std::vector<KnownModel>> command_line_models(const ServeFlags& flags,
                                                    const ModelSpec& defaults) {
    std::vector<KnownModel> known;
    std::vector<std::string> given = flags.common.model_paths;
    given.insert(given.end(), flags.common.hf_refs.begin(), flags.common.hf_refs.end());
    if (given.empty() && flags.models_dir.empty() && flags.models_preset.empty())
        given.push_back(demo_model(true).string());
    for (const std::string& arg : given) {
        ModelSpec s = defaults;
        const std::size_t eq = arg.find('=');
        const std::string what = eq == std::string::npos ? arg : arg.substr(eq + 1);
        set_model_source(s, what);
        // A hub model is named by its reference, as llama-server names a -hf model.
        s.id = eq != std::string::npos ? arg.substr(0, eq) : s.hub ? what : s.path.stem().string();
        if (known.empty() && !flags.alias.empty()) s.id = flags.alias;
        known.push_back(KnownModel{std::move(s), true, false});
    }
    return known;
}

// Known models: the command line's and the presets file's load-on-startup ones are loaded (and
// any failure reported) before serving; the others, and the models directory's, on demand.
Result<std::unique_ptr<ModelManager>> start_models(const ServeFlags& flags,
                                                   std::shared_ptr<KvStore> store) {
    auto mo = manager_options(flags, std::move(store));
    if (!mo) return std::unexpected(mo.error());
    auto defaults = model_defaults(flags);
    if (!defaults) return std::unexpected(defaults.error());
    auto known = command_line_models(flags, *defaults);
    if (!known) return std::unexpected(known.error());
    if (!flags.models_preset.empty()) {
        auto presets = preset_models(flags);
        if (!presets) return std::unexpected(presets.error());
        for (auto& k : *presets) known->push_back(std::move(k));
    }
    if (!flags.models_dir.empty()) {
        auto found = scan_models_dir(flags.models_dir, *defaults);
        if (!found) return std::unexpected(found.error());
        for (auto& s : *found) known->push_back(KnownModel{std::move(s), false, true});
    }
    auto manager = ModelManager::create(std::move(*mo));
    if (!manager) return std::unexpected(manager.error());
    for (KnownModel& k : *known) {
        const std::string id = k.spec.id;
        if (auto ok = (*manager)->add(std::move(k.spec)); !ok) {
            // A directory model named like another model (often the same file) yields to it.
            if (!k.from_models_dir || ok.error().code != ErrorCode::already_exists)
                return std::unexpected(ok.error());
            std::fprintf(stderr, "llamapp: warning: %s; the models-dir copy is skipped\n",
                         ok.error().describe().c_str());
            continue;
        }
        if (!k.preload) continue;
        auto lease = (*manager)->acquire(id);
        if (!lease) {
            auto listed = (*manager)->find(id);
            if (listed && listed->error) return std::unexpected(*listed->error);
            return std::unexpected(lease.error());
        }
    }
    return manager;
}

void announce(const ModelManager& models, const ServerOptions& options, int port) {
    for (const ModelListing& m : models.list()) {
        const std::string what = m.status == ModelStatus::ready
                                     ? fmt::format("ready, {} slots, n_ctx {}", m.slots, m.n_ctx)
                                     : std::string(to_string(m.status));
        const std::string file = m.path.empty() ? m.source : m.path.filename().string();
        std::fprintf(stderr, "llamapp: model %s (%s): %s\n", m.id.c_str(), file.c_str(),
                     what.c_str());
    }
    if (options.unix_socket.empty())
        std::fprintf(stderr, "llamapp: serving on http://%s:%d\n", options.host.c_str(), port);
    else
        std::fprintf(stderr, "llamapp: serving on unix socket %s\n", options.unix_socket.c_str());
}

int serve(const std::shared_ptr<ServeFlags>& flags) {
    apply_log_level(flags->common);
    auto options = server_options(*flags);
    if (!options) return report(options.error());

    // SIGINT and SIGTERM go to one watcher thread (blocked everywhere else), which drains.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    auto store = open_kv_store(flags->cache);
    if (!store) return report(store.error());
    auto models = start_models(*flags, *store);
    if (!models) return report(models.error());
    auto server = Server::create(**models, *options);
    if (!server) return report(server.error());
    if (auto ok = (*server)->bind(); !ok) return report(ok.error());
    Server& srv = **server;
    std::thread watcher([&srv, signals] {
        int sig = 0;
        sigwait(&signals, &sig);
        std::fprintf(stderr, "llamapp: %s, draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        srv.drain();
    });
    announce(**models, *options, srv.port());
    auto served = srv.listen();
    if (!served) {
        report(served.error());
        pthread_kill(watcher.native_handle(), SIGTERM);
        watcher.join();
        return 1;
    }
    watcher.join();
    std::fprintf(stderr, "llamapp: stopped\n");
    return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
    auto flags = std::make_shared<ServeFlags>();
    flags->common.log_level = "info";  // a server logs one line per request
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    add_common(*cmd, flags->common, true);
    add_context(*cmd, flags->context);
    add_cache(*cmd, flags->cache);
    add_draft(*cmd, flags->draft);
    add_serve_options(*cmd, *flags);
    return [flags]() -> int { return serve(flags); };
}

}  // namespace llamapp::cli
