// Helpers for engine tests: drain a handle, build requests.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "llamapp/backend.hpp"
#include "support/eventually.hpp"
#include "support/prometheus.hpp"
#include "support/stories.hpp"

namespace llamapp::test {

// The local GPU a model loaded with default options puts its layers and KV cache on (the Vulkan
// job's lavapipe), if any: the engine's rules for the CPU's attention kernel are off there.
inline std::optional<std::string> local_gpu() {
    for (const auto& d : offload_devices())
        if (d.backend != "RPC") return d.name;
    return std::nullopt;
}

struct Drained {
    std::string text;           // concatenated piece text
    std::vector<Token> tokens;  // piece tokens (including an end-of-generation token)
    Completion completion;
    int finals = 0;
    int pieces = 0;
};

// Reads every event; checks the handle reports nothing after its one final event.
inline Drained drain(RequestHandle& handle) {
    Drained d;
    EngineEvent e;
    while (handle.next(e)) {
        if (e.final()) {
            ++d.finals;
            if (e.completion) d.completion = std::move(*e.completion);
        } else {
            ++d.pieces;
            d.text += e.piece.text;
            if (e.piece.token != no_token) d.tokens.push_back(e.piece.token);
        }
    }
    EXPECT_FALSE(handle.next(e));
    return d;
}

inline Drained drain(RequestHandle&& handle) {
    return drain(handle);
}

// Creates an engine; a failure fails the test at once.
inline Engine create_engine(const Model& model, EngineOptions options) {
    auto e = Engine::create(model, std::move(options));
    if (!e) throw std::runtime_error(e.error().describe());
    return std::move(*e);
}

// Submits `r` and drains its reply; a refused submit throws.
inline Drained submit_and_drain(Engine& e, EngineRequest r) {
    auto handle = e.submit(std::move(r));
    if (!handle) throw std::runtime_error(handle.error().describe());
    return drain(*handle);
}

// One series of the engine's metrics (name plus labels, as exposed); an absent one throws.
inline double engine_metric(const Engine& e, const std::string& series) {
    const auto value = prometheus_value(e.metrics().prometheus_text(), series);
    if (!value) throw std::runtime_error("no metric " + series);
    return *value;
}

inline EngineRequest request(std::vector<Token> prompt, int max_tokens, bool ignore_eos = true) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.options = greedy(max_tokens);
    r.options.ignore_eos = ignore_eos;
    return r;
}

inline std::vector<Token> encode(const Model& m, const std::string& text) {
    auto t = m.tokenizer().encode(text);
    if (!t) throw std::runtime_error(t.error().describe());
    return *t;
}

// Tokens of text that follows a prompt (without the BOS a prompt starts with).
inline std::vector<Token> continuation(const Model& m, const std::string& text) {
    auto t = encode(m, text);
    return {t.begin() + 1, t.end()};
}

inline std::vector<Token> concat(std::vector<Token> a, const std::vector<Token>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A model manager with llama.cpp's and llamapp's logs off.
inline std::unique_ptr<ModelManager> quiet_manager(ModelManagerOptions o = {}) {
    set_log_level(LogLevel::none);
    auto m = ModelManager::create(std::move(o));
    if (!m) throw std::runtime_error(m.error().describe());
    return std::move(*m);
}

}  // namespace llamapp::test
