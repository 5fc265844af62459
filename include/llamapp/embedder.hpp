// Embedder: embeddings computed on a thread of its own, for servers and other callers on many
// threads. One context with embeddings on, made on that thread at the first request (a server
// that is never asked for embeddings never allocates it); requests are served one at a time, in
// the order they arrive.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "llamapp/context.hpp"
#include "llamapp/error.hpp"
#include "llamapp/model.hpp"

namespace llamapp {

struct EmbedderOptions {
    ContextOptions context;       // `embeddings` is set; n_batch and n_ubatch bound an input
    std::size_t max_queued = 64;  // requests waiting for the thread; more fail with queue_full
};

namespace detail {
struct EmbedderState;
}

// Thread-safe. Destroying it fails what still waits with shutting_down and joins the thread.
class Embedder {
  public:
    [[nodiscard]] static Result<Embedder> create(const Model& model, EmbedderOptions options = {});

    Embedder(Embedder&&) noexcept;
    Embedder& operator=(Embedder&&) noexcept;
    ~Embedder();

    // One vector per input, in order; blocks until they are computed. Token ids are used as they
    // are. Errors: those of Context::embed_batch, queue_full, shutting_down.
    [[nodiscard]] Result<std::vector<std::vector<float>>> embed(
        std::vector<std::vector<Token>> inputs, const EmbedOptions& options = {});
    // The longest input accepted (the context's size; 0 = the model's training length).
    std::int64_t max_input_tokens() const;

  private:
    explicit Embedder(std::unique_ptr<detail::EmbedderState> state);
    std::unique_ptr<detail::EmbedderState> state_;
};

}  // namespace llamapp
