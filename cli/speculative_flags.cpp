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

}  // namespace

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
    if (auto ok = s.validate(); !ok) return ok;
    options.speculative = std::move(s);
    return {};
}

}  // namespace llamapp::cli
