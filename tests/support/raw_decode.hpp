// Tests that drive llama.cpp directly: one sequence's tokens decoded in one batch.
#pragma once

#include <llama.h>

#include <span>

namespace llamapp::test {

// `tokens` on `seq` from position `pos`, logits for the last; llama_decode's result.
inline int decode_at(llama_context* ctx, std::span<const llama_token> tokens, int pos,
                     llama_seq_id seq) {
    const int n = static_cast<int>(tokens.size());
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        b.token[i] = tokens[static_cast<std::size_t>(i)];
        b.pos[i] = pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq;
        b.logits[i] = i + 1 == n;
    }
    b.n_tokens = n;
    const int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    return rc;
}

}  // namespace llamapp::test
