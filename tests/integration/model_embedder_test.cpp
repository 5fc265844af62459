// A generative model's embeddings: on a context made at the first request, counted in the
// model's footprint and the memory budget from then on, refused when it does not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <future>

#include "support/engine_helpers.hpp"

namespace llamapp::test {
namespace {

ModelSpec spec(std::string id, std::optional<bool> embed = std::nullopt) {
    ModelSpec s;
    s.id = std::move(id);
    s.path = generated_model("llama-tiny.gguf");
    s.engine.context.n_ctx = 256;
    s.engine.context.n_seq_max = 2;
    s.engine.context.n_threads = 1;
    s.embed = embed;
    return s;
}

std::uint64_t footprint_of(const ModelManager& m, const std::string& id) {
    auto l = m.find(id);
    return l && l->footprint ? l->footprint->on(host_device) : 0;
}

std::uint64_t reserved(const ModelManager& m) {
    for (const auto& b : m.budgets())
        if (b.device == host_device) return b.reserved;
    return 0;
}

// Vectors of two inputs; each normalized.
void expect_embeds(Embedder& e, const Model& model) {
    auto v = e.embed({encode(model, "The cat sat."), encode(model, "A dog ran.")});
    ASSERT_TRUE(v) << v.error().describe();
    ASSERT_EQ(v->size(), 2u);
    for (const auto& one : *v) {
        ASSERT_EQ(one.size(), static_cast<std::size_t>(model.info().n_embd));
        double norm = 0;
        for (float x : one) norm += static_cast<double>(x) * x;
        EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-3);
    }
    EXPECT_NE((*v)[0], (*v)[1]);
}

// What a model takes once loaded, without and with its embedding context made at load.
struct Sizes {
    std::uint64_t generating = 0, embedding = 0;
};

Sizes sizes() {
    Sizes s;
    auto m = quiet_manager();
    EXPECT_TRUE(m->add(spec("lazy")));
    EXPECT_TRUE(m->add(spec("eager", true)));
    // One after the other: llama.cpp's estimate swaps its global log callback, which a load
    // running beside it would race (ThreadSanitizer sees it).
    EXPECT_TRUE(m->acquire("lazy"));
    EXPECT_TRUE(m->acquire("eager"));
    s.generating = footprint_of(*m, "lazy");
    s.embedding = footprint_of(*m, "eager") - s.generating;
    return s;
}

TEST(ModelEmbedder, AGenerativeModelEmbedsOnAContextMadeAtItsFirstRequestAndCountedFromThen) {
    const Sizes size = sizes();
    ASSERT_GT(size.generating, 0u);
    ASSERT_GT(size.embedding, 0u);  // --embeddings counted its context from the load

    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("llama")));
    {
        auto lease = m->acquire("llama");
        ASSERT_TRUE(lease) << lease.error().describe();
        EXPECT_TRUE(lease->capabilities().embed);
        EXPECT_EQ(footprint_of(*m, "llama"), size.generating);
        EXPECT_EQ(reserved(*m), size.generating);

        // Two first requests at once make one embedder.
        auto other = std::async(std::launch::async, [&] { return lease->embedder(); });
        auto embedder = lease->embedder();
        auto same = other.get();
        ASSERT_TRUE(embedder) << embedder.error().describe();
        ASSERT_TRUE(same) << same.error().describe();
        EXPECT_EQ(*embedder, *same);
        expect_embeds(**embedder, lease->model());
        EXPECT_EQ(footprint_of(*m, "llama"), size.generating + size.embedding);
        EXPECT_EQ(reserved(*m), size.generating + size.embedding);
        EXPECT_EQ(*lease->embedder(), *embedder);

        // Generation goes on beside it; an unload frees both, and the next load starts without it.
        auto h = lease->engine().submit(request(encode(lease->model(), "Once"), 4));
        ASSERT_TRUE(h);
        EXPECT_EQ(drain(*h).tokens.size(), 4u);
    }
    ASSERT_TRUE(m->unload("llama"));
    EXPECT_EQ(reserved(*m), 0u);
    ASSERT_TRUE(m->acquire("llama"));
    EXPECT_EQ(footprint_of(*m, "llama"), size.generating);
}

TEST(ModelEmbedder, AContextThatDoesNotFitIsRefusedAndTheModelServesOnOrIdleModelsMakeRoom) {
    const Sizes size = sizes();
    ModelManagerOptions tight;
    tight.memory_budget[std::string(host_device)] = size.generating + size.embedding / 2;
    auto m = quiet_manager(tight);
    ASSERT_TRUE(m->add(spec("llama")));
    {
        auto lease = m->acquire("llama");
        ASSERT_TRUE(lease) << lease.error().describe();
        auto refused = lease->embedder();
        ASSERT_FALSE(refused);
        EXPECT_EQ(refused.error().code, ErrorCode::insufficient_memory);
        EXPECT_NE(refused.error().message.find("embeddings with 'llama' needs a context of"),
                  std::string::npos)
            << refused.error().message;
        EXPECT_EQ(footprint_of(*m, "llama"), size.generating);
        auto h = lease->engine().submit(request(encode(lease->model(), "Once"), 2));
        ASSERT_TRUE(h);
        EXPECT_EQ(drain(*h).tokens.size(), 2u);
    }

    // Two models fit, and one of them with its embeddings once the other, idle, is gone.
    ASSERT_LT(size.embedding, 2 * size.generating);
    ModelManagerOptions room;
    room.memory_budget[std::string(host_device)] = 2 * size.generating + size.embedding / 2;
    room.unload_idle_to_fit = true;
    m = quiet_manager(room);
    ASSERT_TRUE(m->add(spec("a")));
    ASSERT_TRUE(m->add(spec("b")));
    ASSERT_TRUE(m->acquire("b"));
    auto a = m->acquire("a");
    ASSERT_TRUE(a) << a.error().describe();
    auto embedder = a->embedder();
    ASSERT_TRUE(embedder) << embedder.error().describe();
    expect_embeds(**embedder, a->model());
    EXPECT_EQ(m->find("b")->status, ModelStatus::unloaded);
    EXPECT_EQ(reserved(*m), size.generating + size.embedding);
}

TEST(ModelEmbedder, EmbedFalseRefusesAGenerativeModelsEmbeddingsAndNotAnEmbeddingModels) {
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("llama", false)));
    auto lease = m->acquire("llama");
    ASSERT_TRUE(lease) << lease.error().describe();
    EXPECT_FALSE(lease->capabilities().embed);
    auto refused = lease->embedder();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::unsupported_operation);

    ModelSpec reranker = spec("rerank", false);
    reranker.path = generated_model("qwen3-rerank-tiny.gguf");
    ASSERT_TRUE(m->add(reranker));
    auto r = m->acquire("rerank");
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_TRUE(r->capabilities().embed && r->capabilities().rerank);
    EXPECT_TRUE(r->embedder());
}

}  // namespace
}  // namespace llamapp::test
