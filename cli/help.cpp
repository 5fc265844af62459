#include "help.hpp"

#include <fmt/core.h>

#include <map>
#include <memory>
#include <string_view>

namespace llamapp::cli {

namespace {

struct Group {
    const char* name;
    bool common;  // shown by --help; the others by --help-all
    std::vector<std::string_view> options;
};

// In the order the help lists them: what a model does, then how it is served.
std::vector<Group> model_groups() {
    return {
        {"Model",
         true,
         {"model", "hf-repo", "hf-file", "offline", "alias", "ctx-size", "parallel", "threads",
          "gpu-layers", "embedding", "pooling", "tags", "chat-template", "chat-template-file",
          "jinja"}},
        {"Server",
         true,
         {"host", "port", "ollama", "unix-socket", "api-key", "api-key-file", "models-dir",
          "models-preset", "keep-alive"}},
        {"Prompt and output",
         true,
         {"prompt", "file", "predict", "chat", "raw", "system", "hide-thinking", "stop",
          "ignore-eos", "json", "no-display-prompt"}},
        {"Reasoning",
         false,
         {"reasoning", "reasoning-format", "reasoning-budget", "reasoning-budget-message",
          "reasoning-effort", "reasoning-preserve", "chat-template-kwargs", "prefill-assistant"}},
        {"Sampling",
         false,
         {"temp",
          "top-k",
          "top-p",
          "min-p",
          "typical",
          "repeat-penalty",
          "repeat-last-n",
          "presence-penalty",
          "frequency-penalty",
          "dry-multiplier",
          "dry-base",
          "dry-allowed-length",
          "dry-penalty-last-n",
          "dry-sequence-breaker",
          "xtc-probability",
          "xtc-threshold",
          "mirostat",
          "mirostat-lr",
          "mirostat-ent",
          "seed",
          "grammar",
          "grammar-file",
          "json-schema",
          "deterministic"}},
    };
}

std::vector<Group> serving_groups() {
    return {
        {"KV cache",
         false,
         {"cache-ram", "cache-disk", "cache-disk-max", "cache-min-tokens", "cache-type-k",
          "cache-type-v", "kv-unified", "slots", "slot-save-path"}},
        {"Several models",
         false,
         {"models-max", "models-autoload", "memory-budget", "unload-idle", "sleep-idle-seconds",
          "accept-any-model"}},
        {"Limits and security",
         false,
         {"cors-origin", "cors-origins", "allowed-hosts", "ssl-cert-file", "ssl-key-file",
          "read-timeout", "threads-http", "max-queue", "max-body-bytes", "max-prompt-tokens",
          "max-tokens", "max-stop", "max-embedding-inputs", "timeout", "drain-grace",
          "responses-max", "responses-ttl"}},
        {"Devices",
         false,
         {"device", "split-mode", "tensor-split", "main-gpu", "fit", "fit-target", "fit-ctx",
          "kv-offload", "rpc", "list-devices"}},
        {"Performance",
         false,
         {"batch-size", "ubatch-size", "threads-batch", "flash-attn", "no-mmap", "load-mode",
          "min-prefill-rows", "prefill-chunk", "batch-strategy"}},
        {"Speculative decoding",
         false,
         {"spec-type",
          "spec-draft-n-max",
          "spec-draft-n-min",
          "draft-match",
          "draft-batch-rows",
          "spec-default",
          "spec-ngram-simple-size-n",
          "spec-ngram-simple-size-m",
          "spec-ngram-simple-min-hits",
          "spec-ngram-map-k-size-n",
          "spec-ngram-map-k-size-m",
          "spec-ngram-map-k-min-hits",
          "spec-ngram-map-k4v-size-n",
          "spec-ngram-map-k4v-size-m",
          "spec-ngram-map-k4v-min-hits",
          "spec-ngram-mod-n-match",
          "spec-ngram-mod-n-min",
          "spec-ngram-mod-n-max",
          "spec-draft-model",
          "spec-draft-ngl",
          "spec-draft-device",
          "spec-draft-threads",
          "spec-draft-threads-batch",
          "spec-draft-type-k",
          "spec-draft-type-v",
          "spec-draft-p-min",
          "spec-draft-p-split"}},
        {"Logging", false, {"log-level", "verbose", "verbosity", "log-disable"}},
        // Taken so that a llama-server command line runs unchanged; each says what it does here.
        {"llama-server compatibility",
         false,
         {"metrics", "ui", "backend-sampling", "cont-batching"}},
    };
}

const std::vector<Group>& groups() {
    static const std::vector<Group> table = [] {
        std::vector<Group> all = model_groups();
        for (Group& g : serving_groups()) all.push_back(std::move(g));
        return all;
    }();
    return table;
}

// A command with more options than this shows only its common groups under --help.
constexpr std::size_t long_help = 30;

class GroupedHelp final : public CLI::Formatter {
  public:
    std::string make_help(const CLI::App* app, std::string name,
                          CLI::AppFormatMode mode) const override {
        if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
        std::string out = make_description(app) + make_usage(app, name) + make_positionals(app);
        const auto in_group = [&](const std::string& group) {
            return app->get_options([&](const CLI::Option* o) {
                return o->get_group() == group && o->nonpositional();
            });
        };
        const bool shorten =
            mode != CLI::AppFormatMode::All && app->get_options([](const CLI::Option* o) {
                                                      return o->nonpositional();
                                                  }).size() > long_help;
        std::string more;
        std::size_t hidden = 0;
        std::vector<std::string> names;
        for (const Group& g : groups()) names.push_back(g.name);
        names.push_back(other_options);
        for (const std::string& group : app->get_groups())
            if (std::find(names.begin(), names.end(), group) == names.end()) names.push_back(group);
        for (const std::string& group : names) {
            const auto options = in_group(group);
            if (options.empty()) continue;
            const auto* g = find_group(group);
            if (shorten && g && !g->common) {
                more += (more.empty() ? "" : ", ") + group;
                hidden += options.size();
                continue;
            }
            out += make_group(group, false, options);
        }
        out += '\n';  // CLI11 starts each group with a blank line but does not end one
        if (hidden)
            out += fmt::format("{} more options: {}.\n`{} --help-all` lists every option.\n\n",
                               hidden, more, name);
        const std::string subcommands = make_subcommands(app, mode);
        return out + subcommands + (subcommands.empty() ? "" : "\n") + make_footer(app);
    }

    std::string make_option_name(const CLI::Option* o, bool positional) const override {
        std::string name = CLI::Formatter::make_option_name(o, positional);
        // "--no-embeddings{-1}": the value a flag sets is the parser's, not the reader's.
        for (std::size_t at = name.find('{'); at != std::string::npos; at = name.find('{'))
            name.erase(at, name.find('}', at) - at + 1);
        return name;
    }

  private:
    static const Group* find_group(const std::string& name) {
        for (const Group& g : groups())
            if (name == g.name) return &g;
        return nullptr;
    }
};

const std::map<std::string, std::string>& examples() {
    static const std::map<std::string, std::string> table = {
        {"",
         "Examples:\n"
         "  llamapp run model.gguf                          chat with a model in the terminal\n"
         "  llamapp run owner/repo-GGUF:Q4_K_M \"Hello\"      pull from the hub, answer once\n"
         "  llamapp serve -m model.gguf                     serve it on http://127.0.0.1:8080\n"
         "  llamapp ls                                      the models in the hub cache\n"},
        {"run",
         "Examples:\n"
         "  llamapp run model.gguf                          chat (the REPL) with a chat model\n"
         "  llamapp run model.gguf \"Why is the sky blue?\"   one answer, then exit\n"
         "  llamapp run owner/repo-GGUF:Q4_K_M              pulled from the hub on first use\n"
         "  llamapp run -m model.gguf -p \"Once\" -n 64       a completion of 64 tokens\n"},
        {"serve",
         "Examples:\n"
         "  llamapp serve -m model.gguf                     one model on http://127.0.0.1:8080\n"
         "  llamapp serve -hf owner/repo-GGUF:Q4_K_M        pulled from the hub before serving\n"
         "  llamapp serve --models-dir ~/models             each GGUF there, loaded on first use\n"
         "  llamapp serve -m model.gguf --ollama            on Ollama's port, for its clients\n"
         "  llamapp serve -m model.gguf --api-key KEY --host 0.0.0.0\n"
         "                                                  reachable from other machines\n"},
        {"pull",
         "Examples:\n"
         "  llamapp pull owner/repo-GGUF                    the repository's default file\n"
         "  llamapp pull owner/repo-GGUF:Q8_0               the file with that tag\n"
         "  llamapp search qwen3                            find a repository first\n"},
    };
    return table;
}

}  // namespace

std::string help_group_of(const std::string& long_name) {
    for (const Group& g : groups())
        for (std::string_view name : g.options)
            if (name == long_name) return g.name;
    return other_options;
}

void prepare_help(CLI::App& app) {
    app.set_help_all_flag("--help-all", "print every option, the rarely used ones too");
    app.formatter(std::make_shared<GroupedHelp>());
}

void arrange_help(CLI::App& app) {
    for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
        for (CLI::Option* o : command->get_options()) {
            if (!o->nonpositional()) continue;
            const auto& names = o->get_lnames();
            o->group(names.empty() ? other_options : help_group_of(names.front()));
        }
        if (auto it = examples().find(command->get_name()); it != examples().end())
            command->footer(it->second);
    }
    app.footer(examples().at(""));
}

}  // namespace llamapp::cli
