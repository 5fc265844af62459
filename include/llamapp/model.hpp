// Model: a loaded GGUF model. Immutable after load, shareable across threads and contexts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/tokenizer.hpp"

namespace llamapp {

namespace detail {
struct ModelState;
struct Internals;
}  // namespace detail

// How layers spread over several devices: none (main_gpu holds them), by layer, by row (tensor
// parallelism where the backend has it), or tensor (llama.cpp's meta device over all of them).
enum class SplitMode { none, layer, row, tensor };

struct ModelOptions {
    int n_gpu_layers = -1;  // layers to offload to GPUs; -1 = all (no effect without a GPU)
    SplitMode split_mode = SplitMode::layer;
    // The devices the layers go to, by the names list_devices() gives ("RPC0", "CUDA0"), in the
    // order main_gpu and tensor_split index; empty: offload_devices(); {"none"}: the CPU only.
    std::vector<std::string> devices;
    int main_gpu = 0;                 // index into the devices when split_mode is none
    std::vector<float> tensor_split;  // a share per device, at most one per device
    // fit_to_free_memory before loading (the model manager and `llamapp run` do it): on by
    // default, as llama-server's --fit.
    bool fit = true;
    std::vector<std::uint64_t> fit_margins;  // bytes to leave free per device; empty: 1 GiB each
    std::uint32_t fit_min_ctx = 4096;        // the least context a fit of n_ctx 0 chooses
    bool use_mmap = true;
    bool use_mlock = false;
    bool vocab_only = false;  // tokenizer and metadata only, no weights
    // Called with a monotone value in [0, 1]; the last call is exactly 1.0 on success.
    // Return false to cancel the load (Model::load then fails with load_cancelled).
    std::function<bool(float progress)> progress;
};

struct SpecialTokens {
    Token bos = no_token, eos = no_token, eot = no_token, sep = no_token, nl = no_token,
          pad = no_token;
    Token fim_prefix = no_token, fim_suffix = no_token, fim_middle = no_token;
    bool add_bos = false;  // the tokenizer adds BOS by default
    bool add_eos = false;
    bool add_sep = false;  // a pair of texts (a reranker's query and document) is split by SEP
};

struct ModelInfo {
    std::filesystem::path path;
    std::string architecture;  // general.architecture, e.g. "llama"
    std::string name;          // general.name, may be empty
    std::string description;   // llama.cpp's one-line description (type, size, quantization)
    std::uint64_t n_params = 0;
    std::uint64_t file_size = 0;     // bytes on disk
    std::uint64_t tensor_bytes = 0;  // bytes of weights
    int n_ctx_train = 0;
    int n_embd = 0;
    int n_embd_out = 0;  // length of embedding vectors
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int n_vocab = 0;
    int sliding_window = 0;  // 0 = no sliding-window attention layers
    bool is_recurrent = false;
    bool is_hybrid = false;
    bool has_encoder = false;
    bool vocab_only = false;
    std::string quantization;  // the file's type as llama.cpp names it ("Q4_K_M"), may be empty
    bool embedder = false;     // <arch>.pooling_type says the model pools: it embeds, not generates
    bool reranker = false;     // ... by rank: its pooling gives scores
    std::optional<std::string> chat_template;  // the model's default Jinja template
    // A reranker's prompt of a query and a document ({query} and {document} in it), from
    // tokenizer.chat_template.rerank.
    std::optional<std::string> rerank_template;
    std::map<std::string, std::string> metadata;  // GGUF key/values (long arrays abbreviated)
    SpecialTokens special;
};

// A parameter count as model cards and Ollama write it: "7.6B", "494M", "260K".
std::string parameter_count_text(std::uint64_t n_params);

class Model {
  public:
    // Validates options and the file before llama.cpp sees them. Thread-safe.
    [[nodiscard]] static Result<Model> load(const std::filesystem::path& path,
                                            const ModelOptions& options = {});

    const ModelInfo& info() const;
    Tokenizer tokenizer() const;

    // Lower-case hex SHA-256 of the GGUF file, streamed on first call and cached per
    // path + size + mtime for the whole process.
    [[nodiscard]] Result<std::string> fingerprint() const;

  private:
    friend struct detail::Internals;  // src/: the state is shared with contexts
    explicit Model(std::shared_ptr<const detail::ModelState> state) : state_(std::move(state)) {}
    std::shared_ptr<const detail::ModelState> state_;
};

}  // namespace llamapp
