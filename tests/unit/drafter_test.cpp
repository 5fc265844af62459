// The engine's drafter over llamapp's prompt lookup and llama.cpp common's n-gram kinds: which
// kind proposes, the request's bounds, and sequences that start over (llama.cpp's n-gram maps
// abort the process if they see a sequence shrink without being told).
#include "engine/drafter.hpp"

#include <gtest/gtest.h>

#include <numeric>

namespace llamapp::detail {
namespace {

// 1..8, then 1..3: with 4 next, "3 4" and "2 3 4" occurred before, followed by 5 6 7 8.
std::vector<Token> repeating() {
    return {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3};
}

SpeculativeOptions only(DraftKinds kinds) {
    SpeculativeOptions o;
    o.kinds = kinds;
    o.n_max = 3;
    o.ngram_simple = {.key_tokens = 2, .draft_tokens = 3, .min_hits = 1};
    o.ngram_map_k = {.key_tokens = 2, .draft_tokens = 3, .min_hits = 1};
    o.ngram_map_k4v = {.key_tokens = 2, .draft_tokens = 3, .min_hits = 1};
    o.ngram_mod = {.match = 2, .n_min = 1, .n_max = 3};
    return o;
}

Drafter::Proposal propose(Drafter& d, const Drafter::Want& want) {
    std::vector<Drafter::Proposal> out(1);
    d.propose(std::span(&want, 1), out);
    return out[0];
}

Drafter::Want want(const std::vector<Token>& history, Token next, std::uint64_t request = 1,
                   int seq = 0) {
    return {.seq = seq, .request = request, .history = history, .next = next, .n_max = 3};
}

TEST(Drafter, LookupProposesWhatFollowedTheLatestOccurrence) {
    Drafter d(only({DraftKind::lookup}), 2);
    const auto history = repeating();
    const auto p = propose(d, want(history, 4));
    EXPECT_EQ(p.kind, DraftKind::lookup);
    EXPECT_EQ(p.tokens, (std::vector<Token>{5, 6, 7}));
    EXPECT_TRUE(propose(d, want({1, 2, 3}, 9)).tokens.empty());
}

TEST(Drafter, LlamaCppsNgramSimpleProposesFromTheSameHistory) {
    Drafter d(only({DraftKind::ngram_simple}), 2);
    const auto history = repeating();
    const auto p = propose(d, want(history, 4));
    EXPECT_EQ(p.kind, DraftKind::ngram_simple);
    EXPECT_EQ(p.tokens, (std::vector<Token>{5, 6, 7}));
    d.accepted(0, 2);
}

TEST(Drafter, LookupGoesFirstAndLlamaCppsKindsTakeWhatItLeaves) {
    SpeculativeOptions o = only({DraftKind::lookup, DraftKind::ngram_simple});
    o.lookup_match = 5;  // longer than any repeat here: lookup finds nothing
    Drafter d(o, 1);
    const auto history = repeating();
    EXPECT_EQ(propose(d, want(history, 4)).kind, DraftKind::ngram_simple);
    o.lookup_match = 2;
    Drafter first(o, 1);
    EXPECT_EQ(propose(first, want(history, 4)).kind, DraftKind::lookup);
}

TEST(Drafter, TheRequestsBoundsCutOrDropAProposal) {
    const auto history = repeating();
    Drafter d(only({DraftKind::lookup}), 1);
    Drafter::Want w = want(history, 4);
    w.n_max = 2;
    EXPECT_EQ(propose(d, w).tokens, (std::vector<Token>{5, 6}));
    w.n_max = 0;
    EXPECT_TRUE(propose(d, w).tokens.empty());
    // ngram-simple proposing two tokens: dropped where the request wants three at least.
    SpeculativeOptions o = only({DraftKind::ngram_simple});
    o.ngram_simple.draft_tokens = 2;
    Drafter two(o, 1);
    w.n_max = 3;
    w.n_min = 3;
    EXPECT_TRUE(propose(two, w).tokens.empty());
    w.n_min = 2;
    EXPECT_EQ(propose(two, w).tokens, (std::vector<Token>{5, 6}));
    w.n_min = -1;  // the engine's
    o.n_min = 3;
    Drafter engine_min(o, 1);
    EXPECT_TRUE(propose(engine_min, w).tokens.empty());
}

// Every llama.cpp kind, on several sequences, through requests that grow their sequence, then
// new requests that start shorter: no kind may see a shrunken history unannounced.
TEST(Drafter, EveryKindFollowsSequencesThroughNewRequests) {
    for (DraftKind kind :
         {DraftKind::ngram_simple, DraftKind::ngram_map_k, DraftKind::ngram_map_k4v,
          DraftKind::ngram_mod, DraftKind::ngram_cache}) {
        SCOPED_TRACE(std::string(to_string(kind)));
        Drafter d(only({kind}), 3);
        std::vector<Token> text(200);
        for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<Token>(i % 7 + 1);
        int proposed = 0;
        for (std::uint64_t request = 1; request <= 3; ++request) {
            for (int seq = 0; seq < 3; ++seq) {
                // Request 2 starts shorter than request 1 ended.
                const std::size_t start = request == 2 ? 20 : 60;
                for (std::size_t n = start; n < start + 40; n += 3) {
                    const std::vector<Token> history(text.begin(), text.begin() + n);
                    const auto p = propose(d, want(history, text[n], request, seq));
                    for (std::size_t k = 0; k < p.tokens.size(); ++k)
                        EXPECT_EQ(p.tokens[k], text[n + 1 + k]);
                    if (!p.tokens.empty()) {
                        EXPECT_EQ(p.kind, kind);
                        ++proposed;
                    }
                    d.accepted(seq, static_cast<int>(p.tokens.size()));
                }
            }
        }
        EXPECT_GT(proposed, 0);
    }
}

TEST(Drafter, OptionsOutOfRangeAreTypedErrors) {
    SpeculativeOptions o;
    EXPECT_TRUE(o.validate());
    o.n_max = max_draft_tokens + 1;
    EXPECT_EQ(o.validate().error().code, ErrorCode::invalid_argument);
    o = {};
    o.n_min = o.n_max + 1;
    EXPECT_EQ(o.validate().error().context, "speculative n_min");
    o = {};
    o.ngram_mod.n_min = o.ngram_mod.n_max + 1;
    EXPECT_FALSE(o.validate());
    o = {};
    o.ngram_map_k.key_tokens = 0;
    EXPECT_FALSE(o.validate());
    o = {};
    o.batch_rows = 0;
    EXPECT_FALSE(o.validate());
    EXPECT_EQ(parse_draft_kind("ngram-map-k4v"), DraftKind::ngram_map_k4v);
    EXPECT_EQ(parse_draft_kind("draft-simple"), DraftKind::draft_simple);
    EXPECT_EQ(parse_draft_kind("draft-mtp"), std::nullopt);
    o = {};
    o.draft.p_min = 1.5f;
    EXPECT_EQ(o.validate().error().context, "speculative.p_min");
    for (std::size_t k = 0; k < draft_kind_count; ++k)
        EXPECT_EQ(parse_draft_kind(to_string(static_cast<DraftKind>(k))),
                  static_cast<DraftKind>(k));
}

}  // namespace
}  // namespace llamapp::detail
