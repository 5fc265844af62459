#include "engine/ngram_draft.hpp"

namespace llamapp::detail {

void ngram_draft(std::span<const Token> history, Token next, std::size_t match,
                 std::size_t max_draft, std::vector<Token>& out) {
    out.clear();
    const std::size_t n = history.size() + 1;  // history, then next
    if (match == 0 || max_draft == 0 || n <= match) return;
    auto at = [&](std::size_t i) { return i < history.size() ? history[i] : next; };
    const std::size_t key = n - match;
    // Latest first: in a loop or a passage being copied, the nearest occurrence predicts best.
    for (std::size_t j = key; j-- > 0;) {
        bool same = true;
        for (std::size_t k = match; k-- > 0;) {  // the newest token first: most misses end here
            if (at(j + k) != at(key + k)) {
                same = false;
                break;
            }
        }
        if (!same) continue;
        for (std::size_t t = 0; t < max_draft; ++t) {
            const std::size_t i = j + match + t;
            const Token token = i < n ? at(i) : out[i - n];  // a copy: push_back may reallocate
            out.push_back(token);
        }
        return;
    }
}

}  // namespace llamapp::detail
