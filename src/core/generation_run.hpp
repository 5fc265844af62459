// Internal: one generation as a step-by-step state machine, shared by generate(), the
// callback stream and the pull-style TokenStream.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "core/context_state.hpp"
#include "core/reply.hpp"
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
    const Generation& result() const { return reply_.result(); }

  private:
    using Clock = Reply::Clock;
    GenerationRun(ContextState& state, const GenerateOptions& options, Sampler sampler);
    Result<void> prefill(const std::vector<Token>& prompt);
    void finish(FinishReason reason, std::optional<Error> error = std::nullopt);

    ContextState& state_;
    Reply reply_;
    LlamaBatch single_{1};  // reused for every one-token decode
    Clock::time_point deadline_ = Clock::time_point::max();
    int logits_index_ = -1;           // output index holding the logits to sample from
    std::optional<Token> to_decode_;  // sampled but not yet fed back into the model
    bool finished_ = false;
    std::string trailing_;  // held-back text released when the run finishes
};

}  // namespace llamapp::detail
