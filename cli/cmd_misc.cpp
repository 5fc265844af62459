// `llamapp tokenize`, `llamapp embed`, `llamapp devices`.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "options.hpp"

namespace llamapp::cli {

Runner add_tokenize(CLI::App& app) {
    struct Flags {
        CommonFlags common;
        std::string prompt;
        bool parse_special = false;
        bool no_add_special = false;
        bool ids_only = false;
    };
    auto flags = std::make_shared<Flags>();
    CLI::App* cmd = app.add_subcommand("tokenize", "show the tokens of a text");
    add_common(*cmd, flags->common);
    cmd->add_option("-p,--prompt", flags->prompt, "text to tokenize")->required();
    cmd->add_flag("--parse-special", flags->parse_special,
                  "treat special-token text as control tokens");
    cmd->add_flag("--no-add-special", flags->no_add_special, "do not add BOS/EOS");
    cmd->add_flag("--ids", flags->ids_only, "print only the ids, as a JSON array");
    return [flags]() -> int {
        auto model = load_model(flags->common, /*vocab_only=*/true);
        if (!model) return report(model.error());
        const Tokenizer tok = model->tokenizer();
        auto ids = tok.encode(flags->prompt, {.add_special = !flags->no_add_special,
                                              .parse_special = flags->parse_special});
        if (!ids) return report(ids.error());
        if (flags->ids_only) {
            std::cout << nlohmann::json(*ids).dump() << "\n";
            return 0;
        }
        for (Token t : *ids) {
            auto piece = tok.piece(t);
            std::printf("%6d -> '%s'\n", t, piece ? utf8_sanitize(*piece).c_str() : "?");
        }
        return 0;
    };
}

Runner add_embed(CLI::App& app) {
    struct Flags {
        CommonFlags common;
        ContextFlags context;
        std::vector<std::string> inputs;
        std::string pooling = "default";
        bool no_normalize = false;
    };
    auto flags = std::make_shared<Flags>();
    CLI::App* cmd = app.add_subcommand("embed", "print embedding vectors as JSON");
    add_common(*cmd, flags->common);
    add_context(*cmd, flags->context);
    cmd->add_option("-p,--prompt", flags->inputs, "text to embed (repeatable)")->required();
    cmd->add_option("--pooling", flags->pooling, "default, mean, cls or last")
        ->check(CLI::IsMember({"default", "mean", "cls", "last"}));
    cmd->add_flag("--no-normalize", flags->no_normalize, "do not L2-normalise");
    return [flags]() -> int {
        auto options = context_options(flags->context);
        if (!options) return report(options.error());
        auto pooling = parse_pooling(flags->pooling);
        if (!pooling) return report(pooling.error());
        options->embeddings = true;
        options->pooling = *pooling;
        options->n_seq_max =
            static_cast<std::int64_t>(std::min<std::size_t>(flags->inputs.size(), 64));
        auto model = load_model(flags->common);
        if (!model) return report(model.error());
        auto context = Context::create(*model, *options);
        if (!context) return report(context.error());
        auto vectors = context->embed_batch(
            flags->inputs,
            {.normalize = flags->no_normalize ? Normalization::none : Normalization::l2});
        if (!vectors) return report(vectors.error());
        nlohmann::json out = nlohmann::json::array();
        for (std::size_t i = 0; i < vectors->size(); ++i) {
            out.push_back(
                {{"index", i}, {"input", flags->inputs[i]}, {"embedding", (*vectors)[i]}});
        }
        std::cout << out.dump() << "\n";
        return 0;
    };
}

Runner add_devices(CLI::App& app) {
    struct Flags {
        std::string log_level = "warning";
        std::vector<std::string> rpc;
    };
    auto flags = std::make_shared<Flags>();
    CLI::App* cmd = app.add_subcommand("devices", "list compute devices");
    cmd->add_option("--log-level", flags->log_level, "debug, info, warning, error or none");
    cmd->add_option("--rpc", flags->rpc, "remote devices to list too, host:port,...")
        ->delimiter(',');
    return [flags]() -> int {
        LogLevel level = LogLevel::warning;
        parse_log_level(flags->log_level, level);
        set_log_level(level);
        CommonFlags common;
        common.rpc = flags->rpc;
        if (auto ok = connect_rpc(common); !ok) return report(ok.error());
        print_devices();
        return 0;
    };
}

Runner add_rpc_server(CLI::App& app) {
    auto options = std::make_shared<RpcServerOptions>();
    auto cache = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand(
        "rpc-server", "serve this machine's devices to other llamapp processes (ggml RPC)");
    cmd->add_option("--host,-H", options->host,
                    "address to listen on; the protocol has NO authentication, so anything but "
                    "127.0.0.1 lets whoever reaches the port use this machine")
        ->capture_default_str();
    cmd->add_option("--port,-p", options->port, "port")->capture_default_str();
    cmd->add_option("--device,-d", options->devices,
                    "local devices to serve (names from `llamapp devices`; default: the first GPU, "
                    "else the CPU)")
        ->delimiter(',');
    cmd->add_option("--threads,-t", options->threads, "CPU threads (0: all cores)")
        ->capture_default_str();
    cmd->add_option("--cache-dir", *cache,
                    "keep tensors received once here, by hash, so that a model sent again loads "
                    "from disk");
    return [options, cache]() -> int {
        options->cache_dir = *cache;
        if (options->host != "127.0.0.1" && options->host != "localhost") {
            std::fprintf(stderr,
                         "llamapp rpc-server: WARNING: listening on %s. The RPC protocol has no "
                         "authentication and no encryption: anyone who can reach this port can "
                         "run work on this machine and read what it holds. Use it only on a "
                         "network you trust.\n",
                         options->host.c_str());
        }
        std::fflush(stdout);
        auto ok = run_rpc_server(*options);
        return report(ok.error());
    };
}

}  // namespace llamapp::cli
