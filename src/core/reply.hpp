// Internal: the reply being built for one sequence. Turns the logits of each decode into a
// chosen token, log-probabilities, text that is safe to show, and a finish reason. Decoding is
// left to the caller, so one decode can serve many replies (the engine) or just one (Context).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/sampler.hpp"
#include "core/stop_strings.hpp"
#include "llamapp/generation.hpp"
#include "llamapp/model.hpp"

struct llama_context;

namespace llamapp::detail {

class Reply {
  public:
    using Clock = std::chrono::steady_clock;

    // `started` is when the caller asked; TTFT and the total are measured from it.
    Reply(const Model& model, const GenerateOptions& options, Sampler sampler,
          Clock::time_point started);

    void set_prompt(std::span<const Token> prompt, int cached_tokens);

    struct Step {
        StreamPiece piece;
        bool finished = false;
        // The sampled token, to be decoded so that generation can continue (when not finished).
        Token feed_back = no_token;
    };
    // Samples from output `index` of the last decode of `ctx`. `n_past` is how many tokens the
    // sequence holds and `n_ctx` how many it may hold: a full sequence ends with `length`.
    Step advance(llama_context* ctx, int index, std::size_t n_past, std::size_t n_ctx);

    // Ends the reply (no-op when finished) and returns held-back text that is now final.
    std::string finish(FinishReason reason, std::optional<Error> error = std::nullopt);

    bool finished() const { return finished_; }
    const GenerateOptions& options() const { return options_; }
    Generation& result() { return result_; }
    const Generation& result() const { return result_; }
    Clock::time_point started() const { return started_; }
    Clock::time_point first_token_at() const { return first_token_at_; }

  private:
    GenerateOptions options_;
    Sampler sampler_;
    Tokenizer tokenizer_;
    Detokenizer detokenizer_;
    StopMatcher stops_;
    Generation result_;
    Clock::time_point started_;
    Clock::time_point first_token_at_{};
    bool finished_ = false;
};

// Checks a prompt before llama.cpp sees it: not empty, every id inside the vocabulary.
Result<void> validate_prompt(const Model& model, std::span<const Token> prompt);

double ms_between(Reply::Clock::time_point from, Reply::Clock::time_point to);

}  // namespace llamapp::detail
