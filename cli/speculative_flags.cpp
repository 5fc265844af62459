#include "speculative_flags.hpp"

#include <fmt/core.h>

#include "llama_flags.hpp"

namespace llamapp::cli {

namespace {

void add_ngram_map(CLI::App& app, const std::string& kind, NgramMapOptions& o) {
    const std::string flag = "--spec-ngram-" + kind;
    add_llama_option(app, flag + "-size-n", o.key_tokens,
                     kind + ": length of the n-gram looked up in the sequence")
        ->capture_default_str();
    add_llama_option(app, flag + "-size-m", o.draft_tokens,
                     kind + ": most tokens it proposes after a match")
        ->capture_default_str();
    add_llama_option(app, flag + "-min-hits", o.min_hits,
                     kind + ": times a key must have been seen before it proposes")
        ->capture_default_str();
}

void add_draft_model(CLI::App& app, SpeculativeFlags& flags) {
    DraftModelOptions& d = flags.options.draft;
    add_llama_option(app, "--spec-draft-model", flags.draft_path,
                     "a draft model with the model's vocabulary (-md): adds draft-simple to the "
                     "kinds");
    add_llama_option(app, "--spec-draft-ngl", flags.draft_gpu_layers,
                     "draft model layers on GPUs (-ngld; -1 = all)")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-device", flags.draft_devices,
                     "devices for the draft model's layers (-devd; default: the model's)")
        ->delimiter(',');
    add_llama_option(app, "--spec-draft-threads", d.n_threads,
                     "draft model decode threads (-td; 0 = the model's)")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-threads-batch", d.n_threads_batch,
                     "draft model prefill threads (-tbd; 0 = -td)")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-type-k", flags.draft_type_k,
                     "draft model KV cache type for K (-ctkd)")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-type-v", flags.draft_type_v,
                     "draft model KV cache type for V (-ctvd)")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-p-min", d.p_min,
                     "draft a token only while the draft model gives it at least this "
                     "probability")
        ->capture_default_str();
    add_llama_option(app, "--spec-draft-p-split", flags.p_split,
                     "taken for llama-server's command lines; the pinned llama.cpp's drafters do "
                     "not use it")
        ->capture_default_str();
}

Result<void> apply_draft_model(const SpeculativeFlags& flags, SpeculativeOptions& s) {
    auto k = parse_kv_type(flags.draft_type_k);
    if (!k) return std::unexpected(k.error());
    auto v = parse_kv_type(flags.draft_type_v);
    if (!v) return std::unexpected(v.error());
    s.draft.type_k = *k;
    s.draft.type_v = *v;
    if (!(flags.p_split >= 0.0f && flags.p_split <= 1.0f))
        return fail(ErrorCode::invalid_argument,
                    fmt::format("must be in [0, 1], got {}", flags.p_split),
                    "--spec-draft-p-split");
    if (flags.draft_path.empty()) {
        if (s.kinds.has(DraftKind::draft_simple))
            return fail(ErrorCode::invalid_argument, "draft-simple needs a draft model (-md)",
                        "--spec-type");
        return {};
    }
    s.kinds.add(DraftKind::draft_simple);
    return {};
}

}  // namespace

ModelOptions draft_model_options(const SpeculativeFlags& flags, const ModelOptions& model) {
    ModelOptions o = model;
    o.n_gpu_layers = flags.draft_gpu_layers;
    if (!flags.draft_devices.empty()) o.devices = flags.draft_devices;
    o.tensor_split.clear();
    o.main_gpu = 0;
    o.fit = false;  // the model's fit leaves room; a draft is a fraction of it
    o.progress = nullptr;
    return o;
}

void add_speculative(CLI::App& app, SpeculativeFlags& flags) {
    SpeculativeOptions& o = flags.options;
    add_llama_option(app, "--spec-type", flags.types,
                     fmt::format("where drafts come from, a comma list of {} (or none); default: "
                                 "lookup, llamapp's prompt lookup",
                                 draft_kind_names()))
        ->delimiter(',');
    // --draft-tokens: llamapp's name for it before llama-server had one.
    CLI::Option* n_max =
        app.add_option(llama_names("--spec-draft-n-max") + ",--draft-tokens", o.n_max,
                       "most tokens a stream drafts per decode, each kept only if "
                       "sampling picks it (0 = off)");
    n_max->capture_default_str();
    if (const std::string env = llama_env("--spec-draft-n-max"); !env.empty()) n_max->envname(env);
    add_llama_option(app, "--spec-draft-n-min", o.n_min, "a shorter proposal is not decoded")
        ->capture_default_str();
    app.add_option("--draft-match", o.lookup_match,
                   "lookup: tokens that must repeat before it drafts what followed them")
        ->capture_default_str();
    app.add_option("--draft-batch-rows", o.batch_rows,
                   "draft only while the streams' decode call holds at most this many rows "
                   "(streams + drafts; a CPU gains little beyond 4, a GPU can take more)")
        ->capture_default_str();
    add_ngram_map(app, "simple", o.ngram_simple);
    add_ngram_map(app, "map-k", o.ngram_map_k);
    add_ngram_map(app, "map-k4v", o.ngram_map_k4v);
    add_llama_option(app, "--spec-ngram-mod-n-match", o.ngram_mod.match, "ngram-mod: n-gram length")
        ->capture_default_str();
    add_llama_option(app, "--spec-ngram-mod-n-min", o.ngram_mod.n_min,
                     "ngram-mod: shortest proposal")
        ->capture_default_str();
    add_llama_option(app, "--spec-ngram-mod-n-max", o.ngram_mod.n_max,
                     "ngram-mod: longest proposal")
        ->capture_default_str();
    add_llama_switch(app, "--spec-default", flags.llama_default,
                     "llama-server's default speculation: ngram-mod (match 24, 48 to 64 tokens)");
    add_draft_model(app, flags);
}

Result<void> apply_speculative(const SpeculativeFlags& flags, EngineOptions& options) {
    SpeculativeOptions s = flags.options;
    if (flags.llama_default) {
        // What llama-server's --spec-default sets.
        s.kinds = {DraftKind::ngram_mod};
        s.ngram_mod = NgramModOptions{.match = 24, .n_min = 48, .n_max = 64};
        s.n_max = std::max(s.n_max, 64);
    }
    if (!flags.types.empty()) {
        // As llama-server's, --spec-type adds to --spec-default's kind; alone it replaces lookup.
        if (!flags.llama_default) s.kinds = {};
        for (const std::string& name : flags.types) {
            if (name == "none") continue;
            const auto kind = parse_draft_kind(name);
            if (!kind)
                return fail(ErrorCode::invalid_argument,
                            fmt::format("unknown draft kind '{}' (kinds: {}, none)", name,
                                        draft_kind_names()),
                            "--spec-type");
            s.kinds.add(*kind);
        }
    }
    if (auto ok = apply_draft_model(flags, s); !ok) return ok;
    if (auto ok = s.validate(); !ok) return ok;
    options.speculative = std::move(s);
    return {};
}

}  // namespace llamapp::cli
