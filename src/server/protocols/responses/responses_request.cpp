// OpenAI Responses requests: input as text or items (messages, function calls and their outputs,
// reasoning), instructions, function tools, text.format and reasoning, checked field by field
// like the other routes; previous_response_id continues a stored conversation.
#include <fmt/core.h>

#include <map>
#include <optional>

#include "server/protocols/responses/responses.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

std::string item_type(const json& item, const std::string& where) {
    const json* type = optional_field(item, "type");
    return type ? string_field(*type, where + ".type") : std::string();
}

[[noreturn]] void reject_part(const std::string& type, const std::string& where) {
    if (type == "input_image" || type == "input_file" || type == "input_audio")
        reject_field(where, fmt::format("{} is not supported: this server has text models only",
                                        type.substr(6)));
    reject_field(where + ".type", fmt::format("'{}' content is not supported here", type));
}

// A message's content: text, or text parts (input_text, output_text, refusal) on their own lines.
std::string content_text(const json& content, const std::string& where) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        reject_field(where, "must be a string or an array of content parts", "invalid_type");
    std::string text;
    for (std::size_t i = 0; i < content.size(); ++i) {
        const std::string at = fmt::format("{}[{}]", where, i);
        if (!content[i].is_object())
            reject_field(at, "each content part must be an object", "invalid_type");
        const std::string type = item_type(content[i], at);
        const char* field = type == "refusal" ? "refusal" : "text";
        if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal")
            reject_part(type, at);
        if (!text.empty()) text += '\n';
        text += required_string(content[i], field, at);
    }
    return text;
}

// Reasoning items carry their text as reasoning_text content or as summary_text parts.
std::string reasoning_text(const json& item, const std::string& where) {
    std::string text;
    for (const char* field : {"content", "summary"}) {
        const json* parts = optional_field(item, field);
        if (!parts) continue;
        if (!parts->is_array())
            reject_field(where + "." + field, fmt::format("'{}' must be an array", field),
                         "invalid_type");
        for (std::size_t i = 0; i < parts->size(); ++i) {
            const std::string at = fmt::format("{}.{}[{}]", where, field, i);
            if (!(*parts)[i].is_object())
                reject_field(at, "each part must be an object", "invalid_type");
            if (!text.empty()) text += '\n';
            text += required_string((*parts)[i], "text", at);
        }
        if (!text.empty()) break;  // the full reasoning when there is one, else its summary
    }
    return text;
}

// Input items in llamapp's roles. Consecutive assistant items (reasoning, message, calls) make
// one assistant turn; a function_call_output becomes a tool message named after its call.
class InputItems {
  public:
    explicit InputItems(std::vector<ChatMessage> earlier) : messages(std::move(earlier)) {
        for (const ChatMessage& m : messages)
            for (const ToolCall& c : m.tool_calls) tool_names_[c.id] = c.name;
    }

    void add(const json& item, const std::string& where) {
        if (!item.is_object())
            reject_field(where, "each input item must be an object", "invalid_type");
        const std::string type = item_type(item, where);
        if (type.empty() || type == "message") return add_message(item, where);
        if (type == "function_call") return add_call(item, where);
        if (type == "function_call_output") return add_output(item, where);
        if (type == "reasoning") {
            assistant_turn().reasoning_content += reasoning_text(item, where);
            return;
        }
        if (type == "item_reference")
            reject_field(where + ".type",
                         "item references are not supported; continue with previous_response_id");
        reject_field(where + ".type", fmt::format("'{}' input items are not supported here", type));
    }

    std::vector<ChatMessage> messages;

  private:
    void add_message(const json& item, const std::string& where) {
        std::string role = required_string(item, "role", where);
        if (role == "developer") role = "system";
        if (role != "user" && role != "assistant" && role != "system")
            reject_field(where + ".role", "role must be user, assistant, system or developer");
        const json* content = optional_field(item, "content");
        if (!content)
            reject_field(where + ".content", "'content' is required", "missing_required_parameter");
        std::string text = content_text(*content, where + ".content");
        if (role != "assistant") {
            messages.push_back({.role = role, .content = std::move(text)});
            return;
        }
        ChatMessage& m = assistant_turn();
        if (!m.content.empty() && !text.empty()) m.content += '\n';
        m.content += text;
    }

    void add_call(const json& item, const std::string& where) {
        ToolCall call{required_string(item, "call_id", where), required_string(item, "name", where),
                      required_string(item, "arguments", where)};
        if (!json::accept(call.arguments))
            reject_field(where + ".arguments", "'arguments' must be JSON text");
        tool_names_[call.id] = call.name;
        assistant_turn().tool_calls.push_back(std::move(call));
    }

    void add_output(const json& item, const std::string& where) {
        ChatMessage m{.role = "tool"};
        m.tool_call_id = required_string(item, "call_id", where);
        if (auto it = tool_names_.find(m.tool_call_id); it != tool_names_.end())
            m.name = it->second;
        const json* output = optional_field(item, "output");
        if (!output)
            reject_field(where + ".output", "'output' is required", "missing_required_parameter");
        m.content = content_text(*output, where + ".output");
        messages.push_back(std::move(m));
    }

    // The assistant turn an item belongs to: the last message when it is the assistant's.
    ChatMessage& assistant_turn() {
        if (messages.empty() || messages.back().role != "assistant")
            messages.push_back({.role = "assistant"});
        return messages.back();
    }

    std::map<std::string, std::string> tool_names_;  // call_id -> function name
};

// tools: [{type: "function", name, description, parameters, strict}]; tool_choice: auto, none,
// required or {type: "function", name}.
void parse_tools(const json& body, ChatRenderOptions& render) {
    if (const json* tools = optional_field(body, "tools")) {
        if (!tools->is_array()) reject_field("tools", "'tools' must be an array", "invalid_type");
        for (std::size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string at = fmt::format("tools[{}]", i);
            if (!t.is_object()) reject_field(at, "each tool must be an object", "invalid_type");
            if (const std::string type = item_type(t, at); type != "function")
                reject_field(
                    at + ".type",
                    fmt::format("'{}' tools are not supported; only function tools are", type));
            render.tools.push_back(tool_definition(t, at, "parameters", false));
        }
    }
    render.parallel_tool_calls = true;
    if (const json* v = optional_field(body, "parallel_tool_calls"))
        render.parallel_tool_calls = bool_field(*v, "parallel_tool_calls");
    const json* choice = optional_field(body, "tool_choice");
    if (!choice) return;
    if (choice->is_object()) {
        if (item_type(*choice, "tool_choice") != "function")
            reject_field("tool_choice.type", "only a function may be chosen");
        render.forced_tool = required_string(*choice, "name", "tool_choice");
        render.tool_choice = ToolChoice::required;
    } else {
        const std::string c = string_field(*choice, "tool_choice");
        if (c == "auto")
            render.tool_choice = ToolChoice::automatic;
        else if (c == "none")
            render.tool_choice = ToolChoice::none;
        else if (c == "required")
            render.tool_choice = ToolChoice::required;
        else
            reject_field("tool_choice", "must be auto, none, required or a function");
    }
    if (render.tool_choice == ToolChoice::required && render.tools.empty())
        reject_field("tool_choice", "a required tool call needs 'tools'");
}

// text: {format: {type: text | json_object | json_schema (with schema)}, verbosity}.
void parse_text_format(const json& body, SamplingParams& s) {
    const json* text = optional_field(body, "text");
    if (!text) return;
    if (!text->is_object()) reject_field("text", "'text' must be an object", "invalid_type");
    const json* format = optional_field(*text, "format");
    if (!format) return;
    if (!format->is_object())
        reject_field("text.format", "'text.format' must be an object", "invalid_type");
    const std::string type = item_type(*format, "text.format");
    if (type == "json_object") {
        s.json_schema = R"({"type":"object"})";
    } else if (type == "json_schema") {
        const json* schema = optional_field(*format, "schema");
        if (!schema || !schema->is_object())
            reject_field("text.format.schema", "a JSON schema object is required");
        s.json_schema = schema->dump();
    } else if (type != "text") {
        reject_field("text.format.type", "must be one of text, json_object, json_schema");
    }
}

// reasoning: {effort, summary}.
void parse_reasoning(const json& body, GenerationRequest& g) {
    const json* reasoning = optional_field(body, "reasoning");
    if (!reasoning) return;
    if (!reasoning->is_object())
        reject_field("reasoning", "'reasoning' must be an object", "invalid_type");
    if (const json* effort = optional_field(*reasoning, "effort"))
        apply_reasoning_effort(*effort, "reasoning.effort", g);
}

// Options with no counterpart here are refused by name rather than ignored.
void refuse_unsupported(const json& body) {
    if (const json* v = optional_field(body, "background"); v && bool_field(*v, "background"))
        reject_field("background", "background responses are not supported");
    if (const json* v = optional_field(body, "truncation");
        v && string_field(*v, "truncation") != "disabled")
        reject_field("truncation",
                     "only 'disabled' is supported: a prompt over the context is refused");
    for (const char* name : {"conversation", "prompt"})
        if (optional_field(body, name))
            reject_field(name, fmt::format("'{}' is not supported here", name));
    if (const json* v = optional_field(body, "top_logprobs");
        v && integer_field(*v, "top_logprobs", 0, 20) > 0)
        reject_field("top_logprobs", "log-probabilities are not supported on this route yet");
}

std::vector<ChatMessage> earlier_turns(const json& body, ResponseStore& stored,
                                       std::string& previous_id) {
    const json* v = optional_field(body, "previous_response_id");
    if (!v) return {};
    previous_id = string_field(*v, "previous_response_id");
    auto previous = stored.get(previous_id);
    if (!previous)
        throw HttpException{
            invalid("previous_response_id",
                    fmt::format("Previous response with id '{}' not found.", previous_id),
                    "previous_response_not_found")};
    return previous->conversation;
}

// The request's own settings, repeated in the response object as OpenAI's API does.
json echo_of(const json& body, const GenerationRequest& g) {
    json echo = {{"instructions", nullptr},
                 {"max_output_tokens", nullptr},
                 {"metadata", json::object()},
                 {"parallel_tool_calls", g.render.parallel_tool_calls},
                 {"temperature", g.engine.options.sampling.temperature},
                 {"top_p", g.engine.options.sampling.top_p},
                 {"tool_choice", "auto"},
                 {"tools", json::array()},
                 {"text", {{"format", {{"type", "text"}}}}},
                 {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                 {"truncation", "disabled"},
                 {"user", nullptr}};
    for (const char* name : {"instructions", "max_output_tokens", "metadata", "tool_choice",
                             "tools", "text", "reasoning", "user"})
        if (const json* v = optional_field(body, name)) echo[name] = *v;
    return echo;
}

}  // namespace

ResponsesRequest parse_responses(const json& body, const RequestLimits& limits,
                                 const RequestDefaults& defaults, ResponseStore& stored) {
    ResponsesRequest out;
    // The names Responses shares with chat completions (model, stream, temperature, top_p and
    // llama.cpp's samplers) are read by the shared parser; max_output_tokens is its max_tokens.
    out.generation = parse_generation(body, limits, defaults);
    GenerationRequest& g = out.generation;
    if (const json* v = optional_field(body, "max_output_tokens"))
        g.engine.options.max_tokens =
            static_cast<int>(integer_field(*v, "max_output_tokens", 1, limits.max_tokens));
    if (const json* v = optional_field(body, "store")) out.store = bool_field(*v, "store");
    if (const json* m = optional_field(body, "metadata"); m && !m->is_object())
        reject_field("metadata", "'metadata' must be an object", "invalid_type");
    refuse_unsupported(body);
    InputItems items(earlier_turns(body, stored, out.previous_response_id));
    const json* input = optional_field(body, "input");
    if (!input) reject_field("input", "'input' is required", "missing_required_parameter");
    if (input->is_string()) {
        items.messages.push_back({.role = "user", .content = input->get<std::string>()});
        out.input_items.push_back(
            {{"type", "message"},
             {"role", "user"},
             {"content", {{{"type", "input_text"}, {"text", input->get<std::string>()}}}}});
    } else if (input->is_array()) {
        out.input_items = *input;
        for (std::size_t i = 0; i < input->size(); ++i)
            items.add((*input)[i], fmt::format("input[{}]", i));
    } else {
        reject_field("input", "'input' must be a string or an array of items", "invalid_type");
    }
    out.conversation = std::move(items.messages);
    if (const json* v = optional_field(body, "instructions"))
        g.messages.push_back({.role = "system", .content = string_field(*v, "instructions")});
    g.messages.insert(g.messages.end(), out.conversation.begin(), out.conversation.end());
    if (g.messages.empty()) reject_field("input", "'input' must not be empty");
    if (defaults.enable_thinking) g.render.enable_thinking = *defaults.enable_thinking;
    parse_reasoning(body, g);
    parse_text_format(body, g.engine.options.sampling);
    parse_tools(body, g.render);
    refuse_tools_with_grammar(g, "text.format");
    out.echo = echo_of(body, g);
    return out;
}

}  // namespace llamapp::detail
