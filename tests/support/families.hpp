// The architecture families the generator makes, for parameterized tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace llamapp::test {

struct Family {
    const char* file;
    bool recurrent;  // recurrent or hybrid: no partial removal, whole-entry restores only
    bool sliding_window;
    bool hybrid = false;  // attention and recurrent layers in one model
};

inline auto generated_families() {
    return ::testing::Values(
        Family{"llama-tiny.gguf", false, false}, Family{"llama-tiny-q4_0.gguf", false, false},
        Family{"qwen3-tiny.gguf", false, false}, Family{"gemma2-tiny.gguf", false, true},
        Family{"mamba-tiny.gguf", true, false}, Family{"jamba-tiny.gguf", true, false, true});
}

// "llama-tiny-q4_0.gguf" -> "llama_tiny_q4_0", for test names.
inline std::string family_name(const ::testing::TestParamInfo<Family>& info) {
    std::string n = info.param.file;
    n = n.substr(0, n.find(".gguf"));
    std::replace(n.begin(), n.end(), '-', '_');
    return n;
}

}  // namespace llamapp::test
