// One engine shared by several threads: each submits its own prompt and streams its reply, and
// the engine decodes them together (continuous batching).
//   engine_threads MODEL.gguf
#include <llamapp/llamapp.hpp>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

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
    llamapp::EngineOptions engine_options;
    engine_options.context.n_ctx = 2048;
    engine_options.context.n_seq_max = 4;  // four slots: four requests decode at once
    auto engine = llamapp::Engine::create(*model, engine_options);
    if (!engine) {
        std::fprintf(stderr, "error: %s\n", engine.error().describe().c_str());
        return 1;
    }
    const std::vector<std::string> prompts = {"Once upon a time", "The little dog",
                                              "In the morning",   "She looked at the sky",
                                              "Tom and Lily",     "The sun was hot"};
    std::vector<std::string> replies(prompts.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        threads.emplace_back([&, i] {
            llamapp::EngineRequest request;
            request.options.max_tokens = 24;
            // Submit is thread-safe; the handle belongs to this thread.
            auto handle = engine->submit(prompts[i], request);
            if (!handle) {
                replies[i] = "error: " + handle.error().describe();
                return;
            }
            llamapp::EngineEvent event;
            while (handle->next(event)) {
                if (!event.final()) replies[i] += event.piece.text;
            }
        });
    }
    for (auto& t : threads) t.join();
    int failed = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        std::printf("[%zu] %s%s\n", i, prompts[i].c_str(), replies[i].c_str());
        failed += replies[i].rfind("error: ", 0) == 0 ? 1 : 0;
    }
    return failed == 0 ? 0 : 1;
}
