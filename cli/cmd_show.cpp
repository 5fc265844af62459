// `llamapp show MODEL`: what a model is and can do, as `ollama show` prints it. A file, or a hub
// model in the cache, is read here (no weights loaded); any other name is asked of a running
// server (its POST /api/show), which knows its aliases and the templates it renders.
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "options.hpp"
#include "server_client.hpp"

namespace llamapp::cli {

namespace {

using json = nlohmann::json;

struct ShowFlags {
    ServerAddress server;
    std::string model;
    bool json_out = false;
    bool template_only = false;
};

// One description from either source; a field a source does not know stays empty.
struct ModelView {
    std::string architecture;
    std::uint64_t n_params = 0;
    std::int64_t context_length = 0;
    std::int64_t embedding_length = 0;
    std::string quantization;
    std::vector<std::string> capabilities;
    std::string license;
    std::string chat_template;
};

ModelView view_of_file(const ModelInfo& info) {
    ModelView v{.architecture = info.architecture,
                .n_params = info.n_params,
                .context_length = info.n_ctx_train,
                .embedding_length = info.n_embd,
                .quantization = info.quantization,
                .chat_template = info.chat_template.value_or("")};
    // A vocab-only load reads no hyperparameters: the header has them.
    const auto header_number = [&](const std::string& key) -> std::int64_t {
        auto it = info.metadata.find(info.architecture + "." + key);
        return it == info.metadata.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10);
    };
    if (v.context_length == 0) v.context_length = header_number("context_length");
    if (v.embedding_length == 0) v.embedding_length = header_number("embedding_length");
    const bool generates = !info.embedder;
    if (generates) v.capabilities.push_back("completion");
    if (info.embedder) v.capabilities.push_back(info.reranker ? "rerank" : "embedding");
    const TemplateFeatures features = template_features(v.chat_template);
    if (generates && features.tools) v.capabilities.push_back("tools");
    if (generates && features.thinking) v.capabilities.push_back("thinking");
    const SpecialTokens& s = info.special;
    if (generates && s.fim_prefix != no_token && s.fim_suffix != no_token &&
        s.fim_middle != no_token)
        v.capabilities.push_back("insert");
    if (auto it = info.metadata.find("general.license"); it != info.metadata.end())
        v.license = it->second;
    return v;
}

ModelView view_of_server(const json& shown) {
    const json info = shown.value("model_info", json::object());
    const auto number = [&](const std::string& key) -> std::int64_t {
        auto it = info.find(key);
        return it != info.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
    };
    ModelView v;
    v.architecture = info.value("general.architecture", "");
    v.n_params = static_cast<std::uint64_t>(number("general.parameter_count"));
    v.context_length = number(v.architecture + ".context_length");
    v.embedding_length = number(v.architecture + ".embedding_length");
    v.quantization = shown.value("details", json::object()).value("quantization_level", "");
    for (const json& c : shown.value("capabilities", json::array()))
        if (c.is_string()) v.capabilities.push_back(c.get<std::string>());
    v.license = info.value("general.license", "");
    v.chat_template = shown.value("template", "");
    return v;
}

json view_json(const ModelView& v) {
    return {{"architecture", v.architecture},
            {"parameters", v.n_params},
            {"context_length", v.context_length},
            {"embedding_length", v.embedding_length},
            {"quantization", v.quantization},
            {"capabilities", v.capabilities},
            {"license", v.license},
            {"template", v.chat_template}};
}

void print_view(const ModelView& v) {
    const auto row = [](const char* key, const std::string& value) {
        if (!value.empty() && value != "0") std::printf("    %-20s%s\n", key, value.c_str());
    };
    std::printf("  Model\n");
    row("architecture", v.architecture);
    row("parameters", v.n_params ? parameter_count_text(v.n_params) : "");
    row("context length", std::to_string(v.context_length));
    row("embedding length", std::to_string(v.embedding_length));
    row("quantization", v.quantization);
    std::printf("\n  Capabilities\n");
    for (const std::string& c : v.capabilities) std::printf("    %s\n", c.c_str());
    if (!v.license.empty()) std::printf("\n  License\n    %s\n", v.license.c_str());
}

// A file, or a hub model the cache holds: read here without asking anyone. No view when the name
// is neither; an error when it is one and cannot be read.
Result<std::optional<ModelView>> local_view(const std::string& model) {
    std::filesystem::path path;
    if (std::error_code ec; std::filesystem::exists(model, ec)) {
        path = model;
    } else {
        if (!hub_model_ref(model)) return std::nullopt;
        auto cached = resolve_model(model, /*offline=*/true);
        if (!cached) return std::nullopt;
        path = *cached;
    }
    CommonFlags common;
    common.model_path = path.string();
    auto loaded = load_model(common, /*vocab_only=*/true);
    if (!loaded) return std::unexpected(loaded.error());
    return view_of_file(loaded->info());
}

int show(const ShowFlags& f) {
    auto local = local_view(f.model);
    if (!local) return report(local.error());
    std::optional<ModelView> view = std::move(*local);
    if (!view) {
        const json body = {{"model", f.model}};
        auto shown = ask_server(f.server, "/api/show", &body);
        if (!shown) {
            Error e = shown.error();
            // Say where else the name was looked for.
            const bool refused = e.code == ErrorCode::not_found;
            if (refused || e.code == ErrorCode::io_error)
                e.message = fmt::format("'{}' is no file nor a cached hub model, and {}{}", f.model,
                                        refused ? "the server answered: " : "", e.message);
            return report(e);
        }
        view = view_of_server(*shown);
    }
    if (f.json_out)
        std::printf("%s\n", view_json(*view).dump(2).c_str());
    else if (f.template_only)
        std::printf("%s\n", view->chat_template.c_str());
    else
        print_view(*view);
    return 0;
}

}  // namespace

Runner add_show(CLI::App& app) {
    auto flags = std::make_shared<ShowFlags>();
    CLI::App* cmd = app.add_subcommand("show", "what a model is and can do");
    cmd->add_option("model", flags->model,
                    "a GGUF file, a hub model in the cache, or a model of a running server")
        ->required();
    add_server_flags(*cmd, flags->server);
    cmd->add_flag("--json", flags->json_out, "print JSON");
    cmd->add_flag("--template", flags->template_only, "print only the chat template");
    return [flags]() -> int { return show(*flags); };
}

}  // namespace llamapp::cli
