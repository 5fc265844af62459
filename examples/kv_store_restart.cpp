// The KV store across runs: the first run computes a long prompt and saves its state to a
// directory; a second run of the same program restores it instead of computing it again.
//   kv_store_restart MODEL.gguf CACHE_DIR     (run it twice)
#include <llamapp/llamapp.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf CACHE_DIR\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    llamapp::KvStoreOptions store_options;
    store_options.directories.push_back({.directory = argv[2]});
    store_options.policy.min_tokens = 32;  // this example's prompt is short
    auto store = llamapp::KvStore::open(store_options);
    if (!store) {
        std::fprintf(stderr, "error: %s\n", store.error().describe().c_str());
        return 1;
    }
    llamapp::EngineOptions engine_options;
    engine_options.context.n_ctx = 2048;
    engine_options.kv_store = *store;
    auto engine = llamapp::Engine::create(*model, engine_options);
    if (!engine) {
        std::fprintf(stderr, "error: %s\n", engine.error().describe().c_str());
        return 1;
    }
    std::string prompt = "A long system prompt that many requests share. ";
    for (int i = 0; i < 8; ++i) prompt += "It describes the rules of the game in detail. ";
    llamapp::EngineRequest request;
    request.options.max_tokens = 8;
    auto handle = engine->submit(prompt, request);
    if (!handle) {
        std::fprintf(stderr, "error: %s\n", handle.error().describe().c_str());
        return 1;
    }
    const llamapp::Completion done = handle->wait();
    // Shutting down writes what the policy saves to the directory before the program exits.
    engine->shutdown();
    const auto& usage = done.generation.usage;
    std::printf("%d prompt tokens, %d restored from the store (%s), prefill %.1f ms\n",
                usage.prompt_tokens, usage.cached_tokens,
                std::string(llamapp::to_string(done.cache.source)).c_str(),
                done.generation.timings.prefill_ms);
    return done.generation.error ? 1 : 0;
}
