// Engine: many callers share one model and one context through continuous batching.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "llamapp/batch_strategy.hpp"
#include "llamapp/chat.hpp"
#include "llamapp/context.hpp"
#include "llamapp/error.hpp"
#include "llamapp/kv_store.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/model.hpp"
#include "llamapp/request_handle.hpp"
#include "llamapp/speculative.hpp"

namespace llamapp {

enum class LifecycleStage { admitted, first_token, finished, cancelled, rejected };
std::string_view to_string(LifecycleStage stage);

struct LifecycleEvent {
    std::uint64_t request_id = 0;
    LifecycleStage stage = LifecycleStage::admitted;
    std::string_view session;
    const Completion* completion = nullptr;  // finished and cancelled
    const Error* error = nullptr;            // rejected
};

struct EngineOptions {
    // The context all requests share; n_seq_max is the number of slots (parallel sequences).
    ContextOptions context = default_context();
    // How the slots hold their KV cells (overrides context.kv_unified). `unified`: one cache for
    // all slots; any slot may use all of n_ctx and prefixes are shared between slots without
    // copying data, but on a CPU every decode attends over the cells all slots hold, which grows
    // with the number of busy slots (16 busy slots: about 15% of throughput). `per_slot`: each
    // slot gets n_ctx / slots cells of its own, attention stays within them, and adopting another
    // slot's prefix copies its cells. `automatic`: unified up to `max_unified_slots` slots, where
    // a request's room is worth more than the decode cost (5-9% at 4 busy slots), per slot above
    // (figures: docs/performance.md). `llamapp serve` follows llama-server instead.
    enum class KvLayout { automatic, unified, per_slot };
    KvLayout kv_layout = KvLayout::automatic;
    static constexpr int max_unified_slots = 4;
    bool unified_kv() const {
        return kv_layout == KvLayout::automatic ? slots() <= max_unified_slots
                                                : kv_layout == KvLayout::unified;
    }
    // Every request computed as it would be alone on a fresh engine, so that the same request
    // (greedy, or sampled with a seed) gives the same tokens bit for bit on every run: one slot,
    // no prefix reuse (live or from the KV store) and no drafts. Otherwise a reply can change
    // with what else runs: llama.cpp's CPU kernels sum in an order that follows how many rows a
    // decode holds and where a sequence's cells lie (docs/server.md, "When outputs are
    // bit-identical"). Overrides context.n_seq_max, prefix_reuse and speculative.
    bool deterministic = false;
    int slots() const { return deterministic ? 1 : static_cast<int>(context.n_seq_max); }
    std::size_t max_queued_requests = 64;     // accepted but not yet in a slot (>= 1)
    std::size_t max_queued_tokens = 1 << 20;  // prompt tokens of the waiting requests
    int prefill_chunk = 512;                  // most prompt tokens one sequence gets per decode
    // llama.cpp's CPU flash attention runs its fast tiled kernel only for a ubatch of at least
    // 64 query rows; fewer rows take a per-row path that, deep in a long cache, costs more than
    // recomputing dozens of tokens. So a prompt's last chunk is kept at this many tokens or more,
    // and when a reused prefix leaves fewer to compute, cached tokens are given back to make up
    // the rows. 0 = off; ignored without flash attention and where the KV cache is on a GPU (there
    // llama.cpp computes attention on the GPU).
    int min_prefill_rows = 64;
    // The same kernel skips blocks of cached tokens that no row of a 64-row tile attends to. A
    // tile that mixes streams' next tokens with a prompt's rows attends to all of their
    // sequences, so one llama_decode holding both sweeps nearly the whole unified cache; with
    // this on, a step of 64 rows or more decodes the streams' tokens and the prompt chunks in two
    // calls (figures: docs/performance.md). Ignored where min_prefill_rows is, and with a cache per
    // slot, where each sequence attends to its own cells only.
    bool separate_prompt_rows = true;
    // Speculative decoding. Drafts for a decoding sequence (by default from its own history:
    // prompt lookup) ride along in the same decode, and each is kept while it equals what the
    // request's own sampler picks from the logits computed for it: the sampler sees exactly what
    // it would without drafts, and text that repeats (code being edited, quotes, lists, loops)
    // comes several tokens per decode. A sequence whose drafts keep missing drafts less and less
    // often. On by default: a stream with nothing to match drafts nothing and pays nothing
    // (how much of a reply comes as kept drafts: docs/performance.md). Ignored for models whose
    // cache cannot drop a tail (recurrent, hybrid).
    SpeculativeOptions speculative;
    std::shared_ptr<BatchStrategy> strategy;  // null = decode_maximal()
    bool prefix_reuse = true;                 // live prefix reuse and cross-slot adoption
    // A slot whose cached prefix covers less than this share of a prompt is not preferred over
    // the least recently used one, so a short accidental match does not evict a long cache.
    double min_prefix_similarity = 0.1;
    // Copy a prefix from another slot only when it beats the chosen slot's own by this many.
    int min_adopt_tokens = 16;
    std::chrono::milliseconds queue_timeout{0};  // default queue-wait deadline (0 = none)
    // Where the engine's metrics go (a new registry when null), and labels added to each.
    std::shared_ptr<MetricsRegistry> metrics;
    Labels metric_labels;
    // Snapshots of sequences, shared by the engines of a process (null = none). The engine looks
    // up live sequences first, then the store's tiers, then computes; it saves per the policy
    // (the store's unless `save_policy` is set for this engine's model).
    std::shared_ptr<KvStore> kv_store;
    std::optional<SavePolicy> save_policy;
    // Lifecycle hook for embedders' telemetry. Called on the decode thread (rejected: on the
    // submitting thread); keep it quick and do not call back into the engine from it.
    std::function<void(const LifecycleEvent&)> on_lifecycle;

    static ContextOptions default_context() {
        ContextOptions c;
        c.n_ctx = 4096;
        c.n_seq_max = 4;
        return c;
    }
};

struct EngineRequest {
    std::vector<Token> prompt;  // tokenized by the caller (see the submit overloads)
    // Sampling, limits, stop strings, log-probs, cancel token, and `timeout`: the total
    // deadline measured from submit.
    GenerateOptions options;
    std::chrono::milliseconds queue_timeout{-1};  // -1 = the engine's default, 0 = none
    // Longest prompt accepted (a server's limit); 0 = what fits the context (n_ctx - 1).
    std::size_t max_prompt_tokens = 0;
    std::string session;  // sticks the request to the session's sequence; created on first use
    // Runs on this slot (0 .. slots - 1) and waits while another request holds it, as
    // llama-server's id_slot does; -1 = wherever the scheduler chooses. Not with a session.
    int slot = -1;
    // Reuse is a read of another caller's KV: a request reuses or copies only what requests of
    // the same scope left behind, and finds sessions only within it (set it per tenant).
    std::string cache_scope;
    // Attach Progress to every piece and send progress events while the prompt is computed
    // (llama-server's return_progress and timings_per_token).
    bool report_progress = false;
    // Drafts for this request (llama-server's speculative.n_max / n_min): -1 = the engine's
    // (EngineOptions::speculative); draft_max 0 turns them off for it.
    int draft_max = -1;
    int draft_min = -1;
};

struct SessionInfo {
    std::string id;
    std::string scope;
    int slot = -1;
    int cached_tokens = 0;
    bool busy = false;
    double idle_seconds = 0;
};

// A slot's sequence saved to or restored from the KV store (Engine::save_slot, restore_slot).
struct SlotSnapshot {
    int slot = -1;
    std::vector<Token> tokens;  // what the slot holds
    std::uint64_t bytes = 0;    // the state's size
    double ms = 0;              // the copy (and the write or read), not the wait for the slot
};

struct EngineStats {
    int slots = 0;
    int busy_slots = 0;
    std::vector<bool> slot_running;  // per slot, whether a request runs on it
    std::size_t queued_requests = 0;
    std::size_t queued_tokens = 0;
    std::size_t max_queued_requests = 0;  // the queue bound
    std::int64_t kv_tokens = 0;  // tokens held over all sequences (shared cells count per seq)
    int n_ctx = 0;
};

struct ChatSubmission {
    RequestHandle handle;
    ChatPrompt prompt;  // to parse the reply with ChatTemplate::parse
};

namespace detail {
class EngineCore;
}

// Thread-safe: any thread may submit, cancel and manage sessions. One internal decode thread is
// the only code that touches the llama.cpp context. Destroying the engine cancels what runs and
// joins the thread. A moved-from Engine may only be destroyed or assigned to.
class Engine {
  public:
    [[nodiscard]] static Result<Engine> create(const Model& model, EngineOptions options = {});

    Engine(Engine&&) noexcept;
    Engine& operator=(Engine&&) noexcept;
    ~Engine();

    // Pre-tokenized prompt. Everything is validated here, on the caller's thread (token ids,
    // sampling, grammar, context size); over the queue bound it fails at once with queue_full.
    [[nodiscard]] Result<RequestHandle> submit(EngineRequest request);
    // Several requests at once, all or none: they reach the scheduler together, so they are
    // admitted in the same step when slots allow (a batch job, n choices for one prompt).
    [[nodiscard]] Result<std::vector<RequestHandle>> submit_all(
        std::vector<EngineRequest> requests);
    // Text prompt, tokenized with request.options.tokenize on the caller's thread.
    [[nodiscard]] Result<RequestHandle> submit(std::string_view prompt, EngineRequest request);
    // Chat messages rendered and tokenized on the caller's thread; what the reply needs (the
    // template's stop strings, a tool-call grammar) is added to the request's options
    // (ChatPrompt::constrain).
    [[nodiscard]] Result<ChatSubmission> submit_chat(const ChatTemplate& chat_template,
                                                     const std::vector<ChatMessage>& messages,
                                                     EngineRequest request,
                                                     const ChatRenderOptions& render = {});

    // Copies an idle session's sequence into a new session `to`, so that two continuations share
    // the prefix. Errors: not_found, already_exists, busy (from is running, or no free slot).
    [[nodiscard]] Result<void> fork_session(const std::string& from, const std::string& to,
                                            const std::string& scope = {});
    // Forgets a session and frees its sequence. Errors: not_found, busy (a request runs on it).
    [[nodiscard]] Result<void> end_session(const std::string& id, const std::string& scope = {});
    std::vector<SessionInfo> sessions() const;

    // Slots by index (0 .. stats().slots - 1), as llama-server's /slots actions name them. Each
    // waits while a request runs on the slot, then acts between two decode calls, before the
    // next admission. Errors: invalid_argument (no such slot).
    // Saves what the slot holds into the KV store as an entry like any other: a later prompt
    // that shares its prefix restores it, and a directory tier keeps it across restarts.
    // Written when this returns. Errors: unsupported_operation (no store), invalid_argument (an
    // empty slot, or one holding another scope's tokens), out_of_memory (past the store's
    // quotas), io_error.
    [[nodiscard]] Result<SlotSnapshot> save_slot(int slot, const std::string& scope = {});
    // Loads into the slot the stored entry that holds all of `tokens` (saved by this model, in
    // this scope). Errors: not_found, and context_overflow when the context has no room (the
    // slot is then empty).
    [[nodiscard]] Result<SlotSnapshot> restore_slot(int slot, std::span<const Token> tokens,
                                                    const std::string& scope = {});
    // Drops what the slot holds, and the session pinned to it; how many tokens it held. Entries
    // in the KV store stay (KvStore::clear removes those).
    [[nodiscard]] Result<std::size_t> erase_slot(int slot);

    // Stops accepting work, lets what runs and waits finish for up to `grace`, cancels the rest
    // and stops the decode thread. Later submits fail with shutting_down.
    void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds{0});

    const Model& model() const;
    const ReuseModes& reuse_modes() const;
    EngineStats stats() const;
    MetricsRegistry& metrics() const;
    int n_ctx() const;    // tokens one sequence may hold
    int n_batch() const;  // tokens one decode call takes
    // Where drafts come from and how many (EngineOptions::speculative; none where the model's
    // cache cannot drop a tail, or with `deterministic`).
    const SpeculativeOptions& speculative() const;

  private:
    explicit Engine(std::unique_ptr<detail::EngineCore> core);
    std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace llamapp
