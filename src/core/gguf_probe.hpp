// Checks a GGUF file before llama.cpp opens it, so bad files become typed errors, not aborts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "llamapp/error.hpp"

namespace llamapp::detail {

// One metadata key/value of a GGUF header. Arrays are summarized by their length: tokenizer
// vocabularies would otherwise dwarf everything else.
struct GgufEntry {
    enum class Kind { string, integer, real, boolean, array };
    std::string key;
    Kind kind = Kind::string;
    std::string text;          // string
    std::int64_t integer = 0;  // integer and boolean (0 or 1)
    double real = 0;
    std::size_t length = 0;  // array
};

struct GgufSummary {
    std::uint64_t file_size = 0;
    std::string architecture;  // general.architecture, empty when missing
    std::int64_t n_tensors = 0;
    std::string name;                 // general.name, may be empty
    bool has_chat_template = false;   // tokenizer.chat_template
    bool pools = false;               // <arch>.pooling_type says the model pools (an embedder)
    bool ranks = false;               // ... by rank: a reranker (its pooling gives scores)
    std::uint64_t n_params = 0;       // elements of this file's tensors
    int file_type = -1;               // general.file_type (llama_ftype), -1 when missing
    std::vector<GgufEntry> metadata;  // in the file's order
};

// llama.cpp's name of a general.file_type ("Q4_K_M", "F16"); "unknown" for others.
std::string file_type_name(int file_type);

// Errors: file_not_found, is_directory, io_error (unreadable), invalid_model_file (not GGUF,
// bad header, or tensor data extending past the end of the file).
Result<GgufSummary> probe_gguf(const std::filesystem::path& path);

}  // namespace llamapp::detail
