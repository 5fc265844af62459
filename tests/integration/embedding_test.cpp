#include <gtest/gtest.h>

#include <cmath>

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
