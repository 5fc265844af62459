#include <algorithm>

#include "core/generation_run.hpp"
#include "core/internals.hpp"
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

namespace detail {

Result<void> validate_prompt(const Model& model, std::span<const Token> prompt) {
    if (prompt.empty()) return fail(ErrorCode::invalid_argument, "prompt is empty", "prompt");
    const Tokenizer tokenizer = model.tokenizer();
    for (Token t : prompt) {
        if (!tokenizer.is_valid(t)) {
            return fail(ErrorCode::invalid_argument, "prompt token id out of range",
                        fmt::format("token={}, vocab={}", t, tokenizer.vocab_size()));
        }
    }
    return {};
}

}  // namespace detail

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
    : state_(state), reply_(state.model, options, std::move(sampler), Clock::now()) {
    if (options.timeout.count() > 0) deadline_ = reply_.started() + options.timeout;
    state_.busy = true;
}

GenerationRun::~GenerationRun() {
    if (!finished_) finish(FinishReason::cancelled);
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
    if (!state.sequences.exists()) {
        return fail(ErrorCode::unsupported_operation,
                    "this model has no KV cache and cannot generate text",
                    state.model.info().architecture);
    }
    if (auto ok = options.validate(); !ok) return std::unexpected(ok.error());
    if (auto ok = validate_prompt(state.model, prompt); !ok) return std::unexpected(ok.error());
    // Sequence 0's share of the cache (all of it unless several sequences split it).
    const int n_ctx = static_cast<int>(llama_n_ctx_seq(state.ctx.get()));
    if (static_cast<std::int64_t>(prompt.size()) >= n_ctx) {
        return fail(ErrorCode::context_overflow, "prompt does not fit in the context window",
                    fmt::format("prompt tokens={}, n_ctx={}", prompt.size(), n_ctx));
    }
    auto sampler =
        Sampler::create(model_state(state.model), options.sampling, options.ignore_eos, n_ctx);
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
    std::size_t common = reply_.options().reuse_prefix
                             ? reusable_prefix(s.sequences.tokens(0), prompt, s.can_trim)
                             : 0;
    if (common > 0 && common < s.sequences.size(0) && !s.sequences.trim(0, common)) common = 0;
    // The sliding-window cache may already have dropped cells the next tokens attend to.
    if (!s.sequences.window_intact(0, common, s.model.info().sliding_window)) common = 0;
    if (common == 0) s.forget();
    reply_.set_prompt(prompt, static_cast<int>(common));

    const int n_batch = static_cast<int>(llama_n_batch(s.ctx.get()));
    LlamaBatch batch(n_batch);
    for (std::size_t i = common; i < prompt.size();) {
        batch.clear();
        const std::size_t end = std::min(prompt.size(), i + static_cast<std::size_t>(n_batch));
        for (std::size_t k = i; k < end; ++k) {
            batch.add(prompt[k], static_cast<int>(k), 0, k + 1 == prompt.size());
        }
        if (auto ok = s.decode(batch.batch, &reply_.options().cancel, deadline_); !ok) {
            s.forget();  // a partly written batch leaves the sequence in an unknown state
            return ok;
        }
        s.sequences.append(0, std::span(prompt).subspan(i, end - i));
        i = end;
    }
    logits_index_ = batch.batch.n_tokens - 1;
    Timings& t = reply_.result().timings;
    t.prefill_ms = ms_between(reply_.started(), Clock::now());
    const double computed = static_cast<double>(prompt.size() - common);
    t.prefill_tokens_per_s = t.prefill_ms > 0 ? computed * 1000.0 / t.prefill_ms : 0;
    return {};
}

void GenerationRun::finish(FinishReason reason, std::optional<Error> error) {
    if (finished_) return;
    finished_ = true;
    state_.busy = false;
    trailing_ += reply_.finish(reason, std::move(error));
}

bool GenerationRun::next(StreamPiece& piece) {
    piece = StreamPiece{};
    if (finished_) {
        if (trailing_.empty()) return false;
        piece.text.swap(trailing_);  // the last held-back text, once
        return true;
    }
    ContextState& s = state_;
    if (reply_.options().cancel.cancelled()) {
        finish(FinishReason::cancelled);
        return next(piece);
    }
    if (Clock::now() > deadline_) {
        finish(FinishReason::cancelled,
               Error{ErrorCode::timeout, "generation deadline passed", {}});
        return next(piece);
    }
    if (to_decode_) {
        const auto pos = static_cast<int>(s.sequences.size(0));
        single_.clear();
        single_.add(*to_decode_, pos, 0, true);
        auto ok = s.decode(single_.batch, &reply_.options().cancel, deadline_);
        if (!ok) {
            if (!s.can_trim || !s.sequences.rewind_to_held(0)) s.forget();
            const ErrorCode code = ok.error().code;
            finish(code == ErrorCode::cancelled || code == ErrorCode::timeout
                       ? FinishReason::cancelled
                       : FinishReason::error,
                   code == ErrorCode::cancelled ? std::nullopt : std::optional<Error>(ok.error()));
            return next(piece);
        }
        s.sequences.append(0, *to_decode_);
        to_decode_.reset();
        logits_index_ = 0;
    }

    auto step = reply_.advance(s.ctx.get(), logits_index_, s.sequences.size(0),
                               llama_n_ctx_seq(s.ctx.get()));
    piece = std::move(step.piece);
    if (step.finished) {
        finished_ = true;
        state_.busy = false;
        return true;
    }
    to_decode_ = step.feed_back;
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
