// `llamapp run`: one prompt streamed to stdout, --json for a machine-readable result, or
// --chat for an interactive multi-turn conversation.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "llama_flags.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

struct RunFlags {
    CommonFlags common;
    ContextFlags context;
    SamplingFlags sampling;
    CacheFlags cache;
    DraftFlags draft;
    std::string prompt;
    std::string prompt_file;
    std::vector<std::string> words;  // `run [MODEL] [PROMPT]`, as `ollama run` takes them
    int n_predict = 128;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool json = false;
    bool chat = false;
    std::string system;
    std::string chat_template_file;
    bool no_display_prompt = false;
};

// Ctrl-C stops the current generation instead of killing the process.
CancellationToken* g_interrupt = nullptr;
void on_sigint(int) {
    if (g_interrupt) {
        g_interrupt->cancel();
    } else {
        // Nothing to stop: behave like an ordinary Ctrl-C.
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
    }
}

nlohmann::json to_json(const Completion& c) {
    const Generation& g = c.generation;
    nlohmann::json out = {
        {"text", g.text},
        {"tokens", g.tokens},
        {"finish_reason", std::string(to_string(g.finish_reason))},
        {"usage",
         {{"prompt_tokens", g.usage.prompt_tokens},
          {"cached_tokens", g.usage.cached_tokens},
          {"completion_tokens", g.usage.completion_tokens}}},
        {"timings",
         {{"prefill_ms", g.timings.prefill_ms},
          {"prefill_tokens_per_s", g.timings.prefill_tokens_per_s},
          {"decode_ms", g.timings.decode_ms},
          {"decode_tokens_per_s", g.timings.decode_tokens_per_s},
          {"ttft_ms", g.timings.ttft_ms},
          {"total_ms", g.timings.total_ms}}},
    };
    out["cache"] = {{"reused_tokens", c.cache.reused_tokens},
                    {"source", std::string(to_string(c.cache.source))},
                    {"tier", c.cache.tier}};
    if (!g.stop_sequence.empty()) out["stop_sequence"] = g.stop_sequence;
    if (g.error)
        out["error"] = {{"code", std::string(to_string(g.error->code))},
                        {"message", g.error->describe()}};
    return out;
}

// Waits for a request's final event, printing its pieces to stdout as they come when `print`.
std::optional<Completion> stream_reply(RequestHandle& handle, bool print) {
    std::optional<Completion> done;
    EngineEvent event;
    while (handle.next(event)) {
        if (event.final()) {
            done = std::move(event.completion);
        } else if (print) {
            std::fwrite(event.piece.text.data(), 1, event.piece.text.size(), stdout);
            std::fflush(stdout);
        }
    }
    return done;
}

// One line on stderr after the output: tokens, where the prompt's KV came from, speeds.
void print_summary(const Completion& done) {
    std::fflush(stdout);  // after the text, also when stdout is a pipe
    const Generation& g = done.generation;
    std::string cache = "cold";
    if (done.cache.reused_tokens > 0) {
        cache = fmt::format("{} cached ({}{}{})", done.cache.reused_tokens,
                            to_string(done.cache.source), done.cache.tier.empty() ? "" : ": ",
                            done.cache.tier);
    }
    const std::string drafts =
        done.draft_tokens > 0
            ? fmt::format(", drafts {} of {} kept", done.draft_accepted, done.draft_tokens)
            : "";
    std::fprintf(stderr,
                 "[%d prompt tokens, %s, %d generated, ttft %.1f ms, prefill %.1f tok/s, decode "
                 "%.1f tok/s%s, %s]\n",
                 g.usage.prompt_tokens, cache.c_str(), g.usage.completion_tokens, g.timings.ttft_ms,
                 g.timings.prefill_tokens_per_s, g.timings.decode_tokens_per_s, drafts.c_str(),
                 std::string(to_string(g.finish_reason)).c_str());
}

// Each turn resends the whole conversation to the engine under one session, so the sequence
// keeps the history's KV and a turn computes only its new tokens (with --cache-disk the system
// prompt stays warm across runs too).
int run_chat(Engine& engine, const Model& model, const RunFlags& flags,
             const GenerateOptions& options) {
    std::string override_source;
    if (!flags.chat_template_file.empty()) {
        auto text = read_text_file(flags.chat_template_file, "--chat-template-file");
        if (!text) return report(text.error());
        override_source = *text;
    }
    auto tmpl = ChatTemplate::create(model, override_source, MissingTemplate::chatml);
    if (!tmpl) return report(tmpl.error());
    if (tmpl->is_fallback())
        std::fprintf(stderr, "chat: the model has no chat template; using ChatML\n");
    std::vector<ChatMessage> history;
    if (!flags.system.empty()) history.push_back({.role = "system", .content = flags.system});
    std::string line;
    std::fprintf(stderr,
                 "chat: type a message, Enter to send; /reset clears history, Ctrl-D quits\n");
    while (true) {
        std::fprintf(stderr, "> ");
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
        if (line == "/reset") {
            history.resize(flags.system.empty() ? 0 : 1);
            continue;
        }
        history.push_back({.role = "user", .content = line});
        CancellationToken cancel;
        g_interrupt = &cancel;
        EngineRequest request;
        request.options = options;
        request.options.cancel = cancel;
        request.session = "chat";
        auto submission = engine.submit_chat(*tmpl, history, std::move(request));
        std::optional<Completion> done;
        if (submission) done = stream_reply(submission->handle, true);
        g_interrupt = nullptr;
        std::fputc('\n', stdout);
        const Generation* reply = done ? &done->generation : nullptr;
        if (!reply || reply->error) {
            history.pop_back();
            if (!submission)
                report(submission.error());
            else if (reply)
                report(*reply->error);
            continue;
        }
        print_summary(*done);
        history.push_back(ChatTemplate::parse(reply->text, submission->prompt,
                                              reply->finish_reason == FinishReason::stop));
    }
    engine.shutdown();  // saves per the policy and waits for the writes
    return 0;
}

// `run MODEL PROMPT`: the first word is the model unless -m or -hf named one, the next the
// prompt; either may also come as a flag, not both.
Result<void> take_words(RunFlags& flags) {
    auto word = flags.words.begin();
    const bool model_flag = !flags.common.model_path.empty() || !flags.common.hf_refs.empty();
    if (word != flags.words.end() && !model_flag) flags.common.model_path = *word++;
    if (word != flags.words.end()) {
        if (!flags.prompt.empty() || !flags.prompt_file.empty())
            return fail(ErrorCode::invalid_argument,
                        "the prompt is given twice: as a word and with -p or -f", *word);
        flags.prompt = *word++;
    }
    if (word != flags.words.end())
        return fail(ErrorCode::invalid_argument,
                    "run takes MODEL and PROMPT; quote a prompt of several words", *word);
    return {};
}

// The prompt and the generation options from the flags.
Result<std::pair<std::string, GenerateOptions>> run_inputs(const RunFlags& flags) {
    auto sampling = sampling_params(flags.sampling);
    if (!sampling) return std::unexpected(sampling.error());
    std::string prompt = flags.prompt;
    if (!flags.prompt_file.empty()) {
        auto text = read_text_file(flags.prompt_file, "--file");
        if (!text) return std::unexpected(text.error());
        prompt = *text;
    }
    if (prompt.empty() && flags.prompt_file.empty() && !flags.chat) prompt = "Once upon a time";
    GenerateOptions options;
    options.sampling = *sampling;
    options.max_tokens = flags.n_predict;
    options.stop = flags.stop;
    options.ignore_eos = flags.ignore_eos;
    if (auto ok = options.validate(); !ok) return std::unexpected(ok.error());
    return std::pair{std::move(prompt), std::move(options)};
}

// One completion of `prompt`, streamed to stdout (or printed as JSON at the end).
int run_once(Engine& engine, const RunFlags& flags, std::string prompt, GenerateOptions options) {
    CancellationToken cancel;
    g_interrupt = &cancel;
    options.cancel = cancel;
    if (!flags.json && !flags.no_display_prompt) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    }
    EngineRequest request;
    request.options = options;
    auto handle = engine.submit(prompt, std::move(request));
    if (!handle) return report(handle.error());
    std::optional<Completion> done = stream_reply(*handle, !flags.json);
    g_interrupt = nullptr;
    engine.shutdown();  // saves per the policy and waits for the writes
    if (!done) return report(Error{ErrorCode::internal, "the request ended without a result", {}});
    const Generation& result = done->generation;
    if (flags.json) {
        std::cout << to_json(*done).dump(2) << "\n";
    } else {
        std::fputc('\n', stdout);
        print_summary(*done);
    }
    if (result.finish_reason == FinishReason::error) return report(*result.error);
    // Interrupted is not success: 128 + SIGINT, what shells report for a Ctrl-C'd command, so a
    // script can tell the two apart.
    if (cancel.cancelled()) return 128 + SIGINT;
    return 0;
}

int run(RunFlags& flags) {
    if (auto ok = take_words(flags); !ok) return report(ok.error());
    auto inputs = run_inputs(flags);
    if (!inputs) return report(inputs.error());
    auto& [prompt, options] = *inputs;
    auto ctx_options = context_options(flags.context);
    if (!ctx_options) return report(ctx_options.error());
    auto model = load_model(flags.common);
    if (!model) return report(model.error());
    std::signal(SIGINT, on_sigint);
    // One slot of an engine: the same path as the server, with the KV snapshot store, so a
    // prompt run before (in this process or, with --cache-disk, an earlier one) starts warm.
    auto store = open_kv_store(flags.cache);
    if (!store) return report(store.error());
    EngineOptions engine_options;
    engine_options.context = *ctx_options;
    engine_options.context.n_seq_max = 1;
    engine_options.kv_store = *store;
    apply_draft(flags.draft, engine_options);
    auto engine = Engine::create(*model, std::move(engine_options));
    if (!engine) return report(engine.error());
    if (flags.chat) return run_chat(*engine, *model, flags, options);
    return run_once(*engine, flags, std::move(prompt), std::move(options));
}

}  // namespace

Runner add_run(CLI::App& app) {
    auto flags = std::make_shared<RunFlags>();
    CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt (or chat with --chat)");
    add_common(*cmd, flags->common);
    add_context(*cmd, flags->context);
    add_sampling(*cmd, flags->sampling);
    add_constraints(*cmd, flags->sampling);
    add_cache(*cmd, flags->cache);
    add_draft(*cmd, flags->draft);
    cmd->add_option("words", flags->words,
                    "MODEL (a file, a name from `llamapp ls`, or a hub owner/repo[:QUANT]) and "
                    "PROMPT, instead of -m and -p")
        ->expected(0, 2);
    cmd->add_option("-p,--prompt", flags->prompt, "prompt text (default: a story opening)");
    cmd->add_option("-f,--file", flags->prompt_file, "read the prompt from a file");
    add_llama_option(*cmd, "--n-predict", flags->n_predict,
                     "tokens to generate (-1 = until the context is full)")
        ->capture_default_str();
    cmd->add_option("--stop", flags->stop, "stop string (repeatable)");
    cmd->add_flag("--ignore-eos", flags->ignore_eos,
                  "keep generating past end-of-generation tokens");
    cmd->add_flag("--json", flags->json, "print one JSON object with text, usage and timings");
    cmd->add_flag("--chat", flags->chat, "interactive multi-turn chat using the model's template");
    cmd->add_option("--system", flags->system, "system message for --chat");
    cmd->add_option("--chat-template-file", flags->chat_template_file,
                    "Jinja chat template to use instead");
    cmd->add_flag("--no-display-prompt", flags->no_display_prompt,
                  "do not echo the prompt before the output");

    return [flags]() -> int { return run(*flags); };
}

}  // namespace llamapp::cli
