// Internal: OpenAI request bodies checked field by field (type, range, known values) and turned
// into engine requests. Every problem is an HttpException naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "llamapp/chat.hpp"
#include "llamapp/engine.hpp"
#include "llamapp/model_manager.hpp"
#include "server/http_error.hpp"

namespace llamapp::detail {

struct RequestLimits {
    int max_tokens = 0;  // largest max_tokens accepted
    int max_stop_strings = 16;
    int vocab_size = 0;
};

// What /v1/completions and /v1/chat/completions share.
struct GenerationRequest {
    EngineRequest engine;  // prompt empty until rendered / tokenized
    std::string model;
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    // /v1/completions
    std::string prompt_text;  // or engine.prompt when the prompt was token ids
    // /v1/chat/completions
    std::vector<ChatMessage> messages;
    ChatRenderOptions render;  // tools and tool_choice
};

// Parses the body text; invalid JSON is a 400 like any other bad field.
nlohmann::json parse_body(const std::string& body);

// A field the body leaves out takes the model's default (`defaults`).
GenerationRequest parse_completion(const nlohmann::json& body, const RequestLimits& limits,
                                   const RequestDefaults& defaults);
GenerationRequest parse_chat(const nlohmann::json& body, const RequestLimits& limits,
                             const RequestDefaults& defaults);

// Typed field access for the other endpoints.
const nlohmann::json* optional_field(const nlohmann::json& body, const char* name);
std::string string_field(const nlohmann::json& value, const std::string& name);

}  // namespace llamapp::detail
