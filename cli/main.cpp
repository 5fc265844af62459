// llamapp command-line entry point.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.hpp"
#include "help.hpp"
#include "llama_flags.hpp"
#include "options.hpp"
#include "usage.hpp"

int main(int argc, char** argv) {
    using namespace llamapp::cli;
    CLI::App app{"llamapp: local LLM inference on llama.cpp", "llamapp"};
    app.require_subcommand(1);
    prepare_help(app);
    app.set_version_flag("--version",
                         [] { return "llamapp 0.1.0 on " + llamapp::llama_build_info(); });
    const Runner hub = add_hub_commands(app);
    const std::map<std::string, Runner> runners = {
        {"run", add_run(app)},
        {"serve", add_serve(app)},
        {"info", add_info(app)},
        {"tokenize", add_tokenize(app)},
        {"embed", add_embed(app)},
        {"devices", add_devices(app)},
        {"rpc-server", add_rpc_server(app)},
        {"cache", add_cache_command(app)},
        {"ps", add_ps(app)},
        {"stop", add_stop(app)},
        {"show", add_show(app)},
        {"pull", hub},
        {"ls", hub},
        {"rm", hub},
        {"search", hub},
        {"completion", add_completion(app)},
    };
    arrange_help(app);
    std::vector<std::string> args = normalize_args(argc, argv);  // reversed
    // Installed (or linked) as llama-server, it is `llamapp serve` with llama-server's flags.
    if (std::filesystem::path(argv[0]).filename() == "llama-server") args.push_back("serve");
    // A llama-server flag serve does not take is refused by name, before CLI11's generic error.
    if (!args.empty() && args.back() == "serve") {
        const std::vector<std::string> given(args.rbegin() + 1, args.rend());
        if (auto ok = refuse_unsupported(*app.get_subcommand("serve"), given); !ok)
            return report(ok.error());
    }
    if (const int status = refuse_unknown_command(app, args)) return status;
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return report_parse_error(app, e);
    }
    for (const auto* sub : app.get_subcommands()) {
        auto it = runners.find(sub->get_name());
        if (it != runners.end()) return it->second();
    }
    return 1;
}
