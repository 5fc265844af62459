// The real trained tiny model, loaded once per test binary.
#pragma once

#include <gtest/gtest.h>

#include "llamapp/llamapp.hpp"
#include "support/paths.hpp"

namespace llamapp::test {

// Loads a test model quietly; a missing model fails the test binary at once.
inline Model load_test_model(const std::filesystem::path& path) {
    set_log_level(LogLevel::none);
    auto m = Model::load(path);
    if (!m) throw std::runtime_error(m.error().describe());
    return std::move(*m);
}

inline const Model& stories_model() {
    static Model model = load_test_model(shared_model("stories260K.gguf"));
    return model;
}

// The generated Qwen3 model: a real Qwen2 tokenizer and Qwen3's chat template, random weights.
inline const Model& qwen3_model() {
    static Model model = load_test_model(generated_model("qwen3-tiny.gguf"));
    return model;
}

inline Context stories_context(std::int64_t n_ctx = 512) {
    ContextOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    auto c = Context::create(stories_model(), o);
    if (!c) throw std::runtime_error(c.error().describe());
    return std::move(*c);
}

inline GenerateOptions greedy(int max_tokens) {
    GenerateOptions o;
    o.sampling = SamplingParams::greedy();
    o.max_tokens = max_tokens;
    return o;
}

}  // namespace llamapp::test
