// Chat: messages rendered with a model's Jinja template through llama.cpp's common chat code.
#pragma once

#include <memory>
#include <optional>
#include <string>
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

struct ChatRenderOptions {
    bool add_generation_prompt = true;
    bool enable_thinking = true;
};

namespace detail {
struct ChatTemplateState;
struct ChatParseState;
}  // namespace detail

struct ChatPrompt {
    std::string text;               // the rendered template, for display
    std::vector<Token> tokens;      // message text tokenized as text, template markup as specials
    std::vector<std::string> stop;  // extra stop strings the template's format asks for
    std::shared_ptr<const detail::ChatParseState> parse_state;  // how to parse the reply
};

// A parsed chat template. Thread-safe after construction; cheap to copy.
class ChatTemplate {
  public:
    // The model's own template, or `override_source` when not empty. Errors: template_error
    // when the model has none and no override is given, or the template does not parse.
    static Result<ChatTemplate> create(const Model& model, const std::string& override_source = {});

    Result<std::string> apply(const std::vector<ChatMessage>& messages,
                              const ChatRenderOptions& options = {}) const;

    // Renders and tokenizes so that message text can never become control tokens: a user who
    // types "<|im_end|>" gets the characters, not the token.
    Result<ChatPrompt> render(const std::vector<ChatMessage>& messages,
                              const ChatRenderOptions& options = {}) const;

    // Splits raw model output into answer, reasoning and tool calls per the format `prompt`
    // was rendered with. Output the format cannot parse is returned whole as content.
    static ChatMessage parse(const std::string& output, const ChatPrompt& prompt);

    const std::string& source() const;

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
Result<ChatResult> chat(Context& context, const ChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, const ChatOptions& options = {},
                        const PieceCallback& on_piece = {});

}  // namespace llamapp
