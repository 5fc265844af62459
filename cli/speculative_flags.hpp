// Speculative decoding flags: llama-server's --spec-* names for its n-gram kinds, and llamapp's
// prompt lookup (the default).
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
};

void add_speculative(CLI::App& app, SpeculativeFlags& flags);
// The kinds named by --spec-type ("none": no drafts), then the checks SpeculativeOptions makes.
Result<void> apply_speculative(const SpeculativeFlags& flags, EngineOptions& options);

}  // namespace llamapp::cli
