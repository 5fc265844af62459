// Internal: a validated common_sampler for one generation.
#pragma once

#include <memory>
#include <span>

#include "llamapp/error.hpp"
#include "llamapp/generation.hpp"
#include "llamapp/sampling.hpp"

struct common_sampler;
struct llama_context;
struct llama_vocab;

namespace llamapp::detail {

struct ModelState;

class Sampler {
  public:
    // Validates parameters against the model (token ids, grammar, schema) and builds the chain.
    // n_ctx resolves the "-1 = whole context" penalty windows.
    static Result<Sampler> create(const ModelState& model, const SamplingParams& params,
                                  bool ignore_eos, int n_ctx);

    Sampler(Sampler&&) noexcept;
    Sampler& operator=(Sampler&&) noexcept;
    ~Sampler();

    // Prompt tokens inform penalties but not the grammar.
    void accept_prompt(std::span<const Token> tokens);
    // Samples from the logits of output `index` of the last decode and accepts the token once.
    // Fails (invalid_grammar) when the constraints leave no token that may be chosen.
    Result<Token> sample_and_accept(llama_context* ctx, int index);
    // The last sample's chosen token and top_n candidates as the chain left them (probabilities
    // over what its filters kept; none of probability 0).
    TokenLogprobs post_sampling(Token chosen, int top_n) const;

  private:
    struct Deleter {
        void operator()(common_sampler* s) const;
    };
    explicit Sampler(std::unique_ptr<common_sampler, Deleter> s) : sampler_(std::move(s)) {}

    std::unique_ptr<common_sampler, Deleter> sampler_;
    // Plain greedy decoding (no constraint, bias or penalty can change the winner) takes the
    // argmax of the logits directly instead of running the whole chain over the vocabulary.
    bool argmax_ = false;
    bool greedy_ = false;  // temperature 0: the pick is certain
    bool ignore_eos_ = false;
    const llama_vocab* vocab_ = nullptr;
};

// Log-probabilities of the chosen token and the top_n alternatives from raw logits.
TokenLogprobs logprobs_from_logits(const float* logits, int n_vocab, Token chosen, int top_n);

}  // namespace llamapp::detail
