#include "core/reply.hpp"

#include "llama.h"

namespace llamapp::detail {

double ms_between(Reply::Clock::time_point from, Reply::Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

Reply::Reply(const Model& model, const GenerateOptions& options, Sampler sampler,
             Clock::time_point started)
    : options_(options),
      sampler_(std::move(sampler)),
      tokenizer_(model.tokenizer()),
      detokenizer_(tokenizer_, false, options.shown_control_tokens),
      stops_(options.stop),
      started_(started) {}

void Reply::set_prompt(std::span<const Token> prompt, int cached_tokens) {
    result_.usage.prompt_tokens = static_cast<int>(prompt.size());
    result_.usage.cached_tokens = cached_tokens;
    sampler_.accept_prompt(prompt);
}

Reply::Step Reply::advance(llama_context* ctx, int index, std::size_t n_past, std::size_t n_ctx) {
    Step step;
    if (finished_) return step;
    auto sampled = sampler_.sample_and_accept(ctx, index);
    if (!sampled) {
        step.piece.text = finish(FinishReason::error, sampled.error());
        step.finished = true;
        return step;
    }
    const Token token = *sampled;
    StreamPiece& piece = step.piece;
    if (result_.tokens.empty() && first_token_at_ == Clock::time_point{}) {
        first_token_at_ = Clock::now();
        result_.timings.ttft_ms = ms_between(started_, first_token_at_);
    }
    piece.token = token;
    if (options_.logprobs || options_.top_logprobs > 0) {
        TokenLogprobs lp =
            options_.post_sampling_probs
                ? sampler_.post_sampling(token, options_.top_logprobs)
                : logprobs_from_logits(llama_get_logits_ith(ctx, index), tokenizer_.vocab_size(),
                                       token, options_.top_logprobs);
        lp.chosen.piece = tokenizer_.piece(token, false).value_or("");
        for (auto& alt : lp.top) alt.piece = tokenizer_.piece(alt.token, false).value_or("");
        result_.logprobs.push_back(lp);
        piece.logprobs = std::move(lp);
    }

    if (tokenizer_.is_end_of_generation(token) && !options_.ignore_eos) {
        piece.text = finish(FinishReason::stop);
        step.finished = true;
        return step;
    }
    result_.tokens.push_back(token);
    result_.usage.completion_tokens = static_cast<int>(result_.tokens.size());
    auto text = detokenizer_.push(token);
    auto stop = stops_.feed(text ? *text : std::string());
    piece.text = stop.emit;
    result_.text += stop.emit;
    if (stop.matched) {
        result_.stop_sequence = stop.stop;
        finish(FinishReason::stop);
        step.finished = true;
        return step;
    }
    const bool at_max =
        options_.max_tokens > 0 && result_.usage.completion_tokens >= options_.max_tokens;
    // The sampled token still needs a position of its own to be decoded.
    if (at_max || n_past >= n_ctx) {
        // The last token is not fed back: its KV is not needed unless generation continues.
        piece.text += finish(FinishReason::length);
        step.finished = true;
        return step;
    }
    step.feed_back = token;
    return step;
}

std::string Reply::finish(FinishReason reason, std::optional<Error> error) {
    if (finished_) return {};
    finished_ = true;
    result_.finish_reason = reason;
    result_.error = std::move(error);
    std::string trailing;
    if (reason != FinishReason::stop || result_.stop_sequence.empty()) {
        // Held-back bytes are released unless a stop string cut the text.
        auto step = stops_.feed(detokenizer_.flush());
        trailing = step.emit + (step.matched ? "" : stops_.flush());
        result_.text += trailing;
    }
    const auto now = Clock::now();
    Timings& t = result_.timings;
    t.total_ms = ms_between(started_, now);
    if (first_token_at_ != Clock::time_point{}) {
        t.decode_ms = ms_between(first_token_at_, now);
        const int after_first = result_.usage.completion_tokens - 1;
        t.decode_tokens_per_s =
            t.decode_ms > 0 && after_first > 0 ? after_first * 1000.0 / t.decode_ms : 0;
    }
    return trailing;
}

}  // namespace llamapp::detail
