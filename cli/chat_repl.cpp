#include "chat_repl.hpp"

#include <fmt/core.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <tuple>

#include "chat_input.hpp"
#include "chat_saves.hpp"
#include "llamapp/chat_stream.hpp"
#include "options.hpp"
#include "run_output.hpp"

namespace llamapp::cli {

namespace {

constexpr const char* help_text =
    R"(  /set                     show the settings
  /set system TEXT         the system message (empty: none)
  /set NAME VALUE          temperature, top_k, top_p, min_p, seed, repeat_penalty or
                           num_predict (tokens per reply, -1: no limit); Ollama's
                           /set parameter NAME VALUE too
  /set think, nothink      thinking on or off, on models that think
  /set verbose, quiet      the statistics line after each reply, or not
  /clear                   forget the conversation (the system message stays)
  /save NAME, /load NAME   keep the conversation and its KV; continue it later
  /bye                     leave (Ctrl-D too)
  /help                    this list
A line ending with \ continues on the next; """ opens and closes a message of several lines.
Ctrl-C stops a reply.
)";

const std::vector<std::string> command_names = {"/set", "/clear", "/save", "/load",
                                                "/bye", "/help",  "/exit", "/reset"};

// A line's first word and the rest, without the spaces between them.
std::pair<std::string, std::string> first_word(std::string_view line) {
    const std::size_t space = std::min(line.find(' '), line.size());
    const std::size_t rest = std::min(line.find_first_not_of(' ', space), line.size());
    return {std::string(line.substr(0, space)), std::string(line.substr(rest))};
}

// Prints a streamed reply: its thinking dimmed (or between markers without colour), a blank line,
// then its answer.
class ReplyPrinter {
  public:
    ReplyPrinter(bool show_thinking, bool color) : show_thinking_(show_thinking), color_(color) {}

    void print(const ChatDelta& delta) {
        if (!delta.reasoning_content.empty() && show_thinking_) {
            if (!thinking_) std::fputs(color_ ? "\x1b[2m" : "Thinking...\n", stdout);
            thinking_ = true;
            write(delta.reasoning_content);
        }
        if (!delta.content.empty()) {
            close_thinking();
            // The answer starts on a line of its own; its leading blank lines are the template's.
            std::string_view text = delta.content;
            if (!answered_) text.remove_prefix(std::min(text.find_first_not_of('\n'), text.size()));
            if (!text.empty()) answered_ = true;
            write(text);
        }
        std::fflush(stdout);
    }

    void end() {
        close_thinking();
        if (last_ != '\n') std::fputc('\n', stdout);
        std::fflush(stdout);
    }

  private:
    void write(std::string_view text) {
        if (text.empty()) return;
        std::fwrite(text.data(), 1, text.size(), stdout);
        last_ = text.back();
    }
    void close_thinking() {
        if (!thinking_) return;
        thinking_ = false;
        if (last_ != '\n') std::fputc('\n', stdout);
        std::fputs(color_ ? "\x1b[0m\n" : "...done thinking.\n\n", stdout);
        last_ = '\n';
    }

    bool show_thinking_;
    bool color_;
    bool thinking_ = false;
    bool answered_ = false;
    char last_ = '\n';
};

class ChatRepl {
  public:
    ChatRepl(Engine& engine, const Model& model, ChatTemplate tmpl, const ChatRunOptions& options,
             const GenerateOptions& generate)
        : engine_(engine),
          model_(model),
          template_(std::move(tmpl)),
          options_(options),
          generate_(generate),
          thinking_(options.thinking) {
        set_system(options.system);
    }

    // One user turn and the model's reply; false when it failed (the turn is then forgotten).
    bool send(const std::string& text, InterruptScope& interrupts);
    // A line starting with '/'; false when it asks to leave.
    bool command(const std::string& line);
    int status() const { return status_; }

  private:
    bool set(const std::string& args);
    bool set_parameter(const std::string& name, const std::string& value);
    void show_settings() const;
    void set_system(const std::string& text);
    void save(const std::string& name);
    void load(const std::string& name);
    std::optional<Completion> stream(RequestHandle& handle, const ChatPrompt& prompt,
                                     ChatMessage& reply);

    Engine& engine_;
    const Model& model_;
    ChatTemplate template_;
    ChatRunOptions options_;
    GenerateOptions generate_;
    bool thinking_;
    std::vector<ChatMessage> history_;
    int status_ = 0;
};

void ChatRepl::set_system(const std::string& text) {
    const bool has = !history_.empty() && history_.front().role == "system";
    if (text.empty()) {
        if (has) history_.erase(history_.begin());
    } else if (has) {
        history_.front().content = text;
    } else {
        history_.insert(history_.begin(), ChatMessage{.role = "system", .content = text});
    }
    options_.system = text;
}

std::optional<Completion> ChatRepl::stream(RequestHandle& handle, const ChatPrompt& prompt,
                                           ChatMessage& reply) {
    const bool color =
        options_.show_thinking && ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
    ReplyPrinter printer(options_.show_thinking, color);
    ChatStreamParser parser(prompt);
    std::optional<Completion> done;
    EngineEvent event;
    while (handle.next(event)) {
        if (event.final())
            done = std::move(event.completion);
        else if (!options_.json)
            printer.print(parser.push(event.piece.text));
    }
    const bool complete = done && done->generation.finish_reason == FinishReason::stop;
    const ChatDelta rest = parser.finish(complete);
    if (!options_.json) {
        printer.print(rest);
        printer.end();
    }
    reply = parser.message();
    return done;
}

bool ChatRepl::send(const std::string& text, InterruptScope& interrupts) {
    history_.push_back({.role = "user", .content = text});
    CancellationToken cancel;
    EngineRequest request;
    request.options = generate_;
    request.options.cancel = cancel;
    request.session = "chat";
    ChatRenderOptions render;
    render.enable_thinking = thinking_;
    interrupts.arm(&cancel);
    auto submission = engine_.submit_chat(template_, history_, std::move(request), render);
    ChatMessage reply;
    std::optional<Completion> done;
    if (submission) done = stream(submission->handle, submission->prompt, reply);
    interrupts.arm(nullptr);
    const Error* error = !submission ? &submission.error()
                         : !done     ? nullptr
                                 : (done->generation.error ? &*done->generation.error : nullptr);
    if (!submission || !done || (error && !cancel.cancelled())) {
        history_.pop_back();
        report(error ? *error : Error{ErrorCode::internal, "the reply ended without a result"});
        status_ = 1;
        return false;
    }
    if (options_.json) {
        nlohmann::json out = completion_json(*done);
        out["content"] = reply.content;
        out["reasoning_content"] = reply.reasoning_content;
        std::printf("%s\n", out.dump(2).c_str());
    } else if (options_.stats) {
        print_summary(*done);
    }
    // A reply stopped by Ctrl-C or a limit stays, as far as it came.
    history_.push_back(std::move(reply));
    if (cancel.cancelled()) status_ = 128 + SIGINT;
    return true;
}

bool ChatRepl::command(const std::string& line) {
    const auto [name, args] = first_word(line);
    if (name == "/bye" || name == "/exit" || name == "/quit") return false;
    if (name == "/help" || name == "/?") {
        std::fputs(help_text, stderr);
    } else if (name == "/clear" || name == "/reset") {
        history_.clear();
        set_system(options_.system);
        std::fputs("The conversation is cleared.\n", stderr);
    } else if (name == "/set") {
        if (!set(args)) std::fputs("/help lists what /set takes\n", stderr);
    } else if (name == "/save" || name == "/load") {
        if (args.empty())
            std::fprintf(stderr, "%s takes a name\n", name.c_str());
        else if (name == "/save")
            save(args);
        else
            load(args);
    } else {
        std::fprintf(stderr, "unknown command '%s'; /help lists them\n", name.c_str());
    }
    return true;
}

bool ChatRepl::set(const std::string& args) {
    if (args.empty()) {
        show_settings();
        return true;
    }
    auto [word, rest] = first_word(args);
    if (word == "system") {
        set_system(rest);
        std::fputs(
            rest.empty() ? "The system message is removed.\n" : "The system message is set.\n",
            stderr);
        return true;
    }
    if (rest.empty() && (word == "think" || word == "nothink")) {
        thinking_ = word == "think";
        std::fprintf(stderr, "Thinking is %s.\n", thinking_ ? "on" : "off");
        return true;
    }
    if (rest.empty() && (word == "verbose" || word == "quiet")) {
        options_.stats = word == "verbose";
        return true;
    }
    if (word == "parameter") std::tie(word, rest) = first_word(rest);
    return !rest.empty() && set_parameter(word, rest);
}

bool ChatRepl::set_parameter(const std::string& name, const std::string& value) {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool number = end != value.c_str() && *end == '\0';
    const bool integer = number && v == static_cast<double>(static_cast<long long>(v));
    GenerateOptions candidate = generate_;
    SamplingParams& s = candidate.sampling;
    if (!number) {
        std::fprintf(stderr, "'%s' is not a number\n", value.c_str());
        return true;
    }
    if (name == "temperature") {
        s.temperature = static_cast<float>(v);
    } else if (name == "top_p") {
        s.top_p = static_cast<float>(v);
    } else if (name == "min_p") {
        s.min_p = static_cast<float>(v);
    } else if (name == "repeat_penalty") {
        s.repeat_penalty = static_cast<float>(v);
    } else if (integer && name == "top_k" && v >= 0 && v < 1e9) {
        s.top_k = static_cast<int>(v);
    } else if (integer && name == "seed" && v >= -1 && v <= 0xFFFFFFFF) {
        s.seed = v < 0 ? random_seed : static_cast<std::uint32_t>(v);
    } else if (integer && (name == "num_predict" || name == "max_tokens") && v >= -1 && v < 1e9) {
        candidate.max_tokens = static_cast<int>(v);
    } else {
        std::fprintf(stderr, "cannot set '%s' to '%s'\n", name.c_str(), value.c_str());
        return false;
    }
    if (auto ok = candidate.validate(); !ok) {
        report(ok.error());
        return true;
    }
    generate_ = std::move(candidate);
    std::fprintf(stderr, "Set '%s' to '%s'.\n", name.c_str(), value.c_str());
    return true;
}

void ChatRepl::show_settings() const {
    const SamplingParams& s = generate_.sampling;
    std::fprintf(stderr,
                 "  system          %s\n  thinking        %s\n  temperature     %g\n"
                 "  top_k           %d\n  top_p           %g\n  min_p           %g\n"
                 "  repeat_penalty  %g\n  num_predict     %d\n",
                 options_.system.empty() ? "(none)" : options_.system.c_str(),
                 thinking_ ? "on" : "off", s.temperature, s.top_k, s.top_p, s.min_p,
                 s.repeat_penalty, generate_.max_tokens);
}

void ChatRepl::save(const std::string& name) {
    auto path = chat_file(options_.chats_dir, name);
    if (!path) {
        report(path.error());
        return;
    }
    SavedChat chat{.model = model_.info().path.filename().string(), .messages = history_};
    std::string kv = "no KV yet";
    if (std::ranges::any_of(history_, [](const ChatMessage& m) { return m.role != "system"; })) {
        // Into the KV store like any entry; its directory tier keeps it across runs.
        auto snapshot = engine_.save_slot(0);
        if (snapshot) {
            chat.tokens = snapshot->tokens;
            kv = fmt::format("its KV of {} tokens", chat.tokens.size());
        } else {
            kv = "without its KV: " + snapshot.error().describe();
        }
    }
    if (auto ok = write_chat(*path, chat); !ok) {
        report(ok.error());
        return;
    }
    std::fprintf(stderr, "Saved '%s' (%zu messages, %s) in %s\n", name.c_str(), history_.size(),
                 kv.c_str(), path->string().c_str());
}

void ChatRepl::load(const std::string& name) {
    auto path = chat_file(options_.chats_dir, name);
    auto chat = path ? read_chat(*path) : Result<SavedChat>(std::unexpected(path.error()));
    if (!chat) {
        report(chat.error());
        return;
    }
    const std::string model = model_.info().path.filename().string();
    if (chat->model != model)
        std::fprintf(stderr, "note: '%s' was saved with %s, not %s\n", name.c_str(),
                     chat->model.c_str(), model.c_str());
    history_ = std::move(chat->messages);
    options_.system = !history_.empty() && history_.front().role == "system"
                          ? history_.front().content
                          : std::string();
    (void)engine_.end_session("chat");  // none yet is fine
    std::string kv = "no KV was saved: the next reply computes the conversation";
    if (!chat->tokens.empty()) {
        auto restored = engine_.restore_slot(0, chat->tokens);
        kv = restored ? fmt::format("its KV of {} tokens restored in {:.0f} ms",
                                    restored->tokens.size(), restored->ms)
                      : fmt::format("its KV is not in the store ({}): the next reply computes it",
                                    restored.error().describe());
    }
    std::fprintf(stderr, "Loaded '%s' (%zu messages); %s\n", name.c_str(), history_.size(),
                 kv.c_str());
}

}  // namespace

std::filesystem::path default_chats_dir() {
    namespace fs = std::filesystem;
    if (const char* data = std::getenv("XDG_DATA_HOME"); data && *data)
        return fs::path(data) / "llamapp" / "chats";
    const char* home = std::getenv("HOME");
    return fs::path(home && *home ? home : ".") / ".local" / "share" / "llamapp" / "chats";
}

int run_chat(Engine& engine, const Model& model, const ChatRunOptions& options,
             const GenerateOptions& generate) {
    auto tmpl = ChatTemplate::create(model, options.template_source, MissingTemplate::chatml);
    if (!tmpl) return report(tmpl.error());
    if (tmpl->is_fallback())
        std::fprintf(stderr, "chat: the model has no chat template; using ChatML\n");
    ChatRepl repl(engine, model, std::move(*tmpl), options, generate);
    InterruptScope interrupts;
    if (!options.first_message.empty()) repl.send(options.first_message, interrupts);
    if (!options.interactive) {
        engine.shutdown();
        return repl.status();
    }
    const bool terminal = ::isatty(STDIN_FILENO);
    MessageInput input(terminal, command_names);
    std::fputs(terminal ? "Send a message (/? for help, Ctrl-D or /bye to leave)\n"
                        : "chat: type a message, Enter to send; /help lists the commands, Ctrl-D "
                          "quits\n",
               stderr);
    for (std::string message;;) {
        const MessageInput::Status status = input.read(message, interrupts);
        if (status == MessageInput::Status::end) break;
        if (status == MessageInput::Status::interrupted) {
            std::fputs("\nUse Ctrl-D or /bye to leave.\n", stderr);
            continue;
        }
        if (message.find_first_not_of(" \t\n") == message.npos) continue;
        if (message.starts_with('/')) {
            if (!repl.command(message)) break;
            continue;
        }
        repl.send(message, interrupts);
        if (interrupts.take() == SIGTERM) break;
    }
    engine.shutdown();  // saves per the policy and waits for the writes
    return 0;
}

}  // namespace llamapp::cli
