// SamplingParams: how the next token is chosen. Validated before any sampler is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/tokenizer.hpp"

namespace llamapp {

struct LogitBias {
    Token token = no_token;
    float bias = 0.0f;  // added to the logit; -infinity bans the token
};

inline constexpr std::uint32_t random_seed = 0xFFFFFFFFu;

// What switches a lazy grammar on: a token, a literal word, or a regular expression that matches
// somewhere in (pattern) or the whole of (pattern_full) the text generated so far.
struct GrammarTrigger {
    enum class Kind { token, word, pattern, pattern_full };
    Kind kind = Kind::word;
    std::string value;
    Token token = no_token;  // Kind::token only
};

// The grammar a chat template derives for its reply: tool calls, or a JSON reply format after
// the template's thinking block (ChatPrompt::constrain fills it in).
struct ReplyGrammar {
    std::string gbnf;  // empty: none
    // Lazy: free text until a trigger appears, the grammar from there on (tool_choice "auto").
    bool lazy = false;
    std::vector<GrammarTrigger> triggers;
};

// A limit on a reply's thinking block (llama.cpp's reasoning-budget sampler). Once `tokens`
// were generated inside the block, `message` and the first end marker are forced and the reply
// goes on after them, under the reply grammar if there is one. The markers come from the chat
// template (ChatPrompt::constrain); without a start and an end marker there is no limit.
struct ReasoningBudget {
    int tokens = -1;               // -1 = no limit; 0 = the block closes at once
    std::string start;             // e.g. "<think>"
    std::vector<std::string> end;  // e.g. "</think>"; the first is the one forced
    std::string message;           // said before the forced end marker (may be empty)
};

struct SamplingParams {
    float temperature = 0.8f;  // 0 = greedy
    int top_k = 40;            // 0 = whole vocabulary
    float top_p = 0.95f;       // 1 = off
    float min_p = 0.05f;       // 0 = off
    float typical_p = 1.0f;    // 1 = off

    float repeat_penalty = 1.0f;     // 1 = off
    float frequency_penalty = 0.0f;  // 0 = off
    float presence_penalty = 0.0f;   // 0 = off
    int penalty_last_n = 64;         // window of recent tokens penalised; -1 = whole context

    float dry_multiplier = 0.0f;  // 0 = off
    float dry_base = 1.75f;
    int dry_allowed_length = 2;
    int dry_penalty_last_n = -1;  // -1 = whole context
    std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};

    float xtc_probability = 0.0f;  // 0 = off
    float xtc_threshold = 0.1f;

    int mirostat = 0;  // 0 = off, 1 = Mirostat, 2 = Mirostat 2.0
    float mirostat_tau = 5.0f;
    float mirostat_eta = 0.1f;

    std::vector<LogitBias> logit_bias;
    std::uint32_t seed = random_seed;

    // Constraints: at most one of the three. Output that cannot satisfy them is never produced
    // silently unconstrained: a malformed grammar or schema is an error.
    std::string grammar;         // GBNF, root rule "root"
    std::string json_schema;     // JSON Schema text, converted to GBNF with llama.cpp's converter
    ReplyGrammar reply_grammar;  // excludes the two above
    ReasoningBudget reasoning;
    // The start of the reply the template already wrote into the prompt (e.g. an opened
    // thinking block): the reply grammar and the reasoning budget consume it before the first
    // generated token.
    std::string reply_prefix;

    static SamplingParams greedy() {
        SamplingParams p;
        p.temperature = 0.0f;
        p.top_k = 1;
        return p;
    }

    // Checks ranges that do not depend on a model (token ids are checked against the vocab
    // when a sampler is built).
    [[nodiscard]] Result<void> validate() const;
};

}  // namespace llamapp
