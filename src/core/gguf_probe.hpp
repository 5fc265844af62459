// Checks a GGUF file before llama.cpp opens it, so bad files become typed errors, not aborts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "llamapp/error.hpp"

namespace llamapp::detail {

struct GgufSummary {
    std::uint64_t file_size = 0;
    std::string architecture;  // general.architecture, empty when missing
    std::int64_t n_tensors = 0;
    std::string name;                // general.name, may be empty
    bool has_chat_template = false;  // tokenizer.chat_template
    bool pools = false;              // <arch>.pooling_type says the model pools (an embedder)
    bool ranks = false;              // ... by rank: a reranker (its pooling gives scores)
};

// Errors: file_not_found, is_directory, io_error (unreadable), invalid_model_file (not GGUF,
// bad header, or tensor data extending past the end of the file).
Result<GgufSummary> probe_gguf(const std::filesystem::path& path);

}  // namespace llamapp::detail
