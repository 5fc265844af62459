// ModelRef: a model as a user names it on a command line or in a request: a GGUF file, a name
// from the models directory, or a Hugging Face hub reference in llama.cpp's `-hf` form.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "llamapp/error.hpp"

namespace llamapp {

struct HubRef {
    std::string repo;  // "owner/name"
    // What to take from the repository, at most one of the two: a file path inside it
    // ("sub/model-Q4_K_M.gguf"), or a quantization tag ("Q4_K_M") matched against its file
    // names. Neither: the repository's default choice (as llama.cpp's -hf picks one).
    std::string file;
    std::string quant;
    // "owner/name", "owner/name:Q4_K_M" or "owner/name:sub/model.gguf"; parses back to itself.
    std::string to_string() const;
};

enum class ModelRefKind { path, name, hub };

struct ModelRef {
    ModelRefKind kind = ModelRefKind::path;
    std::filesystem::path path;  // kind == path
    std::string name;            // kind == name: a file stem or alias, e.g. "qwen3-0.6b"
    HubRef hub;                  // kind == hub
};

// Reads what a user typed, without touching the file system (a caller that wants an existing
// file to win over a hub reference of the same spelling checks for the file first). In order:
//   - "owner/name[:what]" after "hf://", "hf:", "hf.co/", "huggingface.co/" or
//     "https://huggingface.co/" is a hub reference;
//   - text starting with '/', '.' or '~', or ending in ".gguf" with no ':' in it, is a path;
//   - "owner/name[:what]" is a hub reference, where `what` ending in ".gguf" names a file and
//     anything else is a quantization tag, but for Ollama's "latest" (the default choice);
//   - a single word (letters, digits, '.', '_', '-', and one ':' for a tag) is a name.
// Anything else fails with invalid_argument naming the part at fault. Hub parts are checked
// against the hub's own rules, and a file path may not climb out of its repository.
[[nodiscard]] Result<ModelRef> parse_model_ref(std::string_view text);

// True when `asked` names the hub model `have`, which resolved to `file` (empty while not in
// the cache): the same repository (case-insensitive, as the hub takes it) and either the same
// file, a quantization tag the file's name carries, or what `have` itself asked for.
[[nodiscard]] bool hub_ref_names(const HubRef& asked, const HubRef& have,
                                 const std::filesystem::path& file);

}  // namespace llamapp
