// Internal: the drafts of one step. Turns SpeculativeOptions' kinds into proposals for the
// streams the scheduler lets draft: llamapp's prompt lookup, and llama.cpp common's drafters
// (n-gram kinds, a draft model), one common_speculative per kind so that each proposal and its
// acceptance are known by kind. Decode thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "llamapp/speculative.hpp"
#include "llamapp/tokenizer.hpp"

struct common_speculative;
struct llama_context;

namespace llamapp::detail {

class DraftModel;

// A row the target has just decoded.
struct DecodedRow {
    int seq = 0;
    int pos = 0;
    Token token = no_token;
};

class Drafter {
  public:
    // For sequences 0 .. n_seq - 1 (the engine's slots). `draft` (draft_simple) and `target`
    // (the engine's context) outlive the drafter; null without a draft model.
    Drafter(const SpeculativeOptions& options, int n_seq, DraftModel* draft = nullptr,
            llama_context* target = nullptr);
    ~Drafter();
    Drafter(const Drafter&) = delete;
    Drafter& operator=(const Drafter&) = delete;

    // A stream that may draft this step: what its sequence holds, the token about to be decoded
    // after it, and how many drafts it may take (at most n_max; fewer than n_min: none).
    struct Want {
        int seq = 0;
        std::uint64_t request = 0;  // a new request on the sequence starts the drafters afresh
        std::span<const Token> history;
        Token next = no_token;
        int n_max = 0;
        int n_min = -1;  // -1: SpeculativeOptions::n_min
    };
    struct Proposal {
        std::vector<Token> tokens;  // empty: none
        DraftKind kind = DraftKind::lookup;
    };
    // One proposal per want, the kinds tried in order until one proposes.
    void propose(std::span<const Want> wants, std::span<Proposal> out);
    // The target kept `accepted` of the last proposal for `seq` (0 when none was decoded).
    void accepted(int seq, int accepted);
    // The fewest drafts worth decoding for `want` (its n_min, else the engine's; at least 1).
    int least(const Want& want) const;
    // The target decoded `rows` (a draft model decodes them too); called before it records them.
    void decoded(std::span<const DecodedRow> rows);
    bool follows_decodes() const { return draft_ != nullptr; }

  private:
    struct Common;  // a llama.cpp kind's common_speculative
    struct Sequence {
        std::uint64_t request = 0;
        std::vector<std::int32_t> history;       // llama.cpp's copy of what the sequence holds
        std::optional<std::size_t> proposed_by;  // common_: the last proposal's, if one of them
    };
    void follow(Sequence& s, const Want& want);
    bool lookup(const Want& want, std::vector<Token>& out) const;
    void draft_with(Common& c, std::span<const Want> wants);
    // Whether `c` may draft for `want` now (a draft model: only once its cells are in step).
    bool can_draft(const Common& c, const Want& want) const;

    SpeculativeOptions options_;
    DraftModel* draft_ = nullptr;
    std::vector<Common> common_;  // llama.cpp's kinds, in llama.cpp's order
    std::vector<Sequence> sequences_;
    std::vector<std::size_t> pending_;  // wants without a proposal yet
};

}  // namespace llamapp::detail
