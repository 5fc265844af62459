// Where the test fixtures live.
#pragma once

#include <filesystem>
#include <string>

namespace llamapp::test {

inline std::filesystem::path shared_model(const std::string& name) {
    return std::filesystem::path(LLAMAPP_SHARED_MODELS_DIR) / name;
}
inline std::filesystem::path generated_model(const std::string& name) {
    return std::filesystem::path(LLAMAPP_TEST_MODELS_DIR) / name;
}
inline std::filesystem::path llama_source(const std::string& rel) {
    return std::filesystem::path(LLAMAPP_LLAMA_SOURCE_DIR) / rel;
}
inline std::filesystem::path binary(const std::string& name) {
    return std::filesystem::path(LLAMAPP_BIN_DIR) / name;
}

}  // namespace llamapp::test
