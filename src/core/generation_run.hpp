// Internal: one generation as a step-by-step state machine, shared by generate(), the
// callback stream and the pull-style TokenStream.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "core/context_state.hpp"
#include "core/sampler.hpp"
#include "core/stop_strings.hpp"
#include "llamapp/generation.hpp"

namespace llamapp::detail {

class GenerationRun {
  public:
    // Validates, builds the sampler, reuses the cached prefix and prefills the prompt.
    static Result<std::unique_ptr<GenerationRun>> start(ContextState& state,
                                                        std::vector<Token> prompt,
                                                        const GenerateOptions& options);
    ~GenerationRun();

    // Produces the next piece; false once finished (then result() is final).
    bool next(StreamPiece& piece);
    void cancel() { finish(FinishReason::cancelled); }
    const Generation& result() const { return result_; }

  private:
    using Clock = std::chrono::steady_clock;
    GenerationRun(ContextState& state, const GenerateOptions& options, Sampler sampler);
    Result<void> prefill(const std::vector<Token>& prompt);
    void finish(FinishReason reason, std::optional<Error> error = std::nullopt);
    double ms_since(Clock::time_point t) const;

    ContextState& state_;
    GenerateOptions options_;
    Sampler sampler_;
    Tokenizer tokenizer_;
    Detokenizer detokenizer_;
    LlamaBatch single_{1};  // reused for every one-token decode
    StopMatcher stops_;
    Generation result_;
    Clock::time_point started_;
    Clock::time_point deadline_ = Clock::time_point::max();
    Clock::time_point first_token_at_{};
    int logits_index_ = -1;           // output index holding the logits to sample from
    std::optional<Token> to_decode_;  // sampled but not yet fed back into the model
    int decode_calls_ = 0;
    double decode_ms_ = 0;
    bool finished_ = false;
    std::string trailing_;  // held-back text released when the run finishes
};

}  // namespace llamapp::detail
