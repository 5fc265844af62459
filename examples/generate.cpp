// The smallest program: load a model, make a context, generate text.
//   generate MODEL.gguf [PROMPT]
#include <llamapp/llamapp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    llamapp::ContextOptions context_options;
    context_options.n_ctx = 512;
    auto context = llamapp::Context::create(*model, context_options);
    if (!context) {
        std::fprintf(stderr, "error: %s\n", context.error().describe().c_str());
        return 1;
    }
    llamapp::GenerateOptions options;
    options.max_tokens = 32;
    options.sampling.temperature = 0;  // greedy: the same text every run
    auto reply = context->generate(argc > 2 ? argv[2] : "Once upon a time", options);
    if (!reply) {
        std::fprintf(stderr, "error: %s\n", reply.error().describe().c_str());
        return 1;
    }
    std::printf("%s\n", reply->text.c_str());
    std::fprintf(stderr, "%d prompt tokens, %d generated (%s), %.1f tokens/s\n",
                 reply->usage.prompt_tokens, reply->usage.completion_tokens,
                 std::string(llamapp::to_string(reply->finish_reason)).c_str(),
                 reply->timings.decode_tokens_per_s);
    return 0;
}
