// llama-server's flags as llama.cpp's common library defines them: every spelling and the
// LLAMA_ARG_* variable of each. A llamapp option registered through here takes a llama-server
// command line and environment as they are; one llama-server has and llamapp does not take is
// refused by name instead of being ignored.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "llamapp/error.hpp"

namespace llamapp::cli {

// "-n,--predict,--n-predict" for "--n-predict": the spellings CLI11 takes, one-letter short ones
// and long ones (multi-letter single-dash ones such as -ngl go through normalize_args). With
// `negated`, the "--no-..." spellings too, as CLI11's "!--no-x". A flag llama.cpp does not have
// is a programming error (std::logic_error), caught by the CLI tests.
std::string llama_names(std::string_view flag, bool negated = false);

// Its LLAMA_ARG_* variable, or empty.
std::string llama_env(std::string_view flag);

// An option with llama-server's spellings and variable.
template <typename T>
CLI::Option* add_llama_option(CLI::App& app, std::string_view flag, T& value, std::string help) {
    CLI::Option* o = app.add_option(llama_names(flag), value, std::move(help));
    if (const std::string env = llama_env(flag); !env.empty()) o->envname(env);
    return o;
}

// A switch with its negation (--jinja and --no-jinja).
CLI::Option* add_llama_switch(CLI::App& app, std::string_view flag, bool& value, std::string help);
// The same for a switch whose absence means "let llamapp choose": 1 when the flag is given, -1
// for its negation (or a false environment value), 0 when neither is.
CLI::Option* add_llama_switch(CLI::App& app, std::string_view flag, int& value, std::string help);

// --reasoning (-rea): on, off or auto, with llama.cpp's other spellings of on and off.
CLI::Option* add_reasoning_option(CLI::App& app, std::string& value, std::string help);

// A llama.cpp spelling as the one CLI11 was given: -ngl becomes --gpu-layers, and '_' in a long
// flag's name becomes '-', as llama.cpp reads them. Anything else is returned as it is.
std::string normalize_flag(const std::string& arg);

// A llama-server flag among `args`, or a LLAMA_ARG_* variable set in the environment, that
// `app` does not take: invalid_argument naming it (and saying why, where llamapp does it
// differently).
[[nodiscard]] Result<void> refuse_unsupported(const CLI::App& app,
                                              const std::vector<std::string>& args);

}  // namespace llamapp::cli
