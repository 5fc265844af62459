// `llamapp run`: a chat with a model that has a chat template (one reply to a prompt, or the
// REPL), or a raw completion of a prompt (--raw, or a model without a template); --json for a
// machine-readable result.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>

#include <unistd.h>

#include <cctype>
#include <iterator>

#include "chat_repl.hpp"
#include "commands.hpp"
#include "llama_flags.hpp"
#include "options.hpp"
#include "run_output.hpp"
#include "speculative_flags.hpp"

namespace llamapp::cli {

namespace {

struct RunFlags {
    CommonFlags common;
    ContextFlags context;
    SamplingFlags sampling;
    CacheFlags cache;
    SpeculativeFlags speculative;
    std::string prompt;
    std::string prompt_file;
    std::vector<std::string> words;  // `run [MODEL] [PROMPT]`, as `ollama run` takes them
    int n_predict = 128;             // a chat's replies are not cut unless -n is given
    bool n_predict_given = false;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool json = false;
    bool chat = false;
    bool raw = false;
    std::string reasoning = "auto";
    bool hide_thinking = false;
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
Result<std::pair<std::string, GenerateOptions>> run_inputs(const RunFlags& flags, bool chat) {
    auto sampling = sampling_params(flags.sampling);
    if (!sampling) return std::unexpected(sampling.error());
    std::string prompt = flags.prompt;
    if (!flags.prompt_file.empty()) {
        auto text = read_text_file(flags.prompt_file, "--file");
        if (!text) return std::unexpected(text.error());
        prompt = *text;
    }
    if (prompt.empty() && flags.prompt_file.empty() && !chat) prompt = "Once upon a time";
    GenerateOptions options;
    options.sampling = *sampling;
    options.max_tokens = chat && !flags.n_predict_given ? -1 : flags.n_predict;
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
        std::cout << completion_json(*done).dump(2) << "\n";
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

// A chat unless --raw: the model's template (or the one given) frames the prompt as a user turn.
// A model without a template chats only when --chat asks (with ChatML).
bool chats(const RunFlags& flags, const Model& model) {
    if (flags.raw) return false;
    return flags.chat || model.info().chat_template || !flags.chat_template_file.empty();
}

Result<ChatRunOptions> chat_options(const RunFlags& flags, std::string prompt) {
    ChatRunOptions o;
    o.system = flags.system;
    if (!flags.chat_template_file.empty()) {
        auto text = read_text_file(flags.chat_template_file, "--chat-template-file");
        if (!text) return std::unexpected(text.error());
        o.template_source = *text;
    }
    o.thinking = flags.reasoning != "off";
    o.first_message = std::move(prompt);
    // The REPL follows the prompt with --chat, and runs without one on a terminal; otherwise a
    // prompt gets one reply, and piped input is the prompt (as `echo hi | ollama run M`).
    o.interactive = flags.chat || (o.first_message.empty() && ::isatty(STDIN_FILENO));
    if (!o.interactive && o.first_message.empty()) {
        o.first_message.assign(std::istreambuf_iterator<char>(std::cin), {});
        // The newline that ends piped text is not part of the message.
        while (!o.first_message.empty() &&
               std::isspace(static_cast<unsigned char>(o.first_message.back())))
            o.first_message.pop_back();
        if (o.first_message.find_first_not_of(" \t\n") == std::string::npos)
            return fail(ErrorCode::invalid_argument,
                        "no prompt: give one (a word, -p or -f), pipe it in, or use --chat");
    }
    o.show_thinking = !flags.hide_thinking && !flags.json && ::isatty(STDOUT_FILENO);
    o.json = flags.json;
    if (o.json && o.interactive)
        return fail(ErrorCode::invalid_argument, "--json prints one reply: not with --chat");
    o.chats_dir = default_chats_dir();
    return o;
}

// One slot of an engine: the same path as the server, with the KV snapshot store, so a prompt
// run before (in this process or, with --cache-disk, an earlier one) starts warm. A REPL without
// --cache-disk keeps the KV of the conversations it saves (/save) in the chats directory, and
// only those.
Result<Engine> make_engine(const RunFlags& flags, const Model& model, const ChatRunOptions* chat) {
    auto ctx_options = context_options(flags.context);
    if (!ctx_options) return std::unexpected(ctx_options.error());
    CacheFlags cache = flags.cache;
    const bool saves_only = chat && chat->interactive && cache.disk_dir.empty();
    if (saves_only) cache.disk_dir = (chat->chats_dir / "kv").string();
    auto store = open_kv_store(cache);
    if (!store) return std::unexpected(store.error());
    EngineOptions engine_options;
    engine_options.context = *ctx_options;
    engine_options.context.n_seq_max = 1;
    engine_options.kv_store = *store;
    if (saves_only) {
        SavePolicy policy = (*store)->policy();
        policy.on_finish = policy.on_prefill = policy.on_evict = policy.on_shutdown = false;
        engine_options.save_policy = policy;
    }
    if (auto ok = apply_speculative(flags.speculative, engine_options); !ok)
        return std::unexpected(ok.error());
    if (!flags.speculative.draft_path.empty()) {
        auto draft =
            Model::load(flags.speculative.draft_path,
                        draft_model_options(flags.speculative, model_options(flags.common)));
        if (!draft) return std::unexpected(draft.error());
        engine_options.speculative.draft.model = std::move(*draft);
    }
    return Engine::create(model, std::move(engine_options));
}

int run(RunFlags& flags) {
    apply_log_level(flags.common);
    if (auto ok = connect_rpc(flags.common); !ok) return report(ok.error());
    if (flags.common.list_devices) {
        print_devices();
        return 0;
    }
    if (auto ok = take_words(flags); !ok) return report(ok.error());
    if (flags.raw && flags.chat)
        return report(Error{ErrorCode::invalid_argument, "--raw and --chat exclude each other"});
    auto model = load_model(flags.common, flags.context);
    if (!model) return report(model.error());
    const bool chat = chats(flags, *model);
    auto inputs = run_inputs(flags, chat);
    if (!inputs) return report(inputs.error());
    auto& [prompt, options] = *inputs;
    std::optional<ChatRunOptions> chat_run;
    if (chat) {
        auto o = chat_options(flags, std::move(prompt));
        if (!o) return report(o.error());
        chat_run = std::move(*o);
    }
    auto engine = make_engine(flags, *model, chat_run ? &*chat_run : nullptr);
    if (!engine) return report(engine.error());
    if (chat_run) return run_chat(*engine, *model, *chat_run, options);
    std::signal(SIGINT, on_sigint);
    return run_once(*engine, flags, std::move(prompt), std::move(options));
}

}  // namespace

Runner add_run(CLI::App& app) {
    auto flags = std::make_shared<RunFlags>();
    CLI::App* cmd = app.add_subcommand(
        "run",
        "chat with a model (one reply to a prompt, or a conversation), or complete a prompt");
    add_common(*cmd, flags->common);
    add_context(*cmd, flags->context);
    add_sampling(*cmd, flags->sampling);
    add_constraints(*cmd, flags->sampling);
    add_cache(*cmd, flags->cache);
    add_speculative(*cmd, flags->speculative);
    cmd->add_option("words", flags->words,
                    "MODEL (a file, a name from `llamapp ls`, or a hub owner/repo[:QUANT]) and "
                    "PROMPT, instead of -m and -p")
        ->expected(0, 2);
    cmd->add_option("-p,--prompt", flags->prompt,
                    "the prompt: a chat's first message, or the text --raw continues (default "
                    "then: a story opening)");
    cmd->add_option("-f,--file", flags->prompt_file, "read the prompt from a file");
    add_llama_option(*cmd, "--n-predict", flags->n_predict,
                     "tokens to generate (-1 = until the context is full; a chat's default)")
        ->capture_default_str()
        ->each([flags](const std::string&) { flags->n_predict_given = true; });
    cmd->add_option("--stop", flags->stop, "stop string (repeatable)");
    cmd->add_flag("--ignore-eos", flags->ignore_eos,
                  "keep generating past end-of-generation tokens");
    cmd->add_flag("--json", flags->json, "print one JSON object with text, usage and timings");
    cmd->add_flag("--chat", flags->chat,
                  "the conversation (REPL) after the prompt, also when not on a terminal; on a "
                  "model without a template, with ChatML");
    cmd->add_flag("--raw", flags->raw, "continue the prompt as text, without the chat template");
    cmd->add_option("--system", flags->system, "the chat's system message");
    add_reasoning_option(*cmd, flags->reasoning,
                         "thinking in chat: on, off, or auto (the template's default) (-rea)")
        ->capture_default_str();
    cmd->add_flag("--hide-thinking", flags->hide_thinking,
                  "do not print a reply's thinking (never printed when stdout is not a terminal)");
    cmd->add_option("--chat-template-file", flags->chat_template_file,
                    "Jinja chat template to use instead");
    cmd->add_flag("--no-display-prompt", flags->no_display_prompt,
                  "do not echo the prompt before the output");

    return [flags]() -> int { return run(*flags); };
}

}  // namespace llamapp::cli
