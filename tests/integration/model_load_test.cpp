#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "gguf.h"
#include "llamapp/llamapp.hpp"
#include "support/paths.hpp"

using namespace llamapp;
namespace fs = std::filesystem;

namespace {

class ModelLoad : public ::testing::Test {
  protected:
    void SetUp() override {
        set_log_level(LogLevel::none);
        dir_ = fs::temp_directory_path() / ("llamapp-load-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write_bytes(const std::string& name, const std::string& bytes) {
        fs::path p = dir_ / name;
        std::ofstream(p, std::ios::binary) << bytes;
        return p;
    }
    fs::path truncated_copy(const fs::path& src, std::size_t keep) {
        std::ifstream in(src, std::ios::binary);
        std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        return write_bytes("trunc-" + std::to_string(keep) + ".gguf", data.substr(0, keep));
    }
    static ErrorCode load_error(const fs::path& p, const ModelOptions& o = {}) {
        auto m = Model::load(p, o);
        return m ? ErrorCode::internal : m.error().code;
    }
    fs::path dir_;
};

// A function, not a constant: a missing fixture fails the tests that use it, not the binary.
fs::path stories() {
    return test::shared_model("stories260K.gguf");
}

}  // namespace

TEST_F(ModelLoad, MissingFileIsFileNotFound) {
    auto m = Model::load(dir_ / "nope.gguf");
    ASSERT_FALSE(m);
    EXPECT_EQ(m.error().code, ErrorCode::file_not_found);
    EXPECT_NE(m.error().context.find("nope.gguf"), std::string::npos);
}

TEST_F(ModelLoad, DirectoryIsRejected) {
    EXPECT_EQ(load_error(dir_), ErrorCode::is_directory);
}

TEST_F(ModelLoad, ZeroByteFileIsInvalid) {
    EXPECT_EQ(load_error(write_bytes("empty.gguf", "")), ErrorCode::invalid_model_file);
}

TEST_F(ModelLoad, TextFileIsNotGguf) {
    EXPECT_EQ(load_error(write_bytes("text.gguf", "hello, I am not a model\n")),
              ErrorCode::invalid_model_file);
}

TEST_F(ModelLoad, TruncatedGgufIsInvalidAtEveryCut) {
    const auto size = fs::file_size(stories());
    for (std::size_t keep :
         {std::size_t{4}, std::size_t{24}, std::size_t{200}, std::size_t{5000},
          static_cast<std::size_t>(size / 2), static_cast<std::size_t>(size - 1)}) {
        EXPECT_EQ(load_error(truncated_copy(stories(), keep)), ErrorCode::invalid_model_file)
            << "kept " << keep;
    }
}

TEST_F(ModelLoad, UnknownArchitectureIsUnsupported) {
    gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "no-such-arch");
    const fs::path p = dir_ / "alien.gguf";
    ASSERT_TRUE(gguf_write_to_file(g, p.c_str(), false));
    gguf_free(g);
    EXPECT_EQ(load_error(p), ErrorCode::unsupported_model);
}

TEST_F(ModelLoad, LlamaCppLogLinesReachTheSinkAtItsLevel) {
    std::mutex mu;
    std::vector<std::pair<LogLevel, std::string>> lines;
    set_log_sink([&](LogLevel level, std::string_view line) {
        std::lock_guard lock(mu);
        lines.emplace_back(level, std::string(line));
    });
    const LogLevel before = log_level();
    set_log_level(LogLevel::debug);
    ASSERT_TRUE(Model::load(stories()));
    std::size_t from_llama = 0;
    {
        std::lock_guard lock(mu);
        for (const auto& [level, line] : lines)
            from_llama += line.find("llama_model_loader") != std::string::npos ? 1 : 0;
        lines.clear();
    }
    EXPECT_GT(from_llama, 0u);
    set_log_level(LogLevel::error);  // loading a good model logs nothing this severe
    ASSERT_TRUE(Model::load(stories()));
    {
        std::lock_guard lock(mu);
        EXPECT_TRUE(lines.empty()) << lines.front().second;
    }
    set_log_level(before);
    set_log_sink({});
}

TEST_F(ModelLoad, EncoderDecoderAndDiffusionAreRefusedFromTheHeader) {
    // Headers alone, no weights: the refusal must come before llama.cpp tries to load any.
    for (const char* arch : {"t5", "llada", "dream"}) {
        gguf_context* g = gguf_init_empty();
        gguf_set_val_str(g, "general.architecture", arch);
        const fs::path p = dir_ / (std::string(arch) + ".gguf");
        ASSERT_TRUE(gguf_write_to_file(g, p.c_str(), false));
        gguf_free(g);
        auto m = Model::load(p);
        ASSERT_FALSE(m) << arch;
        EXPECT_EQ(m.error().code, ErrorCode::unsupported_model) << arch;
        EXPECT_EQ(m.error().context, arch);
        EXPECT_NE(
            m.error().message.find(std::string(arch) == "t5" ? "encoder-decoder" : "diffusion"),
            std::string::npos)
            << m.error().message;
    }
}

TEST_F(ModelLoad, InvalidOptionsAreNamed) {
    ModelOptions o;
    o.tensor_split = std::vector<float>(offload_device_count() + 1, 1.0f);
    auto m = Model::load(stories(), o);
    ASSERT_FALSE(m);
    EXPECT_EQ(m.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(m.error().context.find("tensor_split"), std::string::npos);

    ModelOptions gpu;
    gpu.n_gpu_layers = -7;
    EXPECT_EQ(load_error(stories(), gpu), ErrorCode::invalid_argument);
    ModelOptions main_gpu;
    main_gpu.main_gpu = 99;
    EXPECT_EQ(load_error(stories(), main_gpu), ErrorCode::invalid_argument);
}

TEST_F(ModelLoad, ProgressIsMonotoneAndEndsAtExactlyOne) {
    std::vector<float> seen;
    ModelOptions o;
    o.progress = [&](float p) {
        seen.push_back(p);
        return true;
    };
    ASSERT_TRUE(Model::load(stories(), o));
    ASSERT_FALSE(seen.empty());
    for (std::size_t i = 0; i < seen.size(); ++i) {
        EXPECT_GE(seen[i], 0.0f);
        EXPECT_LE(seen[i], 1.0f);
        if (i > 0) {
            EXPECT_GE(seen[i], seen[i - 1]);
        }
    }
    EXPECT_EQ(seen.back(), 1.0f);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1.0f), 1);
}

TEST_F(ModelLoad, ProgressCallbackCanCancel) {
    ModelOptions o;
    o.progress = [](float) { return false; };
    EXPECT_EQ(load_error(stories(), o), ErrorCode::load_cancelled);
}

TEST_F(ModelLoad, IntrospectsStories260K) {
    auto m = Model::load(stories());
    ASSERT_TRUE(m) << m.error().describe();
    const ModelInfo& i = m->info();
    EXPECT_EQ(i.architecture, "llama");
    EXPECT_EQ(i.n_layer, 5);
    EXPECT_EQ(i.n_embd, 64);
    EXPECT_EQ(i.n_embd_out, 64);
    EXPECT_EQ(i.n_head, 8);
    EXPECT_EQ(i.n_head_kv, 4);
    EXPECT_EQ(i.n_vocab, 512);
    EXPECT_EQ(i.n_params, 292800u);
    EXPECT_EQ(i.file_size, 1185376u);
    EXPECT_EQ(i.n_ctx_train, 2048);
    EXPECT_EQ(i.sliding_window, 0);
    EXPECT_FALSE(i.is_recurrent);
    EXPECT_FALSE(i.is_hybrid);
    EXPECT_FALSE(i.has_encoder);
    EXPECT_FALSE(i.chat_template.has_value());
    EXPECT_EQ(i.special.bos, 1);
    EXPECT_EQ(i.special.eos, 2);
    EXPECT_EQ(i.metadata.at("general.architecture"), "llama");
    EXPECT_FALSE(i.description.empty());
}

TEST_F(ModelLoad, FingerprintIsTheFileSha256AndSurvivesRename) {
    auto m = Model::load(stories());
    ASSERT_TRUE(m);
    const std::string expected = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";
    EXPECT_EQ(m->fingerprint().value_or(""), expected);
    EXPECT_EQ(m->fingerprint().value_or(""), expected);  // cached
    const fs::path renamed = dir_ / "renamed.gguf";
    fs::copy_file(stories(), renamed);
    EXPECT_EQ(file_sha256(renamed).value_or(""), expected);
}

TEST_F(ModelLoad, VocabOnlyModelTokenizesButCannotRun) {
    ModelOptions o;
    o.vocab_only = true;
    auto m = Model::load(test::shared_model("vocab/ggml-vocab-llama-spm.gguf"), o);
    ASSERT_TRUE(m) << m.error().describe();
    EXPECT_EQ(m->info().n_vocab, 32000);
    EXPECT_TRUE(m->tokenizer().encode("hello world"));
    auto c = Context::create(*m);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code, ErrorCode::unsupported_operation);
}

TEST_F(ModelLoad, ContextOptionsAreValidated) {
    auto m = Model::load(stories());
    ASSERT_TRUE(m);
    auto code = [&](void (*mutate)(ContextOptions&)) {
        ContextOptions o;
        mutate(o);
        auto c = Context::create(*m, o);
        return c ? ErrorCode::internal : c.error().code;
    };
    EXPECT_EQ(code([](ContextOptions& o) { o.n_ctx = -1; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_ctx = std::int64_t{1} << 40; }),
              ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_batch = 0; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_ubatch = 4096; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_seq_max = 0; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_seq_max = 100000; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) { o.n_threads = -3; }), ErrorCode::invalid_argument);
    EXPECT_EQ(code([](ContextOptions& o) {
                  o.type_v = KvType::q8_0;
                  o.flash_attn = FlashAttention::off;
              }),
              ErrorCode::invalid_argument);
    ContextOptions ok;
    ok.n_ctx = 0;  // training length
    auto c = Context::create(*m, ok);
    ASSERT_TRUE(c) << c.error().describe();
    EXPECT_EQ(c->n_ctx(), 2048);
}

TEST_F(ModelLoad, QuantizedKvCacheWorks) {
    // q8_0 blocks are 32 wide, so the head size must be a multiple of 32 (stories260K has 8).
    auto m = Model::load(test::generated_model("demo.gguf"));
    ASSERT_TRUE(m);
    ContextOptions o;
    o.n_ctx = 256;
    o.type_k = KvType::q8_0;
    o.type_v = KvType::q8_0;
    o.flash_attn = FlashAttention::on;
    auto c = Context::create(*m, o);
    ASSERT_TRUE(c) << c.error().describe();
    GenerateOptions g;
    g.sampling = SamplingParams::greedy();
    g.max_tokens = 8;
    g.ignore_eos = true;
    auto r = c->generate("Once upon a time", g);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_EQ(r->usage.completion_tokens, 8);

    ContextOptions misfit;
    misfit.type_k = KvType::q8_0;
    auto s = Model::load(stories());
    ASSERT_TRUE(s);
    auto refused = Context::create(*s, misfit);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
}

TEST_F(ModelLoad, KvCacheLargerThanMemoryIsOutOfMemory) {
    const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    if (ram > 30.0 * (1ull << 30))
        GTEST_SKIP() << "the 34 GiB cache below would fit on this machine";
    auto m = Model::load(test::generated_model("demo.gguf"));
    ASSERT_TRUE(m);
    ContextOptions o;
    o.n_ctx = 1 << 24;  // 4 layers x 128 KV dims x 2 x f16 x 16M tokens = 34 GiB
    auto c = Context::create(*m, o);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code, ErrorCode::out_of_memory);
    EXPECT_EQ(c.error().context, "n_ctx");
}

TEST_F(ModelLoad, DecodeTimeBudgetInterruptsALongPrefill) {
    auto m = Model::load(test::generated_model("demo.gguf"));
    ASSERT_TRUE(m);
    ContextOptions o;
    o.n_ctx = 2048;
    o.decode_timeout = std::chrono::milliseconds(1);
    auto c = Context::create(*m, o);
    ASSERT_TRUE(c);
    std::vector<Token> prompt(1800, 100);
    GenerateOptions g;
    g.max_tokens = 4;
    auto r = c->generate(prompt, g);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->finish_reason, FinishReason::cancelled)
        << "an 1800-token prefill cannot finish in 1 ms";
    ASSERT_TRUE(r->error);
    EXPECT_EQ(r->error->code, ErrorCode::timeout);
    EXPECT_EQ(r->usage.completion_tokens, 0);
    // A budget of 0 means no limit.
    o.decode_timeout = std::chrono::milliseconds(0);
    auto c2 = Context::create(*m, o);
    ASSERT_TRUE(c2);
    EXPECT_TRUE(c2->generate(std::vector<Token>{1, 100, 200}, g));
}

TEST_F(ModelLoad, HyperparametersLlamaCppAssertsOnAreRejectedFirst) {
    for (std::uint32_t layers : {0u, 100000u}) {
        gguf_context* g = gguf_init_empty();
        gguf_set_val_str(g, "general.architecture", "llama");
        gguf_set_val_u32(g, "llama.block_count", layers);
        const fs::path p = dir_ / ("layers-" + std::to_string(layers) + ".gguf");
        ASSERT_TRUE(gguf_write_to_file(g, p.c_str(), false));
        gguf_free(g);
        auto m = Model::load(p);
        ASSERT_FALSE(m) << layers;
        EXPECT_EQ(m.error().code, ErrorCode::invalid_model_file) << layers;
    }
    gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "llama");
    gguf_set_val_u32(g, "llama.block_count", 2);
    gguf_set_val_u32(g, "llama.expert_count", 4);
    gguf_set_val_u32(g, "llama.expert_used_count", 8);
    const fs::path p = dir_ / "experts.gguf";
    ASSERT_TRUE(gguf_write_to_file(g, p.c_str(), false));
    gguf_free(g);
    EXPECT_EQ(load_error(p), ErrorCode::invalid_model_file);
}

TEST_F(ModelLoad, VocabularyOnlyFileNeedsVocabOnly) {
    auto m = Model::load(test::shared_model("vocab/ggml-vocab-phi-3.gguf"));
    ASSERT_FALSE(m);
    EXPECT_EQ(m.error().code, ErrorCode::invalid_model_file);
    EXPECT_NE(m.error().message.find("vocab_only"), std::string::npos);
}
