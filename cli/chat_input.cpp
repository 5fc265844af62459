#include "chat_input.hpp"

#include <console.h>  // llama.cpp's common library

#include <atomic>
#include <clocale>
#include <cstdio>
#include <iostream>

namespace llamapp::cli {

namespace {

std::atomic<int> g_signal{0};
std::atomic<const CancellationToken*> g_reply{nullptr};
std::vector<std::string> g_commands;  // for Tab; set before the console reads

void on_signal(int signal) {
    g_signal.store(signal);
    if (const CancellationToken* reply = g_reply.load()) reply->cancel();  // an atomic store
}

// Tab on a line that starts a command completes it when one command has that start.
std::vector<std::pair<std::string, std::size_t>> complete_command(std::string_view line,
                                                                  std::size_t) {
    std::vector<std::pair<std::string, std::size_t>> found;
    if (line.empty() || line.front() != '/' || line.find(' ') != line.npos) return found;
    for (const std::string& c : g_commands)
        if (c.starts_with(line)) found.emplace_back(c + " ", c.size() + 1);
    if (found.size() != 1) found.clear();
    return found;
}

}  // namespace

InterruptScope::InterruptScope() {
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
}

InterruptScope::~InterruptScope() {
    g_reply.store(nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
}

void InterruptScope::arm(const CancellationToken* reply) {
    g_reply.store(reply);
}

int InterruptScope::take() {
    return g_signal.exchange(0);
}

MessageInput::MessageInput(bool terminal, std::vector<std::string> commands) : terminal_(terminal) {
    g_commands = std::move(commands);
    if (!terminal_) return;
    console::init(/*use_simple_io=*/false, /*use_advanced_display=*/false);
    console::set_completion_callback(complete_command);
    std::setlocale(LC_NUMERIC, "C");  // the console set the locale; numbers stay C's
}

MessageInput::~MessageInput() {
    if (terminal_) console::cleanup();
}

MessageInput::Status MessageInput::read_line(std::string& line, InterruptScope& interrupts,
                                             bool continued) {
    line.clear();
    if (!terminal_) {
        std::fputs(continued ? "... " : "> ", stderr);
        if (std::getline(std::cin, line)) return Status::message;
        const int signal = interrupts.take();
        if (signal == SIGINT) std::cin.clear();  // the interrupted read failed; go on reading
        return signal == SIGINT ? Status::interrupted : Status::end;
    }
    std::fflush(stdout);  // the reply before the prompt; the console writes to the terminal itself
    console::log("%s", continued ? "... " : ">>> ");
    console::flush();
    // The console reads until Enter; a trailing backslash asks for another line (its "more").
    std::string part;
    bool more = true;
    while (more) {
        more = console::readline(part, false);
        line += part;
        if (const int signal = interrupts.take()) {
            std::clearerr(stdin);  // the interrupted read left stdin's error flag set
            return signal == SIGINT ? Status::interrupted : Status::end;
        }
        if (!more && part.empty() && line.empty()) return Status::end;  // Ctrl-D
    }
    if (line.ends_with("\n")) line.pop_back();
    return Status::message;
}

MessageInput::Status MessageInput::read(std::string& message, InterruptScope& interrupts) {
    Status status = read_line(message, interrupts, false);
    if (status != Status::message || !message.starts_with(R"(""")")) return status;
    // """ opens a message of several lines, closed by a line that ends with """.
    message.erase(0, 3);
    std::string line = message;
    message.clear();
    for (bool first = true; !line.ends_with(R"(""")"); first = false) {
        if (!first || !line.empty()) message += line + "\n";
        status = read_line(line, interrupts, true);
        if (status != Status::message) return status;
    }
    line.resize(line.size() - 3);
    message += line;
    return Status::message;
}

}  // namespace llamapp::cli
