// Generation: options, streamed pieces and the final result of one completion.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llamapp/cancellation.hpp"
#include "llamapp/error.hpp"
#include "llamapp/sampling.hpp"
#include "llamapp/tokenizer.hpp"

namespace llamapp {

enum class FinishReason {
    stop,       // end-of-generation token or a stop string
    length,     // max_tokens reached or the context is full
    cancelled,  // token cancelled, deadline passed, or the consumer stopped the stream
    error,      // decoding failed; Generation::error says why
};
std::string_view to_string(FinishReason reason);

inline constexpr int max_top_logprobs = 20;

struct GenerateOptions {
    SamplingParams sampling;
    int max_tokens = 256;           // >= 1, or -1 for "until the context is full"
    std::vector<std::string> stop;  // stop strings; the text never contains any part of them
    bool ignore_eos = false;
    bool logprobs = false;  // report the log-probability of each chosen token
    int top_logprobs = 0;   // and of the n most likely alternatives (0..max_top_logprobs)
    // Report them as the sampling chain leaves them (after top-k, top-p, min-p, temperature...,
    // renormalized over the tokens left; llama-server's post_sampling_probs) instead of from the
    // raw logits. Greedy sampling reports the chosen token as certain.
    bool post_sampling_probs = false;
    TokenizeOptions tokenize;  // how a text prompt is tokenized
    // Control tokens whose text the reply shows (tool-call markup such as "<tool_call>"); other
    // control tokens produce no text.
    std::vector<Token> shown_control_tokens;
    bool reuse_prefix = true;  // keep the KV of a common prefix with the previous call
    CancellationToken cancel;
    std::chrono::milliseconds timeout{0};  // whole-generation deadline (0 = none)

    [[nodiscard]] Result<void> validate() const;
};

struct TokenProbability {
    Token token = no_token;
    std::string piece;
    float logprob = 0.0f;
};

struct TokenLogprobs {
    TokenProbability chosen;
    std::vector<TokenProbability> top;  // most likely first
};

struct StreamPiece {
    Token token = no_token;
    // Text that became final with this token. May be empty: bytes of an incomplete UTF-8
    // character, or text that might begin a stop string, are held back until resolved.
    std::string text;
    std::optional<TokenLogprobs> logprobs;
};

// Return false to stop generating (finish reason: cancelled).
using PieceCallback = std::function<bool(const StreamPiece&)>;

struct Usage {
    int prompt_tokens = 0;
    int cached_tokens = 0;  // prompt tokens whose KV was reused instead of computed
    int completion_tokens = 0;
};

struct Timings {
    double prefill_ms = 0, prefill_tokens_per_s = 0;
    double decode_ms = 0, decode_tokens_per_s = 0;
    double ttft_ms = 0;  // from the call to the first sampled token
    double total_ms = 0;
};

struct Generation {
    std::string text;
    std::vector<Token> tokens;
    FinishReason finish_reason = FinishReason::stop;
    std::string stop_sequence;  // the stop string that ended it, if any
    Usage usage;
    Timings timings;
    std::vector<TokenLogprobs> logprobs;  // one per token when requested
    std::optional<Error> error;           // set when finish_reason is error
};

namespace detail {
class GenerationRun;
}

// Pull-style stream of pieces: while (stream.next(piece)) { ... } then stream.result().
class TokenStream {
  public:
    explicit TokenStream(std::unique_ptr<detail::GenerationRun> run);
    TokenStream(TokenStream&&) noexcept;
    TokenStream& operator=(TokenStream&&) noexcept;
    ~TokenStream();  // an unfinished stream is cancelled

    bool next(StreamPiece& piece);
    // Valid once next() returned false.
    const Generation& result() const;

  private:
    std::unique_ptr<detail::GenerationRun> run_;
};

}  // namespace llamapp
