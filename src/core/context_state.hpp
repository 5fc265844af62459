// Internal: what a Context owns, and the helpers the generation and embedding code share.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "core/sequence_memory.hpp"
#include "ggml-cpu.h"
#include "llama.h"
#include "llamapp/cancellation.hpp"
#include "llamapp/context.hpp"

namespace llamapp::detail {

struct ThreadpoolDeleter {
    void operator()(ggml_threadpool* t) const { ggml_threadpool_free(t); }
};
using Threadpool = std::unique_ptr<ggml_threadpool, ThreadpoolDeleter>;

struct LlamaContextDeleter {
    void operator()(llama_context* c) const { llama_free(c); }
};

struct LlamaBatch {
    explicit LlamaBatch(int n) : batch(llama_batch_init(n, 0, 1)) {}
    ~LlamaBatch() { llama_batch_free(batch); }
    LlamaBatch(const LlamaBatch&) = delete;
    LlamaBatch& operator=(const LlamaBatch&) = delete;

    void clear() { batch.n_tokens = 0; }
    void add(Token token, int pos, int seq, bool output) {
        const int i = batch.n_tokens++;
        batch.token[i] = token;
        batch.pos[i] = pos;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = seq;
        batch.logits[i] = output;
    }
    llama_batch batch;
};

// What the abort callback checks; written by the thread that calls llama_decode, read by
// ggml's compute threads.
struct AbortGuard {
    // A decode stops when either token is cancelled (a request's own, and its owner's stop).
    std::atomic<const CancellationToken*> token{nullptr};
    std::atomic<const CancellationToken*> stop{nullptr};
    std::atomic<std::int64_t> deadline_ns{0};  // steady_clock; 0 = none
    std::atomic<bool> timed_out{false};
};

struct ContextState {
    ContextState(Model m, ContextOptions o) : model(std::move(m)), options(std::move(o)) {}

    Model model;
    ContextOptions options;
    // Persistent CPU thread pools (decode, and prefill when its thread count differs): without
    // them ggml builds a throwaway pool for every graph. Declared before ctx so they outlive it.
    Threadpool threads;
    Threadpool threads_batch;
    std::unique_ptr<llama_context, LlamaContextDeleter> ctx;
    // Over ctx, set with it. The single-stream calls keep sequence 0 between calls, for prefix
    // reuse; an engine uses every sequence.
    SequenceMemory sequences;
    bool can_trim = true;  // partial sequence removal works (not recurrent/hybrid)
    bool busy = false;     // a generation (TokenStream) is in progress
    AbortGuard abort;

    // Sizes of the context as llama.cpp made it (n_ctx_seq: one sequence's share).
    int n_ctx() const { return static_cast<int>(llama_n_ctx(ctx.get())); }
    int n_ctx_seq() const { return static_cast<int>(llama_n_ctx_seq(ctx.get())); }
    int n_batch() const { return static_cast<int>(llama_n_batch(ctx.get())); }
    int n_ubatch() const { return static_cast<int>(llama_n_ubatch(ctx.get())); }
    int n_seq_max() const { return static_cast<int>(llama_n_seq_max(ctx.get())); }

    void forget() { sequences.clear(); }

    // llama_decode with the cancellation tokens and the earlier of the per-decode budget and
    // `deadline` enforced through the abort callback. Maps llama.cpp's codes to typed errors.
    Result<void> decode(const llama_batch& batch, const CancellationToken* cancel,
                        std::chrono::steady_clock::time_point deadline,
                        const CancellationToken* stop = nullptr);
};

}  // namespace llamapp::detail
