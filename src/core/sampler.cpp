#include "core/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>

#include "common.h"
#include "core/grammar_internal.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "llamapp/grammar.hpp"
#include "sampling.h"

namespace llamapp {

namespace {

Result<void> check(bool ok, const char* option, const std::string& why) {
    if (ok) return {};
    return fail(ErrorCode::invalid_argument, std::string(option) + " " + why, option);
}

}  // namespace

Result<void> SamplingParams::validate() const {
    auto finite = [](float v) { return std::isfinite(v); };
    Result<void> r;
    if (!(r = check(finite(temperature) && temperature >= 0, "temperature",
                    "must be finite and >= 0")))
        return r;
    if (!(r = check(top_k >= 0, "top_k", "must be >= 0"))) return r;
    if (!(r = check(finite(top_p) && top_p > 0 && top_p <= 1, "top_p", "must be in (0, 1]")))
        return r;
    if (!(r = check(finite(min_p) && min_p >= 0 && min_p <= 1, "min_p", "must be in [0, 1]")))
        return r;
    if (!(r = check(finite(typical_p) && typical_p > 0 && typical_p <= 1, "typical_p",
                    "must be in (0, 1]")))
        return r;
    if (!(r = check(finite(repeat_penalty) && repeat_penalty > 0 && repeat_penalty <= 100,
                    "repeat_penalty", "must be in (0, 100]")))
        return r;
    if (!(r = check(finite(frequency_penalty) && std::fabs(frequency_penalty) <= 100,
                    "frequency_penalty", "must be in [-100, 100]")))
        return r;
    if (!(r = check(finite(presence_penalty) && std::fabs(presence_penalty) <= 100,
                    "presence_penalty", "must be in [-100, 100]")))
        return r;
    if (!(r = check(penalty_last_n >= -1, "penalty_last_n", "must be >= -1"))) return r;
    if (!(r = check(finite(dry_multiplier) && dry_multiplier >= 0, "dry_multiplier",
                    "must be >= 0")))
        return r;
    if (!(r = check(finite(dry_base) && dry_base >= 1, "dry_base", "must be >= 1"))) return r;
    if (!(r = check(dry_allowed_length >= 0, "dry_allowed_length", "must be >= 0"))) return r;
    if (!(r = check(dry_penalty_last_n >= -1, "dry_penalty_last_n", "must be >= -1"))) return r;
    if (!(r = check(finite(xtc_probability) && xtc_probability >= 0 && xtc_probability <= 1,
                    "xtc_probability", "must be in [0, 1]")))
        return r;
    if (!(r = check(finite(xtc_threshold) && xtc_threshold >= 0 && xtc_threshold <= 1,
                    "xtc_threshold", "must be in [0, 1]")))
        return r;
    if (!(r = check(mirostat >= 0 && mirostat <= 2, "mirostat", "must be 0, 1 or 2"))) return r;
    if (!(r = check(finite(mirostat_tau) && mirostat_tau > 0, "mirostat_tau", "must be > 0")))
        return r;
    if (!(r = check(finite(mirostat_eta) && mirostat_eta > 0 && mirostat_eta <= 1, "mirostat_eta",
                    "must be in (0, 1]")))
        return r;
    for (const auto& b : logit_bias) {
        // Larger finite biases overflow the logits to infinity and then NaN.
        if (!(r = check(b.bias == -INFINITY || (std::isfinite(b.bias) && std::fabs(b.bias) <= 100),
                        "logit_bias", "values must be in [-100, 100] or -infinity")))
            return r;
    }
    if (!(r = check(reasoning.tokens >= -1, "reasoning.tokens", "must be >= -1"))) return r;
    if (!grammar.empty() && !json_schema.empty()) {
        return fail(ErrorCode::invalid_argument, "grammar and json_schema are mutually exclusive",
                    "grammar");
    }
    if (!reply_grammar.gbnf.empty() && (!grammar.empty() || !json_schema.empty())) {
        return fail(ErrorCode::invalid_argument,
                    "the template's reply grammar excludes a grammar or json_schema", "grammar");
    }
    if (reply_grammar.lazy && reply_grammar.triggers.empty()) {
        return fail(ErrorCode::invalid_argument, "a lazy grammar needs at least one trigger",
                    "reply_grammar.triggers");
    }
    for (const auto& t : reply_grammar.triggers) {
        if (t.kind == GrammarTrigger::Kind::token ? t.token < 0 : t.value.empty()) {
            return fail(ErrorCode::invalid_argument, "a grammar trigger is empty",
                        "reply_grammar.triggers");
        }
    }
    return {};
}

namespace detail {

namespace {

// First index of the largest logit. Two passes, because a plain max over lanes vectorizes and
// an index-tracking loop does not; this runs once per generated token over the whole vocabulary.
Token argmax(const float* logits, int n) {
    constexpr int lanes = 16;
    float lane_max[lanes];
    std::fill(lane_max, lane_max + lanes, -INFINITY);
    int i = 0;
    for (; i + lanes <= n; i += lanes) {
        for (int k = 0; k < lanes; ++k)
            lane_max[k] = logits[i + k] > lane_max[k] ? logits[i + k] : lane_max[k];
    }
    float best = *std::max_element(lane_max, lane_max + lanes);
    for (; i < n; ++i) best = std::max(best, logits[i]);
    for (int k = 0; k < n; ++k) {
        if (logits[k] == best) return k;
    }
    return 0;  // all NaN
}

// A word that is one token of the vocabulary triggers on that token: a control token's text
// never appears in the generated text the pattern triggers look at.
Result<std::vector<common_grammar_trigger>> grammar_triggers(
    const ModelState& model, const std::vector<GrammarTrigger>& triggers) {
    const int n_vocab = llama_vocab_n_tokens(model.vocab);
    std::vector<common_grammar_trigger> out;
    for (const auto& t : triggers) {
        switch (t.kind) {
            case GrammarTrigger::Kind::token:
                if (t.token >= n_vocab)
                    return fail(ErrorCode::invalid_argument, "grammar trigger token out of range",
                                "token=" + std::to_string(t.token));
                out.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN, t.value, t.token});
                break;
            case GrammarTrigger::Kind::word: {
                const auto ids = common_tokenize(model.vocab, t.value, false, true);
                if (ids.size() == 1)
                    out.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN, t.value, ids[0]});
                else
                    out.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_WORD, t.value});
                break;
            }
            case GrammarTrigger::Kind::pattern:
                out.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN, t.value});
                break;
            case GrammarTrigger::Kind::pattern_full:
                out.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL, t.value});
                break;
        }
    }
    return out;
}

}  // namespace

void Sampler::Deleter::operator()(common_sampler* s) const {
    common_sampler_free(s);
}
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;
Sampler::~Sampler() = default;

// llama.cpp's sampling parameters for `p` (the grammar and biases are added by the caller).
common_params_sampling to_common_sampling(const SamplingParams& p, bool ignore_eos, int n_ctx) {
    common_params_sampling cp;
    cp.seed = p.seed;
    cp.temp = p.temperature;
    cp.top_k = p.top_k;
    cp.top_p = p.top_p;
    cp.min_p = p.min_p;
    cp.typ_p = p.typical_p;
    cp.penalty_repeat = p.repeat_penalty;
    cp.penalty_freq = p.frequency_penalty;
    cp.penalty_present = p.presence_penalty;
    // llama.cpp treats a negative window as 0 (off); llamapp documents -1 as "whole context".
    cp.penalty_last_n = p.penalty_last_n < 0 ? n_ctx : p.penalty_last_n;
    cp.dry_multiplier = p.dry_multiplier;
    cp.dry_base = p.dry_base;
    cp.dry_allowed_length = p.dry_allowed_length;
    cp.dry_penalty_last_n = p.dry_penalty_last_n < 0 ? n_ctx : p.dry_penalty_last_n;
    cp.dry_sequence_breakers = p.dry_sequence_breakers;
    cp.xtc_probability = p.xtc_probability;
    cp.xtc_threshold = p.xtc_threshold;
    cp.mirostat = p.mirostat;
    cp.mirostat_tau = p.mirostat_tau;
    cp.mirostat_eta = p.mirostat_eta;
    cp.ignore_eos = ignore_eos;
    cp.no_perf = true;
    return cp;
}

// The tokens that open the thinking block. When the template's reply prefix opens it (QwQ's
// "<think>\n"), they are the prefix's own last tokens, as the sampler is fed them: the marker
// tokenized alone may differ ("<think>" and "\n" merge into other tokens).
llama_tokens opening_tokens(const ModelState& model, const std::string& prefix,
                            const std::string& start) {
    const std::size_t last = prefix.find_last_not_of(" \t\n");
    if (last == std::string::npos || !prefix.substr(0, last + 1).ends_with(start))
        return common_tokenize(model.vocab, start, false, true);
    const llama_tokens all = common_tokenize(model.vocab, prefix, false, true);
    std::string tail;
    for (std::size_t n = 1; n <= all.size(); ++n) {
        tail = common_token_to_piece(model.vocab, all[all.size() - n], true) + tail;
        if (tail.find(start) != std::string::npos) return {all.end() - n, all.end()};
    }
    return common_tokenize(model.vocab, start, false, true);
}

// The budget's markers as tokens, for llama.cpp's reasoning-budget sampler; false when there is no
// budget to keep. With a lazy reply grammar the markers are passed even without a limit: the
// sampler then keeps the grammar from triggering inside the thinking block.
bool set_reasoning_budget(const ModelState& model, const ReasoningBudget& b,
                          common_params_sampling& cp) {
    auto tokens = [&](const std::string& text) {
        return common_tokenize(model.vocab, text, /*add_special=*/false, /*parse_special=*/true);
    };
    if (b.start.empty() || b.end.empty()) return false;
    cp.reasoning_budget_start = opening_tokens(model, cp.generation_prompt, b.start);
    for (const std::string& end : b.end)
        if (auto t = tokens(end); !t.empty()) cp.reasoning_budget_end.push_back(std::move(t));
    if (cp.reasoning_budget_start.empty() || cp.reasoning_budget_end.empty()) {
        cp.reasoning_budget_start.clear();
        cp.reasoning_budget_end.clear();
        return false;
    }
    cp.reasoning_budget_forced = tokens(b.message);
    const auto& end = cp.reasoning_budget_end.front();
    cp.reasoning_budget_forced.insert(cp.reasoning_budget_forced.end(), end.begin(), end.end());
    cp.reasoning_budget_tokens = b.tokens;
    return b.tokens >= 0 || cp.grammar_lazy;
}

// A grammar that parses and names only tokens of the vocabulary, as llama.cpp's sampler takes it.
Result<common_grammar> checked_grammar(const std::string& gbnf, int n_vocab, bool from_template) {
    if (auto ok = validate_gbnf(gbnf); !ok) return std::unexpected(ok.error());
    for (long long id : gbnf_token_references(gbnf)) {
        if (id >= n_vocab) {
            return fail(ErrorCode::invalid_grammar,
                        "grammar refers to a token id outside the vocabulary",
                        "token=" + std::to_string(id) + ", vocab=" + std::to_string(n_vocab));
        }
    }
    // Tool-call grammars start with the reply prefix the template wrote; common feeds it
    // to the grammar only for this type.
    return common_grammar(from_template ? COMMON_GRAMMAR_TYPE_TOOL_CALLS : COMMON_GRAMMAR_TYPE_USER,
                          gbnf);
}

Result<Sampler> Sampler::create(const ModelState& model, const SamplingParams& p, bool ignore_eos,
                                int n_ctx) {
    if (auto ok = p.validate(); !ok) return std::unexpected(ok.error());
    const int n_vocab = llama_vocab_n_tokens(model.vocab);

    common_params_sampling cp = to_common_sampling(p, ignore_eos, n_ctx);
    for (const auto& b : p.logit_bias) {
        if (b.token < 0 || b.token >= n_vocab) {
            return fail(ErrorCode::invalid_argument, "logit_bias token id out of range",
                        "token=" + std::to_string(b.token) + ", vocab=" + std::to_string(n_vocab));
        }
        cp.logit_bias.push_back({b.token, b.bias});
    }
    std::string gbnf = p.grammar;
    if (!p.json_schema.empty()) {
        auto converted = json_schema_to_gbnf(p.json_schema);
        if (!converted) return std::unexpected(converted.error());
        gbnf = std::move(*converted);
    }
    cp.generation_prompt = p.reply_prefix;
    const bool from_template = !p.reply_grammar.gbnf.empty();
    if (from_template) {
        gbnf = p.reply_grammar.gbnf;
        cp.grammar_lazy = p.reply_grammar.lazy;
        if (auto triggers = grammar_triggers(model, p.reply_grammar.triggers); triggers)
            cp.grammar_triggers = std::move(*triggers);
        else
            return std::unexpected(triggers.error());
    }
    // With a grammar, end-of-generation is how a completed grammar stops, so it stays allowed.
    if (ignore_eos && gbnf.empty()) {
        for (Token t = 0; t < n_vocab; ++t) {
            if (llama_vocab_is_eog(model.vocab, t)) cp.logit_bias.push_back({t, -INFINITY});
        }
    }

    if (!gbnf.empty()) {
        auto grammar = checked_grammar(gbnf, n_vocab, from_template);
        if (!grammar) return std::unexpected(grammar.error());
        cp.grammar = std::move(*grammar);
    }

    const bool budgeted = set_reasoning_budget(model, p.reasoning, cp);
    LogCapture capture;
    try {
        common_sampler* s = common_sampler_init(model.model.get(), cp);
        if (!s) {
            return fail(gbnf.empty() ? ErrorCode::invalid_argument : ErrorCode::invalid_grammar,
                        "could not build the sampler: " + capture.last_error(), "sampling");
        }
        Sampler sampler{std::unique_ptr<common_sampler, Deleter>(s)};
        int32_t n_suppress = 0;
        llama_vocab_get_suppress_tokens(model.vocab, &n_suppress);
        // Each condition keeps the most likely token the chain's pick at temperature 0: typical-p
        // and XTC can drop it, penalties, DRY, biases and grammars can change it.
        sampler.argmax_ = p.temperature <= 0 && p.mirostat == 0 && gbnf.empty() && !budgeted &&
                          p.logit_bias.empty() && p.repeat_penalty == 1.0f &&
                          p.frequency_penalty == 0 && p.presence_penalty == 0 &&
                          p.dry_multiplier == 0 && p.xtc_probability == 0 && p.typical_p >= 1.0f &&
                          n_suppress == 0;
        sampler.ignore_eos_ = ignore_eos;
        sampler.greedy_ = p.temperature <= 0 && p.mirostat == 0;
        sampler.vocab_ = model.vocab;
        return sampler;
    } catch (const std::exception& e) {
        return fail(gbnf.empty() ? ErrorCode::invalid_argument : ErrorCode::invalid_grammar,
                    std::string("could not build the sampler: ") + e.what(), "sampling");
    }
}

void Sampler::accept_prompt(std::span<const Token> tokens) {
    // Plain greedy has no penalties, so the chain's token history would never be read.
    if (argmax_) return;
    for (Token t : tokens) common_sampler_accept(sampler_.get(), t, /*is_generated=*/false);
}

Result<Token> Sampler::sample_and_accept(llama_context* ctx, int index) {
    if (argmax_) {
        const float* logits = llama_get_logits_ith(ctx, index);
        const int n_vocab = llama_vocab_n_tokens(vocab_);
        const Token best = argmax(logits, n_vocab);
        // A banned end-of-generation winner needs the chain's biases; that is rare.
        if (!(ignore_eos_ && llama_vocab_is_eog(vocab_, best))) return best;
    }
    try {
        const Token t = common_sampler_sample(sampler_.get(), ctx, index);
        // When the grammar (with biases) rules out every token, all logits are -inf and the
        // chain still returns some id; accepting it would throw or abort inside llama.cpp.
        const llama_token_data_array* cur = common_sampler_get_candidates(sampler_.get(), false);
        if (cur && cur->selected >= 0 && static_cast<std::size_t>(cur->selected) < cur->size &&
            !std::isfinite(cur->data[cur->selected].logit)) {
            return fail(ErrorCode::invalid_grammar,
                        "no token can continue the output under its constraints");
        }
        common_sampler_accept(sampler_.get(), t, /*is_generated=*/true);
        return t;
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_grammar, std::string("sampling failed: ") + e.what());
    }
}

TokenLogprobs Sampler::post_sampling(Token chosen, int top_n) const {
    TokenLogprobs out;
    out.chosen = {chosen, {}, 0.0f};
    if (greedy_ || argmax_) {
        if (top_n > 0) out.top.push_back(out.chosen);
        return out;
    }
    const llama_token_data_array* cur = common_sampler_get_candidates(sampler_.get(), true);
    out.chosen.logprob = -INFINITY;  // unless the chain kept it
    if (!cur) return out;
    for (std::size_t i = 0; i < cur->size; ++i)
        if (cur->data[i].id == chosen) out.chosen.logprob = std::log(cur->data[i].p);
    for (std::size_t i = 0; i < cur->size && static_cast<int>(i) < top_n; ++i) {
        if (!(cur->data[i].p > 0.0f)) break;  // sorted: the rest are 0 too
        out.top.push_back({cur->data[i].id, {}, std::log(cur->data[i].p)});
    }
    return out;
}

TokenLogprobs logprobs_from_logits(const float* logits, int n_vocab, Token chosen, int top_n) {
    float max_logit = -INFINITY;
    for (int i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
    double sum = 0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
    const float log_z = max_logit + static_cast<float>(std::log(sum));
    TokenLogprobs out;
    out.chosen.token = chosen;
    out.chosen.logprob = logits[chosen] - log_z;
    if (top_n > 0) {
        std::vector<int> ids(n_vocab);
        std::iota(ids.begin(), ids.end(), 0);
        const int n = std::min(top_n, n_vocab);
        std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                          [&](int a, int b) { return logits[a] > logits[b]; });
        for (int i = 0; i < n; ++i) out.top.push_back({ids[i], {}, logits[ids[i]] - log_z});
    }
    return out;
}

}  // namespace detail
}  // namespace llamapp
