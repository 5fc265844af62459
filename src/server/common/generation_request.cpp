#include "server/common/generation_request.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace llamapp::detail {

using json = nlohmann::json;

[[noreturn]] void reject_field(const std::string& param, const std::string& message,
                               const char* code) {
    throw HttpException{invalid(param, message, code)};
}

double number_field(const json& v, const std::string& name, double lo, double hi) {
    if (!v.is_number())
        reject_field(name, fmt::format("'{}' must be a number", name), "invalid_type");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        reject_field(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
    return d;
}

long long integer_field(const json& v, const std::string& name, long long lo, long long hi) {
    if (v.is_number_integer()) {
        // Unsigned values above the signed range are out of range anyway.
        if (v.is_number_unsigned() &&
            v.get<unsigned long long>() >
                static_cast<unsigned long long>(std::numeric_limits<long long>::max()))
            reject_field(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
        const long long n = v.get<long long>();
        if (n < lo || n > hi)
            reject_field(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
        return n;
    }
    reject_field(name, fmt::format("'{}' must be an integer", name), "invalid_type");
}

bool bool_field(const json& v, const std::string& name) {
    if (!v.is_boolean())
        reject_field(name, fmt::format("'{}' must be a boolean", name), "invalid_type");
    return v.get<bool>();
}

namespace {

// Drafts for this request: `speculative: false` turns them off; llama-server's
// "speculative.n_max" / "speculative.n_min" (or the same in a `speculative` object) bound them.
void parse_speculative(const json& body, EngineRequest& out) {
    auto bound = [&](const json& v, const std::string& name) {
        return static_cast<int>(integer_field(v, name, 0, max_draft_tokens));
    };
    if (const json* v = optional_field(body, "speculative")) {
        if (v->is_boolean()) {
            if (!v->get<bool>()) out.draft_max = 0;
        } else if (v->is_object()) {
            if (const json* n = optional_field(*v, "n_max"))
                out.draft_max = bound(*n, "speculative.n_max");
            if (const json* n = optional_field(*v, "n_min"))
                out.draft_min = bound(*n, "speculative.n_min");
        } else {
            reject_field("speculative", "'speculative' must be a boolean or an object",
                         "invalid_type");
        }
    }
    if (const json* v = optional_field(body, "speculative.n_max"))
        out.draft_max = bound(*v, "speculative.n_max");
    if (const json* v = optional_field(body, "speculative.n_min"))
        out.draft_min = bound(*v, "speculative.n_min");
    if (out.draft_max >= 0 && out.draft_min > out.draft_max)
        reject_field("speculative.n_min", "'speculative.n_min' exceeds 'speculative.n_max'");
}

// Fields every generation request shares: sampling, limits, streaming, extensions.
void parse_common(const json& body, const RequestLimits& limits, const RequestDefaults& defaults,
                  GenerationRequest& out, bool chat) {
    GenerateOptions& o = out.engine.options;
    SamplingParams& s = o.sampling;
    s = defaults.sampling;
    if (const json* v = optional_field(body, "model")) out.model = string_field(*v, "model");
    if (const json* v = optional_field(body, "stream")) out.stream = bool_field(*v, "stream");
    if (const json* v = optional_field(body, "stream_options")) {
        if (!v->is_object())
            reject_field("stream_options", "'stream_options' must be an object", "invalid_type");
        if (const json* u = optional_field(*v, "include_usage"))
            out.include_usage = bool_field(*u, "stream_options.include_usage");
    }
    o.max_tokens = defaults.max_tokens > 0 ? std::min(defaults.max_tokens, limits.max_tokens)
                                           : limits.max_tokens;
    // llama-server's n_predict: -1 leaves the default, more than the context holds ends with the
    // context (finish "length"), as it does there.
    if (const json* v = optional_field(body, "n_predict")) {
        const long long n = integer_field(*v, "n_predict", -1, std::numeric_limits<int>::max());
        if (n >= 0) o.max_tokens = static_cast<int>(std::clamp<long long>(n, 1, limits.max_tokens));
    }
    for (const char* name : {"max_tokens", "max_completion_tokens"}) {
        if (const json* v = optional_field(body, name))
            o.max_tokens = static_cast<int>(integer_field(*v, name, 1, limits.max_tokens));
    }
    parse_sampling_fields(body, limits, chat, out);
    if (const json* v = optional_field(body, "session"))
        out.engine.session = string_field(*v, "session");
    if (const json* v = optional_field(body, "verbose")) out.verbose = bool_field(*v, "verbose");
    if (const json* v = optional_field(body, "timings_per_token"))
        out.telemetry.timings_per_token = bool_field(*v, "timings_per_token");
    if (const json* v = optional_field(body, "return_progress"))
        out.telemetry.return_progress = bool_field(*v, "return_progress");
    out.engine.report_progress = out.stream && out.telemetry.any();
    // llama-server's slot pinning; the engine checks the slot exists.
    if (const json* v = optional_field(body, "id_slot"))
        out.engine.slot =
            static_cast<int>(integer_field(*v, "id_slot", -1, std::numeric_limits<int>::max()));
    if (const json* v = optional_field(body, "ignore_eos"))
        o.ignore_eos = bool_field(*v, "ignore_eos");
    parse_speculative(body, out.engine);
    if (const json* v = optional_field(body, "cache_prompt"))
        o.reuse_prefix = bool_field(*v, "cache_prompt");
    // llama-server's names for the thinking budget.
    for (const char* name : {"reasoning_budget_tokens", "thinking_budget_tokens"})
        if (const json* v = optional_field(body, name))
            s.reasoning.tokens =
                static_cast<int>(integer_field(*v, name, -1, std::numeric_limits<int>::max()));
    if (const json* v = optional_field(body, "reasoning_budget_message"))
        s.reasoning.message = string_field(*v, "reasoning_budget_message");
    out.render.split_reasoning = defaults.split_reasoning;
    out.render.template_variables = defaults.template_variables;
    if (const auto it = defaults.template_variables.find("enable_thinking");
        it != defaults.template_variables.end())
        out.render.enable_thinking = it->second == "true";
    if (const json* v = optional_field(body, "reasoning_format")) {
        const std::string f = string_field(*v, "reasoning_format");
        if (f != "none" && f != "deepseek" && f != "auto")
            reject_field("reasoning_format", "must be none, deepseek or auto");
        out.render.split_reasoning = f != "none";
    }
}

const json& object_field(const json& parent, const char* name, const std::string& where) {
    const json* v = optional_field(parent, name);
    if (!v)
        reject_field(where + "." + name, fmt::format("'{}' is required", name),
                     "missing_required_parameter");
    if (!v->is_object())
        reject_field(where + "." + name, fmt::format("'{}' must be an object", name),
                     "invalid_type");
    return *v;
}

void require_function_type(const json& item, const std::string& where) {
    const json* type = optional_field(item, "type");
    if (type && string_field(*type, where + ".type") != "function")
        reject_field(where + ".type", "only 'function' is supported");
}

// tools, tool_choice and parallel_tool_calls. Tool names and schemas are checked again, with the
// same rules, when the template renders them.
void parse_tools(const json& body, ChatRenderOptions& render) {
    if (const json* tools = optional_field(body, "tools")) {
        if (!tools->is_array()) reject_field("tools", "'tools' must be an array", "invalid_type");
        for (std::size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string where = fmt::format("tools[{}]", i);
            if (!t.is_object()) reject_field(where, "each tool must be an object", "invalid_type");
            require_function_type(t, where);
            render.tools.push_back(tool_definition(object_field(t, "function", where),
                                                   where + ".function", "parameters", false));
        }
    }
    render.parallel_tool_calls = true;  // OpenAI's default
    if (const json* v = optional_field(body, "parallel_tool_calls"))
        render.parallel_tool_calls = bool_field(*v, "parallel_tool_calls");
    const json* choice = optional_field(body, "tool_choice");
    if (!choice) return;
    if (choice->is_string()) {
        const std::string c = choice->get<std::string>();
        if (c == "auto")
            render.tool_choice = ToolChoice::automatic;
        else if (c == "none")
            render.tool_choice = ToolChoice::none;
        else if (c == "required")
            render.tool_choice = ToolChoice::required;
        else
            reject_field("tool_choice", "must be auto, none, required or a function");
    } else if (choice->is_object()) {
        require_function_type(*choice, "tool_choice");
        render.forced_tool = required_string(object_field(*choice, "function", "tool_choice"),
                                             "name", "tool_choice.function");
        render.tool_choice = ToolChoice::required;
    } else {
        reject_field("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
    }
    if (render.tool_choice == ToolChoice::required && render.tools.empty())
        reject_field("tool_choice", "a required tool call needs 'tools'");
}

// An assistant message's earlier calls: [{id, type, function: {name, arguments}}].
std::vector<ToolCall> message_tool_calls(const json& calls, const std::string& where) {
    if (!calls.is_array()) reject_field(where, "'tool_calls' must be an array", "invalid_type");
    std::vector<ToolCall> out;
    for (std::size_t i = 0; i < calls.size(); ++i) {
        const json& c = calls[i];
        const std::string at = fmt::format("{}[{}]", where, i);
        if (!c.is_object()) reject_field(at, "each tool call must be an object", "invalid_type");
        require_function_type(c, at);
        const json& f = object_field(c, "function", at);
        ToolCall call;
        call.id = required_string(c, "id", at);
        call.name = required_string(f, "name", at + ".function");
        call.arguments = required_string(f, "arguments", at + ".function");
        if (!json::accept(call.arguments))
            reject_field(at + ".function.arguments", "'arguments' must be JSON text");
        out.push_back(std::move(call));
    }
    return out;
}

// Text parts on lines of their own, as llama-server joins them (`delimiter`: llama.cpp renders a
// continued message's parts a blank line apart).
std::string message_content(const json& content, const std::string& name,
                            const char* delimiter = "\n") {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        reject_field(name, "content must be a string or an array of text parts", "invalid_type");
    std::string text;
    for (const auto& part : content) {
        if (!part.is_object()) reject_field(name, "content parts must be objects", "invalid_type");
        const json* type = optional_field(part, "type");
        if (!type || string_field(*type, name + ".type") != "text")
            reject_field(name, "only text content parts are supported");
        const json* t = optional_field(part, "text");
        if (!t) reject_field(name, "a text part needs 'text'");
        if (!text.empty()) text += delimiter;
        text += string_field(*t, name + ".text");
    }
    return text;
}

}  // namespace

json parse_body(const std::string& body) {
    // Copying, comparing and dumping a value recurse once per level: a body nested a million
    // deep would overflow a connection thread's stack. No request needs more than a few levels
    // (a tool's schema the most).
    constexpr int max_depth = 128;
    bool too_deep = false;
    json j = json::parse(
        body,
        [&](int depth, json::parse_event_t, json&) {
            too_deep = too_deep || depth > max_depth;
            return !too_deep;
        },
        false);
    if (too_deep)
        reject_field("", fmt::format("the request body nests deeper than {} levels", max_depth),
                     "invalid_json");
    if (j.is_discarded()) reject_field("", "the request body is not valid JSON", "invalid_json");
    if (!j.is_object()) reject_field("", "the request body must be a JSON object", "invalid_type");
    return j;
}

const json* optional_field(const json& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& value, const std::string& name) {
    if (!value.is_string())
        reject_field(name, fmt::format("'{}' must be a string", name), "invalid_type");
    return value.get<std::string>();
}

std::string required_string(const json& parent, const char* name, const std::string& where) {
    const json* v = optional_field(parent, name);
    if (!v)
        reject_field(where + "." + name, fmt::format("'{}' is required", name),
                     "missing_required_parameter");
    return string_field(*v, where + "." + name);
}

ToolDefinition tool_definition(const json& tool, const std::string& where, const char* schema_field,
                               bool schema_required) {
    ToolDefinition out;
    out.name = required_string(tool, "name", where);
    if (const json* d = optional_field(tool, "description"))
        out.description = string_field(*d, where + ".description");
    const json* schema = optional_field(tool, schema_field);
    if (schema && !schema->is_object())
        reject_field(where + "." + schema_field,
                     fmt::format("'{}' must be a JSON schema object", schema_field),
                     "invalid_type");
    if (!schema && schema_required)
        reject_field(where + "." + schema_field,
                     fmt::format("'{}' is required: a JSON schema object", schema_field),
                     "missing_required_parameter");
    if (schema) out.parameters = schema->dump();
    return out;
}

void apply_reasoning_effort(const json& effort, const std::string& param, GenerationRequest& g) {
    // Tokens of thinking per effort; xhigh leaves it unlimited.
    static const std::map<std::string, int> budgets = {{"none", 0},     {"minimal", 256},
                                                       {"low", 1024},   {"medium", 4096},
                                                       {"high", 16384}, {"xhigh", -1}};
    const std::string e = string_field(effort, param);
    const auto it = budgets.find(e);
    if (it == budgets.end())
        reject_field(param, "must be none, minimal, low, medium, high or xhigh");
    if (e == "none") {
        g.render.enable_thinking = false;
        return;
    }
    g.render.enable_thinking = true;
    g.render.template_variables["reasoning_effort"] = json(e).dump();
    g.engine.options.sampling.reasoning.tokens = it->second;
}

void refuse_tools_with_grammar(const GenerationRequest& g, const std::string& param) {
    const SamplingParams& s = g.engine.options.sampling;
    if (!g.render.tools.empty() && g.render.tool_choice != ToolChoice::none &&
        (!s.grammar.empty() || !s.json_schema.empty()))
        reject_field(param,
                     "tool calls follow their own grammar; drop the tools or set tool_choice to "
                     "none to constrain the answer");
}

namespace {

// OpenAI's n: several replies to one prompt, on /v1/completions and /v1/chat/completions.
void parse_choices(const json& body, GenerationRequest& out) {
    if (const json* v = optional_field(body, "n"))
        out.choices = static_cast<int>(integer_field(*v, "n", 1, max_choices));
}

}  // namespace

GenerationRequest parse_generation(const json& body, const RequestLimits& limits,
                                   const RequestDefaults& defaults) {
    GenerationRequest out;
    parse_common(body, limits, defaults, out, false);
    if (const json* v = optional_field(body, "n"); v && integer_field(*v, "n", 1, 1) != 1)
        reject_field("n", "only n = 1 is supported");
    return out;
}

GenerationRequest parse_completion(const json& body, const RequestLimits& limits,
                                   const RequestDefaults& defaults) {
    GenerationRequest out;
    parse_common(body, limits, defaults, out, false);
    parse_choices(body, out);
    const json* prompt = optional_field(body, "prompt");
    if (!prompt) reject_field("prompt", "'prompt' is required", "missing_required_parameter");
    if (prompt->is_string()) {
        out.prompt_text = prompt->get<std::string>();
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
        out.prompt_text = (*prompt)[0].get<std::string>();
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
        for (const auto& t : *prompt)
            out.engine.prompt.push_back(
                static_cast<Token>(integer_field(t, "prompt", 0, limits.vocab_size - 1)));
    } else {
        reject_field("prompt", "'prompt' must be a string, one string in an array, or token ids",
                     "invalid_type");
    }
    if (out.prompt_text.empty() && out.engine.prompt.empty())
        reject_field("prompt", "'prompt' must not be empty");
    return out;
}

// continue_final_message (vLLM's and transformers' name), or llama-server's prefill: a last
// message from the assistant is continued rather than answered.
void parse_continuation(const json& body, const json& last, bool prefill, GenerationRequest& out) {
    ChatRenderOptions& r = out.render;
    if (const json* v = optional_field(body, "continue_final_message")) {
        if (v->is_boolean()) {
            if (v->get<bool>()) r.continue_final_message = ChatContinuation::automatic;
        } else if (v->is_string() && v->get<std::string>() == "content") {
            r.continue_final_message = ChatContinuation::content;
        } else if (v->is_string() && v->get<std::string>() == "reasoning_content") {
            r.continue_final_message = ChatContinuation::reasoning;
        } else {
            reject_field("continue_final_message",
                         "must be a boolean, \"content\" or \"reasoning_content\"");
        }
        if (r.continue_final_message != ChatContinuation::none && r.add_generation_prompt)
            reject_field(
                "continue_final_message",
                "Cannot set both add_generation_prompt and continue_final_message to true.");
    } else if (prefill && out.messages.back().role == "assistant") {
        r.continue_final_message = ChatContinuation::automatic;
        r.add_generation_prompt = false;
    }
    if (r.continue_final_message == ChatContinuation::none) return;
    ChatMessage& continued = out.messages.back();
    if (continued.role != "assistant")
        reject_field("continue_final_message", "the last message must be the assistant's");
    if (!continued.tool_calls.empty())
        reject_field("continue_final_message",
                     "Cannot continue an assistant message that contains tool calls.");
    if (const json* content = optional_field(last, "content"); content && content->is_array())
        continued.content = message_content(*content, "messages.content", "\n\n");
}

GenerationRequest parse_chat(const json& body, const RequestLimits& limits,
                             const RequestDefaults& defaults) {
    GenerationRequest out;
    parse_common(body, limits, defaults, out, true);
    parse_choices(body, out);
    const json* messages = optional_field(body, "messages");
    if (!messages) reject_field("messages", "'messages' is required", "missing_required_parameter");
    if (!messages->is_array())
        reject_field("messages", "'messages' must be an array", "invalid_type");
    if (messages->empty()) reject_field("messages", "'messages' must not be empty");
    for (std::size_t i = 0; i < messages->size(); ++i) {
        const json& m = (*messages)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) reject_field(where, "each message must be an object", "invalid_type");
        ChatMessage msg;
        const json* role = optional_field(m, "role");
        if (!role)
            reject_field(where + ".role", "'role' is required", "missing_required_parameter");
        msg.role = string_field(*role, "role");
        if (msg.role == "developer") msg.role = "system";
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
            msg.role != "tool")
            reject_field(where + ".role",
                         "role must be system, developer, user, assistant or tool");
        const json* content = optional_field(m, "content");
        if (content) {
            msg.content = message_content(*content, where + ".content");
        } else if (msg.role != "assistant") {
            reject_field(where + ".content", "'content' is required", "missing_required_parameter");
        }
        if (const json* v = optional_field(m, "name")) msg.name = string_field(*v, "name");
        if (msg.role == "tool") msg.tool_call_id = required_string(m, "tool_call_id", where);
        if (msg.role == "assistant") {
            if (const json* v = optional_field(m, "tool_calls"))
                msg.tool_calls = message_tool_calls(*v, where + ".tool_calls");
            if (const json* v = optional_field(m, "reasoning_content"))
                msg.reasoning_content = string_field(*v, where + ".reasoning_content");
        }
        out.messages.push_back(std::move(msg));
    }
    if (defaults.enable_thinking) out.render.enable_thinking = *defaults.enable_thinking;
    if (out.messages.size() >= 2 && out.messages.back().role == "assistant" &&
        out.messages[out.messages.size() - 2].role == "assistant")
        reject_field("messages",
                     "Cannot have 2 or more assistant messages at the end of the list.");
    if (const json* v = optional_field(body, "add_generation_prompt"))
        out.render.add_generation_prompt = bool_field(*v, "add_generation_prompt");
    parse_continuation(body, messages->back(), defaults.prefill_assistant, out);
    parse_tools(body, out.render);
    if (const json* v = optional_field(body, "reasoning_effort"))
        apply_reasoning_effort(*v, "reasoning_effort", out);
    if (const json* v = optional_field(body, "chat_template_kwargs")) {
        if (!v->is_object())
            reject_field("chat_template_kwargs", "'chat_template_kwargs' must be an object",
                         "invalid_type");
        for (const auto& [name, value] : v->items()) {
            if (name == "enable_thinking")
                out.render.enable_thinking =
                    bool_field(value, "chat_template_kwargs.enable_thinking");
            out.render.template_variables[name] = value.dump();
        }
    }
    refuse_tools_with_grammar(
        out, out.engine.options.sampling.grammar.empty() ? "response_format" : "grammar");
    return out;
}

}  // namespace llamapp::detail
