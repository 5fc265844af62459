// `llamapp serve`: the OpenAI-compatible HTTP server on one model.
#include <fmt/core.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "llamapp/server.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

struct ServeFlags {
    CommonFlags common;
    ContextFlags context;
    CacheFlags cache;
    ServerOptions server;
    int slots = 4;
    std::size_t max_queue = 64;
    int min_prefill_rows = EngineOptions{}.min_prefill_rows;
    int prefill_chunk = EngineOptions{}.prefill_chunk;
    std::string batch_strategy = "decode_maximal";
    DraftFlags draft;
    std::string api_key_file;
    std::string chat_template_file;
    int timeout_s = 600;
    int drain_grace_s = 30;
};

void add_serve_options(CLI::App& cmd, ServeFlags& flags) {
    ServerOptions& s = flags.server;
    cmd.add_option("--parallel", flags.slots, "slots: requests decoded together (-np)")
        ->capture_default_str();
    cmd.add_option("--host", s.host, "address to listen on")->capture_default_str();
    cmd.add_option("--port", s.port, "port (0 = any free port)")->capture_default_str();
    cmd.add_option("--unix-socket", s.unix_socket, "listen on a unix socket instead");
    cmd.add_option("--api-key", s.api_key, "require Authorization: Bearer KEY");
    cmd.add_option("--api-key-file", flags.api_key_file, "read the API key from a file");
    cmd.add_option("--alias", s.model_id, "model id in the API (default: the file name)");
    cmd.add_option("--chat-template-file", flags.chat_template_file,
                   "Jinja chat template to use instead of the model's");
    cmd.add_option("--cors-origin", s.cors_origins, "allow this browser origin (repeatable)");
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
    if (!flags.chat_template_file.empty()) {
        auto text = read_text_file(flags.chat_template_file, "--chat-template-file");
        if (!text) return std::unexpected(text.error());
        options.chat_template = *text;
    }
    if (flags.timeout_s < 1 || flags.drain_grace_s < 0)
        return fail(ErrorCode::invalid_argument, "must be positive", "--timeout");
    options.request_timeout = std::chrono::seconds(flags.timeout_s);
    options.drain_grace = std::chrono::seconds(flags.drain_grace_s);
    return options;
}

EngineOptions engine_options(const ServeFlags& flags, const ContextOptions& context,
                             std::shared_ptr<BatchStrategy> strategy,
                             std::shared_ptr<KvStore> store) {
    EngineOptions eo;
    eo.context = context;
    // -c is the whole cache, as in llama-server; on the unified cache any slot may use all.
    eo.context.n_seq_max = flags.slots;
    eo.max_queued_requests = flags.max_queue;
    eo.min_prefill_rows = flags.min_prefill_rows;
    eo.prefill_chunk = flags.prefill_chunk;
    eo.strategy = strategy;
    apply_draft(flags.draft, eo);
    eo.kv_store = store;
    return eo;
}

int serve(const std::shared_ptr<ServeFlags>& flags) {
    auto options = server_options(*flags);
    if (!options) return report(options.error());
    auto ctx_options = context_options(flags->context);
    if (!ctx_options) return report(ctx_options.error());

    // SIGINT and SIGTERM go to one watcher thread (blocked everywhere else), which drains.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    auto strategy = llamapp::batch_strategy(flags->batch_strategy);
    if (!strategy) return report(strategy.error());
    auto model = load_model(flags->common);
    if (!model) return report(model.error());
    auto store = open_kv_store(flags->cache);
    if (!store) return report(store.error());
    const EngineOptions eo = engine_options(*flags, *ctx_options, *strategy, *store);
    auto engine = Engine::create(*model, eo);
    if (!engine) return report(engine.error());
    auto server = Server::create(*model, *engine, *store, *options);
    if (!server) return report(server.error());
    if (auto ok = (*server)->bind(); !ok) return report(ok.error());
    Server& srv = **server;
    std::thread watcher([&srv, signals] {
        int sig = 0;
        sigwait(&signals, &sig);
        std::fprintf(stderr, "llamapp: %s, draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        srv.drain();
    });
    if (options->unix_socket.empty())
        std::fprintf(stderr, "llamapp: serving %s on http://%s:%d (%d slots, prefix reuse: %s)\n",
                     model->info().path.filename().c_str(), options->host.c_str(), srv.port(),
                     flags->slots, engine->reuse_modes().describe().c_str());
    else
        std::fprintf(stderr, "llamapp: serving on unix socket %s\n", options->unix_socket.c_str());
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
    add_common(*cmd, flags->common);
    add_context(*cmd, flags->context);
    add_cache(*cmd, flags->cache);
    add_draft(*cmd, flags->draft);
    add_serve_options(*cmd, *flags);
    return [flags]() -> int { return serve(flags); };
}

}  // namespace llamapp::cli
