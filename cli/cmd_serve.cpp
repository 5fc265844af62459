// `llamapp serve`: the OpenAI-compatible HTTP server on the models given with -m and those of a
// models directory.
#include <fmt/core.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <thread>

#include "commands.hpp"
#include "llama_flags.hpp"
#include "llamapp/server.hpp"
#include "options.hpp"
#include "serve_flags.hpp"

namespace llamapp::cli {

namespace {

// Who may call, from where, and over what (SECURITY.md).
void add_access_options(CLI::App& cmd, ServeFlags& flags) {
    ServerOptions& s = flags.server;
    add_llama_option(cmd, "--api-key", flags.api_keys,
                     "require Authorization: Bearer KEY (repeatable, or a comma list)")
        ->delimiter(',');
    add_llama_option(cmd, "--api-key-file", flags.api_key_file,
                     "read API keys from a file, one per line");
    cmd.add_option("--cors-origin", s.cors_origins, "allow this browser origin (repeatable)");
    add_llama_option(cmd, "--cors-origins", flags.cors_origins,
                     "allowed browser origins, a comma list (* = any)")
        ->delimiter(',');
    cmd.add_option("--allowed-hosts", s.allowed_hosts,
                   "Host names a server on a loopback address answers to besides loopback "
                   "ones (against DNS rebinding), a comma list; * = any")
        ->delimiter(',');
    add_llama_option(cmd, "--ssl-cert-file", flags.ssl_cert_file,
                     "serve HTTPS with this PEM certificate (with --ssl-key-file)");
    add_llama_option(cmd, "--ssl-key-file", flags.ssl_key_file,
                     "the PEM private key of --ssl-cert-file");
    cmd.add_option("--read-timeout", flags.read_timeout_s,
                   "seconds a request's headers may take to arrive, and its body may pause; "
                   "then 408 or the connection is closed")
        ->capture_default_str();
}

void add_serve_options(CLI::App& cmd, ServeFlags& flags) {
    ServerOptions& s = flags.server;
    add_model_flags(cmd, flags);
    add_llama_option(cmd, "--host", s.host, "address to listen on")->capture_default_str();
    CLI::Option* port =
        add_llama_option(cmd, "--port", s.port, "port (0 = any free port)")->capture_default_str();
    // Tools written for Ollama look for it on its port; the other protocols are served there too.
    cmd.add_flag_callback(
           "--ollama", [&s] { s.port = 11434; },
           "listen on Ollama's port, 11434, so that its clients find the server unconfigured")
        ->excludes(port);
    cmd.add_option("--unix-socket", s.unix_socket, "listen on a unix socket instead");
    add_access_options(cmd, flags);
    add_llama_option(cmd, "--alias", flags.aliases,
                     "names of the first -m model in the API, a comma list: the first in "
                     "alphabetical order is its id (default: the file name)")
        ->delimiter(',');
    add_llama_option(cmd, "--models-dir", flags.models_dir,
                     "serve the GGUF models of this directory too, loaded on first use");
    add_llama_option(cmd, "--models-preset", flags.models_preset,
                     "an INI file of models with their own flags, in llama-server's format");
    add_llama_option(cmd, "--models-max", flags.max_models,
                     "most models resident at once (0 = no cap)")
        ->capture_default_str();
    add_llama_switch(cmd, "--models-autoload", flags.models_autoload,
                     "load a model a request names when it is not loaded (--no-models-autoload: "
                     "answer 400 until POST /models/load loads it)");
    cmd.add_option("--memory-budget", flags.memory_budget,
                   "memory the models may take: RAM, e.g. 8G, and per device, e.g. "
                   "8G,CUDA0=20G (default: what is free at start, less 256M)");
    cmd.add_flag("--unload-idle", flags.unload_idle,
                 "unload least recently used idle models when a load would not fit");
    add_llama_switch(cmd, "--slots", s.slots_route, "serve GET /slots (--no-slots: do not)");
    add_llama_option(cmd, "--slot-save-path", flags.slot_save_path,
                     "serve POST /slots/{id}?action=save|restore|erase: a saved slot is a KV "
                     "store entry, named by a file here; without --cache-disk this directory "
                     "is the store's disk tier too");
    cmd.add_flag("--accept-any-model,!--no-accept-any-model", s.accept_any_model,
                 "with one model, serve it whatever \"model\" a request names, as llama-server "
                 "does (the default; Ollama's routes keep exact names); --no-accept-any-model: "
                 "404 for an unknown name")
        ->envname("LLAMAPP_ACCEPT_ANY_MODEL");
    add_llama_switch(cmd, "--metrics", flags.metrics, "no effect: /metrics is always served");
    add_llama_switch(cmd, "--cont-batching", flags.cont_batching,
                     "no effect: llamapp always batches continuously");
    add_llama_switch(cmd, "--ui", flags.webui, "no effect as --no-ui: llamapp has no web UI");
    add_llama_switch(cmd, "--backend-sampling", flags.backend_sampling,
                     "no effect: llamapp runs llama.cpp's sampling chain on the CPU, which draws "
                     "the same tokens");
    add_llama_option(cmd, "--threads-http", s.http_threads,
                     "HTTP threads (0 = one per slot and queued request)");
    cmd.add_option("--max-body-bytes", s.max_body_bytes, "largest request body")
        ->capture_default_str();
    cmd.add_option("--max-prompt-tokens", s.max_prompt_tokens, "0 = the context size");
    cmd.add_option("--max-tokens", s.max_tokens, "largest max_tokens (0 = the context size)");
    cmd.add_option("--max-stop", s.max_stop_strings, "most stop strings per request")
        ->capture_default_str();
    cmd.add_option("--max-embedding-inputs", s.max_embedding_inputs,
                   "most inputs per embeddings request")
        ->capture_default_str();
    add_llama_option(cmd, "--timeout", flags.timeout_s, "per-request deadline in seconds (-to)")
        ->capture_default_str();
    cmd.add_option("--drain-grace", flags.drain_grace_s,
                   "seconds in-flight requests get to finish on SIGTERM")
        ->capture_default_str();
    cmd.add_option("--responses-max", s.max_stored_responses,
                   "most /v1/responses kept in memory for previous_response_id (0 = none)")
        ->capture_default_str();
    cmd.add_option("--responses-ttl", flags.responses_ttl_s,
                   "seconds a kept response can be continued")
        ->capture_default_str();
}

// What a llama-server flag asks that llamapp cannot do: refused, never ignored.
Result<void> check_honoured(const ServeFlags& flags) {
    if (!flags.cont_batching)
        return fail(ErrorCode::invalid_argument, "llamapp always batches continuously",
                    "--no-cont-batching");
    if (flags.webui) return fail(ErrorCode::invalid_argument, "llamapp has no web UI", "--ui");
    return {};
}

// Keys from --api-key and the lines of --api-key-file. An empty file would mean no
// authentication at all: refused rather than opening up.
Result<std::vector<std::string>> api_keys(const ServeFlags& flags) {
    std::vector<std::string> keys;
    for (const std::string& k : flags.api_keys)
        if (!k.empty()) keys.push_back(k);
    if (flags.api_key_file.empty()) return keys;
    auto text = read_text_file(flags.api_key_file, "--api-key-file");
    if (!text) return std::unexpected(text.error());
    std::size_t from_file = 0;
    std::istringstream lines(*text);
    for (std::string line; std::getline(lines, line);) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty()) continue;
        keys.push_back(line);
        ++from_file;
    }
    if (from_file == 0)
        return fail(ErrorCode::invalid_argument, "the API key file is empty", flags.api_key_file);
    return keys;
}

// Google Vertex AI starts a serving container with AIP_MODE=PREDICTION and says where to listen
// and which paths to serve in AIP_* variables, as llama-server reads them.
Result<void> apply_vertex_ai(ServerOptions& options) {
    auto env = [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v ? v : "");
    };
    auto route = [](std::string path) {
        return path.empty() || path[0] == '/' ? path : "/" + path;
    };
    if (env("AIP_MODE") != "PREDICTION") return {};
    options.predict_route =
        env("AIP_PREDICT_ROUTE").empty() ? "/predict" : route(env("AIP_PREDICT_ROUTE"));
    options.health_route = route(env("AIP_HEALTH_ROUTE"));
    const std::string port = env("AIP_HTTP_PORT").empty() ? "8080" : env("AIP_HTTP_PORT");
    int value = -1;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || end != port.data() + port.size() || value < 1 || value > 65535)
        return fail(ErrorCode::invalid_argument, "a port number 1-65535", "AIP_HTTP_PORT=" + port);
    if (value != options.port)
        std::fprintf(stderr, "llamapp: Vertex AI: AIP_HTTP_PORT %d overrides --port %d\n", value,
                     options.port);
    options.port = value;
    return {};
}

// Both files or neither, each readable, so that a typo is an error at start and not a server
// that cannot answer anyone.
Result<void> tls_files(const ServeFlags& flags, ServerOptions& options) {
    if (flags.ssl_cert_file.empty() != flags.ssl_key_file.empty())
        return fail(ErrorCode::invalid_argument, "--ssl-cert-file and --ssl-key-file go together",
                    flags.ssl_cert_file.empty() ? "--ssl-cert-file" : "--ssl-key-file");
    for (const std::string* file : {&flags.ssl_cert_file, &flags.ssl_key_file})
        if (!file->empty() && !std::ifstream(*file))
            return fail(ErrorCode::io_error, "cannot read the file", *file);
    if (!options.unix_socket.empty() && !flags.ssl_cert_file.empty())
        return fail(ErrorCode::invalid_argument, "TLS is served on TCP, not a unix socket",
                    "--ssl-cert-file");
    options.ssl_cert_file = flags.ssl_cert_file;
    options.ssl_key_file = flags.ssl_key_file;
    return {};
}

Result<ServerOptions> server_options(const ServeFlags& flags) {
    if (auto ok = check_honoured(flags); !ok) return std::unexpected(ok.error());
    ServerOptions options = flags.server;
    auto keys = api_keys(flags);
    if (!keys) return std::unexpected(keys.error());
    options.api_keys = std::move(*keys);
    options.cors_origins.insert(options.cors_origins.end(), flags.cors_origins.begin(),
                                flags.cors_origins.end());
    if (flags.timeout_s < 1 || flags.drain_grace_s < 0)
        return fail(ErrorCode::invalid_argument, "must be positive", "--timeout");
    options.request_timeout = std::chrono::seconds(flags.timeout_s);
    options.drain_grace = std::chrono::seconds(flags.drain_grace_s);
    if (!(flags.read_timeout_s >= 0.1 && flags.read_timeout_s <= 3600))
        return fail(ErrorCode::invalid_argument, "must be in [0.1, 3600] seconds",
                    "--read-timeout");
    options.read_timeout = std::chrono::milliseconds(std::llround(flags.read_timeout_s * 1000));
    if (auto tls = tls_files(flags, options); !tls) return std::unexpected(tls.error());
    if (flags.responses_ttl_s < 1)
        return fail(ErrorCode::invalid_argument, "must be positive", "--responses-ttl");
    options.stored_response_ttl = std::chrono::seconds(flags.responses_ttl_s);
    options.verbose_replies = flags.common.verbose;
    options.router = flags.common.model_paths.empty() && flags.common.hf_refs.empty();
    auto defaults = model_defaults(flags);
    if (!defaults) return std::unexpected(defaults.error());
    options.pulled_model = without_draft(std::move(*defaults));
    if (!flags.slot_save_path.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(flags.slot_save_path, ec);
        if (ec || !std::filesystem::is_directory(flags.slot_save_path))
            return fail(ErrorCode::io_error, "cannot create the directory",
                        "--slot-save-path=" + flags.slot_save_path);
        options.slot_save_path = flags.slot_save_path;
    }
    if (auto ok = apply_vertex_ai(options); !ok) return std::unexpected(ok.error());
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
    mo.load_on_request = flags.models_autoload;
    mo.unload_idle_to_fit = flags.unload_idle;
    mo.unload_grace = std::chrono::seconds(flags.drain_grace_s);
    auto keep = parse_keep_alive(keep_alive_of(flags));
    if (!keep) return std::unexpected(keep.error());
    mo.keep_alive = *keep;
    mo.hub = hub_options(flags.common.offline, false);  // the manager logs a pull's progress
    // "8G" is the host's budget; "CUDA0=20G" a device's, by the name `llamapp devices` gives.
    std::stringstream items(flags.memory_budget);
    for (std::string item; std::getline(items, item, ',');) {
        const auto eq = item.find('=');
        const std::string device =
            eq == std::string::npos ? std::string(host_device) : item.substr(0, eq);
        auto bytes =
            parse_size(eq == std::string::npos ? item : item.substr(eq + 1), "--memory-budget");
        if (!bytes) return std::unexpected(bytes.error());
        mo.memory_budget[device] = *bytes;
    }
    return mo;
}

// The -m and -hf models (ID=PATH names one; the first takes --alias), loaded before serving.
Result<std::vector<KnownModel>> command_line_models(const ServeFlags& flags,
                                                    const ModelSpec& defaults) {
    std::vector<KnownModel> known;
    std::vector<std::string> given = flags.common.model_paths;
    auto refs = hub_refs(flags.common);
    if (!refs) return std::unexpected(refs.error());
    given.insert(given.end(), refs->begin(), refs->end());
    if (given.empty() && flags.models_dir.empty() && flags.models_preset.empty()) {
        auto demo = demo_model();
        if (!demo) return std::unexpected(demo.error());
        given.push_back(demo->string());
    }
    for (const std::string& arg : given) {
        ModelSpec s = defaults;
        const std::size_t eq = arg.find('=');
        const std::string what = eq == std::string::npos ? arg : arg.substr(eq + 1);
        set_model_source(s, what);
        // A hub model is named by its reference, as llama-server names a -hf model.
        s.id = eq != std::string::npos ? arg.substr(0, eq) : s.hub ? what : s.path.stem().string();
        if (known.empty() && !flags.aliases.empty()) {
            // As llama-server names it: the first alias in alphabetical order is the id.
            std::vector<std::string> names = flags.aliases;
            std::sort(names.begin(), names.end());
            names.erase(std::unique(names.begin(), names.end()), names.end());
            s.id = names.front();
            s.aliases.assign(names.begin() + 1, names.end());
        }
        known.push_back(KnownModel{std::move(s), true, false});
    }
    return known;
}

// The models a server starts with: the manager knows them all (nothing is loaded yet); `preload`
// lists the command line's and the presets file's load-on-startup ones, which preload() loads.
struct StartingModels {
    std::unique_ptr<ModelManager> manager;
    std::vector<std::string> preload;
};

// A draft for a model on disk is checked before serving (vocabularies only: quick), so that a
// wrong -md is one line at start rather than a failed load.
Result<void> check_draft(const ModelSpec& s) {
    if (s.draft_path.empty() || s.path.empty()) return {};
    ModelOptions vocab;
    vocab.vocab_only = true;
    vocab.fit = false;
    // The full loads say the same things again.
    const LogLevel level = log_level();
    if (level < LogLevel::error) set_log_level(LogLevel::error);
    auto target = Model::load(s.path, vocab);
    auto draft = Model::load(s.draft_path, vocab);
    set_log_level(level);
    if (!target) return std::unexpected(target.error());
    if (!draft) {
        Error e = draft.error();
        e.message = "the draft model: " + e.message;
        return std::unexpected(std::move(e));
    }
    return check_draft_vocabulary(*target, *draft);
}

Result<StartingModels> known_models(const ServeFlags& flags, std::shared_ptr<KvStore> store) {
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
    for (const KnownModel& k : *known)
        if (auto ok = check_draft(k.spec); !ok) return std::unexpected(ok.error());
    if (!flags.models_dir.empty()) {
        auto found = scan_models_dir(flags.models_dir, without_draft(*defaults));
        if (!found) return std::unexpected(found.error());
        for (auto& s : *found) known->push_back(KnownModel{std::move(s), false, true});
    }
    auto manager = ModelManager::create(std::move(*mo));
    if (!manager) return std::unexpected(manager.error());
    StartingModels out{std::move(*manager), {}};
    for (KnownModel& k : *known) {
        const std::string id = k.spec.id;
        if (auto ok = out.manager->add(std::move(k.spec)); !ok) {
            // A directory model named like another model (often the same file) yields to it.
            if (!k.from_models_dir || ok.error().code != ErrorCode::already_exists)
                return std::unexpected(ok.error());
            std::fprintf(stderr, "llamapp: warning: %s; the models-dir copy is skipped\n",
                         ok.error().describe().c_str());
            continue;
        }
        if (k.preload) out.preload.push_back(id);
    }
    return out;
}

// Loads the load-on-startup models; the first failure is the server's.
Result<void> preload(ModelManager& manager, const std::vector<std::string>& ids, bool autoload) {
    for (const std::string& id : ids) {
        // acquire() alone does not load under --no-models-autoload.
        if (!autoload) {
            if (auto started = manager.load(id); !started) return std::unexpected(started.error());
        }
        if (auto lease = manager.acquire(id); !lease) {
            auto listed = manager.find(id);
            if (listed && listed->error) return std::unexpected(*listed->error);
            return std::unexpected(lease.error());
        }
    }
    return {};
}

void announce_models(const ModelManager& models) {
    for (const ModelListing& m : models.list()) {
        const std::string what = m.status == ModelStatus::ready
                                     ? fmt::format("ready, {} slots, n_ctx {}", m.slots, m.n_ctx)
                                     : std::string(to_string(m.status));
        const std::string file = m.path.empty() ? m.source : m.path.filename().string();
        std::fprintf(stderr, "llamapp: model %s (%s): %s\n", m.id.c_str(), file.c_str(),
                     what.c_str());
    }
}

void announce_listener(const ServerOptions& options, const Server& server, const char* what) {
    for (const std::string& url : server.urls())
        std::fprintf(stderr, "llamapp: %s on %s\n", what, url.c_str());
    if (!options.unix_socket.empty())
        std::fprintf(stderr, "llamapp: %s on unix socket %s\n", what, options.unix_socket.c_str());
}

// SIGINT and SIGTERM go to one watcher thread (blocked everywhere else), which drains.
class SignalWatcher {
  public:
    SignalWatcher() {
        sigemptyset(&signals_);
        sigaddset(&signals_, SIGINT);
        sigaddset(&signals_, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    }
    void drain_on_signal(Server& server) {
        thread_ = std::thread([this, &server] {
            int sig = 0;
            sigwait(&signals_, &sig);
            if (!told_)
                std::fprintf(stderr, "llamapp: %s, draining\n",
                             sig == SIGINT ? "SIGINT" : "SIGTERM");
            server.drain();
        });
    }
    // Drains now (after a failure the caller reported), and waits for the watcher.
    void drain_now() {
        told_ = true;
        if (thread_.joinable()) pthread_kill(thread_.native_handle(), SIGTERM);
        join();
    }
    void join() {
        if (thread_.joinable()) thread_.join();
    }

  private:
    sigset_t signals_;
    std::atomic<bool> told_{false};
    std::thread thread_;
};

// glibc serves a large allocation with mmap, but after one is freed it raises that threshold
// (to 32 MiB at most), so the next request bodies and replies of that size come from the
// connection thread's own arena and stay resident: a few oversized uploads, each on another
// thread, kept up to arenas x 24 MB (382 MB on 2 cores; docs/performance.md). A fixed threshold
// returns every buffer of 1 MiB or more at once. An operator's own setting wins.
void keep_large_buffers_out_of_arenas() {
#ifdef __GLIBC__
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    const bool operator_set =
        std::getenv("MALLOC_MMAP_THRESHOLD_") ||
        (tunables && std::string_view(tunables).find("mmap_threshold") != std::string_view::npos);
    if (!operator_set) mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

int serve(const std::shared_ptr<ServeFlags>& flags) {
    apply_log_level(flags->common);
    if (auto ok = connect_rpc(flags->common); !ok) return report(ok.error());
    if (flags->common.list_devices) {
        print_devices();
        return 0;
    }
    keep_large_buffers_out_of_arenas();
    auto options = server_options(*flags);
    if (!options) return report(options.error());
    SignalWatcher watcher;

    CacheFlags cache = flags->cache;
    // Saved slots are kept across restarts, as llama-server's files are.
    if (cache.disk_dir.empty()) cache.disk_dir = flags->slot_save_path;
    auto store = open_kv_store(cache);
    if (!store) return report(store.error());
    auto models = known_models(*flags, *store);
    if (!models) return report(models.error());
    auto server = Server::create(*models->manager, *options);
    if (!server) return report(server.error());
    // Bound before the models load: a taken port is said at once, not after a long load.
    if (auto ok = (*server)->bind(); !ok) return report(ok.error());
    Server& srv = **server;
    watcher.drain_on_signal(srv);
    srv.set_loading(!models->preload.empty());
    Result<void> served;
    std::thread listener([&] { served = srv.listen(); });
    if (!models->preload.empty()) announce_listener(*options, srv, "loading the models; listening");
    auto loaded = preload(*models->manager, models->preload, flags->models_autoload);
    if (!loaded) {
        report(loaded.error());
        watcher.drain_now();
        listener.join();
        return 1;
    }
    srv.set_loading(false);
    announce_models(*models->manager);
    announce_listener(*options, srv, "serving");
    listener.join();
    if (!served) {
        report(served.error());
        watcher.drain_now();
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
    add_speculative(*cmd, flags->speculative);
    add_serve_options(*cmd, *flags);
    return [flags]() -> int { return serve(flags); };
}

}  // namespace llamapp::cli
