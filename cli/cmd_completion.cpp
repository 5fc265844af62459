// `llamapp completion bash|zsh|fish`: a completion script for the shell, generated from the
// command definitions, so that it never lags behind them. Subcommands, their options (values
// from an option's choices, file names for options and words that take a file), and the
// words a command takes (its subcommands, the choices of its arguments: cache's actions).
#include <fmt/core.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

struct OptionSpec {
    std::vector<std::string> names;  // "-m", "--model"
    std::string description;
    bool takes_value = false;
    bool file = false;
    std::vector<std::string> choices;
};

struct CommandSpec {
    std::vector<std::string> names;  // the name, then its aliases
    std::string description;
    std::vector<OptionSpec> options;
    std::vector<std::string> arguments;  // its subcommands and the choices of its positionals
};

bool names_a_file(const std::string& long_name) {
    return long_name == "model" || long_name == "file" || long_name == "cache-disk" ||
           long_name == "models-preset" || long_name.ends_with("-file") ||
           long_name.ends_with("-dir") || long_name.ends_with("-path");
}

// The values of a check such as CLI::IsMember, from the type name CLI11 shows
// ("TEXT:{on,off,auto}"); a transform's mapping ("{true->on,...}") is not a list of values.
std::vector<std::string> choices_of(const std::string& type_name) {
    std::vector<std::string> found;
    for (std::size_t open = type_name.find('{'); open != type_name.npos;
         open = type_name.find('{', open + 1)) {
        const std::size_t close = type_name.find('}', open);
        if (close == type_name.npos) break;
        const std::string list = type_name.substr(open + 1, close - open - 1);
        if (list.find("->") != list.npos || list.find(' ') != list.npos) continue;
        found.clear();
        for (std::size_t at = 0; at <= list.size();) {
            const std::size_t comma = std::min(list.find(',', at), list.size());
            if (comma > at) found.push_back(list.substr(at, comma - at));
            at = comma + 1;
        }
    }
    return found;
}

CommandSpec spec_of(CLI::App& cmd) {
    CommandSpec spec{.names = {cmd.get_name()}, .description = cmd.get_description()};
    for (const std::string& alias : cmd.get_aliases()) spec.names.push_back(alias);
    for (const CLI::Option* o : cmd.get_options()) {
        if (o->get_lnames().empty() && o->get_snames().empty()) {  // a positional
            for (std::string& choice : choices_of(o->get_type_name()))
                spec.arguments.push_back(std::move(choice));
            continue;
        }
        OptionSpec option{.description = o->get_description(),
                          .takes_value = o->get_items_expected_max() > 0};
        for (const std::string& s : o->get_snames()) option.names.push_back("-" + s);
        for (const std::string& l : o->get_lnames()) {
            option.names.push_back("--" + l);
            option.file = option.file || (option.takes_value && names_a_file(l));
        }
        if (option.takes_value) option.choices = choices_of(o->get_type_name());
        spec.options.push_back(std::move(option));
    }
    for (CLI::App* sub : cmd.get_subcommands({})) spec.arguments.push_back(sub->get_name());
    return spec;
}

std::string joined(const std::vector<std::string>& words) {
    std::string out;
    for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
    return out;
}

// "a|b": a case pattern of several words.
std::string alternatives(const std::vector<std::string>& words) {
    std::string out;
    for (const std::string& w : words) out += (out.empty() ? "" : "|") + w;
    return out;
}

// Text for a single-quoted shell word.
std::string shell_word(std::string_view text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string bash_case(const CommandSpec& c) {
    std::vector<std::string> words, files, takes;
    std::string values;
    for (const OptionSpec& o : c.options) {
        words.insert(words.end(), o.names.begin(), o.names.end());
        if (o.file) files.insert(files.end(), o.names.begin(), o.names.end());
        if (o.takes_value) takes.insert(takes.end(), o.names.begin(), o.names.end());
        if (!o.choices.empty())
            values += fmt::format("                {}) values={} ;;\n", alternatives(o.names),
                                  shell_word(joined(o.choices)));
    }
    const std::string pattern = alternatives(c.names);
    std::string out = fmt::format(
        "        {})\n            words={}\n            files={}\n"
        "            takes={}\n            arguments={}\n",
        pattern, shell_word(joined(words)), shell_word(joined(files)), shell_word(joined(takes)),
        shell_word(joined(c.arguments)));
    if (!values.empty()) out += "            case $prev in\n" + values + "            esac\n";
    return out + "            ;;\n";
}

std::string bash_script(const std::vector<CommandSpec>& commands) {
    std::vector<std::string> names;
    std::string cases;
    for (const CommandSpec& c : commands) {
        names.insert(names.end(), c.names.begin(), c.names.end());
        cases += bash_case(c);
    }
    return fmt::format(R"(# llamapp completion for bash: source <(llamapp completion bash)
_llamapp() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local words="" files="" takes="" arguments="" values=""
    COMPREPLY=()
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W {} -- "$cur"))
        return
    fi
    case ${{COMP_WORDS[1]}} in
{}    esac
    if [ -n "$values" ]; then
        COMPREPLY=($(compgen -W "$values" -- "$cur"))
    elif [[ " $files " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [[ " $takes " == *" $prev "* ]]; then
        COMPREPLY=()
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$arguments" -- "$cur") $(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _llamapp llamapp
)",
                       shell_word(joined(names) + " --help --version"), cases);
}

std::string fish_script(const std::vector<CommandSpec>& commands) {
    std::string out =
        "# llamapp completion for fish: llamapp completion fish | source\n"
        "complete -c llamapp -f\n";
    std::vector<std::string> all;
    for (const CommandSpec& c : commands) all.insert(all.end(), c.names.begin(), c.names.end());
    const std::string none = "not __fish_seen_subcommand_from " + joined(all);
    for (const CommandSpec& c : commands) {
        out += fmt::format("complete -c llamapp -n {} -a {} -d {}\n", shell_word(none), c.names[0],
                           shell_word(c.description));
        const std::string within = "__fish_seen_subcommand_from " + joined(c.names);
        for (const std::string& argument : c.arguments)
            out += fmt::format("complete -c llamapp -n {} -a {}\n", shell_word(within), argument);
        for (const OptionSpec& o : c.options) {
            std::string line = "complete -c llamapp -n " + shell_word(within);
            for (const std::string& n : o.names)
                line += n.starts_with("--") ? " -l " + n.substr(2)
                        : n.size() == 2     ? " -s " + n.substr(1)
                                            : " -o " + n.substr(1);
            if (o.file)
                line += " -F -r";
            else if (!o.choices.empty())
                line += " -x -a " + shell_word(joined(o.choices));
            else if (o.takes_value)
                line += " -x";
            out += line + " -d " + shell_word(o.description.substr(0, o.description.find('\n'))) +
                   "\n";
        }
    }
    return out;
}

}  // namespace

Runner add_completion(CLI::App& app) {
    auto shell = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand(
        "completion",
        "a completion script for bash, zsh or fish (e.g. source <(llamapp completion bash))");
    cmd->add_option("shell", *shell, "bash, zsh or fish")
        ->required()
        ->check(CLI::IsMember({"bash", "zsh", "fish"}));
    return [shell, &app]() -> int {
        std::vector<CommandSpec> commands;
        for (CLI::App* sub : app.get_subcommands({})) commands.push_back(spec_of(*sub));
        if (*shell == "fish") {
            std::fputs(fish_script(commands).c_str(), stdout);
        } else {
            // zsh runs the bash script through its bash-completion layer.
            if (*shell == "zsh")
                std::fputs("#compdef llamapp\nautoload -U +X bashcompinit && bashcompinit\n",
                           stdout);
            std::fputs(bash_script(commands).c_str(), stdout);
        }
        return 0;
    };
}

}  // namespace llamapp::cli
