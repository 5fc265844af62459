// Internal: llama-server's native reply shapes (/completion, /props), built from an engine
// completion the way its tools/server builds them, so that its clients read them unchanged.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "llamapp/engine.hpp"
#include "server/common/telemetry.hpp"

namespace llamapp::detail {

// What a native reply needs beyond the completion.
struct NativeReplyContext {
    std::string model;        // the id the reply names
    std::string prompt_text;  // the prompt detokenized with its special tokens
    int prompt_tokens = 0;    // tokens_evaluated
    int n_ctx = 0;            // the sequence's context, for "truncated"
    bool stream = false;
    bool return_tokens = false;        // the final object lists the generated token ids
    bool post_sampling_probs = false;  // probabilities as "prob", after the sampling chain
    std::size_t index = 0;             // of the prompt, when a request has several
};

// A prompt as llama-server shows it: detokenized with its special tokens.
std::string detokenized(const Tokenizer& tokenizer, const std::vector<Token>& tokens);

// llama-server's "__verbose" debug object (a request's `verbose`, or --verbose): the native final
// object of the reply, beside the protocol's own fields.
struct VerboseReply {
    GenerateOptions options;
    NativeReplyContext context;
};

// generation_settings: the sampling and limits a request ran with.
nlohmann::json generation_settings_json(const GenerateOptions& options, bool stream);

// The final object of /completion (streamed: its last chunk, whose content and tokens are
// empty since the chunks carried them).
nlohmann::json native_final_json(const Completion& done, const GenerateOptions& options,
                                 const NativeReplyContext& context);

// One streamed chunk; `predicted` counts the tokens generated so far.
nlohmann::json native_chunk_json(const StreamPiece& piece, int predicted,
                                 const NativeReplyContext& context);

// llama-server's `response_fields`: the final object reduced to these paths ("a/b" reaches
// into nested objects), keyed by the path as given. Paths that lead nowhere are left out.
nlohmann::json select_fields(const nlohmann::json& reply, const std::vector<std::string>& paths);

}  // namespace llamapp::detail
