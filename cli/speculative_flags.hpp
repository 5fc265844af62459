// Speculative decoding flags: llama-server's --spec-* names for its n-gram kinds and its draft
// model, and llamapp's prompt lookup (the default).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "llamapp/llamapp.hpp"

namespace llamapp::cli {

struct SpeculativeFlags {
    SpeculativeOptions options;      // the numbers, llamapp's defaults until a flag sets them
    std::vector<std::string> types;  // --spec-type, comma lists; empty: the default kinds
    bool llama_default = false;      // --spec-default: llama-server's ngram-mod preset
    std::string draft_path;          // -md
    int draft_gpu_layers = -1;       // -ngld
    std::vector<std::string> draft_devices;  // -devd; empty: the model's
    std::string draft_type_k = "f16";
    std::string draft_type_v = "f16";
    float p_split = 0.1f;  // taken for llama-server's command lines; no pinned drafter uses it
};

void add_speculative(CLI::App& app, SpeculativeFlags& flags);
// The kinds named by --spec-type ("none": no drafts), then the checks SpeculativeOptions makes.
// -md adds draft-simple to the kinds; --spec-type draft-simple needs -md.
Result<void> apply_speculative(const SpeculativeFlags& flags, EngineOptions& options);
// The draft model's load options: -ngld and -devd over the model's own.
ModelOptions draft_model_options(const SpeculativeFlags& flags, const ModelOptions& model);

}  // namespace llamapp::cli
