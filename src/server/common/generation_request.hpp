// Internal: the neutral generation request every protocol parses into, and the parser of the
// chat and completion bodies (OpenAI's shape, which the other protocols translate into), checked
// field by field (type, range, known values). Every problem is an HttpException naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "llamapp/chat.hpp"
#include "llamapp/engine.hpp"
#include "llamapp/model_manager.hpp"
#include "server/common/telemetry.hpp"
#include "server/http/http_error.hpp"

namespace llamapp::detail {

struct RequestLimits {
    int max_tokens = 0;  // largest max_tokens accepted
    int max_stop_strings = 16;
    int vocab_size = 0;
    // For llama-server's logit_bias keyed by text: every token of the text gets the bias.
    std::optional<Tokenizer> tokenizer;
};

// A generation as every protocol asks for it.
inline constexpr int max_choices = 16;  // a request's n

struct GenerationRequest {
    EngineRequest engine;  // prompt empty until rendered / tokenized
    std::string model;
    int choices = 1;  // n: replies to the same prompt, each its own engine request (whole only)
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    // /v1/completions
    std::string prompt_text;  // or engine.prompt when the prompt was token ids
    // /v1/chat/completions
    std::vector<ChatMessage> messages;
    ChatRenderOptions render;     // tools and tool_choice
    std::optional<bool> verbose;  // llama-server's __verbose object; unset: the server's default
    StreamTelemetry telemetry;    // streamed: llama-server's timings_per_token, return_progress
};

// Parses the body text; invalid JSON is a 400 like any other bad field.
nlohmann::json parse_body(const std::string& body);

// A field the body leaves out takes the model's default (`defaults`).
GenerationRequest parse_completion(const nlohmann::json& body, const RequestLimits& limits,
                                   const RequestDefaults& defaults);
GenerationRequest parse_chat(const nlohmann::json& body, const RequestLimits& limits,
                             const RequestDefaults& defaults);
// The fields every generation shares, without a prompt (llama-server's /completion has prompt
// forms of its own).
GenerationRequest parse_generation(const nlohmann::json& body, const RequestLimits& limits,
                                   const RequestDefaults& defaults);

// One function tool: name, description and the JSON schema under `schema_field` (a tool without
// one takes no arguments unless `schema_required`). `where` names the tool in errors.
ToolDefinition tool_definition(const nlohmann::json& tool, const std::string& where,
                               const char* schema_field, bool schema_required);
// OpenAI's reasoning effort (none, minimal, low, medium, high, xhigh): passed to the template as
// llama-server passes it, and a thinking budget for it; none turns thinking off. `param` names
// the field in errors.
void apply_reasoning_effort(const nlohmann::json& effort, const std::string& param,
                            GenerationRequest& g);
// Tool calls follow their own grammar: a request with tools in play and a grammar or JSON schema
// of its own is refused, naming `param`.
void refuse_tools_with_grammar(const GenerationRequest& g, const std::string& param);
std::string required_string(const nlohmann::json& parent, const char* name,
                            const std::string& where);

// Temperature and the other samplers, stop, logit_bias, logprobs and response_format, over
// what `out` holds (the model's defaults); sampling_fields.cpp.
void parse_sampling_fields(const nlohmann::json& body, const RequestLimits& limits, bool chat,
                           GenerationRequest& out);

// Typed field access for the other endpoints; a value of the wrong type or range is an
// HttpException naming the field.
const nlohmann::json* optional_field(const nlohmann::json& body, const char* name);
std::string string_field(const nlohmann::json& value, const std::string& name);
double number_field(const nlohmann::json& v, const std::string& name, double lo, double hi);
long long integer_field(const nlohmann::json& v, const std::string& name, long long lo,
                        long long hi);
bool bool_field(const nlohmann::json& v, const std::string& name);
[[noreturn]] void reject_field(const std::string& param, const std::string& message,
                               const char* code = "invalid_value");

}  // namespace llamapp::detail
