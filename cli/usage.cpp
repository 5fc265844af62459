#include "usage.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace llamapp::cli {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    std::iota(row.begin(), row.end(), 0);
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::vector<std::string> command_names(CLI::App& app) {
    std::vector<std::string> names;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        names.push_back(sub->get_name());
        for (const std::string& alias : sub->get_aliases()) names.push_back(alias);
    }
    return names;
}

// The long names ("--port") of a command's options, for suggestions.
std::vector<std::string> option_names(const CLI::App& command) {
    std::vector<std::string> names;
    for (const CLI::Option* o : command.get_options())
        for (const std::string& name : o->get_lnames()) names.push_back("--" + name);
    return names;
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "error: %s [invalid_argument]\n", message.c_str());
    return usage_exit;
}

// The innermost command given on the command line (the app itself when none was).
const CLI::App& given_command(const CLI::App& app) {
    for (const CLI::App* sub : app.get_subcommands()) return given_command(*sub);
    return app;
}

std::string program_name(const CLI::App& command) {
    return command.get_parent() ? "llamapp " + command.get_name() : "llamapp";
}

}  // namespace

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
    std::string best;
    std::size_t best_distance = std::max<std::size_t>(1, word.size() / 3) + 1;
    for (const std::string& c : candidates) {
        const std::size_t d = edit_distance(word, c);
        if (d < best_distance) {
            best = c;
            best_distance = d;
        }
    }
    return best;
}

int refuse_unknown_command(CLI::App& app, const std::vector<std::string>& reversed_args) {
    if (reversed_args.empty()) return 0;
    const std::string& word = reversed_args.back();
    if (word.starts_with('-')) return 0;
    const std::vector<std::string> names = command_names(app);
    if (std::find(names.begin(), names.end(), word) != names.end()) return 0;
    const std::string meant = closest(word, names);
    return usage_error(fmt::format("unknown command '{}'{}; `llamapp --help` lists the commands",
                                   word, meant.empty() ? "" : "; did you mean '" + meant + "'?"));
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const CLI::App& command = given_command(app);
    const std::string program = program_name(command);
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
        std::vector<std::string> extras = command.remaining();
        if (extras.empty()) extras = app.remaining(true);
        const std::string first = extras.empty() ? std::string() : extras.front();
        if (first.starts_with('-')) {
            const std::string name = first.substr(0, first.find('='));
            const std::string meant = closest(name, option_names(command));
            return usage_error(fmt::format("unknown option {}{}; `{} --help` lists them", name,
                                           meant.empty() ? "" : "; did you mean " + meant + "?",
                                           program));
        }
        return usage_error(fmt::format("unexpected argument '{}' for {}; see `{} --help`", first,
                                       program, program));
    }
    return usage_error(fmt::format("{}; see `{} --help`", e.what(), program));
}

}  // namespace llamapp::cli
