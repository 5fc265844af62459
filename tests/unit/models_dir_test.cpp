// A models directory read into specs, and keep-alive spellings, without a model.
#include <gtest/gtest.h>

#include <fstream>

#include "llamapp/model_manager.hpp"
#include "support/temp_dir.hpp"

namespace llamapp {
namespace {

using namespace std::chrono_literals;

TEST(ModelsDir, OneModelPerFileOrSplitSetAndPerSubdirectoryWithOneModel) {
    test::TempDir dir;
    for (const char* f :
         {"a.gguf", "b-00001-of-00002.gguf", "b-00002-of-00002.gguf", "c-00002-of-00003.gguf",
          "c-00003-of-00003.gguf", "mmproj-a.gguf", "notes.txt", "weird name.GGUF"})
        std::ofstream(dir / f) << "x";
    std::filesystem::create_directories(dir / "d");
    std::ofstream(dir / "d" / "model-q4.gguf") << "x";
    std::ofstream(dir / "d" / "mmproj-model.gguf") << "x";
    std::filesystem::create_directories(dir / "two");
    std::ofstream(dir / "two" / "x.gguf") << "x";
    std::ofstream(dir / "two" / "y.gguf") << "x";
    ModelSpec defaults;
    defaults.engine.context.n_ctx = 321;
    auto specs = scan_models_dir(dir.path(), defaults);
    ASSERT_TRUE(specs) << specs.error().describe();
    std::vector<std::pair<std::string, std::string>> got;
    for (const auto& s : *specs) {
        got.emplace_back(s.id, std::filesystem::relative(s.path, dir.path()).string());
        EXPECT_EQ(s.source, "models-dir");
        EXPECT_EQ(s.engine.context.n_ctx, 321);
    }
    const std::vector<std::pair<std::string, std::string>> want = {
        {"a", "a.gguf"},
        {"b", "b-00001-of-00002.gguf"},
        // The first part is missing: named, so that the load fails and says so.
        {"c", "c-00001-of-00003.gguf"},
        {"d", "d/model-q4.gguf"},
        {"weird-name", "weird name.GGUF"},
    };
    EXPECT_EQ(got, want);
    EXPECT_EQ(scan_models_dir(dir / "missing").error().code, ErrorCode::file_not_found);
    EXPECT_EQ(scan_models_dir(dir / "a.gguf").error().code, ErrorCode::invalid_argument);
}

TEST(ModelsDir, KeepAliveIsSecondsOrANumberWithAUnitAsOllamaSpellsIt) {
    const std::vector<std::pair<const char*, std::chrono::milliseconds>> ok = {
        {"300", 300s},   {"0", 0ms},      {"-1", -1ms},  {"-5m", -1ms}, {"500ms", 500ms},
        {"30s", 30s},    {"5m", 5min},    {"2h", 2h},    {"1.5m", 90s}, {"1h30m", 90min},
        {"2m30s", 150s}, {"1500us", 1ms}, {"+10s", 10s},
    };
    for (const auto& [text, want] : ok) {
        auto got = parse_keep_alive(text);
        ASSERT_TRUE(got) << text;
        EXPECT_EQ(*got, want) << text;
    }
    for (const char* bad : {"", "m", "5 m", "5d", "forever", "1e9h", "--1", "1h30", "5m-1s"})
        EXPECT_EQ(parse_keep_alive(bad).error().code, ErrorCode::invalid_argument) << bad;
    // A client's digits: refused by length, never read (a regex over them recursed per digit).
    EXPECT_EQ(parse_keep_alive(std::string(100000, '1')).error().code, ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace llamapp
