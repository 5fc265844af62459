// Speculative decoding with a draft model: a small model with the same vocabulary proposes a
// few tokens per step, the engine's model checks them all in one decode and keeps those it would
// have picked itself. The reply is the model's own; what drafting saved is in the completion.
//   draft_model MODEL.gguf DRAFT.gguf [PROMPT]
#include <llamapp/llamapp.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf DRAFT.gguf [PROMPT]\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    auto draft = llamapp::Model::load(argv[2]);
    for (const auto* loaded : {&model, &draft}) {
        if (!*loaded) {
            std::fprintf(stderr, "error: %s\n", loaded->error().describe().c_str());
            return 1;
        }
    }
    llamapp::EngineOptions options;
    options.context.n_ctx = 1024;
    options.speculative.kinds = {llamapp::DraftKind::draft_simple};
    options.speculative.n_max = 4;  // drafts per step
    options.speculative.draft.model = *draft;
    // Refused here, with the first difference named, if the vocabularies differ.
    auto engine = llamapp::Engine::create(*model, options);
    if (!engine) {
        std::fprintf(stderr, "error: %s\n", engine.error().describe().c_str());
        return 1;
    }
    llamapp::EngineRequest request;
    request.options.max_tokens = 48;
    request.options.sampling.temperature = 0;
    auto handle = engine->submit(argc > 3 ? argv[3] : "Once upon a time", request);
    if (!handle) {
        std::fprintf(stderr, "error: %s\n", handle.error().describe().c_str());
        return 1;
    }
    const llamapp::Completion done = handle->wait();
    std::printf("%s\n", done.generation.text.c_str());
    std::printf("drafted %d tokens, kept %d\n", done.draft_tokens, done.draft_accepted);
    return done.generation.error ? 1 : 0;
}
