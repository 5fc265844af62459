#include "llamapp/chat.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>

#include "chat.h"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "llamapp/backend.hpp"

namespace llamapp {

namespace detail {

struct ChatTemplateState {
    Model model;
    common_chat_templates_ptr templates;
    std::string source;
};

struct ChatParseState {
    common_chat_parser_params params;
};

}  // namespace detail

namespace {

// Stand-ins for message text while the template renders. The bytes 0x1E/0x1F never appear in
// chat markup, and no template has a reason to transform them.
std::string marker(std::size_t i) {
    return fmt::format("\x1ELLAMAPP_TEXT_{}\x1F", i);
}

Result<void> validate(const std::vector<ChatMessage>& messages) {
    if (messages.empty())
        return fail(ErrorCode::invalid_argument, "messages must not be empty", "messages");
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const auto& role = messages[i].role;
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
            return fail(ErrorCode::invalid_argument, "unknown message role '" + role + "'",
                        fmt::format("messages[{}].role", i));
        }
    }
    return {};
}

common_chat_msg to_common(const ChatMessage& m, std::string content, std::string reasoning) {
    common_chat_msg out;
    out.role = m.role;
    out.content = std::move(content);
    out.reasoning_content = std::move(reasoning);
    out.tool_call_id = m.tool_call_id;
    out.tool_name = m.role == "tool" ? m.name : std::string();
    for (const auto& c : m.tool_calls) out.tool_calls.push_back({c.name, c.arguments, c.id});
    return out;
}

Result<common_chat_params> apply_common(const detail::ChatTemplateState& s,
                                        std::vector<common_chat_msg> msgs,
                                        const ChatRenderOptions& options) {
    common_chat_templates_inputs inputs;
    inputs.messages = std::move(msgs);
    inputs.add_generation_prompt = options.add_generation_prompt;
    inputs.enable_thinking = options.enable_thinking;
    inputs.use_jinja = true;
    inputs.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    detail::LogCapture capture;
    // One render at a time: common's template context formats the date with localtime(),
    // whose time-zone state is not thread-safe (ThreadSanitizer caught it under server load).
    static std::mutex render_mutex;
    std::lock_guard lock(render_mutex);
    try {
        return common_chat_templates_apply(s.templates.get(), inputs);
    } catch (const std::exception& e) {
        return fail(ErrorCode::template_error,
                    std::string("chat template failed to render: ") + e.what());
    }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::create(const Model& model, const std::string& override_source) {
    ensure_backend();
    const auto& info = model.info();
    std::string source = override_source;
    if (source.empty()) {
        if (!info.chat_template) {
            return fail(ErrorCode::template_error,
                        "the model has no chat template; pass one explicitly", info.path.string());
        }
        source = *info.chat_template;
    }
    auto state = std::make_shared<detail::ChatTemplateState>(model, nullptr, source);
    detail::LogCapture capture;
    try {
        state->templates = common_chat_templates_init(model.state()->model.get(), source);
    } catch (const std::exception& e) {
        return fail(ErrorCode::template_error,
                    std::string("chat template does not parse: ") + e.what());
    }
    if (!state->templates) return fail(ErrorCode::template_error, "chat template does not parse");
    // Render once so that a template that only fails at render time fails here, not mid-request.
    ChatTemplate result(std::move(state));
    if (auto probe = result.apply({{.role = "user", .content = "hello"}}); !probe) {
        return std::unexpected(probe.error());
    }
    return result;
}

const std::string& ChatTemplate::source() const {
    return state_->source;
}

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                        const ChatRenderOptions& options) const {
    if (auto ok = validate(messages); !ok) return std::unexpected(ok.error());
    std::vector<common_chat_msg> msgs;
    for (const auto& m : messages) msgs.push_back(to_common(m, m.content, m.reasoning_content));
    auto params = apply_common(*state_, std::move(msgs), options);
    if (!params) return std::unexpected(params.error());
    return params->prompt;
}

namespace {

// True when tokenizing `text` with special-token parsing would produce control tokens, i.e. the
// text spells out markup such as "<|im_end|>".
Result<bool> spells_control_tokens(const Tokenizer& tok, const std::string& text) {
    if (text.empty()) return false;
    auto plain = tok.encode(text, {.add_special = false, .parse_special = false});
    auto special = tok.encode(text, {.add_special = false, .parse_special = true});
    if (!plain) return std::unexpected(plain.error());
    if (!special) return std::unexpected(special.error());
    return *plain != *special;
}

}  // namespace

Result<ChatPrompt> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                        const ChatRenderOptions& options) const {
    if (auto ok = validate(messages); !ok) return std::unexpected(ok.error());
    const Tokenizer tokenizer = state_->model.tokenizer();

    // Fields the template renders verbatim into markup must not spell control tokens at all.
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        std::vector<const std::string*> raw = {&m.name, &m.tool_call_id};
        for (const auto& c : m.tool_calls) raw.insert(raw.end(), {&c.id, &c.name, &c.arguments});
        for (const std::string* field : raw) {
            auto spells = spells_control_tokens(tokenizer, *field);
            if (!spells) return std::unexpected(spells.error());
            if (*spells) {
                return fail(ErrorCode::invalid_argument,
                            "tool call fields must not contain special-token text",
                            fmt::format("messages[{}]", i));
            }
        }
    }
    // Content and reasoning that spell control tokens are replaced by markers while the template
    // renders, and tokenized as plain text afterwards. Everything else renders as is, and the
    // prompt is tokenized in one piece exactly as llama.cpp's server does (segment-wise
    // tokenization would add SentencePiece space prefixes at every boundary).
    std::vector<const std::string*> texts;
    std::vector<common_chat_msg> msgs;
    for (const auto& m : messages) {
        std::string fields[2] = {m.content, m.reasoning_content};
        for (auto& f : fields) {
            auto spells = spells_control_tokens(tokenizer, f);
            if (!spells) return std::unexpected(spells.error());
            if (*spells) {
                texts.push_back(&f == &fields[0] ? &m.content : &m.reasoning_content);
                f = marker(texts.size() - 1);
            }
        }
        msgs.push_back(to_common(m, std::move(fields[0]), std::move(fields[1])));
    }
    auto params = apply_common(*state_, std::move(msgs), options);
    if (!params) return std::unexpected(params.error());

    ChatPrompt prompt;
    const std::string& rendered = params->prompt;
    std::vector<bool> seen(texts.size(), false);
    std::size_t pos = 0;
    auto add = [&](std::string_view part, bool markup) -> Result<void> {
        if (part.empty()) return {};
        prompt.text.append(part);
        auto tokens = tokenizer.encode(part, {.add_special = false, .parse_special = markup});
        if (!tokens) return std::unexpected(tokens.error());
        prompt.tokens.insert(prompt.tokens.end(), tokens->begin(), tokens->end());
        return {};
    };
    while (pos < rendered.size()) {
        const std::size_t start = texts.empty() ? std::string::npos : rendered.find('\x1E', pos);
        const std::size_t end =
            start == std::string::npos ? std::string::npos : rendered.find('\x1F', start);
        std::size_t index = 0;
        const bool is_marker =
            end != std::string::npos &&
            std::sscanf(rendered.c_str() + start, "\x1ELLAMAPP_TEXT_%zu\x1F", &index) == 1 &&
            index < texts.size() && rendered.compare(start, end + 1 - start, marker(index)) == 0;
        if (!is_marker) {
            const std::size_t stop = start == std::string::npos ? rendered.size() : start + 1;
            if (auto ok = add(std::string_view(rendered).substr(pos, stop - pos), true); !ok)
                return std::unexpected(ok.error());
            pos = stop;
            continue;
        }
        if (auto ok = add(std::string_view(rendered).substr(pos, start - pos), true); !ok)
            return std::unexpected(ok.error());
        if (auto ok = add(*texts[index], false); !ok) return std::unexpected(ok.error());
        seen[index] = true;
        pos = end + 1;
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
        // The template transformed the text (e.g. |tojson), so it cannot be kept apart as text.
        return fail(ErrorCode::invalid_argument,
                    "message text contains special-token text that this chat template cannot keep "
                    "as plain text",
                    "messages");
    }
    const auto& special = state_->model.info().special;
    if (special.add_bos && special.bos != no_token &&
        (prompt.tokens.empty() || prompt.tokens.front() != special.bos)) {
        prompt.tokens.insert(prompt.tokens.begin(), special.bos);
    }
    if (prompt.tokens.empty())
        return fail(ErrorCode::template_error, "chat template rendered an empty prompt");
    prompt.stop = params->additional_stops;
    auto parse_state = std::make_shared<detail::ChatParseState>();
    parse_state->params = common_chat_parser_params(*params);
    parse_state->params.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    if (!params->parser.empty()) {
        try {
            parse_state->params.parser.load(params->parser);
        } catch (const std::exception& e) {
            return fail(ErrorCode::template_error,
                        std::string("chat output parser failed to load: ") + e.what());
        }
    }
    prompt.parse_state = std::move(parse_state);
    return prompt;
}

ChatMessage ChatTemplate::parse(const std::string& output, const ChatPrompt& prompt) {
    ChatMessage message{.role = "assistant"};
    if (!prompt.parse_state) {
        message.content = output;
        return message;
    }
    try {
        common_chat_msg parsed =
            common_chat_parse(output, /*is_partial=*/false, prompt.parse_state->params);
        message.content = parsed.content;
        message.reasoning_content = parsed.reasoning_content;
        for (const auto& c : parsed.tool_calls)
            message.tool_calls.push_back({c.id, c.name, c.arguments});
    } catch (const std::exception&) {
        // Random or unexpected output is still an answer; show it as it came.
        message.content = output;
        message.reasoning_content.clear();
        message.tool_calls.clear();
    }
    return message;
}

Result<ChatResult> chat(Context& context, const ChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, const ChatOptions& options,
                        const PieceCallback& on_piece) {
    auto prompt = chat_template.render(messages, options.render);
    if (!prompt) return std::unexpected(prompt.error());
    GenerateOptions generate = options.generate;
    for (const auto& s : prompt->stop) {
        if (!s.empty()) generate.stop.push_back(s);
    }
    auto generation = context.stream(std::span<const Token>(prompt->tokens), generate, on_piece);
    if (!generation) return std::unexpected(generation.error());
    ChatResult result;
    result.message = ChatTemplate::parse(generation->text, *prompt);
    result.generation = std::move(*generation);
    return result;
}

}  // namespace llamapp
