// Ollama's /api/chat and /api/generate bodies, read as the OpenAI bodies of the same meaning.
#include <fmt/core.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string_view>

#include "core/log_internal.hpp"
#include "server/protocols/native/infill.hpp"
#include "server/protocols/ollama/go_template.hpp"
#include "server/protocols/ollama/ollama.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// Ollama's sampling options and the OpenAI or llama-server field of the same meaning.
constexpr std::pair<std::string_view, std::string_view> sampling_options[] = {
    {"num_predict", "n_predict"},  // negative: as many as the context allows, as Ollama's -1
    {"temperature", "temperature"},
    {"top_k", "top_k"},
    {"top_p", "top_p"},
    {"min_p", "min_p"},
    {"typical_p", "typical_p"},
    {"repeat_penalty", "repeat_penalty"},
    {"repeat_last_n", "repeat_last_n"},
    {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
    {"seed", "seed"},
    {"stop", "stop"},
    {"mirostat", "mirostat"},
    {"mirostat_tau", "mirostat_tau"},
    {"mirostat_eta", "mirostat_eta"}};

// Each option this server does not apply is logged once per process, not once per request; a
// client inventing names cannot grow the set (or the log) past a bound.
void note_unapplied(const std::string& name, const char* why) {
    static std::mutex mutex;
    static std::set<std::string> noted;
    std::lock_guard lock(mutex);
    if (noted.size() < 256 && noted.insert(name.substr(0, 64)).second)
        log(LogLevel::warning, "ollama option {} not applied: {}", dump(json(name.substr(0, 64))),
            why);  // quoted and escaped: the name is the client's
}

// Settings of a model's load (threads, offload, batch, mmap), which the operator sets for every
// request alike.
constexpr std::string_view load_time_options[] = {"num_batch",
                                                  "num_gpu",
                                                  "main_gpu",
                                                  "use_mmap",
                                                  "use_mlock",
                                                  "num_thread",
                                                  "numa",
                                                  "low_vram",
                                                  "f16_kv",
                                                  "vocab_only",
                                                  "logits_all",
                                                  "num_gqa",
                                                  "rope_frequency_base",
                                                  "rope_frequency_scale"};

void note_option(const std::string& name) {
    if (name == "num_keep")
        note_unapplied(name, "llamapp never shifts the context, so no tokens need keeping");
    else if (std::ranges::find(load_time_options, name) != std::end(load_time_options))
        note_unapplied(name, "a load-time setting, which the server's command line sets");
    else
        note_unapplied(name, "not an option llamapp knows");
}

// options.* onto the flat body; num_ctx is checked against the loaded context and bounds the
// prompt and the reply.
void flatten_options(const json& body, json& flat, ServedModel& m, int n_ctx) {
    const json* options = optional_field(body, "options");
    if (!options) return;
    if (!options->is_object())
        reject_field("options", "'options' must be an object", "invalid_type");
    for (const auto& [name, value] : options->items()) {
        if (value.is_null()) continue;
        if (name == "num_ctx") {
            // Clients such as Continue send the model's trained length on every request; the
            // context is the operator's, so a larger one is served with the loaded context.
            const long long want = integer_field(value, "options.num_ctx", 1, 1LL << 40);
            if (want > n_ctx)
                note_unapplied("num_ctx",
                               "larger than the loaded context, which requests get instead "
                               "(--ctx-size sets it)");
            const int bound = static_cast<int>(std::min<long long>(want, n_ctx));
            m.max_prompt_tokens = std::min(m.max_prompt_tokens, bound);
            m.limits.max_tokens = std::min(m.limits.max_tokens, bound);
            continue;
        }
        // Ollama's -1 (no limit) and -2 (fill the context) are both what -1 means here.
        if (name == "num_predict" && value.is_number() && value.get<double>() < 0) {
            flat["n_predict"] = -1;
            continue;
        }
        bool known = false;
        for (const auto& [ollama, openai] : sampling_options)
            if (name == ollama) {
                flat[std::string(openai)] = value;
                known = true;
            }
        if (!known) note_option(name);
    }
}

// format: "json", a JSON schema, or "" for none.
void flatten_format(const json& body, json& flat) {
    const json* format = optional_field(body, "format");
    if (!format) return;
    if (format->is_object()) {
        flat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *format}}}};
    } else if (format->is_string() && format->get<std::string>() == "json") {
        flat["response_format"] = {{"type", "json_object"}};
    } else if (!format->is_string() || !format->get<std::string>().empty()) {
        reject_field("format", "'format' must be \"json\" or a JSON schema object");
    }
}

// An error of the OpenAI body, named as the Ollama body names the field.
std::string ollama_param(const std::string& param) {
    for (const auto& [ollama, openai] : sampling_options)
        if (param == openai) return "options." + std::string(ollama);
    if (param.starts_with("response_format")) return "format";
    if (param == "max_tokens") return "options.num_predict";
    return param;
}

template <typename Parse>
GenerationRequest parse_as_openai(Parse&& parse) {
    try {
        return parse();
    } catch (HttpException& e) {
        const std::string named = ollama_param(e.error.param);
        if (named != e.error.param) {
            const std::string was = "'" + e.error.param + "'";
            if (auto at = e.error.message.find(was); at != std::string::npos)
                e.error.message.replace(at, was.size(), "'" + named + "'");
            e.error.param = named;
        }
        throw;
    }
}

// think: true or false, or an effort ("low", "medium", "high") for models that take one.
void apply_think(const json& body, GenerationRequest& g) {
    const json* think = optional_field(body, "think");
    if (!think || think->is_null()) return;
    if (think->is_boolean()) {
        g.render.enable_thinking = think->get<bool>();
    } else if (think->is_string()) {
        apply_reasoning_effort(*think, "think", g);
    } else {
        reject_field("think", "'think' must be a boolean or low, medium or high", "invalid_type");
    }
}

void refuse_images(const json& holder, const std::string& where) {
    if (const json* images = optional_field(holder, "images");
        images && !(images->is_array() && images->empty()))
        reject_field(where + ".images",
                     "image input is not supported: this server has text models only");
}

// Ollama's tool calls carry no ids and their arguments as an object; OpenAI's need both as
// strings. A tool message answers the oldest unanswered call of its tool_name.
class MessageTranslator {
  public:
    json translate(const json& messages) {
        if (!messages.is_array()) return messages;  // parse_chat names the error
        json out = json::array();
        for (std::size_t i = 0; i < messages.size(); ++i) out.push_back(message(messages[i], i));
        return out;
    }

  private:
    json message(const json& m, std::size_t index) {
        if (!m.is_object()) return m;
        const std::string where = fmt::format("messages[{}]", index);
        refuse_images(m, where);
        json out = m;
        out.erase("images");
        out.erase("tool_name");
        out.erase("thinking");
        if (const json* thinking = optional_field(m, "thinking"))
            out["reasoning_content"] = string_field(*thinking, where + ".thinking");
        if (!out.contains("content") || out["content"].is_null()) out["content"] = "";
        if (const json* calls = optional_field(m, "tool_calls"))
            out["tool_calls"] = tool_calls(*calls, where + ".tool_calls");
        // parse_chat checks the role; a tool message needs its call's id first.
        if (const json* role = optional_field(m, "role"); role && *role == "tool")
            tool_result(m, out, where);
        return out;
    }

    json tool_calls(const json& calls, const std::string& where) {
        if (!calls.is_array()) reject_field(where, "'tool_calls' must be an array", "invalid_type");
        json out = json::array();
        for (std::size_t i = 0; i < calls.size(); ++i) {
            const std::string at = fmt::format("{}[{}].function", where, i);
            const json* f = calls[i].is_object() ? optional_field(calls[i], "function") : nullptr;
            if (!f || !f->is_object())
                reject_field(at, "each tool call needs a 'function' object", "invalid_type");
            const std::string name = required_string(*f, "name", at);
            const json* args = optional_field(*f, "arguments");
            std::string arguments = "{}";
            if (args && args->is_string())
                arguments = args->get<std::string>();
            else if (args && args->is_object())
                arguments = args->dump();
            else if (args)
                reject_field(at + ".arguments", "must be an object", "invalid_type");
            std::string id = fmt::format("call_{}", next_id_++);
            if (const json* given = optional_field(calls[i], "id"); given && given->is_string())
                id = given->get<std::string>();
            pending_.emplace_back(name, id);
            out.push_back({{"id", id},
                           {"type", "function"},
                           {"function", {{"name", name}, {"arguments", arguments}}}});
        }
        return out;
    }

    void tool_result(const json& m, json& out, const std::string& where) {
        if (out.contains("tool_call_id")) return;
        std::string name;
        if (const json* n = optional_field(m, "tool_name"))
            name = string_field(*n, where + ".tool_name");
        auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const auto& p) { return name.empty() || p.first == name; });
        if (it == pending_.end()) {
            out["tool_call_id"] = name.empty() ? "call" : "call_" + name;
        } else {
            out["tool_call_id"] = it->second;
            if (name.empty()) name = it->first;
            pending_.erase(it);
        }
        if (!name.empty()) out["name"] = name;
    }

    std::vector<std::pair<std::string, std::string>> pending_;  // (tool, id) not yet answered
    int next_id_ = 0;
};

// The fields both routes read alike, as an OpenAI body.
json common_body(const json& body, ServedModel& m, int n_ctx) {
    json flat = json::object();
    flat["stream"] = true;  // Ollama streams unless told not to
    if (const json* v = optional_field(body, "stream")) flat["stream"] = *v;
    flatten_options(body, flat, m, n_ctx);
    flatten_format(body, flat);
    return flat;
}

}  // namespace

std::optional<std::chrono::milliseconds> ollama_keep_alive(const json& body) {
    const json* v = optional_field(body, "keep_alive");
    if (!v || v->is_null()) return std::nullopt;
    std::string text;
    if (v->is_number()) {
        const double seconds = v->get<double>();
        if (!std::isfinite(seconds) || std::abs(seconds) > 1e9)
            reject_field("keep_alive", "'keep_alive' is out of range");
        if (seconds < 0) return std::chrono::milliseconds(-1);
        return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    }
    text = string_field(*v, "keep_alive");
    if (text.size() > 32) reject_field("keep_alive", "'keep_alive' is too long");
    auto parsed = parse_keep_alive(text);
    if (!parsed) reject_field("keep_alive", parsed.error().message);
    return *parsed;
}

OllamaRequest parse_ollama_chat(const json& body, ServedModel& m, int n_ctx) {
    json flat = common_body(body, m, n_ctx);
    for (const char* field : {"model", "tools", "tool_choice"})
        if (const json* v = optional_field(body, field)) flat[field] = *v;
    const json* messages = optional_field(body, "messages");
    flat["messages"] = messages ? MessageTranslator().translate(*messages) : json::array();
    OllamaRequest r;
    r.g = parse_as_openai([&] { return parse_chat(flat, m.limits, m.lease.defaults()); });
    apply_think(body, r.g);
    return r;
}

OllamaRequest parse_ollama_generate(const json& body, ServedModel& m, int n_ctx) {
    refuse_images(body, "body");
    if (const json* c = optional_field(body, "context"); c && !(c->is_array() && c->empty()))
        reject_field("context",
                     "'context' (a previous reply's tokens) is not supported; send the "
                     "conversation to /api/chat, whose prefix the server's cache keeps anyway");
    auto text = [&](const char* name) {
        const json* v = optional_field(body, name);
        return v && !v->is_null() ? string_field(*v, name) : std::string();
    };
    const std::string prompt = text("prompt"), system = text("system"), suffix = text("suffix"),
                      tmpl = text("template");
    bool raw = false;
    if (const json* v = optional_field(body, "raw")) raw = bool_field(*v, "raw");
    json flat = common_body(body, m, n_ctx);
    OllamaRequest r;
    if (!suffix.empty() && tmpl.empty() && !raw) {
        // Fill-in-the-middle: the model's own markers around the prompt and the suffix.
        r.chat = false;
        r.g = parse_as_openai([&] { return parse_generation(flat, m.limits, m.lease.defaults()); });
        const Engine& engine = m.lease.engine();
        try {
            r.g.engine.prompt = infill_prompt({{"input_prefix", prompt}, {"input_suffix", suffix}},
                                              m.lease.model().tokenizer(),
                                              {.n_batch = engine.n_batch(),
                                               .n_ctx = engine.n_ctx(),
                                               .n_predict = r.g.engine.options.max_tokens});
        } catch (const HttpException& e) {
            if (e.error.status != 501) throw;  // 501: the model has no FIM tokens
            reject_field("suffix", "this model does not support insert (fill-in-the-middle): " +
                                       e.error.message);
        }
        return r;
    }
    if (raw || !tmpl.empty()) {
        r.chat = false;
        flat["prompt"] = raw ? prompt : render_go_template(tmpl, system, prompt, suffix);
        if (flat["prompt"].get<std::string>().empty())
            reject_field("prompt", "the prompt is empty");
        r.g = parse_as_openai([&] { return parse_completion(flat, m.limits, m.lease.defaults()); });
        return r;
    }
    json messages = json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    flat["messages"] = std::move(messages);
    r.g = parse_as_openai([&] { return parse_chat(flat, m.limits, m.lease.defaults()); });
    apply_think(body, r.g);
    return r;
}

}  // namespace llamapp::detail
