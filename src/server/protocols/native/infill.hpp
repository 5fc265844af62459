// Internal: llama-server's /infill prompt, for code models with fill-in-the-middle tokens.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "llamapp/tokenizer.hpp"

namespace llamapp::detail {

struct InfillSizes {
    int n_batch = 0;    // the prefix and suffix are cut to fit one decode call
    int n_ctx = 0;      // the extra files fill what the context leaves
    int n_predict = 0;  // room kept for the reply
};

// The body's input_prefix, input_suffix (text or token ids), optional prompt (text after the
// prefix) and input_extra ([{"filename", "text"}], other files of the project) laid out as
// llama-server lays them out: the extra files in the repository-level pattern, then prefix,
// suffix and middle markers. Throws HttpException: 501 for a model without the markers, 400 for
// a field of the wrong type.
std::vector<Token> infill_prompt(const nlohmann::json& body, const Tokenizer& tokenizer,
                                 const InfillSizes& sizes);

}  // namespace llamapp::detail
