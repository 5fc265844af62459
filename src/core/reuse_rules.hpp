// Internal: the rules for reusing cached tokens, as plain functions over token lists and
// positions (no llama.cpp), shared by the single-stream Context and the engine and tested
// without a model. SequenceMemory applies them to a live context.
#pragma once

#include <cstddef>
#include <span>

#include "llamapp/tokenizer.hpp"

namespace llamapp::detail {

std::size_t common_prefix(std::span<const Token> a, std::span<const Token> b);
// How much of a sequence holding `cached` a prompt can reuse: at most all but the prompt's last
// token, so that fresh logits exist; and where the memory cannot be trimmed (recurrent state),
// only all of `cached` as an exact prefix, or nothing.
std::size_t reusable_prefix(std::span<const Token> cached, std::span<const Token> prompt,
                            bool trim_tail);

// Whether reusing the first `reused` tokens of a sequence is safe under a sliding window of
// `window` cells, given the lowest position the sequence still holds (-1: none at all, which is
// not a whole window either). No window, or nothing reused, is always safe.
bool window_intact(int pos_min, std::size_t reused, int window);

}  // namespace llamapp::detail
