// `--models-preset FILE`: llama-server's INI presets file. llama.cpp's common library reads it
// (sections, `[*]`, comments, its key names and boolean spellings); each section's keys become
// llamapp's own per-model flags, parsed by CLI11 like the command line, so a value means the
// same in both places and a key llamapp cannot honour per model is an error naming it.
#include <arg.h>
#include <fmt/core.h>
#include <preset.h>

#include <algorithm>

#include "llama_flags.hpp"
#include "serve_flags.hpp"

namespace llamapp::cli {

namespace {

constexpr const char* honoured =
    "model, hf-repo, hf-file, alias, tags, ctx-size, batch-size, ubatch-size, threads, "
    "threads-batch, flash-attn, cache-type-k, cache-type-v, kv-offload, n-gpu-layers, device, "
    "split-mode, tensor-split, main-gpu, fit, fit-target, fit-ctx, load-mode, parallel, "
    "keep-alive, sleep-idle-seconds, embeddings, pooling, chat-template, chat-template-file, "
    "jinja, reasoning, reasoning-format, reasoning-budget, reasoning-budget-message, "
    "prefill-assistant, kv-unified, "
    "max-queue, prefill-chunk, min-prefill-rows, batch-strategy, "
    "load-on-startup, "
    "n-predict and the sampling flags (temp, top-k, top-p, min-p, typical, seed, "
    "repeat-penalty, repeat-last-n, presence-penalty, frequency-penalty, dry-*, xtc-*, "
    "mirostat*)";

struct Section {
    ServeFlags flags;
    std::vector<std::string> aliases;
};

// One preset's options as command-line arguments, parsed into `into` over what it holds.
Result<void> apply(const common_preset& preset, Section& into, const std::string& where) {
    for (const auto& [opt, value] : preset.options)
        if (opt.is_preset_only &&
            (!opt.env || opt.env != std::string_view(COMMON_ARG_PRESET_LOAD_ON_STARTUP)))
            return fail(ErrorCode::invalid_argument,
                        fmt::format("[{}]: {} is not supported; a section takes: {}", preset.name,
                                    opt.args.back(), honoured),
                        where);
    std::vector<std::string> args;
    try {
        args = preset.to_args();
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_argument, fmt::format("[{}]: {}", preset.name, e.what()),
                    where);
    }
    CLI::App app{"preset"};
    ServeFlags& f = into.flags;
    add_llama_option(app, "--model", f.common.model_path, "");
    add_llama_option(app, "--hf-repo", f.common.hf_refs, "");
    add_llama_option(app, "--hf-file", f.common.hf_file, "");
    add_llama_option(app, "--n-gpu-layers", f.common.n_gpu_layers, "")
        ->transform(CLI::Transformer({{"all", "-1"}, {"auto", "-1"}}));
    add_llama_option(app, "--load-mode", f.common.load_mode, "");
    add_placement(app, f.common);
    app.add_flag("--no-mmap", f.common.no_mmap);
    app.add_flag_callback("--mmap", [&f] { f.common.no_mmap = false; });
    add_llama_option(app, "--alias", into.aliases, "")->delimiter(',');
    add_context(app, f.context);
    add_model_flags(app, f);
    // The environment is the command line's: it reaches a section through the flags it holds.
    for (CLI::Option* o : app.get_options()) o->envname("");
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return fail(ErrorCode::invalid_argument,
                    fmt::format("[{}]: {}; a section takes: {}", preset.name, e.what(), honoured),
                    where);
    }
    return {};
}

bool names_a_model(const common_preset& preset) {
    std::string v;
    return preset.get_option("LLAMA_ARG_MODEL", v) || preset.get_option("LLAMA_ARG_HF_REPO", v);
}

bool loads_on_startup(const common_preset& preset) {
    std::string v;
    if (!preset.get_option(COMMON_ARG_PRESET_LOAD_ON_STARTUP, v)) return false;
    return common_arg_utils::is_truthy(v);
}

}  // namespace

Result<std::vector<KnownModel>> preset_models(const ServeFlags& flags) {
    const std::string& file = flags.models_preset;
    common_preset global;
    common_presets presets;
    try {
        common_preset_context context(LLAMA_EXAMPLE_SERVER);
        // llamapp's own per-model flags, as keys the reader accepts and hands back as arguments.
        for (const char* flag : {"--keep-alive", "--max-queue", "--prefill-chunk",
                                 "--min-prefill-rows", "--batch-strategy"})
            context.key_to_opt.emplace(
                flag + 2,
                common_arg({flag}, "VALUE", "", [](common_params&, const std::string&) {}));
        presets = context.load_from_ini(file, global);
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_argument, e.what(), file);
    }
    if (presets.empty())
        return fail(ErrorCode::invalid_argument, "the presets file names no model", file);
    std::vector<KnownModel> known;
    for (const auto& [name, preset] : presets) {
        // The command line's per-model flags, then [*], then the section: later ones win.
        Section s{flags, {}};
        s.flags.common.model_path.clear();
        s.flags.common.hf_refs.clear();
        s.flags.common.hf_file.clear();
        for (const common_preset* p : {static_cast<const common_preset*>(&global), &preset}) {
            if (names_a_model(*p)) {  // a section's model replaces [*]'s, whichever key
                s.flags.common.model_path.clear();
                s.flags.common.hf_refs.clear();
                s.flags.common.hf_file.clear();
            }
            if (auto ok = apply(*p, s, file); !ok) return std::unexpected(ok.error());
        }
        auto refs = hub_refs(s.flags.common);
        if (!refs) return std::unexpected(refs.error());
        const std::string what = !s.flags.common.model_path.empty() ? s.flags.common.model_path
                                 : refs->empty()                    ? std::string()
                                                                    : refs->back();
        if (what.empty())
            return fail(ErrorCode::invalid_argument,
                        fmt::format("[{}] names no model: give model = PATH or hf-repo = "
                                    "owner/repo[:QUANT]",
                                    name),
                        file);
        auto spec = model_defaults(s.flags);
        if (!spec) return std::unexpected(spec.error());
        spec->id = name;
        spec->aliases = s.aliases;
        set_model_source(*spec, what);
        spec->source = "preset";
        if (keep_alive_of(s.flags) != keep_alive_of(flags)) {
            auto keep = parse_keep_alive(keep_alive_of(s.flags));
            if (!keep) return std::unexpected(keep.error());
            spec->keep_alive = *keep;
        }
        known.push_back(
            KnownModel{without_draft(std::move(*spec)), loads_on_startup(preset), false});
    }
    return known;
}

}  // namespace llamapp::cli
