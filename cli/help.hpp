// Help pages that can be read: a command's options under headings, the common ones first (the
// rest named, and shown by --help-all), and examples at the end.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace llamapp::cli {

// The heading an option's long name ("port") is listed under; "Other options" when the table
// has none (the CLI tests check that none of run's and serve's options end up there).
std::string help_group_of(const std::string& long_name);
inline constexpr const char* other_options = "Other options";

// Before the commands are added: --help-all, and the grouped formatter, which the commands
// inherit.
void prepare_help(CLI::App& app);

// After the commands are added: each option under its heading, and the examples.
void arrange_help(CLI::App& app);

}  // namespace llamapp::cli
