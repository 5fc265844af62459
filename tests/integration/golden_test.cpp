// llamapp's greedy output on the real stories260K model equals llama.cpp's own.
#include <gtest/gtest.h>

#include "llama.h"
#include "support/stories.hpp"

using namespace llamapp;
using test::greedy;

namespace {

// The straightforward greedy loop over llama.h, the reference llamapp must match token for token.
std::vector<llama_token> reference_greedy(const std::string& prompt, int n) {
    llama_model_params mp = llama_model_default_params();
    llama_model* model =
        llama_model_load_from_file(test::shared_model("stories260K.gguf").c_str(), mp);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    llama_context* ctx = llama_init_from_model(model, cp);
    std::vector<llama_token> tokens(prompt.size() + 8);
    const int n_prompt =
        llama_tokenize(vocab, prompt.data(), static_cast<int>(prompt.size()), tokens.data(),
                       static_cast<int>(tokens.size()), true, false);
    tokens.resize(n_prompt);
    llama_sampler* greedy_sampler = llama_sampler_init_greedy();
    std::vector<llama_token> out;
    llama_batch batch = llama_batch_get_one(tokens.data(), n_prompt);
    llama_token next = 0;
    for (int i = 0; i < n; ++i) {
        if (llama_decode(ctx, batch) != 0) break;
        next = llama_sampler_sample(greedy_sampler, ctx, -1);
        if (llama_vocab_is_eog(vocab, next)) break;
        out.push_back(next);
        batch = llama_batch_get_one(&next, 1);
    }
    llama_sampler_free(greedy_sampler);
    llama_free(ctx);
    llama_model_free(model);
    return out;
}

}  // namespace

TEST(Golden, MatchesLlamaCompletionText) {
    // Produced by llama.cpp's own llama-completion from the same tree:
    //   llama-completion -m stories260K.gguf -p "<prompt>" -n 100 --temp 0 -no-cnv
    const std::pair<const char*, const char*> cases[] = {
        {"Once upon a time",
         ", there was a little girl named Lily. She loved to play outside in the park. One day, "
         "she saw a big, "
         "red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, "
         "let's go to the "
         "park.\" Lily was sad and didn't know what to do"},
        {"The cat sat",
         " down on the ground. He liked to see a big box. He liked to play with his ball. He liked "
         "to play with "
         "his ball. He liked to play with his ball.\nOne day, a little boy named Tim came to the "
         "park. He saw a "
         "big box. Tim wanted to play with the ball. He wanted to play with the"},
    };
    Context ctx = test::stories_context();
    for (const auto& [prompt, expected] : cases) {
        EXPECT_TRUE(ctx.clear());
        auto r = ctx.generate(prompt, greedy(100));
        ASSERT_TRUE(r) << r.error().describe();
        EXPECT_EQ(r->text, expected) << prompt;
        EXPECT_EQ(r->finish_reason, FinishReason::length);
    }
}

TEST(Golden, MatchesReferenceGreedyLoopTokenForToken) {
    Context ctx = test::stories_context();
    for (const char* prompt :
         {"Once upon a time", "Lily and Ben went", "The sun was", "One day, a big dog"}) {
        const auto expected = reference_greedy(prompt, 80);
        EXPECT_TRUE(ctx.clear());
        auto r = ctx.generate(prompt, greedy(80));
        ASSERT_TRUE(r) << r.error().describe();
        EXPECT_EQ(r->tokens, expected) << prompt;
    }
}
