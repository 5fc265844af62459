// Tokenizer and streaming Detokenizer over a model's vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/error.hpp"

namespace llamapp {

using Token = std::int32_t;
inline constexpr Token no_token = -1;

namespace detail {
struct ModelState;
}

struct TokenizeOptions {
    bool add_special = true;     // add BOS/EOS as the model's tokenizer config says
    bool parse_special = false;  // treat text like "<|im_end|>" as control tokens (off: plain text)
};

// A code model's fill-in-the-middle markers (no_token where the vocabulary has none).
struct InfillTokens {
    Token prefix = no_token;
    Token suffix = no_token;
    Token middle = no_token;
    Token repository = no_token;  // repository-level context: the project's name follows
    Token separator = no_token;   // before each file of that context
    bool available() const {
        return prefix != no_token && suffix != no_token && middle != no_token;
    }
};

// Cheap to copy; keeps the model alive. Thread-safe.
class Tokenizer {
  public:
    explicit Tokenizer(std::shared_ptr<const detail::ModelState> model)
        : model_(std::move(model)) {}

    [[nodiscard]] Result<std::vector<Token>> encode(std::string_view text,
                                                    TokenizeOptions options = {}) const;
    // Joins pieces; special tokens are rendered as text only when render_special is set.
    [[nodiscard]] Result<std::string> decode(std::span<const Token> tokens,
                                             bool render_special = false) const;
    // Raw bytes of one token (may be a partial UTF-8 sequence).
    [[nodiscard]] Result<std::string> piece(Token token, bool render_special = true) const;

    int vocab_size() const;
    bool is_valid(Token token) const { return token >= 0 && token < vocab_size(); }
    bool is_end_of_generation(Token token) const;
    bool is_control(Token token) const;
    InfillTokens infill_tokens() const;
    // The BOS token encode() puts first with add_special (no_token when the model adds none).
    Token added_bos() const;
    // A reranker's input for one query-document pair, laid out as llama-server lays it out: the
    // model's rerank template filled in (its special tokens parsed), else BOS, query, EOS, SEP,
    // document, EOS, each as the vocabulary adds them (SEP where there is no EOS).
    [[nodiscard]] Result<std::vector<Token>> rerank_prompt(std::string_view query,
                                                           std::string_view document) const;

  private:
    std::shared_ptr<const detail::ModelState> model_;
};

// Turns a stream of tokens into text without ever emitting a broken UTF-8 sequence: bytes of an
// incomplete code point are held back until the rest arrives (or flush() is called).
class Detokenizer {
  public:
    // `shown` lists special tokens rendered as text even when render_special is off.
    explicit Detokenizer(Tokenizer tokenizer, bool render_special = false,
                         std::vector<Token> shown = {});

    // Returns the text that became complete with this token (possibly empty).
    [[nodiscard]] Result<std::string> push(Token token);
    // Returns any held-back bytes, with invalid sequences replaced by U+FFFD.
    std::string flush();
    void reset() { pending_.clear(); }

  private:
    Tokenizer tokenizer_;
    bool render_special_;
    std::vector<Token> shown_;  // sorted
    std::string pending_;
};

// Length of the longest prefix of `bytes` that ends on a complete UTF-8 code point boundary,
// treating invalid bytes as complete (so they are never held back forever).
std::size_t utf8_complete_prefix(std::string_view bytes);

// Replaces invalid UTF-8 sequences with U+FFFD.
std::string utf8_sanitize(std::string_view bytes);

}  // namespace llamapp
