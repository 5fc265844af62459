// Internal: the engine core. Owns the decode thread, the llama.cpp context, the slots and the
// wait queue. Its loop is: take the inbox, ask the Scheduler (engine/scheduler.hpp) what to do
// (expire, admit, the rows of the step), carry it out (restore, copy, decode, sample), deliver
// the events. Every method below except the ones marked "any thread" runs on the decode thread.
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/context_state.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/inbox.hpp"
#include "engine/scheduler.hpp"
#include "llamapp/engine.hpp"

namespace llamapp::detail {

// A request that holds a slot.
struct Running {
    std::unique_ptr<Pending> pending;
    std::size_t next_prompt = 0;  // first prompt token not yet in the KV cache
    Token to_decode = no_token;   // sampled, to be fed back in the next decode
    CacheInfo cache;
    Reply::Clock::time_point admitted;
    Reply::Clock::time_point last_token{};
    double queue_ms = 0;
    std::size_t save_at = 0;  // > 0: snapshot the sequence once the prompt is cached up to here
    // Prompt-lookup speculation: drafts decoded and confirmed so far; after a step whose drafts
    // all missed, the sequence waits `draft_wait` steps before drafting again, twice as long
    // after each further miss.
    int draft_tokens = 0;
    int draft_accepted = 0;
    int draft_wait = 0;
    int draft_backoff = 1;
    // Preempted under KV pressure (EngineCore::preempt): the sequence holds nothing and no rows are
    // planned until there is room again. `resumed` then stands in for the prompt: the prompt,
    // the reply's tokens and the last one sampled, computed again from the start; sampling after
    // its last token carries the reply on.
    bool preempted = false;
    std::vector<Token> resumed;

    // The tokens to compute before the next sample: the prompt, or `resumed` after a preemption.
    const std::vector<Token>& prompt() const {
        return resumed.empty() ? pending->request.prompt : resumed;
    }
    Reply& reply() { return *pending->reply; }
};

// What a slot holds (its tokens) is its sequence's, kept by SequenceMemory: EngineCore::held.
struct Slot {
    int seq = 0;
    std::string session;  // pinned to this session when not empty
    std::string scope;    // cache scope of the request that wrote the cached tokens
    Reply::Clock::time_point last_used{};
    std::unique_ptr<Running> running;  // null while idle
    bool save_pending = false;  // finished; its finish save waits (SavePolicy::finish_save_delay)
};

// The engine's view of the KV store: which namespace its snapshots live in, how to look them up
// and when to save.
struct Persistence {
    std::optional<KvStoreClient> store;  // empty: no store
    KvNamespace ns;                      // scope left empty; set per request
    SavePolicy policy;
    KvLookup lookup;

    KvNamespace ns_for(const std::string& scope) const {
        KvNamespace n = ns;
        n.scope = scope;
        return n;
    }
};

class EngineCore {
  public:
    using Clock = Reply::Clock;
    EngineCore(Context context, EngineOptions options, EngineMetrics metrics, ReuseModes modes,
               Persistence persistence);
    ~EngineCore();

    void start();

    // Any thread.
    // All or none; fails with queue_full or shutting_down.
    Result<void> enqueue(std::vector<std::unique_ptr<Pending>> pending);
    void shutdown(std::chrono::milliseconds grace);
    // Runs `work` on the decode thread between two decode calls and returns its result.
    template <typename T>
    Result<T> on_decode_thread(std::function<Result<T>()> work);
    EngineStats stats() const;

    const Model& model() const { return context_.model(); }
    const ReuseModes& modes() const { return modes_; }
    const EngineOptions& options() const { return options_; }
    EngineMetrics& metrics() { return metrics_; }
    int n_ctx_seq() const { return n_ctx_seq_; }
    int n_batch() const { return n_batch_; }
    int n_slots() const { return static_cast<int>(slots_.size()); }
    // Any thread: invalid_argument unless `index` names one of the slots.
    Result<void> check_slot(int index) const {
        if (index >= 0 && index < n_slots()) return {};
        return fail(ErrorCode::invalid_argument,
                    fmt::format("slot {} does not exist (this engine has {})", index, n_slots()),
                    "slot");
    }
    std::shared_ptr<Inbox> inbox() const { return inbox_; }
    // Decode thread: the tokens whose KV the slot's sequence holds, in position order.
    std::span<const Token> held(const Slot& slot) const {
        return state_.sequences.tokens(slot.seq);
    }
    // A copy of it, for what outlives this step (a store entry, a snapshot's description).
    std::vector<Token> held_copy(const Slot& slot) const {
        const auto tokens = held(slot);
        return {tokens.begin(), tokens.end()};
    }
    std::uint64_t next_id() { return ++last_id_; }
    void notify(const LifecycleEvent& event) const;
    // Any thread: looks the prompt up in the KV store and loads the best entry into `pending`.
    void prefetch(Pending& pending, bool refresh = false) const;

    // Decode thread: session commands.
    Result<void> fork(const std::string& from, const std::string& to, const std::string& scope);
    Result<void> end(const std::string& id, const std::string& scope);
    std::vector<SessionInfo> list_sessions() const;

    // Any thread: runs `work` on the decode thread once no request runs on slot `index` (at
    // once when none does), before the next admission; returns its result.
    template <typename T>
    Result<T> on_idle_slot(int index, std::function<Result<T>(Slot&)> work);
    // Decode thread, on an idle slot: the slot actions (Engine::save_slot and the others). The
    // save reserves and fills a store entry; the caller waits for its write.
    Result<SlotSnapshot> save_slot(Slot& slot);
    Result<SlotSnapshot> restore_slot(Slot& slot, const KvHit& hit, const std::string& scope);
    std::size_t erase_slot(Slot& slot);
    // Any thread: the stored entry holding all of `tokens`, loaded (file reads happen here).
    std::optional<KvHit> fetch_whole(std::span<const Token> tokens, const std::string& scope) const;
    bool stores() const { return persistence_.store.has_value(); }
    // Any thread: whether the store serves all of `tokens`, written where its tiers are.
    Result<void> wait_until_stored(std::span<const Token> tokens, const std::string& scope) const;

  private:
    void loop();
    bool take_inbox();  // false once asked to stop
    void wait_for_work();
    // Whatever still runs or waits ends as cancelled; then the shutdown saves.
    void end_all_at_shutdown();
    void reap();
    void run_slot_commands();  // those whose slot is idle
    void admit();
    void tick();
    void plan_rows();
    // What the scheduler sees: the slots, a queued request, the running streams.
    std::span<const SlotView> slot_views();
    RequestView request_view(const Pending& pending) const;
    std::span<const StreamView> stream_views();
    void process_rows(std::size_t begin, std::size_t end);
    void commit_rows(std::size_t begin, std::size_t end);
    bool free_one_idle_sequence();
    // KV pressure with one token that cannot fit: the request the scheduler picks gives its
    // cells up. It is preempted (Scheduler::resumes_after_preemption), or its reply ends
    // (length), or, before it has one, it fails. Returns that request's slot.
    int preempt_for(int stuck);
    void preempt(Slot& slot);
    void resume_preempted();  // Scheduler::resuming_preempted
    bool any_preempted() const;
    bool drop_drafts(std::size_t begin, std::size_t end);  // false when there were none
    // Samples output `batch_index` for the slot's request and streams the piece; true when the
    // reply is finished (the caller completes it).
    bool sample(Slot& slot, int batch_index);
    // Keeps the drafts after rows_[lead] while each is the token just sampled, then drops the KV
    // of the rest; true when the reply is finished.
    bool accept_drafts(Slot& slot, std::size_t lead, bool finished);
    void rollback(std::size_t begin, std::size_t end, const Error& error, bool fail_requests);

    // Carries out an admission: the session binding, the saves of what the slot loses, the
    // reuse (restore, copy or trim).
    void start_running(const Admission& admission, std::unique_ptr<Pending> pending);
    void bind_session(Slot& slot, const Admission& admission, const EngineRequest& request);
    CacheInfo take_reuse(Slot& slot, const Admission& admission,
                         const std::optional<KvHit>& stored);
    bool window_intact(const Slot& slot, std::size_t reused) const;
    void widen_short_prefill(Slot& slot, std::size_t prompt_size, CacheInfo& cache);
    void clear_sequence(Slot& slot);
    // KV store: restore a prefetched entry into `slot` (false leaves the slot empty); save a
    // sequence's state when the policy asks and the store does not hold it yet.
    bool restore(Slot& slot, const KvHit& hit);
    // What `slot` holds beyond its first `kept` tokens is about to go: takes the save the
    // scheduler asks for (Scheduler::save_before_losing).
    void save_before_losing(Slot& slot, std::size_t kept);
    // Takes every deferred finish save.
    void take_deferred_saves();
    void save(Slot& slot, SaveReason reason);
    void save_prefill_boundaries();

    void emit(Running& running, StreamPiece piece);
    // EngineRequest::report_progress: a progress event of its own (the prompt so far).
    void emit_prompt_progress(Running& running);
    Progress progress_of(Running& running) const;
    // How a request ends. A running one the engine stops (cancelled, past its deadline, failed)
    // ends its reply with `reason` and is concluded; one whose reply ended by itself (stop,
    // length) is concluded at once. Concluding frees the slot and sends the final event. A
    // queued one the engine stops sends its final event without ever holding a slot.
    void stop_running(Slot& slot, FinishReason reason, std::optional<Error> error = std::nullopt);
    void conclude_running(Slot& slot);
    void stop_queued(std::unique_ptr<Pending> pending, std::optional<Error> error);
    void send_final(Completion completion, const Pending& pending);
    void dequeued(const Pending& pending);
    void publish_gauges();
    bool live(const Row& row) const;

    Context context_;
    ContextState& state_;
    EngineOptions options_;
    EngineMetrics metrics_;
    const ReuseModes modes_;
    const Persistence persistence_;
    const int n_ctx_seq_;
    const int n_batch_;
    std::shared_ptr<Inbox> inbox_;
    std::atomic<std::uint64_t> last_id_{0};
    CancellationToken stop_decoding_;  // aborts a decode in flight at shutdown

    // Decode thread state.
    std::vector<Slot> slots_;
    std::deque<std::unique_ptr<Pending>> queue_;
    using SessionKey = std::pair<std::string, std::string>;  // scope, session id
    std::map<SessionKey, int> sessions_;                     // -> slot index
    // Slot actions waiting for their slot to be idle (on_idle_slot).
    struct SlotCommand {
        int slot = 0;
        std::function<void()> run;
    };
    std::deque<SlotCommand> slot_commands_;
    Clock::time_point saves_due_{};  // when deferred finish saves are taken if still idle
    Scheduler scheduler_;            // decisions; the methods above carry them out
    StepPlan plan_;                  // this step's rows
    std::vector<Row>& rows_ = plan_.rows;
    std::vector<SlotView> slot_views_;
    std::vector<StreamView> stream_views_;
    std::vector<int> resuming_;
    LlamaBatch batch_;

    std::atomic<int> busy_slots_{0};
    mutable std::mutex running_mutex_;  // slot_running_: written by the decode thread each step
    std::vector<bool> slot_running_;
    std::vector<bool> slot_running_seen_;  // the decode thread's own copy, compared each step
    std::atomic<std::int64_t> kv_tokens_{0};
    std::mutex idle_mutex_;
    std::condition_variable idle_;  // signalled when nothing runs and nothing waits
    bool is_idle_ = true;
    std::thread thread_;
};

template <typename T>
Result<T> EngineCore::on_decode_thread(std::function<Result<T>()> work) {
    auto task = std::make_shared<std::packaged_task<Result<T>()>>(std::move(work));
    auto result = task->get_future();
    {
        std::lock_guard lock(inbox_->mutex);
        if (inbox_->stop) return fail(ErrorCode::shutting_down, "the engine has stopped");
        inbox_->commands.emplace_back([task] { (*task)(); });
        inbox_->dirty = true;
    }
    inbox_->wake.notify_one();
    return result.get();
}

template <typename T>
Result<T> EngineCore::on_idle_slot(int index, std::function<Result<T>(Slot&)> work) {
    if (auto ok = check_slot(index); !ok) return std::unexpected(ok.error());
    auto promise = std::make_shared<std::promise<Result<T>>>();
    auto result = promise->get_future();
    auto posted = on_decode_thread<void>([&]() -> Result<void> {
        slot_commands_.push_back({index, [this, index, work = std::move(work), promise] {
                                      promise->set_value(
                                          work(slots_[static_cast<std::size_t>(index)]));
                                  }});
        run_slot_commands();
        return {};
    });
    if (!posted) return std::unexpected(posted.error());
    return result.get();
}

}  // namespace llamapp::detail
