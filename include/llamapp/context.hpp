// Context: one llama.cpp inference context over a Model (its KV cache, threads, batch sizes).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llamapp/embedding.hpp"
#include "llamapp/error.hpp"
#include "llamapp/generation.hpp"
#include "llamapp/model.hpp"

namespace llamapp {

enum class FlashAttention { automatic, on, off };

// KV cache element types llama.cpp accepts for -ctk / -ctv.
enum class KvType { f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 };
[[nodiscard]] Result<KvType> parse_kv_type(std::string_view name);
std::string_view to_string(KvType type);

enum class Pooling { model_default, none, mean, cls, last };
[[nodiscard]] Result<Pooling> parse_pooling(std::string_view name);

struct ContextOptions {
    // Signed on purpose: values from users are validated here rather than wrapped around.
    std::int64_t n_ctx = 0;       // 0 = the model's training length
    std::int64_t n_batch = 2048;  // tokens per llama_decode call
    std::int64_t n_ubatch = 512;  // tokens per compute graph
    std::int64_t n_seq_max = 1;   // parallel sequences
    int n_threads = 0;            // decode threads; 0 = all hardware threads
    int n_threads_batch = 0;      // prefill threads; 0 = same as n_threads
    FlashAttention flash_attn = FlashAttention::automatic;
    KvType type_k = KvType::f16;
    KvType type_v = KvType::f16;
    bool offload_kqv = true;
    bool kv_unified = false;
    bool embeddings = false;  // produce embeddings instead of next-token logits
    Pooling pooling = Pooling::model_default;
    // Longest a single llama_decode call may run before it is aborted (0 = no limit).
    std::chrono::milliseconds decode_timeout{0};
};

// What partial removal and sequence copy can do for this model, probed when an engine starts.
struct ReuseModes {
    bool trim_tail = false;    // a cached sequence can be cut back to a shorter prefix
    bool copy_prefix = false;  // part of a sequence can be shared in place (unified KV)
    bool copy_whole = false;   // a whole sequence can be copied (what fork needs)
    int sliding_window = 0;    // > 0: reuse only while the window stays whole
    std::string describe() const;
};

namespace detail {
struct ContextState;
struct Internals;
}  // namespace detail

class TokenStream;

// Not thread-safe: one thread uses a Context at a time (the Model may be shared). A
// CancellationToken passed in GenerateOptions may be cancelled from any other thread.
class Context {
  public:
    [[nodiscard]] static Result<Context> create(const Model& model,
                                                const ContextOptions& options = {});

    Context(Context&&) noexcept;
    Context& operator=(Context&&) noexcept;
    ~Context();

    const Model& model() const;
    int n_ctx() const;
    int n_batch() const;
    const ContextOptions& options() const;

    // Text in, text out. The prompt is tokenized with GenerateOptions::tokenize.
    [[nodiscard]] Result<Generation> generate(std::string_view prompt,
                                              const GenerateOptions& options = {});
    [[nodiscard]] Result<Generation> generate(std::span<const Token> prompt,
                                              const GenerateOptions& options = {});

    // Push-style streaming: on_piece is called for every generated token; returning false stops.
    [[nodiscard]] Result<Generation> stream(std::string_view prompt, const GenerateOptions& options,
                                            const PieceCallback& on_piece);
    [[nodiscard]] Result<Generation> stream(std::span<const Token> prompt,
                                            const GenerateOptions& options,
                                            const PieceCallback& on_piece);

    // Pull-style streaming. The stream borrows this context: keep the context alive and do not
    // start another generation until the stream is finished or destroyed.
    [[nodiscard]] Result<TokenStream> start(std::span<const Token> prompt,
                                            const GenerateOptions& options = {});

    // Embeddings (the context must be created with embeddings = true). A reranker's context
    // (rank pooling) gives its classifier's scores per input instead, not normalized: the first
    // is the relevance of a query-document prompt.
    [[nodiscard]] Result<std::vector<float>> embed(std::string_view text,
                                                   const EmbedOptions& options = {});
    [[nodiscard]] Result<std::vector<std::vector<float>>> embed_batch(
        std::span<const std::string> texts, const EmbedOptions& options = {});
    // Token ids as they are (not detokenized and tokenized again); each list is validated.
    [[nodiscard]] Result<std::vector<std::vector<float>>> embed_batch(
        std::span<const std::vector<Token>> inputs, const EmbedOptions& options = {});
    // One vector per token (pooling none).
    [[nodiscard]] Result<std::vector<std::vector<float>>> embed_tokens(
        std::string_view text, const EmbedOptions& options = {});

    // Forgets the KV cache (the next generation starts cold). Fails while a TokenStream runs.
    [[nodiscard]] Result<void> clear();

  private:
    friend struct detail::Internals;  // src/: the engine runs on a context's state
    explicit Context(std::unique_ptr<detail::ContextState> state);
    std::unique_ptr<detail::ContextState> state_;
};

}  // namespace llamapp
