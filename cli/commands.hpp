// CLI subcommands. Each registers its flags on a CLI11 subcommand and returns a runner.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace llamapp::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_embed(CLI::App& app);
Runner add_devices(CLI::App& app);
Runner add_rpc_server(CLI::App& app);
Runner add_cache_command(CLI::App& app);
Runner add_ps(CLI::App& app);
Runner add_stop(CLI::App& app);
Runner add_show(CLI::App& app);
// Generated from the commands registered on `app` when it runs: registered last.
Runner add_completion(CLI::App& app);
// pull, ls, rm and search share one runner.
Runner add_hub_commands(CLI::App& app);

}  // namespace llamapp::cli
