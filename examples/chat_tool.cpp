// Chat with a tool: the model's template describes the tool, a grammar keeps a call well-formed,
// and the reply comes back parsed into text or tool calls.
//   chat_tool MODEL.gguf
#include <llamapp/llamapp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    auto context = llamapp::Context::create(*model);
    // A model without a template of its own chats with ChatML.
    auto chat_template =
        llamapp::ChatTemplate::create(*model, {}, llamapp::MissingTemplate::chatml);
    if (!context || !chat_template) {
        const auto& error = !context ? context.error() : chat_template.error();
        std::fprintf(stderr, "error: %s\n", error.describe().c_str());
        return 1;
    }
    llamapp::ChatOptions options;
    options.generate.max_tokens = 64;
    options.generate.sampling.seed = 1;
    options.render.tools.push_back({
        .name = "get_weather",
        .description = "The current weather in a city",
        .parameters = R"({"type":"object","properties":{"city":{"type":"string"}},)"
                      R"("required":["city"]})",
    });
    // `required`: the reply must call a tool, so even a tiny model produces a call.
    options.render.tool_choice = llamapp::ToolChoice::required;
    const std::vector<llamapp::ChatMessage> messages = {
        {.role = "system", .content = "You answer with the tools you have."},
        {.role = "user", .content = "What is the weather in Lisbon?"},
    };
    auto reply = llamapp::chat(*context, *chat_template, messages, options);
    if (!reply) {
        std::fprintf(stderr, "error: %s\n", reply.error().describe().c_str());
        return 1;
    }
    for (const auto& call : reply->message.tool_calls)
        std::printf("tool call %s(%s)\n", call.name.c_str(), call.arguments.c_str());
    if (!reply->message.content.empty()) std::printf("text: %s\n", reply->message.content.c_str());
    return reply->message.tool_calls.empty() ? 1 : 0;
}
