// Chat templates rendered over hostile messages and tools: real templates of llama.cpp's tree
// (tool-calling and thinking ones), a vocabulary-only model to tokenize with, and a JSON input
// of messages and tools. Rendering may refuse (a typed error); it must not crash, hang or throw.
// The first byte picks the template and the render options.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llamapp/chat.hpp"
#include "llamapp/log.hpp"
#include "llamapp/model.hpp"

namespace {

using json = nlohmann::json;

struct Fixture {
    llamapp::Model model;
    std::vector<llamapp::ChatTemplate> templates;
};

Fixture load() {
    llamapp::set_log_level(llamapp::LogLevel::none);
    llamapp::ModelOptions o;
    o.vocab_only = true;
    auto model =
        llamapp::Model::load(LLAMAPP_SHARED_MODELS_DIR "/vocab/ggml-vocab-llama-spm.gguf", o);
    if (!model) __builtin_trap();
    Fixture f{std::move(*model), {}};
    for (const char* name :
         {"Qwen-Qwen3-0.6B", "Qwen-QwQ-32B", "meta-llama-Llama-3.3-70B-Instruct",
          "mistralai-Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-V3.1",
          "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "google-gemma-2-2b-it"}) {
        std::ifstream in(std::string(LLAMAPP_LLAMA_SOURCE_DIR "/models/templates/") + name +
                         ".jinja");
        std::stringstream text;
        text << in.rdbuf();
        if (auto t = llamapp::ChatTemplate::create(f.model, text.str())) f.templates.push_back(*t);
    }
    if (f.templates.empty()) __builtin_trap();
    return f;
}

std::string text_of(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const Fixture fixture = load();
    if (size == 0) return 0;
    const json input = json::parse(data + 1, data + size, nullptr, false);
    if (!input.is_object()) return 0;
    std::vector<llamapp::ChatMessage> messages;
    for (const json& m : input.value("messages", json::array())) {
        if (!m.is_object()) continue;
        llamapp::ChatMessage msg{
            text_of(m, "role"),         text_of(m, "content"), text_of(m, "reasoning_content"), {},
            text_of(m, "tool_call_id"), text_of(m, "name")};
        for (const json& c : m.value("tool_calls", json::array()))
            if (c.is_object())
                msg.tool_calls.push_back(
                    {text_of(c, "id"), text_of(c, "name"), text_of(c, "arguments")});
        messages.push_back(std::move(msg));
    }
    llamapp::ChatRenderOptions options;
    for (const json& t : input.value("tools", json::array()))
        if (t.is_object())
            options.tools.push_back({text_of(t, "name"), text_of(t, "description"),
                                     t.contains("parameters") ? t["parameters"].dump() : "{}"});
    options.enable_thinking = data[0] & 0x10;
    options.add_generation_prompt = !(data[0] & 0x20);
    if (data[0] & 0x40) options.tool_choice = llamapp::ToolChoice::required;
    const auto& tmpl = fixture.templates[data[0] % fixture.templates.size()];
    if (auto prompt = tmpl.render(messages, options)) {
        (void)llamapp::ChatTemplate::parse(text_of(input, "reply"), *prompt, data[0] & 0x80);
    }
    return 0;
}
