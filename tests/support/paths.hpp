// Where the test fixtures live.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>

namespace llamapp::test {

// Where ../shared/models is: the build's, or LLAMAPP_TEST_SHARED_MODELS_DIR (a test of the tests
// points it at a folder that does not exist).
inline std::filesystem::path shared_models_dir() {
    const char* over = std::getenv("LLAMAPP_TEST_SHARED_MODELS_DIR");
    return over && *over ? std::filesystem::path(over)
                         : std::filesystem::path(LLAMAPP_SHARED_MODELS_DIR);
}

// A fixture of ../shared/models. Without it the test fails at once with one line naming the
// file (gtest reports the exception), instead of running on and crashing on a model that did
// not load.
struct MissingFixture : std::runtime_error {
    using std::runtime_error::runtime_error;
};
inline const std::thread::id test_main_thread = std::this_thread::get_id();
inline std::filesystem::path shared_model(const std::string& name) {
    const auto path = shared_models_dir() / name;
    if (std::filesystem::exists(path)) return path;
    const std::string line = "missing test fixture " + path.string() +
                             " (the shared folder is not beside this checkout)";
    // An exception off the test's own thread would terminate the process; ctest runs each test
    // in a process of its own, so ending it with the line is that test failing.
    if (std::this_thread::get_id() != test_main_thread) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::_Exit(1);
    }
    throw MissingFixture(line);
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
