// Conversations kept by the REPL's /save and read back by /load: JSON files of the messages and
// of the tokens whose KV the store holds for them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "llamapp/llamapp.hpp"

namespace llamapp::cli {

struct SavedChat {
    std::string model;  // the model file's name, to say when another model loads it
    std::vector<ChatMessage> messages;
    std::vector<Token> tokens;  // what the saved KV holds; empty: no KV was saved
};

// A name (letters, digits, '.', '_', '-') is <dir>/<name>.json; a text with a '/' is a path.
// Errors: invalid_argument.
Result<std::filesystem::path> chat_file(const std::filesystem::path& dir, const std::string& name);
// Written whole or not at all (a temporary file renamed). Errors: io_error.
Result<void> write_chat(const std::filesystem::path& path, const SavedChat& chat);
// Errors: file_not_found, io_error, invalid_argument (not a saved conversation).
Result<SavedChat> read_chat(const std::filesystem::path& path);

}  // namespace llamapp::cli
