// The REPL's input: messages read with llama.cpp's console on a terminal (line editing, history,
// Tab completing the slash commands), plain lines otherwise; and Ctrl-C turned from the end of
// the process into an interruption of the reply, or of the line being typed.
#pragma once

#include <csignal>
#include <string>
#include <vector>

#include "llamapp/cancellation.hpp"

namespace llamapp::cli {

// While one lives, SIGINT and SIGTERM cancel `reply` (set with arm) instead of ending the
// process. They are installed without SA_RESTART, so that a read at the prompt returns. One at a
// time; the main thread's.
class InterruptScope {
  public:
    InterruptScope();
    ~InterruptScope();
    InterruptScope(const InterruptScope&) = delete;
    InterruptScope& operator=(const InterruptScope&) = delete;
    void arm(const CancellationToken* reply);  // null: none in progress
    // The signal that arrived since the last call (0: none), and forget it.
    int take();

  private:
    struct sigaction old_int_ {};
    struct sigaction old_term_ {};
};

class MessageInput {
  public:
    // `terminal`: stdin is one; the console takes it over (raw mode) until destroyed.
    MessageInput(bool terminal, std::vector<std::string> commands);
    ~MessageInput();
    MessageInput(const MessageInput&) = delete;
    MessageInput& operator=(const MessageInput&) = delete;

    enum class Status { message, interrupted, end };
    // One message: a line, lines joined by a trailing backslash, or the lines between """ and
    // """ (Ollama's multi-line input). The text has no trailing newline.
    Status read(std::string& message, InterruptScope& interrupts);

  private:
    Status read_line(std::string& line, InterruptScope& interrupts, bool continued);
    bool terminal_;
};

}  // namespace llamapp::cli
