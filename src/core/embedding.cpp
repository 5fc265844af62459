#include <cmath>

#include "core/context_state.hpp"
#include "core/internals.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "core/reply.hpp"
#include "llamapp/context.hpp"

namespace llamapp {

namespace {

void normalize(std::vector<float>& v, Normalization how) {
    if (how != Normalization::l2) return;
    double sum = 0;
    for (float x : v) sum += static_cast<double>(x) * x;
    const double norm = std::sqrt(sum);
    if (norm > 0) {
        for (float& x : v) x = static_cast<float>(x / norm);
    }
}

Result<void> require_embeddings(const detail::ContextState& s) {
    if (!s.options.embeddings) {
        return fail(ErrorCode::unsupported_operation,
                    "create the context with embeddings = true to embed", "embeddings");
    }
    if (s.busy)
        return fail(ErrorCode::unsupported_operation, "a generation is running on this context");
    return {};
}

// Runs one batch of sequences through the model. Encoder-only models take llama_encode.
Result<void> run_batch(detail::ContextState& s, const llama_batch& batch) {
    const llama_model* m = detail::model_state(s.model).model.get();
    if (llama_model_has_encoder(m) && !llama_model_has_decoder(m)) {
        if (llama_encode(s.ctx.get(), batch) != 0)
            return fail(ErrorCode::decode_failed, "llama_encode failed");
        return {};
    }
    return s.decode(batch, nullptr, std::chrono::steady_clock::time_point::max());
}

Result<std::vector<std::vector<Token>>> tokenize_all(const detail::ContextState& s,
                                                     std::span<const std::string> texts,
                                                     const EmbedOptions& options) {
    std::vector<std::vector<Token>> out;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        if (texts[i].empty()) {
            return fail(ErrorCode::invalid_argument, "embedding input is empty",
                        fmt::format("input[{}]", i));
        }
        auto tokens = s.model.tokenizer().encode(texts[i], {.add_special = options.add_special});
        if (!tokens) return std::unexpected(tokens.error());
        out.push_back(std::move(*tokens));
    }
    return out;
}

Result<void> validate_inputs(const detail::ContextState& s,
                             std::span<const std::vector<Token>> inputs, int limit) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& tokens = inputs[i];
        if (tokens.empty() || static_cast<int>(tokens.size()) > limit) {
            return fail(ErrorCode::context_overflow, "embedding input does not fit in one batch",
                        fmt::format("input[{}] tokens={}, limit={}", i, tokens.size(), limit));
        }
        if (auto ok = detail::validate_prompt(s.model, tokens); !ok) {
            return fail(ok.error().code, ok.error().message,
                        fmt::format("input[{}] {}", i, ok.error().context));
        }
    }
    return {};
}

}  // namespace

Result<std::vector<std::vector<float>>> Context::embed_batch(std::span<const std::string> texts,
                                                             const EmbedOptions& options) {
    auto tokenized = tokenize_all(*state_, texts, options);
    if (!tokenized) return std::unexpected(tokenized.error());
    return embed_batch(std::span<const std::vector<Token>>(*tokenized), options);
}

Result<std::vector<std::vector<float>>> Context::embed_batch(
    std::span<const std::vector<Token>> inputs, const EmbedOptions& options) {
    detail::ContextState& s = *state_;
    if (auto ok = require_embeddings(s); !ok) return std::unexpected(ok.error());
    if (llama_pooling_type(s.ctx.get()) == LLAMA_POOLING_TYPE_NONE) {
        return fail(ErrorCode::unsupported_operation,
                    "pooling is none: use embed_tokens for per-token vectors", "pooling");
    }
    // Non-causal models need a whole sequence inside one ubatch.
    const int limit = std::min(s.n_batch(), s.n_ubatch());
    if (auto ok = validate_inputs(s, inputs, limit); !ok) return std::unexpected(ok.error());
    const std::span<const std::vector<Token>> tokenized = inputs;
    // Rank pooling (a reranker) gives the classifier's scores, which are not normalized.
    const bool rank = llama_pooling_type(s.ctx.get()) == LLAMA_POOLING_TYPE_RANK;
    const llama_model* model = detail::model_state(s.model).model.get();
    const int n_out =
        rank ? static_cast<int>(llama_model_n_cls_out(model)) : llama_model_n_embd_out(model);
    const int n_seq_max = s.n_seq_max();
    std::vector<std::vector<float>> result(inputs.size());
    detail::LlamaBatch batch(limit);
    std::size_t next = 0;
    while (next < tokenized.size()) {
        s.forget();
        batch.clear();
        std::size_t first = next;
        int seq = 0;
        // Pack as many texts as fit, each as its own sequence.
        while (next < tokenized.size() && seq < n_seq_max &&
               batch.batch.n_tokens + static_cast<int>(tokenized[next].size()) <= limit) {
            const auto& tokens = tokenized[next];
            for (std::size_t p = 0; p < tokens.size(); ++p)
                batch.add(tokens[p], static_cast<int>(p), seq, true);
            ++seq;
            ++next;
        }
        if (auto ok = run_batch(s, batch.batch); !ok) {
            s.forget();
            return std::unexpected(ok.error());
        }
        for (int k = 0; k < seq; ++k) {
            const float* v = llama_get_embeddings_seq(s.ctx.get(), k);
            if (!v) return fail(ErrorCode::internal, "llama.cpp returned no pooled embedding");
            std::vector<float> e(v, v + n_out);
            if (!rank) normalize(e, options.normalize);
            result[first + static_cast<std::size_t>(k)] = std::move(e);
        }
    }
    s.forget();
    return result;
}

Result<std::vector<float>> Context::embed(std::string_view text, const EmbedOptions& options) {
    std::string one(text);
    auto all = embed_batch(std::span<const std::string>(&one, 1), options);
    if (!all) return std::unexpected(all.error());
    return std::move(all->front());
}

Result<std::vector<std::vector<float>>> Context::embed_tokens(std::string_view text,
                                                              const EmbedOptions& options) {
    detail::ContextState& s = *state_;
    if (auto ok = require_embeddings(s); !ok) return std::unexpected(ok.error());
    if (llama_pooling_type(s.ctx.get()) != LLAMA_POOLING_TYPE_NONE) {
        return fail(ErrorCode::unsupported_operation,
                    "embed_tokens needs a context with pooling none", "pooling");
    }
    const int limit = std::min(s.n_batch(), s.n_ubatch());
    std::string one(text);
    auto tokenized = tokenize_all(s, std::span<const std::string>(&one, 1), options);
    if (!tokenized) return std::unexpected(tokenized.error());
    if (auto ok = validate_inputs(s, *tokenized, limit); !ok) return std::unexpected(ok.error());
    const auto& tokens = tokenized->front();
    s.forget();
    detail::LlamaBatch batch(limit);
    for (std::size_t p = 0; p < tokens.size(); ++p)
        batch.add(tokens[p], static_cast<int>(p), 0, true);
    if (auto ok = run_batch(s, batch.batch); !ok) {
        s.forget();
        return std::unexpected(ok.error());
    }
    const int n_embd = llama_model_n_embd_out(detail::model_state(s.model).model.get());
    std::vector<std::vector<float>> out;
    for (std::size_t p = 0; p < tokens.size(); ++p) {
        const float* v = llama_get_embeddings_ith(s.ctx.get(), static_cast<int>(p));
        if (!v) return fail(ErrorCode::internal, "llama.cpp returned no token embedding");
        std::vector<float> e(v, v + n_embd);
        normalize(e, options.normalize);
        out.push_back(std::move(e));
    }
    s.forget();
    return out;
}

}  // namespace llamapp
