// The flags that shape one model of `llamapp serve`, and the model spec they make: shared by the
// command line and the sections of a presets file.
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <cmath>
#include <map>

#include "llama_flags.hpp"
#include "options.hpp"
#include "serve_flags.hpp"

namespace llamapp::cli {

// Flags that shape one model. On the command line they apply to every model; a section of
// the presets file sets them for its model.
void add_model_flags(CLI::App& cmd, ServeFlags& flags) {
    add_llama_option(cmd, "--parallel", flags.slots,
                     "slots: requests decoded together (-np; -1 = auto, 4)")
        ->capture_default_str();
    add_sampling(cmd, flags.sampling);
    add_llama_option(cmd, "--n-predict", flags.n_predict,
                     "max_tokens of a request that gives none (-1 = up to --max-tokens)")
        ->capture_default_str();
    cmd.add_option("--keep-alive", flags.keep_alive,
                   "unload a model idle this long: seconds, or 30s, 5m, 2h (-1 = never)")
        ->capture_default_str();
    add_llama_option(cmd, "--sleep-idle-seconds", flags.sleep_idle_seconds,
                     "llama-server's name for --keep-alive in seconds");
    cmd.add_flag("--embedding{1},--embeddings{1},--no-embeddings{-1}", flags.embeddings,
                 "a generative model computes embeddings too, on a context of its own made at "
                 "the first request; --embeddings makes it at load, --no-embeddings refuses "
                 "such requests (an embedding model always serves them)")
        ->envname(llama_env("--embeddings"));
    add_llama_option(cmd, "--tags", flags.tags, "informational tags of the model, a comma list")
        ->delimiter(',');
    add_llama_option(cmd, "--pooling", flags.pooling,
                     "embedding pooling: none, mean, cls, last or rank (default: the model's)");
    add_llama_option(cmd, "--chat-template", flags.chat_template,
                     "a chat template to use instead of the model's: Jinja text, or with "
                     "--no-jinja the name of one of llama.cpp's built-in templates");
    add_llama_option(cmd, "--chat-template-file", flags.chat_template_file,
                     "Jinja chat template to use instead of the model's");
    add_llama_switch(cmd, "--jinja", flags.jinja,
                     "render chat templates with Jinja (default; --no-jinja: llama.cpp's "
                     "built-in templates, without tools)");
    add_reasoning_option(cmd, flags.reasoning,
                         "thinking in chat: on, off, or auto (the template's default), as a "
                         "request's chat_template_kwargs.enable_thinking sets it (-rea)");
    add_llama_option(cmd, "--reasoning-format", flags.reasoning_format,
                     "deepseek or auto: a reply's thinking goes to reasoning_content; none: it "
                     "stays in the content (deepseek-legacy, both at once, is not supported)")
        ->check(CLI::IsMember({"none", "deepseek", "auto"}))
        ->capture_default_str();
    add_llama_option(cmd, "--chat-template-kwargs", flags.chat_template_kwargs,
                     "a JSON object of variables every chat template gets; a request's own "
                     "chat_template_kwargs replace them by name");
    add_llama_option(cmd, "--reasoning-effort", flags.reasoning_effort,
                     "the reasoning_effort variable of the chat template (minimal, low, medium, "
                     "high, xhigh, max), or default: the template's own")
        ->capture_default_str();
    cmd.add_flag("--reasoning-preserve{true},--no-reasoning-preserve{false}",
                 flags.reasoning_preserve,
                 "the template keeps the thinking of earlier turns (preserve_reasoning), where "
                 "it can; unset: the template's default")
        ->envname(llama_env("--reasoning-preserve"));
    add_llama_switch(cmd, "--prefill-assistant", flags.prefill_assistant,
                     "continue a chat's last message when it is the assistant's (default; "
                     "--no-prefill-assistant: answer it with a turn of its own)");
    add_llama_switch(
        cmd, "--kv-unified", flags.kv_unified,
        "slots share one KV cache, and a request may use all of -c; "
        "--no-kv-unified gives each slot -c / --parallel (faster with many busy "
        "slots). Default, as llama-server: per slot when --parallel is given, else shared");
    cmd.add_flag("--deterministic", flags.deterministic,
                 "same request, same bits: one at a time, no prefix reuse, no drafts");
    cmd.add_option("--max-queue", flags.max_queue, "requests waiting for a slot before 429")
        ->capture_default_str();
    cmd.add_option("--min-prefill-rows", flags.min_prefill_rows,
                   "widen short prompt chunks to this many tokens for the CPU's fast attention "
                   "kernel (0 = off)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd.add_option("--prefill-chunk", flags.prefill_chunk,
                   "most prompt tokens one sequence computes per decode call")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd.add_option("--batch-strategy", flags.batch_strategy,
                   "how a decode call is split between streams and prompts: decode_maximal, "
                   "prefill_priority, balanced or first_token_first")
        ->capture_default_str();
}

// --chat-template-kwargs, --reasoning-effort and --reasoning-preserve, as llama-server merges
// them: the later flags win over the object's keys of the same name.
Result<std::map<std::string, std::string>> template_variables(const ServeFlags& flags) {
    std::map<std::string, std::string> out;
    if (!flags.chat_template_kwargs.empty()) {
        const auto object = nlohmann::json::parse(flags.chat_template_kwargs, nullptr, false);
        if (!object.is_object())
            return fail(ErrorCode::invalid_argument, "must be a JSON object",
                        "--chat-template-kwargs");
        for (const auto& [name, value] : object.items()) out[name] = value.dump();
    }
    if (flags.reasoning_effort != "default")
        out["reasoning_effort"] = nlohmann::json(flags.reasoning_effort).dump();
    const std::string& keep = flags.reasoning_preserve;
    if (keep == "true" || keep == "1" || keep == "on")
        out["preserve_reasoning"] = "true";
    else if (keep == "false" || keep == "0" || keep == "off")
        out["preserve_reasoning"] = "false";
    else if (!keep.empty())
        return fail(ErrorCode::invalid_argument, "must be true or false",
                    "--reasoning-preserve=" + keep);
    return out;
}

namespace {

// As in llama-server: a --parallel given on the command line splits the cache into one per slot,
// where decode attends to its own slot's cells only (from 2 busy slots on faster; repeated prompts
// at 4 clients 5-9%: docs/performance.md); -np auto (4 slots) shares one. --kv-unified and
// --no-kv-unified decide either way.
EngineOptions::KvLayout kv_layout(const ServeFlags& flags) {
    using Layout = EngineOptions::KvLayout;
    if (flags.kv_unified != 0) return flags.kv_unified > 0 ? Layout::unified : Layout::per_slot;
    return flags.slots > 1 ? Layout::per_slot : Layout::automatic;
}

}  // namespace

ModelSpec without_draft(ModelSpec spec) {
    spec.draft_path.clear();
    spec.engine.speculative.draft = {};
    if (spec.engine.speculative.kinds == DraftKinds{DraftKind::draft_simple})
        spec.engine.speculative.kinds = {DraftKind::lookup};
    else
        spec.engine.speculative.kinds.remove(DraftKind::draft_simple);
    return spec;
}

Result<ModelSpec> model_defaults(const ServeFlags& flags) {
    auto context = context_options(flags.context);
    if (!context) return std::unexpected(context.error());
    auto strategy = llamapp::batch_strategy(flags.batch_strategy);
    if (!strategy) return std::unexpected(strategy.error());
    auto sampling = sampling_params(flags.sampling);
    if (!sampling) return std::unexpected(sampling.error());
    if (flags.slots == 0 || flags.slots < -1)
        return fail(ErrorCode::invalid_argument, "must be -1 (auto) or at least 1", "--parallel");
    ModelSpec s;
    s.model = model_options(flags.common);
    s.engine.context = *context;
    // -c is the whole cache, as in llama-server; on the unified cache any slot may use all.
    s.engine.context.n_seq_max = flags.slots < 0 ? 4 : flags.slots;
    s.engine.kv_layout = kv_layout(flags);
    s.engine.deterministic = flags.deterministic;
    s.engine.max_queued_requests = flags.max_queue;
    s.engine.min_prefill_rows = flags.min_prefill_rows;
    s.engine.prefill_chunk = flags.prefill_chunk;
    s.engine.strategy = *strategy;
    if (auto ok = apply_speculative(flags.speculative, s.engine); !ok)
        return std::unexpected(ok.error());
    s.draft_path = flags.speculative.draft_path;
    s.draft_model = draft_model_options(flags.speculative, s.model);
    s.defaults.sampling = *sampling;
    s.defaults.max_tokens = flags.n_predict < 0 ? -1 : flags.n_predict;
    if (flags.reasoning != "auto") s.defaults.enable_thinking = flags.reasoning == "on";
    s.defaults.split_reasoning = flags.reasoning_format != "none";
    s.defaults.prefill_assistant = flags.prefill_assistant;
    auto variables = template_variables(flags);
    if (!variables) return std::unexpected(variables.error());
    s.defaults.template_variables = std::move(*variables);
    if (flags.n_predict == 0)
        return fail(ErrorCode::invalid_argument, "must be -1 or at least 1", "--n-predict");
    if (flags.embeddings != 0) s.embed = flags.embeddings > 0;
    s.tags = flags.tags;
    if (!flags.pooling.empty()) {
        auto pooling = parse_pooling(flags.pooling);
        if (!pooling) return std::unexpected(pooling.error());
        s.engine.context.pooling = *pooling;
    }
    s.template_renderer = flags.jinja ? TemplateRenderer::jinja : TemplateRenderer::builtin;
    s.chat_template = flags.chat_template;
    if (!flags.chat_template_file.empty()) {
        auto text = read_text_file(flags.chat_template_file, "--chat-template-file");
        if (!text) return std::unexpected(text.error());
        s.chat_template = *text;
    }
    return s;
}

std::string keep_alive_of(const ServeFlags& flags) {
    return flags.sleep_idle_seconds >= 0 ? std::to_string(flags.sleep_idle_seconds)
                                         : flags.keep_alive;
}

void set_model_source(ModelSpec& spec, const std::string& what) {
    spec.hub = hub_model_ref(what);
    if (spec.hub) {
        spec.source = "hub";  // the manager finds it in the cache or pulls it on its first load
    } else {
        spec.path = what;
        spec.source = "path";
    }
}

}  // namespace llamapp::cli
