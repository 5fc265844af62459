// Anthropic Messages requests: system, content blocks (text, thinking, tool_use, tool_result),
// tools with input_schema, tool_choice and thinking, checked field by field like the OpenAI ones.
#include <fmt/core.h>

#include <limits>
#include <map>

#include "server/protocols/anthropic/anthropic.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

std::string block_type(const json& block, const std::string& where) {
    if (!block.is_object())
        reject_field(where, "each content block must be an object", "invalid_type");
    const json* type = optional_field(block, "type");
    if (!type) reject_field(where + ".type", "'type' is required", "missing_required_parameter");
    return string_field(*type, where + ".type");
}

std::string block_text(const json& block, const char* name, const std::string& where) {
    const json* text = optional_field(block, name);
    if (!text)
        reject_field(where + "." + name, fmt::format("'{}' is required", name),
                     "missing_required_parameter");
    return string_field(*text, where + "." + name);
}

[[noreturn]] void reject_block(const std::string& type, const std::string& where) {
    if (type == "image" || type == "document")
        reject_field(
            where,
            fmt::format("{} input is not supported: this server has text models only", type));
    reject_field(where + ".type", fmt::format("'{}' content blocks are not supported here", type));
}

// Text, or text blocks joined by lines (system prompts and tool results).
std::string text_of(const json& content, const std::string& where) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        reject_field(where, "must be a string or an array of text blocks", "invalid_type");
    std::string text;
    for (std::size_t i = 0; i < content.size(); ++i) {
        const std::string at = fmt::format("{}[{}]", where, i);
        const std::string type = block_type(content[i], at);
        if (type != "text") reject_block(type, at);
        if (!text.empty()) text += '\n';
        text += block_text(content[i], "text", at);
    }
    return text;
}

// The conversation so far, in llamapp's roles: a user turn's tool_result blocks become tool
// messages (named after the tool_use they answer), its text one user message.
class Conversation {
  public:
    void add(const json& message, const std::string& where) {
        if (!message.is_object())
            reject_field(where, "each message must be an object", "invalid_type");
        const json* role = optional_field(message, "role");
        if (!role)
            reject_field(where + ".role", "'role' is required", "missing_required_parameter");
        const std::string r = string_field(*role, where + ".role");
        if (r != "user" && r != "assistant")
            reject_field(where + ".role", "role must be user or assistant");
        const json* content = optional_field(message, "content");
        if (!content)
            reject_field(where + ".content", "'content' is required", "missing_required_parameter");
        if (content->is_string()) {
            messages.push_back({.role = r, .content = content->get<std::string>()});
            return;
        }
        if (!content->is_array())
            reject_field(where + ".content", "content must be a string or an array of blocks",
                         "invalid_type");
        if (r == "user") {
            add_user(*content, where + ".content");
        } else {
            add_assistant(*content, where + ".content");
        }
    }

    std::vector<ChatMessage> messages;

  private:
    void add_user(const json& blocks, const std::string& where) {
        ChatMessage text{.role = "user"};
        auto flush = [&] {
            if (!text.content.empty()) messages.push_back(std::exchange(text, {.role = "user"}));
        };
        for (std::size_t i = 0; i < blocks.size(); ++i) {
            const std::string at = fmt::format("{}[{}]", where, i);
            const std::string type = block_type(blocks[i], at);
            if (type == "text") {
                if (!text.content.empty()) text.content += '\n';
                text.content += block_text(blocks[i], "text", at);
            } else if (type == "tool_result") {
                flush();
                messages.push_back(tool_result(blocks[i], at));
            } else {
                reject_block(type, at);
            }
        }
        flush();
    }

    ChatMessage tool_result(const json& block, const std::string& at) {
        ChatMessage m{.role = "tool"};
        m.tool_call_id = block_text(block, "tool_use_id", at);
        if (auto it = tool_names_.find(m.tool_call_id); it != tool_names_.end())
            m.name = it->second;
        if (const json* c = optional_field(block, "content"))
            m.content = text_of(*c, at + ".content");
        if (const json* e = optional_field(block, "is_error");
            e && bool_field(*e, at + ".is_error"))
            m.content = "Error: " + m.content;
        return m;
    }

    void add_assistant(const json& blocks, const std::string& where) {
        ChatMessage m{.role = "assistant"};
        for (std::size_t i = 0; i < blocks.size(); ++i) {
            const std::string at = fmt::format("{}[{}]", where, i);
            const std::string type = block_type(blocks[i], at);
            if (type == "text") {
                if (!m.content.empty()) m.content += '\n';
                m.content += block_text(blocks[i], "text", at);
            } else if (type == "thinking") {
                m.reasoning_content += block_text(blocks[i], "thinking", at);
            } else if (type == "redacted_thinking") {
                continue;  // encrypted by another provider: nothing a local model can read
            } else if (type == "tool_use") {
                const json* input = optional_field(blocks[i], "input");
                if (!input || !input->is_object())
                    reject_field(at + ".input", "'input' must be an object", "invalid_type");
                ToolCall call{block_text(blocks[i], "id", at), block_text(blocks[i], "name", at),
                              input->dump()};
                tool_names_[call.id] = call.name;
                m.tool_calls.push_back(std::move(call));
            } else {
                reject_block(type, at);
            }
        }
        messages.push_back(std::move(m));
    }

    std::map<std::string, std::string> tool_names_;  // tool_use id -> tool name
};

void parse_tools(const json& body, ChatRenderOptions& render) {
    if (const json* tools = optional_field(body, "tools")) {
        if (!tools->is_array()) reject_field("tools", "'tools' must be an array", "invalid_type");
        for (std::size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string at = fmt::format("tools[{}]", i);
            if (!t.is_object()) reject_field(at, "each tool must be an object", "invalid_type");
            if (const json* type = optional_field(t, "type");
                type && string_field(*type, at + ".type") != "custom")
                reject_field(at + ".type",
                             fmt::format("server tools ('{}') are not supported; define the tool "
                                         "with a name and an input_schema",
                                         type->get<std::string>()));
            render.tools.push_back(tool_definition(t, at, "input_schema", true));
        }
    }
    render.parallel_tool_calls = true;
    const json* choice = optional_field(body, "tool_choice");
    if (!choice) return;
    if (!choice->is_object())
        reject_field("tool_choice", "'tool_choice' must be an object", "invalid_type");
    const std::string type = block_type(*choice, "tool_choice");
    if (type == "auto") {
        render.tool_choice = ToolChoice::automatic;
    } else if (type == "any") {
        render.tool_choice = ToolChoice::required;
    } else if (type == "tool") {
        render.tool_choice = ToolChoice::required;
        render.forced_tool = block_text(*choice, "name", "tool_choice");
    } else if (type == "none") {
        render.tool_choice = ToolChoice::none;
    } else {
        reject_field("tool_choice.type", "must be auto, any, tool or none");
    }
    if (const json* v = optional_field(*choice, "disable_parallel_tool_use"))
        render.parallel_tool_calls = !bool_field(*v, "tool_choice.disable_parallel_tool_use");
    if (render.tool_choice == ToolChoice::required && render.tools.empty())
        reject_field("tool_choice", "a required tool call needs 'tools'");
}

// thinking: {"type": "enabled", "budget_tokens": n} or {"type": "disabled"}.
void parse_thinking(const json& body, GenerationRequest& g) {
    const json* thinking = optional_field(body, "thinking");
    if (!thinking) return;
    if (!thinking->is_object())
        reject_field("thinking", "'thinking' must be an object", "invalid_type");
    const std::string type = block_type(*thinking, "thinking");
    if (type == "disabled") {
        g.render.enable_thinking = false;
        return;
    }
    if (type != "enabled" && type != "adaptive")
        reject_field("thinking.type", "must be enabled, adaptive or disabled");
    g.render.enable_thinking = true;
    if (const json* b = optional_field(*thinking, "budget_tokens"))
        g.engine.options.sampling.reasoning.tokens = static_cast<int>(
            integer_field(*b, "thinking.budget_tokens", 1, std::numeric_limits<int>::max()));
}

void parse_stop_sequences(const json& body, const RequestLimits& limits, GenerateOptions& o) {
    const json* v = optional_field(body, "stop_sequences");
    if (!v) return;
    if (!v->is_array())
        reject_field("stop_sequences", "'stop_sequences' must be an array of strings",
                     "invalid_type");
    if (v->size() > static_cast<std::size_t>(limits.max_stop_strings))
        reject_field("stop_sequences",
                     fmt::format("at most {} stop sequences", limits.max_stop_strings));
    for (const json& s : *v) {
        std::string stop = string_field(s, "stop_sequences");
        if (stop.empty()) reject_field("stop_sequences", "stop sequences must not be empty");
        o.stop.push_back(std::move(stop));
    }
}

}  // namespace

GenerationRequest parse_messages(const json& body, const RequestLimits& limits,
                                 const RequestDefaults& defaults) {
    // OpenAI's names of the shared fields (model, max_tokens, stream, temperature, top_p, top_k,
    // llama.cpp's samplers) mean the same here; "tools" and "tool_choice" are read below.
    GenerationRequest g = parse_generation(body, limits, defaults);
    if (const json* m = optional_field(body, "metadata"); m && !m->is_object())
        reject_field("metadata", "'metadata' must be an object", "invalid_type");
    parse_stop_sequences(body, limits, g.engine.options);
    Conversation conversation;
    if (const json* system = optional_field(body, "system"))
        conversation.messages.push_back({.role = "system", .content = text_of(*system, "system")});
    const json* messages = optional_field(body, "messages");
    if (!messages) reject_field("messages", "'messages' is required", "missing_required_parameter");
    if (!messages->is_array())
        reject_field("messages", "'messages' must be an array", "invalid_type");
    // An empty list is answered (the template's generation prompt alone), as llama-server does.
    for (std::size_t i = 0; i < messages->size(); ++i)
        conversation.add((*messages)[i], fmt::format("messages[{}]", i));
    g.messages = std::move(conversation.messages);
    if (defaults.enable_thinking) g.render.enable_thinking = *defaults.enable_thinking;
    parse_thinking(body, g);
    parse_tools(body, g.render);
    refuse_tools_with_grammar(g, "tools");
    return g;
}

}  // namespace llamapp::detail
