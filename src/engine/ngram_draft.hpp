// Internal: prompt-lookup drafting. A sequence that repeats itself (a quoted passage, code being
// edited, a list, a loop) is predicted from its own history: find the latest earlier place where
// its last few tokens occurred and propose what followed there. No draft model, no state.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "llamapp/tokenizer.hpp"

namespace llamapp::detail {

// Proposes up to `max_draft` tokens to follow `history` then `next` (the token about to be
// decoded), into `out` (cleared first). The key is the last `match` tokens of history + next; the
// draft is what followed its most recent earlier occurrence, continued periodically when that
// occurrence runs into the key itself (a loop). Nothing is proposed when the key never occurred.
void ngram_draft(std::span<const Token> history, Token next, std::size_t match,
                 std::size_t max_draft, std::vector<Token>& out);

}  // namespace llamapp::detail
