// llamapp command-line entry point.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "commands.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
    using namespace llamapp::cli;
    CLI::App app{"llamapp: local LLM inference on llama.cpp"};
    app.require_subcommand(1);
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
        {"cache", add_cache_command(app)},
        {"ps", add_ps(app)},
        {"pull", hub},
        {"ls", hub},
        {"rm", hub},
        {"search", hub},
    };
    try {
        app.parse(normalize_args(argc, argv));
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    for (const auto* sub : app.get_subcommands()) {
        auto it = runners.find(sub->get_name());
        if (it != runners.end()) return it->second();
    }
    return 1;
}
