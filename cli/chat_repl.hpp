// The chat of `llamapp run` on a model with a chat template: a first message from the command
// line or stdin, then, with --chat or on a terminal, a REPL: line editing and history
// (llama.cpp's console), slash commands (/help lists them), thinking shown dimmed and apart, and
// conversations saved and loaded with their KV (/save, /load).
#pragma once

#include <filesystem>
#include <string>

#include "llamapp/llamapp.hpp"

namespace llamapp::cli {

struct ChatRunOptions {
    std::string system;
    std::string template_source;      // replaces the model's template when not empty
    bool thinking = true;             // ChatRenderOptions::enable_thinking (--reasoning off: false)
    std::string first_message;        // sent before any input is read; empty: none
    bool interactive = true;          // read turns from stdin (after the first message)
    bool show_thinking = true;        // print the reply's thinking (dimmed on a terminal)
    bool json = false;                // one reply, printed as a JSON object
    bool stats = true;                // the summary line on stderr after each reply
    std::filesystem::path chats_dir;  // where /save and /load keep conversations
};

// Runs the chat to its end; the process's exit status. Thread: the engine's owner. Installs
// its own SIGINT/SIGTERM handling for its duration: Ctrl-C stops a reply, or at the prompt
// says how to leave.
int run_chat(Engine& engine, const Model& model, const ChatRunOptions& options,
             const GenerateOptions& generate);

// $XDG_DATA_HOME/llamapp/chats, else ~/.local/share/llamapp/chats.
std::filesystem::path default_chats_dir();

}  // namespace llamapp::cli
