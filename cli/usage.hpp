// What the CLI says when a command line is wrong: llamapp's one-line error form, with the
// command or option that was probably meant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace llamapp::cli {

// Exit status of a command line that could not be parsed (as getopt-based tools use).
inline constexpr int usage_exit = 2;

// The candidate closest to `word` by edit distance, if it is close enough to be a typo of it
// (at most a third of its letters, and at least one); empty when none is.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// Before parsing: an unknown command (the first word that is not an option) is reported here,
// since CLI11 would only say that a subcommand is required. Returns the exit status, or 0 when
// the command is known.
int refuse_unknown_command(CLI::App& app, const std::vector<std::string>& reversed_args);

// A CLI11 parse error in llamapp's form ("error: … [invalid_argument]"), with a suggestion for
// an unknown option; help and version requests print as CLI11 does. Returns the exit status.
int report_parse_error(CLI::App& app, const CLI::ParseError& e);

}  // namespace llamapp::cli
