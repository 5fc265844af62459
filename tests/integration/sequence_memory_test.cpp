// SequenceMemory keeps what each sequence holds in step with its cells: every call that changes
// the cells (append after a decode, trim, rewind, copy, restore, remove) changes the token list
// in the same call, checked against llama.cpp's own positions on a real model.
#include "core/sequence_memory.hpp"

#include <gtest/gtest.h>
#include <llama.h>

#include <string>
#include <vector>

#include "core/log_internal.hpp"
#include "support/paths.hpp"
#include "support/raw_decode.hpp"

namespace {

using llamapp::detail::SequenceMemory;
using Tokens = std::vector<llama_token>;

class SequenceContents : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        llama_backend_init();
        llamapp::detail::install_llama_log_bridge();
        model_ = llama_model_load_from_file(llamapp::test::shared_model("stories260K.gguf").c_str(),
                                            llama_model_default_params());
    }
    static void TearDownTestSuite() {
        llama_model_free(model_);
        model_ = nullptr;
    }
    void SetUp() override {
        ASSERT_NE(model_, nullptr);
        llama_context_params p = llama_context_default_params();
        p.n_ctx = 512;
        p.n_batch = p.n_ubatch = 64;
        p.n_seq_max = 4;
        p.kv_unified = true;
        p.n_threads = p.n_threads_batch = 1;
        ctx_ = llama_init_from_model(model_, p);
        ASSERT_NE(ctx_, nullptr);
        memory_ = SequenceMemory(ctx_, true);
    }
    void TearDown() override { llama_free(ctx_); }

    // Writes `t` into the cells of `seq` from position `pos` (as the engine's decode does).
    void decode(const Tokens& t, int pos, int seq) {
        ASSERT_EQ(llamapp::test::decode_at(ctx_, t, pos, seq), 0);
    }
    Tokens held(int seq) const {
        const auto t = memory_.tokens(seq);
        return {t.begin(), t.end()};
    }
    // The list and the cells agree: positions [0, size) and nothing after.
    void expect_in_step(int seq) const {
        EXPECT_EQ(memory_.pos_max(seq), static_cast<int>(memory_.size(seq)) - 1) << "seq " << seq;
    }

    static llama_model* model_;
    llama_context* ctx_ = nullptr;
    SequenceMemory memory_;
};
llama_model* SequenceContents::model_ = nullptr;

const Tokens prompt = {1, 400, 300, 200, 100, 50};

TEST_F(SequenceContents, AppendTrimAndRewindChangeTheListWithTheCells) {
    decode(prompt, 0, 0);
    memory_.append(0, prompt);
    EXPECT_EQ(held(0), prompt);
    expect_in_step(0);

    ASSERT_TRUE(memory_.trim(0, 4));
    EXPECT_EQ(held(0), Tokens(prompt.begin(), prompt.begin() + 4));
    expect_in_step(0);

    // Two drafts decoded, the first kept: the second's cell goes, the list keeps five.
    decode({7, 8}, 4, 0);
    memory_.append(0, 7);
    ASSERT_TRUE(memory_.rewind_to_held(0));
    EXPECT_EQ(held(0), (Tokens{1, 400, 300, 200, 7}));
    expect_in_step(0);

    memory_.remove(0);
    EXPECT_TRUE(held(0).empty());
    expect_in_step(0);
}

TEST_F(SequenceContents, CopiesCarryTheTokensWithTheCells) {
    decode(prompt, 0, 0);
    memory_.append(0, prompt);
    decode({9}, 0, 1);  // a stale cell the copy must replace
    memory_.append(1, 9);

    memory_.copy_prefix(0, 1, 3);
    EXPECT_EQ(held(1), Tokens(prompt.begin(), prompt.begin() + 3));
    expect_in_step(1);

    memory_.copy_whole(0, 2);
    EXPECT_EQ(held(2), prompt);
    expect_in_step(2);
    EXPECT_EQ(held(0), prompt) << "the source is untouched";

    memory_.clear();
    for (int seq = 0; seq < 3; ++seq) {
        EXPECT_TRUE(held(seq).empty());
        expect_in_step(seq);
    }
}

TEST_F(SequenceContents, ARestoreHoldsTheKeptTokensOrNothing) {
    decode(prompt, 0, 0);
    memory_.append(0, prompt);
    std::vector<std::uint8_t> bytes(memory_.snapshot_size(0));
    ASSERT_TRUE(memory_.snapshot(0, bytes));

    ASSERT_TRUE(memory_.restore(3, bytes, held(0), 4));
    EXPECT_EQ(held(3), Tokens(prompt.begin(), prompt.begin() + 4));
    expect_in_step(3);

    EXPECT_FALSE(memory_.restore(3, std::span<const std::uint8_t>{}, held(0), 4));
    EXPECT_TRUE(held(3).empty());
    expect_in_step(3);
}

}  // namespace
