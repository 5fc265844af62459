// The entries the KV store crash test writes: deterministic, so the parent can check what the
// killed child published.
#pragma once

#include <random>
#include <vector>

#include "kvstore/store_client.hpp"

namespace llamapp::test {

inline detail::KvNamespace crash_namespace() {
    return {"crash-test-model", "f16/f16", "", ""};
}

inline std::vector<Token> crash_tokens(int round, int index) {
    std::vector<Token> t(static_cast<std::size_t>(16 + index % 40));
    for (std::size_t i = 0; i < t.size(); ++i)
        t[i] = round * 100000 + index * 100 + static_cast<Token>(i);
    return t;
}

inline std::vector<std::uint8_t> crash_payload(int round, int index) {
    std::vector<std::uint8_t> p(static_cast<std::size_t>(20000 + (index * 7919) % 200000));
    std::mt19937 rng(static_cast<unsigned>(round * 7777 + index));
    for (auto& b : p) b = static_cast<std::uint8_t>(rng());
    return p;
}

}  // namespace llamapp::test
