#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "llama.h"
#include "support/stories.hpp"

using namespace llamapp;

namespace {

Context embedding_context(Pooling pooling, std::int64_t n_seq_max = 4) {
    ContextOptions o;
    o.n_ctx = 512;
    o.embeddings = true;
    o.pooling = pooling;
    o.n_seq_max = n_seq_max;
    auto c = Context::create(test::stories_model(), o);
    if (!c) throw std::runtime_error(c.error().describe());
    return std::move(*c);
}

double norm(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s);
}

// The straightforward llama.h embedding, the reference llamapp's vectors must match: one text per
// fresh context, all its tokens in one batch, the pooled vector L2-normalized.
class RawEmbedder {
  public:
    explicit RawEmbedder(enum llama_pooling_type pooling) {
        model_.reset(llama_model_load_from_file(test::shared_model("stories260K.gguf").c_str(),
                                                llama_model_default_params()));
        if (!model_) throw std::runtime_error("llama.cpp cannot load stories260K.gguf");
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 512;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;  // llama.cpp's default 4, on 2 cores, spins at every barrier
        cp.embeddings = true;
        cp.pooling_type = pooling;
        ctx_.reset(llama_init_from_model(model_.get(), cp));
        if (!ctx_) throw std::runtime_error("llama.cpp cannot make an embedding context");
    }

    std::vector<float> embed(const std::string& text) {
        const llama_vocab* vocab = llama_model_get_vocab(model_.get());
        std::vector<llama_token> tokens(text.size() + 8);
        const int n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()),
                                     tokens.data(), static_cast<int>(tokens.size()), true, false);
        if (n <= 0) throw std::runtime_error("llama_tokenize failed: " + text);
        // An empty cache each time: nothing of an earlier text can leak into this one.
        llama_memory_clear(llama_get_memory(ctx_.get()), true);
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; ++i) {
            b.token[i] = tokens[static_cast<std::size_t>(i)];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = true;
        }
        b.n_tokens = n;
        const int rc = llama_decode(ctx_.get(), b);
        llama_batch_free(b);
        const float* v = rc == 0 ? llama_get_embeddings_seq(ctx_.get(), 0) : nullptr;
        if (!v) throw std::runtime_error("llama.cpp gave no pooled embedding: " + text);
        std::vector<float> out(v, v + llama_model_n_embd_out(model_.get()));
        const double length = norm(out);
        for (float& x : out) x = static_cast<float>(x / length);
        return out;
    }

  private:
    std::unique_ptr<llama_model, decltype(&llama_model_free)> model_{nullptr, &llama_model_free};
    std::unique_ptr<llama_context, decltype(&llama_free)> ctx_{nullptr, &llama_free};
};

// The largest difference between two vectors' components (infinite when the lengths differ).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    return worst;
}

}  // namespace

TEST(Embedding, VectorHasOutputLengthAndUnitNorm) {
    Context ctx = embedding_context(Pooling::model_default);
    auto v = ctx.embed("The cat sat on the mat.");
    ASSERT_TRUE(v) << v.error().describe();
    EXPECT_EQ(static_cast<int>(v->size()), test::stories_model().info().n_embd_out);
    EXPECT_NEAR(norm(*v), 1.0, 1e-4);
    auto raw = ctx.embed("The cat sat on the mat.", {.normalize = Normalization::none});
    ASSERT_TRUE(raw);
    for (std::size_t i = 0; i < v->size(); ++i) EXPECT_NEAR((*raw)[i] / norm(*raw), (*v)[i], 1e-4);
}

// Against llama.cpp itself, not against llamapp's own other path: a wrong pooling, tokenization,
// sequence packing or normalization that is consistent everywhere would pass the tests above.
TEST(Embedding, MatchesBareLlamaEmbeddings) {
    const std::vector<std::string> texts = {"The cat sat on the mat.", "Lily went to the park",
                                            "a red ball", "Once upon a time there was a big dog"};
    // model_default is mean for a causal LM such as stories260K, which has no pooling of its own.
    const std::pair<Pooling, enum llama_pooling_type> modes[] = {
        {Pooling::model_default, LLAMA_POOLING_TYPE_MEAN},
        {Pooling::last, LLAMA_POOLING_TYPE_LAST},
        {Pooling::cls, LLAMA_POOLING_TYPE_CLS}};
    for (const auto& [pooling, reference_pooling] : modes) {
        RawEmbedder reference(reference_pooling);
        // Three texts packed into one batch and the fourth in a second one.
        Context ctx = embedding_context(pooling, 3);
        auto batch = ctx.embed_batch(texts);
        ASSERT_TRUE(batch) << batch.error().describe();
        ASSERT_EQ(batch->size(), texts.size());
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const std::vector<float> expected = reference.embed(texts[i]);
            EXPECT_LT(max_abs_diff((*batch)[i], expected), 1e-4) << texts[i];
            auto one = ctx.embed(texts[i]);
            ASSERT_TRUE(one) << one.error().describe();
            EXPECT_LT(max_abs_diff(*one, expected), 1e-4) << texts[i];
        }
    }
}

TEST(Embedding, BatchEqualsOneByOne) {
    Context ctx = embedding_context(Pooling::mean, 2);
    const std::vector<std::string> texts = {"a red ball", "Lily went to the park", "the sun",
                                            "big dog"};
    auto batch = ctx.embed_batch(texts);
    ASSERT_TRUE(batch) << batch.error().describe();
    ASSERT_EQ(batch->size(), texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
        auto one = ctx.embed(texts[i]);
        ASSERT_TRUE(one);
        for (std::size_t k = 0; k < one->size(); ++k)
            EXPECT_NEAR((*batch)[i][k], (*one)[k], 1e-4) << i;
    }
    EXPECT_GT(
        std::fabs((*batch)[0][0] - (*batch)[1][0]) + std::fabs((*batch)[0][1] - (*batch)[1][1]),
        1e-6);
}

TEST(Embedding, PoolingModesDiffer) {
    const std::string text = "Once upon a time there was a dog";
    auto mean = embedding_context(Pooling::mean).embed(text);
    auto last = embedding_context(Pooling::last).embed(text);
    auto cls = embedding_context(Pooling::cls).embed(text);
    ASSERT_TRUE(mean && last && cls);
    EXPECT_NE(*mean, *last);
    EXPECT_NE(*mean, *cls);

    Context none = embedding_context(Pooling::none);
    auto pooled = none.embed(text);
    ASSERT_FALSE(pooled);
    EXPECT_EQ(pooled.error().code, ErrorCode::unsupported_operation);
    auto per_token = none.embed_tokens(text);
    ASSERT_TRUE(per_token) << per_token.error().describe();
    auto n_tokens = test::stories_model().tokenizer().encode(text);
    EXPECT_EQ(per_token->size(), n_tokens->size());
    // Last-token pooling equals the last per-token vector.
    for (std::size_t k = 0; k < last->size(); ++k)
        EXPECT_NEAR(per_token->back()[k], (*last)[k], 1e-4);
}

TEST(Embedding, WrongContextKindOrInputIsAnError) {
    Context gen = test::stories_context();
    auto v = gen.embed("x");
    ASSERT_FALSE(v);
    EXPECT_EQ(v.error().code, ErrorCode::unsupported_operation);

    Context emb = embedding_context(Pooling::mean);
    auto g = emb.generate("x", test::greedy(2));
    ASSERT_FALSE(g);
    EXPECT_EQ(g.error().code, ErrorCode::unsupported_operation);
    auto empty = emb.embed("");
    ASSERT_FALSE(empty);
    EXPECT_EQ(empty.error().code, ErrorCode::invalid_argument);

    // llama.cpp's pooling aborts the process on fewer batch tokens than sequences: refused here.
    ContextOptions o;
    o.n_ctx = 512;
    o.embeddings = true;
    o.n_seq_max = 4;
    o.n_ubatch = 3;
    auto small = Context::create(test::stories_model(), o);
    ASSERT_FALSE(small);
    EXPECT_EQ(small.error().code, ErrorCode::invalid_argument);
}

// A reranker (rank pooling, a two-label classifier): each input gives its classifier's softmax,
// not a vector, and a pair's score does not depend on what it was batched with.
TEST(Embedding, ARerankerScoresEachQueryDocumentPair) {
    auto model = Model::load(test::generated_model("qwen3-rerank-tiny.gguf"));
    ASSERT_TRUE(model) << model.error().describe();
    ASSERT_TRUE(model->info().rerank_template.has_value());
    const Tokenizer tok = model->tokenizer();
    std::vector<std::vector<Token>> pairs;
    for (const char* doc : {"A cat is a small animal.", "Paris is in France.", "{query}"}) {
        auto p = tok.rerank_prompt("What is a cat?", doc);
        ASSERT_TRUE(p) << p.error().describe();
        pairs.push_back(std::move(*p));
    }
    // The template's markers are control tokens; a document's text is not a slot.
    auto marker = tok.encode("<|im_start|>", {.add_special = false, .parse_special = true});
    ASSERT_TRUE(marker && marker->size() == 1u);
    EXPECT_EQ(pairs[0].front(), marker->front());
    auto text = tok.decode(pairs[2]);
    ASSERT_TRUE(text);
    EXPECT_NE(text->find("Document: {query}"), std::string::npos) << *text;

    ContextOptions o;
    o.n_ctx = 512;
    o.embeddings = true;
    o.n_seq_max = 4;
    auto ctx = Context::create(*model, o);
    ASSERT_TRUE(ctx) << ctx.error().describe();
    auto all = ctx->embed_batch(std::span<const std::vector<Token>>(pairs));
    ASSERT_TRUE(all) << all.error().describe();
    ASSERT_EQ(all->size(), 3u);
    for (const auto& scores : *all) {
        ASSERT_EQ(scores.size(), 2u);  // "yes" and "no"
        EXPECT_NEAR(scores[0] + scores[1], 1.0, 1e-4);
    }
    EXPECT_NE((*all)[0][0], (*all)[1][0]);
    auto alone = ctx->embed_batch(std::span<const std::vector<Token>>(&pairs[1], 1));
    ASSERT_TRUE(alone);
    EXPECT_NEAR(alone->front()[0], (*all)[1][0], 1e-4);
}
