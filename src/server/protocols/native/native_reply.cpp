#include "server/protocols/native/native_reply.hpp"

#include <cmath>
#include <limits>

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

json bytes_json(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
}

// A probability of 0 is the lowest float, not -inf, which JSON cannot hold.
double finite_logprob(float lp) {
    return std::isfinite(lp) ? lp : std::numeric_limits<float>::lowest();
}

// Post-sampling probabilities are given as "prob", as llama-server gives them.
json probability_json(const TokenProbability& p, bool post_sampling) {
    json out = {{"id", p.token}, {"token", p.piece}, {"bytes", bytes_json(p.piece)}};
    if (post_sampling)
        out["prob"] = std::exp(static_cast<double>(p.logprob));
    else
        out["logprob"] = finite_logprob(p.logprob);
    return out;
}

json probabilities_json(const TokenLogprobs& t, bool post_sampling) {
    json entry = probability_json(t.chosen, post_sampling);
    json top = json::array();
    for (const TokenProbability& alt : t.top) top.push_back(probability_json(alt, post_sampling));
    entry[post_sampling ? "top_probs" : "top_logprobs"] = std::move(top);
    return entry;
}

const char* stop_type(const Generation& g) {
    switch (g.finish_reason) {
        case FinishReason::stop:
            return g.stop_sequence.empty() ? "eos" : "word";
        case FinishReason::length:
            return "limit";
        case FinishReason::cancelled:
        case FinishReason::error:
            break;
    }
    return "none";
}

}  // namespace

json generation_settings_json(const GenerateOptions& o, bool stream) {
    const SamplingParams& s = o.sampling;
    json bias = json::array();
    for (const LogitBias& b : s.logit_bias)
        bias.push_back(
            {{"bias", std::isfinite(b.bias) ? json(b.bias) : json(nullptr)}, {"token", b.token}});
    // Samplers llamapp does not have are listed at the values that leave them off.
    return {{"seed", s.seed},
            {"temperature", s.temperature},
            {"dynatemp_range", 0.0},
            {"dynatemp_exponent", 1.0},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"top_n_sigma", -1.0},
            {"xtc_probability", s.xtc_probability},
            {"xtc_threshold", s.xtc_threshold},
            {"typical_p", s.typical_p},
            {"repeat_last_n", s.penalty_last_n},
            {"repeat_penalty", s.repeat_penalty},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"dry_multiplier", s.dry_multiplier},
            {"dry_base", s.dry_base},
            {"dry_allowed_length", s.dry_allowed_length},
            {"dry_penalty_last_n", s.dry_penalty_last_n},
            {"dry_sequence_breakers", s.dry_sequence_breakers},
            {"mirostat", s.mirostat},
            {"mirostat_tau", s.mirostat_tau},
            {"mirostat_eta", s.mirostat_eta},
            {"adaptive_target", -1.0},
            {"adaptive_decay", 0.9},
            {"stop", o.stop},
            {"max_tokens", o.max_tokens},
            {"n_predict", o.max_tokens},
            {"n_keep", 0},
            {"n_discard", 0},
            {"ignore_eos", o.ignore_eos},
            {"stream", stream},
            {"logit_bias", std::move(bias)},
            {"n_probs", o.top_logprobs},
            {"min_keep", 0},
            {"grammar", s.grammar},
            {"json_schema", s.json_schema.empty() ? json(nullptr) : json::parse(s.json_schema)}};
}

std::string detokenized(const Tokenizer& tokenizer, const std::vector<Token>& tokens) {
    auto text = tokenizer.decode(tokens, /*render_special=*/true);
    return text ? *text : std::string();
}

json native_final_json(const Completion& done, const GenerateOptions& options,
                       const NativeReplyContext& c) {
    const Generation& g = done.generation;
    const bool truncated = g.finish_reason == FinishReason::length &&
                           g.usage.prompt_tokens + g.usage.completion_tokens >= c.n_ctx;
    json out = {
        {"index", c.index},
        {"content", c.stream ? std::string() : g.text},
        {"tokens", c.return_tokens && !c.stream ? json(g.tokens) : json::array()},
        {"id_slot", done.cache.slot},
        {"stop", true},
        {"model", c.model},
        {"tokens_predicted", g.usage.completion_tokens},
        {"tokens_evaluated", g.usage.prompt_tokens},
        {"generation_settings", generation_settings_json(options, c.stream)},
        {"prompt", c.prompt_text},
        {"has_new_line", g.text.find('\n') != std::string::npos},
        {"truncated", truncated},
        {"stop_type", stop_type(g)},
        {"stopping_word", g.stop_sequence},
        {"tokens_cached", std::max(0, g.usage.prompt_tokens + g.usage.completion_tokens - 1)},
        {"timings", timings_json(done)}};
    if (options.logprobs && !c.stream) {
        json probs = json::array();
        for (const TokenLogprobs& t : g.logprobs)
            probs.push_back(probabilities_json(t, options.post_sampling_probs));
        out["completion_probabilities"] = std::move(probs);
    }
    return out;
}

json native_chunk_json(const StreamPiece& piece, int predicted, const NativeReplyContext& c) {
    json out = {{"index", c.index},
                {"content", piece.text},
                {"tokens", piece.token == no_token ? json::array() : json::array({piece.token})},
                {"stop", false},
                {"id_slot", -1},
                {"tokens_predicted", predicted},
                {"tokens_evaluated", c.prompt_tokens}};
    if (piece.logprobs)
        out["completion_probabilities"] =
            json::array({probabilities_json(*piece.logprobs, c.post_sampling_probs)});
    return out;
}

json select_fields(const json& reply, const std::vector<std::string>& paths) {
    json out = json::object();
    for (const std::string& path : paths) {
        const json* at = &reply;
        std::size_t from = 0;
        while (at && from <= path.size()) {
            const std::size_t slash = std::min(path.find('/', from), path.size());
            const std::string key = path.substr(from, slash - from);
            auto it = at->is_object() ? at->find(key) : at->end();
            at = at->is_object() && it != at->end() ? &*it : nullptr;
            from = slash + 1;
        }
        if (at) out[path] = *at;
    }
    return out;
}

}  // namespace llamapp::detail
