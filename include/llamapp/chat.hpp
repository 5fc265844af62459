// Chat: messages rendered with a model's Jinja template through llama.cpp's common chat code.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/context.hpp"
#include "llamapp/error.hpp"
#include "llamapp/generation.hpp"
#include "llamapp/model.hpp"

namespace llamapp {

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text
};

struct ChatMessage {
    std::string role;  // system, user, assistant or tool
    std::string content;
    std::string reasoning_content;  // assistant only: the thinking part
    std::vector<ToolCall> tool_calls;
    std::string tool_call_id;  // tool only
    std::string name;
};

// A function the model may call. `parameters` is a JSON Schema (an object schema) as text.
struct ToolDefinition {
    std::string name;  // 1-64 of a-z, A-Z, 0-9, '_', '-', '.'
    std::string description;
    std::string parameters = R"({"type":"object","properties":{}})";
};

enum class ToolChoice {
    automatic,  // the model decides between text and tool calls
    none,       // the tools are described but never called
    required,   // the reply is one or more tool calls
};

// Whether the reply continues the last message, an assistant's prefill, instead of starting a
// turn of its own (llama.cpp's continue_final_message): its content, its reasoning, or whichever
// it has (the reasoning when it has no content).
enum class ChatContinuation { none, automatic, reasoning, content };

struct ChatRenderOptions {
    bool add_generation_prompt = true;  // must be false when continuing
    ChatContinuation continue_final_message = ChatContinuation::none;
    bool enable_thinking = true;
    // The reply's thinking parsed out into reasoning_content; false leaves it in the content
    // (llama-server's --reasoning-format none).
    bool split_reasoning = true;
    std::vector<ToolDefinition> tools;
    ToolChoice tool_choice = ToolChoice::automatic;
    std::string forced_tool;  // not empty: the reply is a call of exactly this tool
    bool parallel_tool_calls = false;
    // Extra variables for the template (name -> JSON value as text), e.g. a model's own switches.
    std::map<std::string, std::string> template_variables;
    // A JSON reply format (JSON Schema text): the template builds its grammar, which lets the
    // model's thinking block come first, and its parser. Not with tools.
    std::string json_schema;
};

namespace detail {
struct ChatTemplateState;
struct ChatParseState;
}  // namespace detail

struct ChatPrompt {
    std::string text;               // the rendered template, for display
    std::vector<Token> tokens;      // message text tokenized as text, template markup as specials
    std::vector<std::string> stop;  // extra stop strings the template's format asks for
    // With tools, the grammar tool calls must follow; with a JSON reply format, the grammar of
    // an optional thinking block and the JSON after it.
    ReplyGrammar reply_grammar;
    std::string reply_prefix;  // the start of the reply the template wrote (its generation prompt)
    // The template's thinking markers; empty when it has none.
    std::string thinking_start;
    std::vector<std::string> thinking_end;
    bool reply_format = false;                // reply_grammar is the JSON reply format's
    std::vector<Token> shown_control_tokens;  // markup tokens the reply parser needs to see
    std::shared_ptr<const detail::ChatParseState> parse_state;  // how to parse the reply

    // Adds what the reply needs to `options`: stop strings, the reply grammar (which replaces
    // the JSON schema it was rendered for), the thinking markers of the reasoning budget and the
    // markup tokens to show. A reply the grammar forces (a required tool call, a JSON format)
    // gets a thinking budget when `options` sets none: a quarter of max_tokens, at most 1024,
    // so that the call or object can still arrive. Errors: invalid_argument when a tool-call
    // grammar would have to replace a grammar or JSON schema already in `options`.
    [[nodiscard]] Result<void> constrain(GenerateOptions& options) const;
};

// What ChatTemplate::create does for a model whose GGUF carries no chat template, when no
// override is given either.
enum class MissingTemplate {
    fail,    // template_error
    chatml,  // ChatML, the most common convention; the server and the CLI's chat use this
};

// How a template is rendered.
enum class TemplateRenderer {
    jinja,    // llama.cpp's Jinja engine: any template, with tools and reasoning
    builtin,  // llama.cpp's built-in templates (llama-server's --no-jinja), chosen by name
              // ("llama3", "chatml", ...) or recognised from the source; no tools
};

// What a template's text offers, read from the text alone (for a model that is not loaded): tools
// when it mentions them (a template that does renders them), thinking when it has a thinking
// block or a switch for one.
struct TemplateFeatures {
    bool tools = false;
    bool thinking = false;
};
TemplateFeatures template_features(std::string_view source);

// A parsed chat template. Thread-safe after construction; cheap to copy.
class ChatTemplate {
  public:
    // The model's own template, or `override_source` when not empty (with the built-in
    // renderer, a template name too). Errors: template_error when the model has none and no
    // override is given (unless `missing` says chatml), or the template does not parse (built-in:
    // is none llama.cpp knows).
    [[nodiscard]] static Result<ChatTemplate> create(
        const Model& model, const std::string& override_source = {},
        MissingTemplate missing = MissingTemplate::fail,
        TemplateRenderer renderer = TemplateRenderer::jinja);

    [[nodiscard]] Result<std::string> apply(const std::vector<ChatMessage>& messages,
                                            const ChatRenderOptions& options = {}) const;

    // Renders and tokenizes so that message text can never become control tokens: a user who
    // types "<|im_end|>" gets the characters, not the token.
    [[nodiscard]] Result<ChatPrompt> render(const std::vector<ChatMessage>& messages,
                                            const ChatRenderOptions& options = {}) const;

    // render() for a reply generated with `options`, which then get what the reply needs
    // (ChatPrompt::constrain). Their JSON schema, when there is one and no tool is in play, is
    // rendered as the reply format (ChatRenderOptions::json_schema).
    [[nodiscard]] Result<ChatPrompt> render_for(const std::vector<ChatMessage>& messages,
                                                const ChatRenderOptions& render,
                                                GenerateOptions& options) const;

    // Splits raw model output into answer, reasoning and tool calls per the format `prompt`
    // was rendered with. Output the format cannot parse is returned whole as content. Tool
    // calls the format gives no id get a fresh random one. A reply cut short (`complete`
    // false: max_tokens or the context ran out) is read as the beginning of a reply, so a tool
    // call it ends inside stays a tool call with the arguments generated so far.
    static ChatMessage parse(const std::string& output, const ChatPrompt& prompt,
                             bool complete = true);

    const std::string& source() const;
    // ChatML stood in for a template the model does not have (MissingTemplate::chatml).
    bool is_fallback() const;

  private:
    explicit ChatTemplate(std::shared_ptr<const detail::ChatTemplateState> state)
        : state_(std::move(state)) {}
    std::shared_ptr<const detail::ChatTemplateState> state_;
};

struct ChatOptions {
    GenerateOptions generate;
    ChatRenderOptions render;
};

struct ChatResult {
    ChatMessage message;  // role "assistant", reasoning split out
    Generation generation;
};

// One assistant turn. on_piece (optional) sees the raw pieces as they are generated.
[[nodiscard]] Result<ChatResult> chat(Context& context, const ChatTemplate& chat_template,
                                      const std::vector<ChatMessage>& messages,
                                      const ChatOptions& options = {},
                                      const PieceCallback& on_piece = {});

}  // namespace llamapp
