#include "llamapp/tokenizer.hpp"

#include <climits>
#include <exception>

#include "core/model_state.hpp"

namespace llamapp {

Result<std::vector<Token>> Tokenizer::encode(std::string_view text, TokenizeOptions options) const {
    if (text.size() > static_cast<std::size_t>(INT32_MAX / 2)) {
        return fail(ErrorCode::invalid_argument, "text is too long to tokenize",
                    "bytes=" + std::to_string(text.size()));
    }
    const auto n_text = static_cast<int32_t>(text.size());
    std::vector<Token> tokens(text.size() + 2);
    const auto tokenize = [&] {
        return llama_tokenize(model_->vocab, text.data(), n_text, tokens.data(),
                              static_cast<int32_t>(tokens.size()), options.add_special,
                              options.parse_special);
    };
    int32_t n = 0;
    // llama.cpp's pre-tokenizers throw on some byte sequences that are not UTF-8 (found by
    // tests/fuzz/fuzz_tokenizer): a typed error, not an exception through the caller.
    try {
        n = tokenize();
        if (n < 0) {
            tokens.resize(static_cast<std::size_t>(-n));
            n = tokenize();
        }
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_argument, "the text cannot be tokenized", e.what());
    }
    if (n < 0) return fail(ErrorCode::internal, "tokenization failed");
    tokens.resize(static_cast<std::size_t>(n));
    return tokens;
}

Result<std::string> Tokenizer::decode(std::span<const Token> tokens, bool render_special) const {
    for (Token t : tokens) {
        if (!is_valid(t)) {
            return fail(ErrorCode::invalid_argument, "token id out of range",
                        "token=" + std::to_string(t) + ", vocab=" + std::to_string(vocab_size()));
        }
    }
    if (tokens.size() > static_cast<std::size_t>(INT32_MAX / 16)) {
        return fail(ErrorCode::invalid_argument, "too many tokens to decode");
    }
    std::string text(tokens.size() * 8 + 16, '\0');
    const auto n_tokens = static_cast<int32_t>(tokens.size());
    const auto detokenize = [&] {
        return llama_detokenize(model_->vocab, tokens.data(), n_tokens, text.data(),
                                static_cast<int32_t>(text.size()), false, render_special);
    };
    int32_t n = 0;
    try {  // as in encode: llama.cpp's byte maps throw on what they do not know
        n = detokenize();
        if (n < 0) {
            text.resize(static_cast<std::size_t>(-n));
            n = detokenize();
        }
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_argument, "the tokens cannot be detokenized", e.what());
    }
    if (n < 0) return fail(ErrorCode::internal, "detokenization failed");
    text.resize(static_cast<std::size_t>(n));
    return text;
}

Result<std::string> Tokenizer::piece(Token token, bool render_special) const {
    if (!is_valid(token)) {
        return fail(ErrorCode::invalid_argument, "token id out of range",
                    "token=" + std::to_string(token));
    }
    char buf[128];
    int32_t n = llama_token_to_piece(model_->vocab, token, buf, sizeof buf, 0, render_special);
    if (n >= 0) return std::string(buf, static_cast<std::size_t>(n));
    std::string big(static_cast<std::size_t>(-n), '\0');
    n = llama_token_to_piece(model_->vocab, token, big.data(), static_cast<int32_t>(big.size()), 0,
                             render_special);
    if (n < 0) return fail(ErrorCode::internal, "token to piece failed");
    big.resize(static_cast<std::size_t>(n));
    return big;
}

int Tokenizer::vocab_size() const {
    return llama_vocab_n_tokens(model_->vocab);
}

bool Tokenizer::is_end_of_generation(Token token) const {
    return is_valid(token) && llama_vocab_is_eog(model_->vocab, token);
}

bool Tokenizer::is_control(Token token) const {
    return is_valid(token) && llama_vocab_is_control(model_->vocab, token);
}

static_assert(no_token == LLAMA_TOKEN_NULL);

InfillTokens Tokenizer::infill_tokens() const {
    const llama_vocab* v = model_->vocab;
    return {llama_vocab_fim_pre(v), llama_vocab_fim_suf(v), llama_vocab_fim_mid(v),
            llama_vocab_fim_rep(v), llama_vocab_fim_sep(v)};
}

Token Tokenizer::added_bos() const {
    return llama_vocab_get_add_bos(model_->vocab) ? llama_vocab_bos(model_->vocab) : no_token;
}

Result<std::vector<Token>> Tokenizer::rerank_prompt(std::string_view query,
                                                    std::string_view document) const {
    const ModelInfo& info = model_->info;
    if (info.rerank_template) {
        // One pass over the template, so that a query holding "{document}" stays as it is.
        const std::string_view t = *info.rerank_template;
        std::string prompt;
        for (std::size_t at = 0; at < t.size();) {
            if (t.substr(at).starts_with("{query}")) {
                prompt += query;
                at += std::string_view("{query}").size();
            } else if (t.substr(at).starts_with("{document}")) {
                prompt += document;
                at += std::string_view("{document}").size();
            } else {
                prompt += t[at++];
            }
        }
        return encode(prompt, {.add_special = false, .parse_special = true});
    }
    auto q = encode(query, {.add_special = false});
    if (!q) return q;
    auto d = encode(document, {.add_special = false});
    if (!d) return d;
    const SpecialTokens& t = info.special;
    const Token end = t.eos != no_token ? t.eos : t.sep;
    std::vector<Token> out;
    if (t.add_bos) out.push_back(t.bos);
    out.insert(out.end(), q->begin(), q->end());
    if (t.add_eos) out.push_back(end);
    if (t.add_sep) out.push_back(t.sep);
    out.insert(out.end(), d->begin(), d->end());
    if (t.add_eos) out.push_back(end);
    return out;
}

}  // namespace llamapp
