// Why a greedy reply can change when its prompt's prefix is reused instead of computed (issue 19,
// finding 5). Two causes are told apart on the pinned llama.cpp, on stories260K, through
// llama.cpp's own API:
// - state: the K/V bytes a token leaves. Equal for a prompt token whatever batch computed it, as
//   long as it was one of several; different for a token decoded alone (a generated token),
//   because the CPU backend multiplies one row with another kernel than several.
// - layout: the same bytes in other KV cells. Attention sums over cells in cell order and in
//   chunks of cells, so a prefix adopted from another sequence (whose other cells then lie
//   between the prefix and the new tokens) changes the logits, with every byte of state equal.
// docs/server.md, "When outputs are bit-identical", states what follows for the server.
#include <gtest/gtest.h>

#include <llama.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/log_internal.hpp"
#include "core/sequence_memory.hpp"
#include "support/paths.hpp"
#include "support/raw_decode.hpp"

namespace {

using Tokens = std::vector<llama_token>;

class Determinism : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        llama_backend_init();
        llamapp::detail::install_llama_log_bridge();  // llama.cpp's info lines at debug
        model_ = llama_model_load_from_file(llamapp::test::shared_model("stories260K.gguf").c_str(),
                                            llama_model_default_params());
    }
    static void TearDownTestSuite() {
        llama_model_free(model_);
        model_ = nullptr;
    }
    void SetUp() override { ASSERT_NE(model_, nullptr); }

    static Tokens tokens(const std::string& text, bool bos) {
        const llama_vocab* vocab = llama_model_get_vocab(model_);
        Tokens t(text.size() + 8);
        t.resize(static_cast<std::size_t>(llama_tokenize(vocab, text.data(),
                                                         static_cast<int>(text.size()), t.data(),
                                                         static_cast<int>(t.size()), bos, false)));
        return t;
    }

    // A unified cache of 1024 cells for 4 sequences, flash attention on (what "auto" chooses
    // on a CPU), two threads: the engine's settings.
    struct Ctx {
        llama_context* ctx;
        explicit Ctx(bool unified = true) {
            llama_context_params p = llama_context_default_params();
            p.n_ctx = 1024;
            p.n_batch = p.n_ubatch = 512;
            p.n_seq_max = 4;
            p.kv_unified = unified;
            p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            p.n_threads = p.n_threads_batch = 2;
            ctx = llama_init_from_model(model_, p);
        }
        ~Ctx() { llama_free(ctx); }
        Ctx(const Ctx&) = delete;
        Ctx& operator=(const Ctx&) = delete;
        llama_memory_t memory() const { return llama_get_memory(ctx); }

        // `t` on `seq` from position `pos`, in one batch.
        void decode(const Tokens& t, int pos, llama_seq_id seq) {
            ASSERT_EQ(llamapp::test::decode_at(ctx, t, pos, seq), 0);
        }
        std::vector<std::uint8_t> state(llama_seq_id seq) const {
            std::vector<std::uint8_t> s(llama_state_seq_get_size(ctx, seq));
            s.resize(llama_state_seq_get_data(ctx, s.data(), s.size(), seq));
            return s;
        }
        // The logits after the last decode, then after each of `n` greedy tokens.
        std::vector<float> continue_greedily(int pos, llama_seq_id seq, int n) {
            const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model_));
            std::vector<float> all;
            for (int i = 0;; ++i) {
                const float* l = llama_get_logits_ith(ctx, -1);
                all.insert(all.end(), l, l + vocab);
                if (i == n) return all;
                llama_token best = 0;
                for (llama_token k = 1; k < vocab; ++k)
                    if (l[k] > l[best]) best = k;
                decode({best}, pos + i, seq);
            }
        }
    };

    static bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    }

    static llama_model* model_;
};
llama_model* Determinism::model_ = nullptr;

TEST_F(Determinism, APromptTokenLeavesTheSameStateInAnyBatchButAGeneratedOneDoesNot) {
    const Tokens x = tokens("Once upon a time, there was", true);
    Tokens xy = x, xz = x;
    for (llama_token t : tokens(" a little girl named Lily who", false)) xy.push_back(t);
    for (llama_token t : tokens(" a big dog that liked to run", false)) xz.push_back(t);
    const auto prefix_state = [&](const Tokens& batch) {
        Ctx c;
        c.decode(batch, 0, 0);
        llama_memory_seq_rm(c.memory(), 0, static_cast<llama_pos>(x.size()), -1);
        return c.state(0);
    };
    const auto alone = prefix_state(x);
    EXPECT_EQ(prefix_state(xy), alone);
    EXPECT_EQ(prefix_state(xz), alone);
    Ctx one_by_one;
    for (std::size_t i = 0; i < x.size(); ++i) one_by_one.decode({x[i]}, static_cast<int>(i), 0);
    EXPECT_NE(one_by_one.state(0), alone)
        << "a token decoded alone left the bytes of a batched one: update docs/server.md's "
           "\"When outputs are bit-identical\"";
}

TEST_F(Determinism, TheSameStateInAnotherCellLayoutChangesTheLogits) {
    const Tokens x = tokens("Once upon a time, there was", true);
    const Tokens y = tokens(" a little girl named Lily who", false);
    Tokens z;  // long enough that the cells after it lie in another chunk of the cache
    while (z.size() < 300)
        for (llama_token t : tokens(" a big dog that liked to run", false)) z.push_back(t);
    Tokens xy = x, xz = x;
    xy.insert(xy.end(), y.begin(), y.end());
    xz.insert(xz.end(), z.begin(), z.end());
    const int end = static_cast<int>(xy.size());

    Ctx cold;
    cold.decode(xy, 0, 0);
    const auto reference = cold.continue_greedily(end, 0, 16);

    // Adopted from another sequence: sequence 1 computed x + z; sequence 0 shares x's cells,
    // and y lands after z's.
    Ctx adopted;
    adopted.decode(xz, 0, 1);
    llama_memory_seq_cp(adopted.memory(), 1, 0, 0, static_cast<llama_pos>(x.size()));
    Ctx donor_state;
    donor_state.decode(x, 0, 0);
    EXPECT_EQ(adopted.state(0), donor_state.state(0)) << "the adopted prefix's bytes differ";
    adopted.decode(y, static_cast<int>(x.size()), 0);
    EXPECT_FALSE(bit_equal(adopted.continue_greedily(end, 0, 16), reference))
        << "the layout no longer changes the sums: update docs/server.md's \"When outputs are "
           "bit-identical\"";

    // The same adoption, with the donor gone before y: y lands right after x, as when cold.
    Ctx freed;
    freed.decode(xz, 0, 1);
    llama_memory_seq_cp(freed.memory(), 1, 0, 0, static_cast<llama_pos>(x.size()));
    llama_memory_seq_rm(freed.memory(), 1, -1, -1);
    freed.decode(y, static_cast<int>(x.size()), 0);
    EXPECT_TRUE(bit_equal(freed.continue_greedily(end, 0, 16), reference));

    // The prefix's bytes restored from a saved state after other cells (a KV store restore):
    // x and y are contiguous again, and the sums are a cold run's.
    Ctx restored;
    restored.decode(z, 0, 1);
    const auto saved = donor_state.state(0);
    ASSERT_EQ(llama_state_seq_set_data(restored.ctx, saved.data(), saved.size(), 0), saved.size());
    restored.decode(y, static_cast<int>(x.size()), 0);
    EXPECT_TRUE(bit_equal(restored.continue_greedily(end, 0, 16), reference));
}

// With a KV stream per sequence (--no-kv-unified), llama.cpp copies a whole sequence's cells only
// at the next decode; a snapshot taken before it (a fork, then a save of the forked slot) read the
// old cells. SequenceMemory::copy_whole copies at once.
TEST_F(Determinism, AWholeCopyBetweenStreamsIsThereBeforeTheNextDecode) {
    const Tokens x = tokens("Once upon a time, there was", true);
    const Tokens y = tokens(" a little girl", false);
    const int end = static_cast<int>(x.size() + y.size());
    Ctx cold(false);
    cold.decode(x, 0, 0);
    cold.decode(y, static_cast<int>(x.size()), 0);
    const auto reference = cold.continue_greedily(end, 0, 4);

    Ctx split(false);
    split.decode(x, 0, 0);
    llamapp::detail::SequenceMemory memory(split.ctx, false);
    memory.copy_whole(0, 1);
    EXPECT_EQ(memory.pos_max(1), static_cast<int>(x.size()) - 1);
    const auto saved = split.state(1);  // before any decode, as a save after a fork is
    Ctx restored(false);
    ASSERT_EQ(llama_state_seq_set_data(restored.ctx, saved.data(), saved.size(), 0), saved.size());
    restored.decode(y, static_cast<int>(x.size()), 0);
    EXPECT_TRUE(bit_equal(restored.continue_greedily(end, 0, 4), reference));
    // The copy itself decodes on as the original would.
    split.decode(y, static_cast<int>(x.size()), 1);
    EXPECT_TRUE(bit_equal(split.continue_greedily(end, 1, 4), reference));
}

}  // namespace
