#include <algorithm>

#include "core/generation_run.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "llamapp/context.hpp"

namespace llamapp {

std::string_view to_string(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop:
            return "stop";
        case FinishReason::length:
            return "length";
        case FinishReason::cancelled:
            return "cancelled";
        case FinishReason::error:
            return "error";
    }
    return "error";
}

Result<void> GenerateOptions::validate() const {
    if (max_tokens == 0 || max_tokens < -1) {
        return fail(ErrorCode::invalid_argument, "max_tokens must be >= 1, or -1 for no limit",
                    "max_tokens=" + std::to_string(max_tokens));
    }
    if (top_logprobs < 0 || top_logprobs > max_top_logprobs) {
        return fail(ErrorCode::invalid_argument, "top_logprobs must be between 0 and 20",
                    "top_logprobs=" + std::to_string(top_logprobs));
    }
    if (timeout.count() < 0)
        return fail(ErrorCode::invalid_argument, "timeout must be >= 0", "timeout");
    for (const auto& s : stop) {
        if (s.empty()) {
            return fail(ErrorCode::invalid_argument, "stop strings must not be empty", "stop");
        }
        // A stop string that is not valid UTF-8 could match inside a character and cut it.
        if (utf8_sanitize(s) != s) {
            return fail(ErrorCode::invalid_argument, "stop strings must be valid UTF-8", "stop");
        }
    }
    return sampling.validate();
}

namespace detail {

GenerationRun::GenerationRun(ContextState& state, const GenerateOptions& options, Sampler sampler)
    : state_(state),
      options_(options),
      sampler_(std::move(sampler)),
      tokenizer_(state.model.tokenizer()),
      detokenizer_(tokenizer_),
      stops_(options.stop),
      started_(Clock::now()) {
    if (options.timeout.count() > 0) deadline_ = started_ + options.timeout;
    state_.busy = true;
}

GenerationRun::~GenerationRun() {
    if (!finished_) finish(FinishReason::cancelled);
}

double GenerationRun::ms_since(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

Result<std::unique_ptr<GenerationRun>> GenerationRun::start(ContextState& state,
                                                            std::vector<Token> prompt,
                                                            const GenerateOptions& options) {
    if (state.busy) {
        return fail(ErrorCode::unsupported_operation,
                    "another generation is still running on this context");
    }
    if (state.options.embeddings) {
        return fail(ErrorCode::unsupported_operation, "this context was created for embeddings",
                    "embeddings");
    }
    if (!state.memory()) {
        return fail(ErrorCode::unsupported_operation,
                    "this model has no KV cache and cannot generate text",
                    state.model.info().architecture);
    }
    if (auto ok = options.validate(); !ok) return std::unexpected(ok.error());
    if (prompt.empty()) return fail(ErrorCode::invalid_argument, "prompt is empty", "prompt");
    const Tokenizer tokenizer = state.model.tokenizer();
    for (Token t : prompt) {
        if (!tokenizer.is_valid(t)) {
            return fail(ErrorCode::invalid_argument, "prompt token id out of range",
                        fmt::format("token={}, vocab={}", t, tokenizer.vocab_size()));
        }
    }
    // Sequence 0's share of the cache (all of it unless several sequences split it).
    const int n_ctx = static_cast<int>(llama_n_ctx_seq(state.ctx.get()));
    if (static_cast<std::int64_t>(prompt.size()) >= n_ctx) {
        return fail(ErrorCode::context_overflow, "prompt does not fit in the context window",
                    fmt::format("prompt tokens={}, n_ctx={}", prompt.size(), n_ctx));
    }
    auto sampler =
        Sampler::create(*state.model.state(), options.sampling, options.ignore_eos, n_ctx);
    if (!sampler) return std::unexpected(sampler.error());

    std::unique_ptr<GenerationRun> run(new GenerationRun(state, options, std::move(*sampler)));
    if (auto ok = run->prefill(prompt); !ok) {
        const ErrorCode code = ok.error().code;
        if (code == ErrorCode::cancelled || code == ErrorCode::timeout) {
            // Stopping during prefill is a finished generation with no tokens, like any other stop.
            run->finish(FinishReason::cancelled, code == ErrorCode::timeout
                                                     ? std::optional<Error>(ok.error())
                                                     : std::nullopt);
            return run;
        }
        run->finished_ = true;
        state.busy = false;
        return std::unexpected(ok.error());
    }
    return run;
}

Result<void> GenerationRun::prefill(const std::vector<Token>& prompt) {
    ContextState& s = state_;
    // Longest common prefix with what sequence 0 already holds; keep at least one prompt token
    // to decode so that fresh logits exist.
    std::size_t common = 0;
    if (options_.reuse_prefix) {
        const std::size_t limit = std::min(s.cached.size(), prompt.size() - 1);
        while (common < limit && s.cached[common] == prompt[common]) ++common;
    }
    if (!s.can_trim && common != s.cached.size()) common = 0;  // recurrent state cannot rewind
    if (common > 0 && common < s.cached.size()) {
        if (!llama_memory_seq_rm(s.memory(), 0, static_cast<llama_pos>(common), -1)) common = 0;
    }
    const int n_swa = s.model.info().sliding_window;
    if (common > 0 && n_swa > 0) {
        // The sliding-window cache may already have dropped cells the next tokens attend to.
        const llama_pos pos_min = llama_memory_seq_pos_min(s.memory(), 0);
        if (pos_min > std::max<llama_pos>(0, static_cast<llama_pos>(common) - n_swa)) common = 0;
    }
    if (common == 0) s.forget();
    s.cached.resize(common);
    result_.usage.prompt_tokens = static_cast<int>(prompt.size());
    result_.usage.cached_tokens = static_cast<int>(common);
    sampler_.accept_prompt(prompt);

    const int n_batch = static_cast<int>(llama_n_batch(s.ctx.get()));
    LlamaBatch batch(n_batch);
    for (std::size_t i = common; i < prompt.size();) {
        batch.clear();
        const std::size_t end = std::min(prompt.size(), i + static_cast<std::size_t>(n_batch));
        for (std::size_t k = i; k < end; ++k) {
            batch.add(prompt[k], static_cast<int>(k), 0, k + 1 == prompt.size());
        }
        if (auto ok = s.decode(batch.batch, &options_.cancel, deadline_); !ok) {
            s.forget();  // a partly written batch leaves the sequence in an unknown state
            return ok;
        }
        s.cached.insert(s.cached.end(), prompt.begin() + static_cast<std::ptrdiff_t>(i),
                        prompt.begin() + static_cast<std::ptrdiff_t>(end));
        i = end;
    }
    logits_index_ = batch.batch.n_tokens - 1;
    result_.timings.prefill_ms = ms_since(started_);
    const double computed = static_cast<double>(prompt.size() - common);
    result_.timings.prefill_tokens_per_s =
        result_.timings.prefill_ms > 0 ? computed * 1000.0 / result_.timings.prefill_ms : 0;
    return {};
}

void GenerationRun::finish(FinishReason reason, std::optional<Error> error) {
    if (finished_) return;
    finished_ = true;
    state_.busy = false;
    result_.finish_reason = reason;
    result_.error = std::move(error);
    if (reason != FinishReason::stop || result_.stop_sequence.empty()) {
        // Held-back bytes are released unless a stop string cut the text.
        std::string tail = detokenizer_.flush();
        auto step = stops_.feed(tail);
        trailing_ = step.emit + (step.matched ? "" : stops_.flush());
        result_.text += trailing_;
    }
    const double total = ms_since(started_);
    result_.timings.total_ms = total;
    result_.timings.decode_ms = decode_ms_;
    result_.timings.decode_tokens_per_s = decode_ms_ > 0 ? decode_calls_ * 1000.0 / decode_ms_ : 0;
}

bool GenerationRun::next(StreamPiece& piece) {
    piece = StreamPiece{};
    if (finished_) {
        if (trailing_.empty()) return false;
        piece.text.swap(trailing_);  // the last held-back text, once
        return true;
    }
    ContextState& s = state_;
    if (options_.cancel.cancelled()) {
        finish(FinishReason::cancelled);
        return next(piece);
    }
    if (Clock::now() > deadline_) {
        finish(FinishReason::cancelled,
               Error{ErrorCode::timeout, "generation deadline passed", {}});
        return next(piece);
    }
    if (to_decode_) {
        const auto pos = static_cast<int>(s.cached.size());
        single_.clear();
        single_.add(*to_decode_, pos, 0, true);
        const auto t0 = Clock::now();
        auto ok = s.decode(single_.batch, &options_.cancel, deadline_);
        decode_ms_ += ms_since(t0);
        ++decode_calls_;
        if (!ok) {
            if (s.can_trim)
                llama_memory_seq_rm(s.memory(), 0, pos, -1);
            else
                s.forget();
            const ErrorCode code = ok.error().code;
            finish(code == ErrorCode::cancelled || code == ErrorCode::timeout
                       ? FinishReason::cancelled
                       : FinishReason::error,
                   code == ErrorCode::cancelled ? std::nullopt : std::optional<Error>(ok.error()));
            return next(piece);
        }
        s.cached.push_back(*to_decode_);
        to_decode_.reset();
        logits_index_ = 0;
    }

    auto sampled = sampler_.sample_and_accept(s.ctx.get(), logits_index_);
    if (!sampled) {
        finish(FinishReason::error, sampled.error());
        return next(piece);
    }
    const Token token = *sampled;
    if (result_.tokens.empty()) {
        first_token_at_ = Clock::now();
        result_.timings.ttft_ms = ms_since(started_);
    }
    piece.token = token;
    if (options_.logprobs || options_.top_logprobs > 0) {
        TokenLogprobs lp =
            logprobs_from_logits(llama_get_logits_ith(s.ctx.get(), logits_index_),
                                 tokenizer_.vocab_size(), token, options_.top_logprobs);
        lp.chosen.piece = tokenizer_.piece(token, false).value_or("");
        for (auto& alt : lp.top) alt.piece = tokenizer_.piece(alt.token, false).value_or("");
        result_.logprobs.push_back(lp);
        piece.logprobs = std::move(lp);
    }

    if (tokenizer_.is_end_of_generation(token) && !options_.ignore_eos) {
        finish(FinishReason::stop);
        piece.text.swap(trailing_);
        return true;
    }
    result_.tokens.push_back(token);
    result_.usage.completion_tokens = static_cast<int>(result_.tokens.size());
    auto text = detokenizer_.push(token);
    auto step = stops_.feed(text ? *text : std::string());
    piece.text = step.emit;
    result_.text += step.emit;
    if (step.matched) {
        result_.stop_sequence = step.stop;
        finish(FinishReason::stop);
        return true;
    }
    const bool at_max =
        options_.max_tokens > 0 && result_.usage.completion_tokens >= options_.max_tokens;
    // The sampled token still needs a position of its own to be decoded.
    const bool ctx_full = s.cached.size() >= llama_n_ctx_seq(s.ctx.get());
    if (at_max || ctx_full) {
        // The last token is not fed back: its KV is not needed unless generation continues.
        finish(FinishReason::length);
        piece.text += trailing_;
        trailing_.clear();
        return true;
    }
    to_decode_ = token;
    return true;
}

}  // namespace detail

TokenStream::TokenStream(std::unique_ptr<detail::GenerationRun> run) : run_(std::move(run)) {}
TokenStream::TokenStream(TokenStream&&) noexcept = default;
TokenStream& TokenStream::operator=(TokenStream&&) noexcept = default;
TokenStream::~TokenStream() = default;
bool TokenStream::next(StreamPiece& piece) {
    return run_ && run_->next(piece);
}
const Generation& TokenStream::result() const {
    return run_->result();
}

namespace {

Result<std::vector<Token>> tokenize_prompt(const Context& ctx, std::string_view prompt,
                                           const GenerateOptions& o) {
    if (prompt.empty()) return fail(ErrorCode::invalid_argument, "prompt is empty", "prompt");
    return ctx.model().tokenizer().encode(prompt, o.tokenize);
}

}  // namespace

Result<TokenStream> Context::start(std::span<const Token> prompt, const GenerateOptions& options) {
    auto run = detail::GenerationRun::start(*state_, {prompt.begin(), prompt.end()}, options);
    if (!run) return std::unexpected(run.error());
    return TokenStream(std::move(*run));
}

Result<Generation> Context::stream(std::span<const Token> prompt, const GenerateOptions& options,
                                   const PieceCallback& on_piece) {
    auto run = detail::GenerationRun::start(*state_, {prompt.begin(), prompt.end()}, options);
    if (!run) return std::unexpected(run.error());
    StreamPiece piece;
    while ((*run)->next(piece)) {
        if (on_piece && !on_piece(piece)) {
            (*run)->cancel();
            while ((*run)->next(piece)) {
            }
            break;
        }
    }
    return (*run)->result();
}

Result<Generation> Context::stream(std::string_view prompt, const GenerateOptions& options,
                                   const PieceCallback& on_piece) {
    auto tokens = tokenize_prompt(*this, prompt, options);
    if (!tokens) return std::unexpected(tokens.error());
    return stream(std::span<const Token>(*tokens), options, on_piece);
}

Result<Generation> Context::generate(std::span<const Token> prompt,
                                     const GenerateOptions& options) {
    return stream(prompt, options, PieceCallback{});
}

Result<Generation> Context::generate(std::string_view prompt, const GenerateOptions& options) {
    return stream(prompt, options, PieceCallback{});
}

}  // namespace llamapp
