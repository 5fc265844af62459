#include "llama_flags.hpp"

#include <arg.h>
#include <fmt/core.h>

#include <cstdlib>
#include <map>
#include <stdexcept>

#include "llamapp/backend.hpp"

namespace llamapp::cli {

namespace {

// llama.cpp's parser setup asks which backends there are, which brings them up: llamapp's log
// bridge must be in place first, or a GPU backend's start-up lines reach the terminal of every
// command (and the JSON some of them print).
common_params_context server_parser(common_params& params) {
    ensure_backend();
    return common_params_parser_init(params, LLAMA_EXAMPLE_SERVER);
}

// llama-server's options, built once by llama.cpp's own parser setup (no handler ever runs).
struct Registry {
    common_params params;
    common_params_context context;
    std::map<std::string, const common_arg*, std::less<>> by_spelling;  // negations included

    Registry() : context(server_parser(params)) {
        for (const common_arg& a : context.options) {
            for (const char* s : a.args) by_spelling.emplace(s, &a);
            for (const char* s : a.args_neg) by_spelling.emplace(s, &a);
        }
    }

    const common_arg* find(std::string_view spelling) const {
        auto it = by_spelling.find(spelling);
        return it == by_spelling.end() ? nullptr : it->second;
    }
};

const Registry& registry() {
    static const Registry r;
    return r;
}

const common_arg& known(std::string_view flag) {
    const common_arg* a = registry().find(flag);
    if (!a) throw std::logic_error(fmt::format("llama-server has no flag {}", flag));
    return *a;
}

// CLI11 takes "-x" and "--long" names; "-ngl" reaches it rewritten (normalize_flag).
bool cli11_name(std::string_view s) {
    return s.size() == 2 || s.starts_with("--");
}

bool is_negation(const common_arg& a, std::string_view spelling) {
    for (const char* s : a.args_neg)
        if (spelling == s) return true;
    return false;
}

// Where llamapp does something else on purpose, the refusal says what.
std::string why_not(std::string_view flag) {
    static const std::vector<std::pair<std::string_view, std::string_view>> reasons = {
        {"--lora", "LoRA adapters are not supported yet"},
        {"--spec-synth",
         "a draft is kept only where the request's own sampler picks it; synthetic acceptance "
         "rates are not supported"},
        {"--spec-draft-hf", "a draft model is a file here (-md); Hugging Face pulls are for -hf"},
        {"--spec-",
         "llamapp takes the draft model's file, layers, devices, threads and KV types; MTP "
         "heads, EAGLE-3 and DFlash are not supported yet"},
        {"--mmproj", "multimodal input is not supported yet"},
        {"--media-path", "multimodal input is not supported yet"},
        {"--webui", "llamapp has no web UI"},
        {"--grammar", "a request brings its own grammar or schema (grammar, response_format)"},
        {"--json-schema", "a request brings its own grammar or schema (grammar, response_format)"},
        {"--no-cont-batching", "llamapp always batches continuously"},
        {"--context-shift",
         "llamapp never shifts the context: a prompt that does not fit is refused, and a reply "
         "that fills it ends with finish_reason \"length\""},
    };
    for (const auto& [prefix, reason] : reasons)
        if (flag.starts_with(prefix)) return std::string(reason);
    return "llamapp does not support it";
}

bool takes(const CLI::App& app, const std::string& name) {
    for (const CLI::Option* o : app.get_options())
        if (o->check_name(name)) return true;
    return false;
}

bool takes_env(const CLI::App& app, std::string_view env) {
    for (const CLI::Option* o : app.get_options())
        if (o->get_envname() == env) return true;
    return false;
}

std::string long_name(const common_arg& a) {
    for (const char* s : a.args)
        if (std::string_view(s).starts_with("--")) return s;
    return a.args.front();
}

}  // namespace

std::string llama_names(std::string_view flag, bool negated) {
    const common_arg& a = known(flag);
    std::string names;
    auto add = [&names](std::string_view s, bool negation) {
        if (!cli11_name(s)) return;
        if (!names.empty()) names += ',';
        if (negation) names += '!';
        names += s;
    };
    for (const char* s : a.args) add(s, false);
    if (negated)
        for (const char* s : a.args_neg) add(s, true);
    return names;
}

std::string llama_env(std::string_view flag) {
    const common_arg& a = known(flag);
    return a.env ? a.env : "";
}

CLI::Option* add_llama_switch(CLI::App& app, std::string_view flag, bool& value, std::string help) {
    CLI::Option* o = app.add_flag(llama_names(flag, true), value, std::move(help));
    if (const std::string env = llama_env(flag); !env.empty()) o->envname(env);
    return o;
}

CLI::Option* add_llama_switch(CLI::App& app, std::string_view flag, int& value, std::string help) {
    // The last occurrence wins, as for the bool switches (CLI11 would sum an int flag's).
    CLI::Option* o = app.add_flag(llama_names(flag, true), value, std::move(help))
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (const std::string env = llama_env(flag); !env.empty()) o->envname(env);
    return o;
}

CLI::Option* add_reasoning_option(CLI::App& app, std::string& value, std::string help) {
    return add_llama_option(app, "--reasoning", value, std::move(help))
        ->transform(CLI::Transformer({{"true", "on"},
                                      {"1", "on"},
                                      {"enabled", "on"},
                                      {"false", "off"},
                                      {"0", "off"},
                                      {"disabled", "off"}}))
        ->check(CLI::IsMember({"on", "off", "auto"}));
}

std::string normalize_flag(const std::string& arg) {
    if (arg.starts_with("--")) {
        const std::size_t eq = arg.find('=');
        std::string name = arg.substr(0, eq);
        std::replace(name.begin() + 2, name.end(), '_', '-');
        if (!registry().find(name)) return arg;
        return eq == std::string::npos ? name : name + arg.substr(eq);
    }
    if (arg.size() <= 2 || arg[0] != '-') return arg;
    const common_arg* a = registry().find(arg);
    if (!a) return arg;
    for (const char* s : is_negation(*a, arg) ? a->args_neg : a->args)
        if (std::string_view(s).starts_with("--")) return s;
    return arg;
}

Result<void> refuse_unsupported(const CLI::App& app, const std::vector<std::string>& args) {
    for (const std::string& arg : args) {
        if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) continue;
        const std::string name = normalize_flag(arg.substr(0, arg.find('=')));
        if (!registry().find(name) || takes(app, name)) continue;
        return fail(ErrorCode::invalid_argument,
                    fmt::format("llama-server's {} is not supported: {}", arg, why_not(name)), arg);
    }
    for (const common_arg& a : registry().context.options) {
        if (!a.env || !std::string_view(a.env).starts_with("LLAMA_ARG_")) continue;
        if (!std::getenv(a.env) || takes_env(app, a.env)) continue;
        const std::string flag = long_name(a);
        return fail(ErrorCode::invalid_argument,
                    fmt::format("{} is set, and llama-server's {} is not supported: {}", a.env,
                                flag, why_not(flag)),
                    a.env);
    }
    return {};
}

}  // namespace llamapp::cli
