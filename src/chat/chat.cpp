#include "llamapp/chat.hpp"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <mutex>
#include <random>
#include <regex>

#include "chat/chat_state.hpp"
#include "common.h"
#include "core/internals.hpp"
#include "core/log_internal.hpp"
#include "core/model_state.hpp"
#include "llamapp/backend.hpp"
#include "llamapp/grammar.hpp"

namespace llamapp {

namespace detail {

struct ChatTemplateState {
    Model model;
    common_chat_templates_ptr templates;
    std::string source;
    TemplateRenderer renderer = TemplateRenderer::jinja;
};

std::optional<ChatMessage> parse_reply(const ChatParseState& state, const std::string& output,
                                       bool partial) {
    try {
        const common_chat_msg parsed = common_chat_parse(output, partial, state.params);
        ChatMessage message{.role = "assistant"};
        message.content = parsed.content;
        message.reasoning_content = parsed.reasoning_content;
        for (const auto& c : parsed.tool_calls) {
            if (message.tool_calls.size() == state.max_tool_calls) break;
            message.tool_calls.push_back({c.id, c.name, c.arguments});
        }
        return message;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::string new_tool_call_id() {
    static constexpr char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 random{std::random_device{}()};
    std::uniform_int_distribution<std::size_t> pick(0, sizeof(alphabet) - 2);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += alphabet[pick(random)];
    return id;
}

}  // namespace detail

namespace {

// MissingTemplate::chatml: what a model without a template of its own chats with.
constexpr std::string_view chatml_template =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Stand-ins for message text while the template renders. The bytes 0x1E/0x1F never appear in
// chat markup, and no template has a reason to transform them.
std::string marker(std::size_t i) {
    return fmt::format("\x1ELLAMAPP_TEXT_{}\x1F", i);
}

bool valid_tool_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-' || c == '.';
    });
}

Result<void> validate_tools(const ChatRenderOptions& options) {
    for (std::size_t i = 0; i < options.tools.size(); ++i) {
        const auto& tool = options.tools[i];
        const std::string where = fmt::format("tools[{}]", i);
        if (!valid_tool_name(tool.name))
            return fail(ErrorCode::invalid_argument,
                        "a tool name must be 1 to 64 of a-z, A-Z, 0-9, '_', '-' and '.'",
                        where + ".name");
        for (std::size_t j = 0; j < i; ++j) {
            if (options.tools[j].name == tool.name)
                return fail(ErrorCode::invalid_argument,
                            "tool '" + tool.name + "' is defined twice", where + ".name");
        }
        const auto schema = nlohmann::ordered_json::parse(tool.parameters, nullptr, false);
        if (!schema.is_object())
            return fail(ErrorCode::invalid_json_schema,
                        "tool parameters must be a JSON schema object", where + ".parameters");
        // The template turns the schema into the tool-call grammar; a schema that cannot be
        // enforced fails here, named, instead of inside the template.
        if (auto gbnf = json_schema_to_gbnf(tool.parameters); !gbnf) {
            Error e = gbnf.error();
            e.context = where + ".parameters";
            return std::unexpected(std::move(e));
        }
    }
    if (!options.forced_tool.empty() &&
        std::none_of(options.tools.begin(), options.tools.end(),
                     [&](const ToolDefinition& t) { return t.name == options.forced_tool; }))
        return fail(ErrorCode::invalid_argument,
                    "tool '" + options.forced_tool + "' is not among the tools", "tool_choice");
    if (options.tool_choice == ToolChoice::required && options.tools.empty())
        return fail(ErrorCode::invalid_argument, "tool_choice 'required' needs tools",
                    "tool_choice");
    return {};
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

common_chat_tool_choice to_common(ToolChoice choice) {
    switch (choice) {
        case ToolChoice::none:
            return COMMON_CHAT_TOOL_CHOICE_NONE;
        case ToolChoice::required:
            return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
        case ToolChoice::automatic:
            break;
    }
    return COMMON_CHAT_TOOL_CHOICE_AUTO;
}

// `only_tool` not empty: offer just that tool (the grammar and parser of a forced call).
Result<common_chat_params> apply_common(const detail::ChatTemplateState& s,
                                        std::vector<common_chat_msg> msgs,
                                        const ChatRenderOptions& options,
                                        const std::string& only_tool = {}) {
    if (s.renderer == TemplateRenderer::builtin && !options.tools.empty())
        return fail(ErrorCode::template_error,
                    "tools need a Jinja chat template, and this server renders llama.cpp's "
                    "built-in ones (--no-jinja)",
                    "tools");
    common_chat_templates_inputs inputs;
    inputs.messages = std::move(msgs);
    inputs.add_generation_prompt = options.add_generation_prompt;
    switch (options.continue_final_message) {
        case ChatContinuation::none:
            break;
        case ChatContinuation::automatic:
            inputs.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
            break;
        case ChatContinuation::reasoning:
            inputs.continue_final_message = COMMON_CHAT_CONTINUATION_REASONING;
            break;
        case ChatContinuation::content:
            inputs.continue_final_message = COMMON_CHAT_CONTINUATION_CONTENT;
            break;
    }
    inputs.enable_thinking = options.enable_thinking;
    for (const auto& t : options.tools) {
        if (only_tool.empty() || t.name == only_tool)
            inputs.tools.push_back({t.name, t.description, t.parameters});
    }
    inputs.tool_choice =
        only_tool.empty() ? to_common(options.tool_choice) : COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    inputs.parallel_tool_calls = options.parallel_tool_calls && only_tool.empty();
    inputs.chat_template_kwargs = options.template_variables;
    inputs.json_schema = options.json_schema;
    inputs.use_jinja = s.renderer == TemplateRenderer::jinja;
    inputs.reasoning_format =
        options.split_reasoning ? COMMON_REASONING_FORMAT_DEEPSEEK : COMMON_REASONING_FORMAT_NONE;
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

Result<ChatTemplate> ChatTemplate::create(const Model& model, const std::string& override_source,
                                          MissingTemplate missing, TemplateRenderer renderer) {
    ensure_backend();
    const auto& info = model.info();
    std::string source = override_source;
    if (source.empty()) {
        if (info.chat_template) {
            source = *info.chat_template;
        } else if (missing == MissingTemplate::chatml) {
            detail::log(LogLevel::warning, "chat: {} has no chat template; using ChatML",
                        info.path.filename().string());
            source = chatml_template;
        } else {
            return fail(ErrorCode::template_error,
                        "the model has no chat template; pass one explicitly", info.path.string());
        }
    }
    auto state = std::make_shared<detail::ChatTemplateState>(model, nullptr, source, renderer);
    detail::LogCapture capture;
    try {
        state->templates =
            common_chat_templates_init(detail::model_state(model).model.get(), source);
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

TemplateFeatures template_features(std::string_view source) {
    const auto has = [&](std::string_view word) { return source.find(word) != source.npos; };
    return {.tools = has("tools"),
            .thinking = has("<think>") || has("enable_thinking") || has("reasoning_content")};
}

const std::string& ChatTemplate::source() const {
    return state_->source;
}

bool ChatTemplate::is_fallback() const {
    return state_->source == chatml_template;
}

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                        const ChatRenderOptions& options) const {
    if (auto ok = validate(messages); !ok) return std::unexpected(ok.error());
    if (auto ok = validate_tools(options); !ok) return std::unexpected(ok.error());
    std::vector<common_chat_msg> msgs;
    for (const auto& m : messages) msgs.push_back(to_common(m, m.content, m.reasoning_content));
    auto params = apply_common(*state_, std::move(msgs), options);
    if (!params) return std::unexpected(params.error());
    return params->prompt;
}

namespace {

// llama.cpp's tool-call grammars let free text precede the calls even when a call is required
// (root ::= ... until-N? tool-calls). A required call is the reply, as OpenAI's tool_choice
// means, so that optional lead-in is dropped from the root rule; the rule itself stays and an
// optional thinking block before the calls is kept.
std::string without_text_before_calls(const std::string& gbnf) {
    static const std::regex lead_in(R"( until-[0-9]+\?(?= ))");
    const std::size_t root = gbnf.starts_with("root ::= ") ? 0 : gbnf.find("\nroot ::= ");
    if (root == std::string::npos) return gbnf;
    const std::size_t begin = root == 0 ? 0 : root + 1;
    const std::size_t end = std::min(gbnf.find('\n', begin), gbnf.size());
    return gbnf.substr(0, begin) +
           std::regex_replace(gbnf.substr(begin, end - begin), lead_in, "") + gbnf.substr(end);
}

// For templates whose every call sits in its own markers (Qwen3's <tool_call>...</tool_call>)
// this llama.cpp builds `tool-calls ::= (...)+` even with parallel calls off, so a model may go
// on calling until max_tokens while the parse keeps only the first call; allow one instead.
std::string one_tool_call(const std::string& gbnf) {
    static const std::regex repeated(R"((^|\n)tool-calls ::= \((.*)\)\+(?=\n|$))");
    return std::regex_replace(gbnf, repeated, "$1tool-calls ::= $2",
                              std::regex_constants::format_first_only);
}

// JSON's grammar lets whitespace be up to two newlines and twenty blanks wherever it may go, and
// a weak model fills a call's arguments with it until max_tokens instead of closing the call
// (seen with a complete `{"city": "London"}` spread over 64 tokens). A call needs one blank at
// most; once its arguments close, the grammar then leaves only the end of the reply.
std::string bounded_whitespace(const std::string& gbnf) {
    static const std::regex wide(R"((^|\n)space ::= [^\n]*)");
    return std::regex_replace(gbnf, wide, "$1space ::= | \" \"");
}

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

namespace {

// Fields the template renders verbatim into markup must not spell control tokens at all.
Result<void> check_markup_fields(const Tokenizer& tokenizer,
                                 const std::vector<ChatMessage>& messages) {
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
    return {};
}

// The messages for llama.cpp's renderer, with content and reasoning that spell control tokens
// replaced by markers; `texts` gets what each marker stands for.
Result<std::vector<common_chat_msg>> with_markers(const Tokenizer& tokenizer,
                                                  const std::vector<ChatMessage>& messages,
                                                  std::vector<const std::string*>& texts) {
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
    return msgs;
}

// Tokenizes the rendered template: markup with special tokens parsed, each marker's text as
// plain text. Fails when the template transformed a marked text (e.g. |tojson).
Result<void> tokenize_rendered(const Tokenizer& tokenizer, const std::string& rendered,
                               const std::vector<const std::string*>& texts, ChatPrompt& prompt) {
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
                return ok;
            pos = stop;
            continue;
        }
        if (auto ok = add(std::string_view(rendered).substr(pos, start - pos), true); !ok)
            return ok;
        if (auto ok = add(*texts[index], false); !ok) return ok;
        seen[index] = true;
        pos = end + 1;
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
        return fail(ErrorCode::invalid_argument,
                    "message text contains special-token text that this chat template cannot keep "
                    "as plain text",
                    "messages");
    }
    return {};
}

// The grammar spells the thinking markers as text, which a model may write in any pieces ("<",
// "think", ">"); the reasoning budget watches for the marker's own tokens. So the grammar asks
// for exactly those tokens.
std::string markers_as_tokens(std::string gbnf, const Tokenizer& tokenizer,
                              const std::vector<std::string>& markers) {
    for (const std::string& marker : markers) {
        if (marker.empty() || marker.find_first_of("\\\"") != std::string::npos) continue;
        auto special = tokenizer.encode(marker, {.add_special = false, .parse_special = true});
        if (!special || special->empty()) continue;
        const std::string literal = "\"" + marker + "\"";
        std::string token;
        for (Token t : *special) token += fmt::format("<[{}]>", t);
        for (std::size_t at = gbnf.find(literal); at != std::string::npos;
             at = gbnf.find(literal, at + token.size()))
            gbnf.replace(at, literal.size(), token);
    }
    return gbnf;
}

bool tools_active(const ChatRenderOptions& options) {
    return !options.tools.empty() && options.tool_choice != ToolChoice::none;
}

// The template's grammar: for tool calls, or (without tools) for the JSON reply format.
ReplyGrammar reply_grammar_of(const common_chat_params& params, const ChatRenderOptions& options,
                              bool one_call) {
    ReplyGrammar g;
    g.gbnf = params.grammar;
    if (tools_active(options)) {
        const bool must_call =
            options.tool_choice == ToolChoice::required || !options.forced_tool.empty();
        if (must_call) g.gbnf = without_text_before_calls(g.gbnf);
        if (one_call) g.gbnf = one_tool_call(g.gbnf);
        g.gbnf = bounded_whitespace(g.gbnf);
    }
    g.lazy = params.grammar_lazy;
    for (const auto& t : params.grammar_triggers) {
        using Kind = GrammarTrigger::Kind;
        const Kind kind = t.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN          ? Kind::token
                          : t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN      ? Kind::pattern
                          : t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL ? Kind::pattern_full
                                                                               : Kind::word;
        g.triggers.push_back({kind, t.value, t.token});
    }
    return g;
}

Result<std::shared_ptr<const detail::ChatParseState>> parse_state_of(
    const common_chat_params& params, bool one_call, bool split_reasoning) {
    auto state = std::make_shared<detail::ChatParseState>();
    state->params = common_chat_parser_params(params);
    state->params.reasoning_format =
        split_reasoning ? COMMON_REASONING_FORMAT_DEEPSEEK : COMMON_REASONING_FORMAT_NONE;
    if (one_call) state->max_tool_calls = 1;
    if (!params.parser.empty()) {
        try {
            state->params.parser.load(params.parser);
        } catch (const std::exception& e) {
            return fail(ErrorCode::template_error,
                        std::string("chat output parser failed to load: ") + e.what());
        }
    }
    return state;
}

}  // namespace

Result<ChatPrompt> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                        const ChatRenderOptions& options) const {
    if (auto ok = validate(messages); !ok) return std::unexpected(ok.error());
    if (auto ok = validate_tools(options); !ok) return std::unexpected(ok.error());
    const Tokenizer tokenizer = state_->model.tokenizer();
    if (auto ok = check_markup_fields(tokenizer, messages); !ok) return std::unexpected(ok.error());
    // Content and reasoning that spell control tokens are replaced by markers while the template
    // renders, and tokenized as plain text afterwards. Everything else renders as is, and the
    // prompt is tokenized in one piece exactly as llama.cpp's server does (segment-wise
    // tokenization would add SentencePiece space prefixes at every boundary).
    std::vector<const std::string*> texts;
    auto msgs = with_markers(tokenizer, messages, texts);
    if (!msgs) return std::unexpected(msgs.error());
    auto params = apply_common(*state_, *msgs, options);
    if (!params) return std::unexpected(params.error());
    if (!options.forced_tool.empty() && options.tool_choice != ToolChoice::none) {
        // The prompt describes every tool; the grammar and the parser know only the forced one.
        auto forced = apply_common(*state_, std::move(*msgs), options, options.forced_tool);
        if (!forced) return std::unexpected(forced.error());
        forced->prompt = std::move(params->prompt);
        params = std::move(forced);
    }
    ChatPrompt prompt;
    if (auto ok = tokenize_rendered(tokenizer, params->prompt, texts, prompt); !ok)
        return std::unexpected(ok.error());
    const auto& special = state_->model.info().special;
    if (special.add_bos && special.bos != no_token &&
        (prompt.tokens.empty() || prompt.tokens.front() != special.bos)) {
        prompt.tokens.insert(prompt.tokens.begin(), special.bos);
    }
    if (prompt.tokens.empty())
        return fail(ErrorCode::template_error, "chat template rendered an empty prompt");
    prompt.stop = params->additional_stops;
    const bool one_call = !options.parallel_tool_calls || !options.forced_tool.empty();
    if (!params->grammar.empty())
        prompt.reply_grammar = reply_grammar_of(*params, options, one_call);
    prompt.reply_format = !options.json_schema.empty() && !prompt.reply_grammar.gbnf.empty();
    prompt.reply_prefix = params->generation_prompt;
    if (!params->thinking_end_tags.empty()) {
        prompt.thinking_start = params->thinking_start_tag;
        prompt.thinking_end = params->thinking_end_tags;
        std::vector<std::string> markers = prompt.thinking_end;
        markers.push_back(prompt.thinking_start);
        // Markers the prefix already wrote are fed to the grammar as the prompt tokenized them.
        std::erase_if(markers, [&](const std::string& m) {
            return prompt.reply_prefix.find(m) != std::string::npos;
        });
        prompt.reply_grammar.gbnf =
            markers_as_tokens(prompt.reply_grammar.gbnf, tokenizer, markers);
    }
    for (const auto& text : params->preserved_tokens) {
        auto ids = tokenizer.encode(text, {.add_special = false, .parse_special = true});
        if (ids && ids->size() == 1) prompt.shown_control_tokens.push_back(ids->front());
    }
    auto parse_state = parse_state_of(*params, one_call, options.split_reasoning);
    if (!parse_state) return std::unexpected(parse_state.error());
    prompt.parse_state = std::move(*parse_state);
    return prompt;
}

Result<ChatPrompt> ChatTemplate::render_for(const std::vector<ChatMessage>& messages,
                                            const ChatRenderOptions& render,
                                            GenerateOptions& options) const {
    ChatRenderOptions with_format = render;
    if (with_format.json_schema.empty() && !tools_active(render))
        with_format.json_schema = options.sampling.json_schema;
    auto prompt = this->render(messages, with_format);
    if (!prompt) return prompt;
    if (auto ok = prompt->constrain(options); !ok) return std::unexpected(ok.error());
    return prompt;
}

Result<void> ChatPrompt::constrain(GenerateOptions& options) const {
    for (const auto& s : stop) {
        if (!s.empty() && std::ranges::find(options.stop, s) == options.stop.end())
            options.stop.push_back(s);
    }
    SamplingParams& sampling = options.sampling;
    if (reply_format) sampling.json_schema.clear();  // the template's grammar holds the schema
    if (!reply_grammar.gbnf.empty()) {
        if (!sampling.grammar.empty() || !sampling.json_schema.empty())
            return fail(ErrorCode::invalid_argument,
                        "tool calls follow their own grammar; a grammar or JSON schema cannot be "
                        "combined with tools",
                        sampling.grammar.empty() ? "json_schema" : "grammar");
        sampling.reply_grammar = reply_grammar;
    }
    sampling.reply_prefix = reply_prefix;
    if (!thinking_end.empty()) {
        ReasoningBudget& budget = sampling.reasoning;
        budget.start = thinking_start;
        budget.end = thinking_end;
        // Unlimited thinking before a forced call or object could spend every token on it.
        const bool forced = !reply_grammar.gbnf.empty() && !reply_grammar.lazy;
        if (budget.tokens < 0 && forced)
            budget.tokens =
                options.max_tokens > 0 ? std::clamp(options.max_tokens / 4, 1, 1024) : 1024;
    }
    options.shown_control_tokens.insert(options.shown_control_tokens.end(),
                                        shown_control_tokens.begin(), shown_control_tokens.end());
    return {};
}

ChatMessage ChatTemplate::parse(const std::string& output, const ChatPrompt& prompt,
                                bool complete) {
    std::optional<ChatMessage> parsed;
    if (prompt.parse_state) parsed = detail::parse_reply(*prompt.parse_state, output, !complete);
    // Random or unexpected output is still an answer; show it as it came.
    if (!parsed) return {.role = "assistant", .content = output};
    // A call cut off before its name ended is of no use to anyone.
    std::erase_if(parsed->tool_calls, [](const ToolCall& call) { return call.name.empty(); });
    for (auto& call : parsed->tool_calls) {
        if (call.id.empty()) call.id = detail::new_tool_call_id();
    }
    return std::move(*parsed);
}

Result<ChatResult> chat(Context& context, const ChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, const ChatOptions& options,
                        const PieceCallback& on_piece) {
    GenerateOptions generate = options.generate;
    auto prompt = chat_template.render_for(messages, options.render, generate);
    if (!prompt) return std::unexpected(prompt.error());
    auto generation = context.stream(std::span<const Token>(prompt->tokens), generate, on_piece);
    if (!generation) return std::unexpected(generation.error());
    ChatResult result;
    result.message = ChatTemplate::parse(generation->text, *prompt,
                                         generation->finish_reason == FinishReason::stop);
    result.generation = std::move(*generation);
    return result;
}

}  // namespace llamapp
