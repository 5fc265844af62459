// The sampling fields of a generation request (OpenAI's and llama-server's): temperature and
// the other samplers, stop strings, logit_bias, logprobs and response_format.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "server/common/generation_request.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

float float_field(const json& body, const char* name, double lo, double hi, float current) {
    const json* v = optional_field(body, name);
    return v ? static_cast<float>(number_field(*v, name, lo, hi)) : current;
}

int int_field(const json& body, const char* name, long long lo, long long hi, int current) {
    const json* v = optional_field(body, name);
    return v ? static_cast<int>(integer_field(*v, name, lo, hi)) : current;
}

// llama-server's further samplers, accepted on every route as it accepts them.
void parse_llama_sampling(const json& body, SamplingParams& s) {
    s.typical_p = float_field(body, "typical_p", 0, 1, s.typical_p);
    s.penalty_last_n = int_field(body, "repeat_last_n", -1, 1 << 20, s.penalty_last_n);
    s.dry_multiplier = float_field(body, "dry_multiplier", 0, 100, s.dry_multiplier);
    s.dry_base = float_field(body, "dry_base", 1, 100, s.dry_base);
    s.dry_allowed_length = int_field(body, "dry_allowed_length", 0, 1 << 20, s.dry_allowed_length);
    s.dry_penalty_last_n = int_field(body, "dry_penalty_last_n", -1, 1 << 20, s.dry_penalty_last_n);
    if (const json* v = optional_field(body, "dry_sequence_breakers")) {
        if (!v->is_array() || v->empty())
            reject_field("dry_sequence_breakers", "must be a non-empty array of strings");
        s.dry_sequence_breakers.clear();
        for (const json& b : *v)
            s.dry_sequence_breakers.push_back(string_field(b, "dry_sequence_breakers"));
    }
    s.xtc_probability = float_field(body, "xtc_probability", 0, 1, s.xtc_probability);
    s.xtc_threshold = float_field(body, "xtc_threshold", 0, 1, s.xtc_threshold);
    s.mirostat = int_field(body, "mirostat", 0, 2, s.mirostat);
    s.mirostat_tau = float_field(body, "mirostat_tau", 0, 100, s.mirostat_tau);
    s.mirostat_eta = float_field(body, "mirostat_eta", 0, 1, s.mirostat_eta);
}

// temperature, top_p, top_k, min_p, the penalties and the seed.
void parse_sampling(const json& body, const RequestLimits& limits, SamplingParams& s) {
    if (const json* v = optional_field(body, "temperature"))
        s.temperature = static_cast<float>(number_field(*v, "temperature", 0, 2));
    if (const json* v = optional_field(body, "top_p"))
        s.top_p = static_cast<float>(number_field(*v, "top_p", 0, 1));
    if (const json* v = optional_field(body, "top_k"))
        s.top_k = static_cast<int>(integer_field(*v, "top_k", 0, limits.vocab_size));
    if (const json* v = optional_field(body, "min_p"))
        s.min_p = static_cast<float>(number_field(*v, "min_p", 0, 1));
    if (const json* v = optional_field(body, "presence_penalty"))
        s.presence_penalty = static_cast<float>(number_field(*v, "presence_penalty", -2, 2));
    if (const json* v = optional_field(body, "frequency_penalty"))
        s.frequency_penalty = static_cast<float>(number_field(*v, "frequency_penalty", -2, 2));
    if (const json* v = optional_field(body, "repeat_penalty"))
        s.repeat_penalty = static_cast<float>(number_field(*v, "repeat_penalty", 0, 10));
    if (const json* v = optional_field(body, "seed")) {
        // Any 64-bit integer; the sampler takes its low 32 bits.
        s.seed = static_cast<std::uint32_t>(integer_field(*v, "seed",
                                                          std::numeric_limits<long long>::min(),
                                                          std::numeric_limits<long long>::max()));
    }
}

void parse_stop(const json& body, const RequestLimits& limits, GenerateOptions& o) {
    if (const json* v = optional_field(body, "stop")) {
        if (v->is_string()) {
            o.stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            if (v->size() > static_cast<std::size_t>(limits.max_stop_strings))
                reject_field("stop",
                             fmt::format("at most {} stop strings", limits.max_stop_strings));
            for (const auto& item : *v) o.stop.push_back(string_field(item, "stop"));
        } else {
            reject_field("stop", "'stop' must be a string or an array of strings", "invalid_type");
        }
        for (const auto& stop : o.stop) {
            if (stop.empty()) reject_field("stop", "stop strings must not be empty");
        }
    }
}

// A bias for every token of `text` (llama-server's logit_bias keyed by text).
void bias_text(const std::string& text, float bias, const RequestLimits& limits,
               SamplingParams& s) {
    if (!limits.tokenizer) reject_field("logit_bias", fmt::format("'{}' is not a token id", text));
    auto tokens = limits.tokenizer->encode(text, TokenizeOptions{.add_special = false});
    if (!tokens || tokens->empty())
        reject_field("logit_bias", fmt::format("'{}' is no text of this model", text));
    for (Token t : *tokens) s.logit_bias.push_back({t, bias});
}

// A bias value; llama-server's false bans the token.
float bias_value(const json& v) {
    if (v.is_boolean() && !v.get<bool>()) return -std::numeric_limits<float>::infinity();
    return static_cast<float>(number_field(v, "logit_bias", -100, 100));
}

// llama-server's array form, [[token id or text, bias or false], ...].
void parse_logit_bias_pairs(const json& pairs, const RequestLimits& limits, SamplingParams& s) {
    for (const json& pair : pairs) {
        if (!pair.is_array() || pair.size() != 2 ||
            !(pair[0].is_number_integer() || pair[0].is_string()))
            reject_field("logit_bias", "each entry is [token id or text, bias or false]",
                         "invalid_type");
        const float bias = bias_value(pair[1]);
        if (pair[0].is_string()) {
            bias_text(pair[0].get<std::string>(), bias, limits, s);
            continue;
        }
        s.logit_bias.push_back(
            {static_cast<Token>(integer_field(pair[0], "logit_bias", 0, limits.vocab_size - 1)),
             bias});
    }
}

void parse_logit_bias(const json& body, const RequestLimits& limits, SamplingParams& s) {
    if (const json* v = optional_field(body, "logit_bias")) {
        if (v->is_array()) return parse_logit_bias_pairs(*v, limits, s);
        if (!v->is_object())
            reject_field("logit_bias", "'logit_bias' must be an object", "invalid_type");
        for (const auto& [key, bias] : v->items()) {
            std::size_t used = 0;
            long token = -1;
            try {
                token = std::stol(key, &used);
            } catch (...) {
                used = 0;
            }
            if (used != key.size() && limits.tokenizer) {
                bias_text(key, bias_value(bias), limits, s);
                continue;
            }
            if (used != key.size() || token < 0 || token >= limits.vocab_size)
                reject_field("logit_bias",
                             fmt::format("'{}' is not a token id of this model", key));
            s.logit_bias.push_back({static_cast<Token>(token), bias_value(bias)});
        }
    }
}

// Chat: logprobs (bool) and top_logprobs; completions: logprobs (the number of alternatives).
void parse_logprobs(const json& body, bool chat, GenerationRequest& out) {
    if (chat) {
        if (const json* v = optional_field(body, "logprobs"))
            out.logprobs = bool_field(*v, "logprobs");
        if (const json* v = optional_field(body, "top_logprobs")) {
            out.top_logprobs = static_cast<int>(integer_field(*v, "top_logprobs", 0, 20));
            if (!out.logprobs)
                reject_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
    } else if (const json* v = optional_field(body, "logprobs")) {
        out.top_logprobs = static_cast<int>(integer_field(*v, "logprobs", 0, 5));
        out.logprobs = true;
    }
    if (const json* v = optional_field(body, "n_probs")) {  // llama-server's name
        out.top_logprobs = static_cast<int>(integer_field(*v, "n_probs", 0, max_top_logprobs));
        out.logprobs = out.top_logprobs > 0;
    }
    out.engine.options.logprobs = out.logprobs;
    out.engine.options.top_logprobs = out.top_logprobs;
}

// JSON mode and JSON schema, enforced by grammar.
void parse_response_format(const json& body, SamplingParams& s) {
    if (const json* v = optional_field(body, "response_format")) {
        if (!v->is_object())
            reject_field("response_format", "'response_format' must be an object", "invalid_type");
        const json* type = optional_field(*v, "type");
        const std::string t = type ? string_field(*type, "response_format.type") : "";
        if (t == "json_object") {
            // llama-server's extension: a schema beside json_object constrains it further.
            const json* schema = optional_field(*v, "schema");
            if (schema && !schema->is_object())
                reject_field("response_format.schema", "must be a JSON schema object",
                             "invalid_type");
            s.json_schema = schema ? schema->dump() : R"({"type":"object"})";
        } else if (t == "json_schema") {
            const json* spec = optional_field(*v, "json_schema");
            const json* schema =
                spec && spec->is_object() ? optional_field(*spec, "schema") : nullptr;
            if (!schema || !schema->is_object())
                reject_field("response_format.json_schema.schema",
                             "a JSON schema object is required");
            s.json_schema = schema->dump();
        } else if (t != "text") {
            reject_field("response_format.type", "must be one of text, json_object, json_schema");
        }
    }
    if (const json* v = optional_field(body, "json_schema")) {  // llama-server's field
        if (!v->is_object())
            reject_field("json_schema", "must be a JSON schema object", "invalid_type");
        if (!s.json_schema.empty())
            reject_field("json_schema", "'json_schema' and response_format exclude each other");
        s.json_schema = v->dump();
    }
    if (const json* v = optional_field(body, "grammar")) {
        s.grammar = string_field(*v, "grammar");
        if (!s.json_schema.empty())
            reject_field("grammar", "'grammar' and a JSON response_format exclude each other");
    }
}

}  // namespace

void parse_sampling_fields(const json& body, const RequestLimits& limits, bool chat,
                           GenerationRequest& out) {
    SamplingParams& s = out.engine.options.sampling;
    parse_sampling(body, limits, s);
    parse_llama_sampling(body, s);
    parse_stop(body, limits, out.engine.options);
    parse_logit_bias(body, limits, s);
    parse_logprobs(body, chat, out);
    parse_response_format(body, s);
}

}  // namespace llamapp::detail
