// Internal: the engine core. Owns the decode thread, the llama.cpp context, the wait queue and
// the parts that carry the work: the SlotTable (slots, sessions), KvPersistence (restores and
// saves), the Executor (one step: batch, decode, sample), Delivery (events, how a request ends)
// and SlotActions (save, restore, erase a slot). Its loop reads: take the inbox, expire, run the
// slot actions, admit, then one step (the Scheduler decides; the executor carries it out and
// delivers) or wait. Every method below except the ones marked "any thread" runs on the decode
// thread.
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
#include "engine/delivery.hpp"
#include "engine/draft_model.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/executor.hpp"
#include "engine/inbox.hpp"
#include "engine/kv_persistence.hpp"
#include "engine/scheduler.hpp"
#include "engine/slot_actions.hpp"
#include "engine/slot_table.hpp"
#include "llamapp/engine.hpp"

namespace llamapp::detail {

class EngineCore {
  public:
    using Clock = Reply::Clock;
    // `draft`: the draft model (DraftKind::draft_simple), or null.
    EngineCore(Context context, EngineOptions options, EngineMetrics metrics, ReuseModes modes,
               StoreSettings store, std::unique_ptr<DraftModel> draft);
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
    // Any thread: invalid_argument unless `index` names one of the slots.
    Result<void> check_slot(int index) const {
        if (index >= 0 && index < slots_.size()) return {};
        return fail(
            ErrorCode::invalid_argument,
            fmt::format("slot {} does not exist (this engine has {})", index, slots_.size()),
            "slot");
    }
    std::shared_ptr<Inbox> inbox() const { return inbox_; }
    std::uint64_t next_id() { return ++last_id_; }
    void notify(const LifecycleEvent& event) const { delivery_.notify(event); }
    // Lookups (any thread) and the slot actions (on an idle slot: on_idle_slot).
    KvPersistence& persistence() { return persistence_; }
    SlotActions& slot_actions() { return actions_; }
    // Decode thread.
    const SlotTable& slots() const { return slots_; }

    // Decode thread: session commands.
    Result<void> fork(const std::string& from, const std::string& to, const std::string& scope);
    Result<void> end(const std::string& id, const std::string& scope);
    std::vector<SessionInfo> list_sessions() const { return slots_.sessions(); }

    // Any thread: runs `work` on the decode thread once no request runs on slot `index` (at
    // once when none does), before the next admission; returns its result.
    template <typename T>
    Result<T> on_idle_slot(int index, std::function<Result<T>(Slot&)> work);

  private:
    void loop();
    bool take_inbox();  // false once asked to stop
    void wait_for_work();
    // Whatever still runs or waits ends as cancelled; then the shutdown saves.
    void end_all_at_shutdown();
    void expire();
    void admit();
    RequestView request_view(const Pending& pending) const;
    void dequeued(const Pending& pending);
    void publish_gauges();

    // Carries out an admission: the session binding, the saves of what the slot loses, the
    // reuse (restore, copy or trim).
    void start_running(const Admission& admission, std::unique_ptr<Pending> pending);
    void bind_session(Slot& slot, const Admission& admission, const EngineRequest& request);
    CacheInfo take_reuse(Slot& slot, const Admission& admission,
                         const std::optional<KvHit>& stored);
    void widen_short_prefill(Slot& slot, std::size_t prompt_size, CacheInfo& cache);

    Context context_;
    ContextState& state_;
    EngineOptions options_;
    EngineMetrics metrics_;
    const ReuseModes modes_;
    const int n_ctx_seq_;
    const int n_batch_;
    std::shared_ptr<Inbox> inbox_;
    std::atomic<std::uint64_t> last_id_{0};

    // Decode thread state, in the order each part needs the ones before it.
    Scheduler scheduler_;  // decisions; the parts below carry them out
    SlotTable slots_;
    std::unique_ptr<DraftModel> draft_model_;  // follows state_.sequences while it lives
    Drafter drafter_;
    KvPersistence persistence_;
    Delivery delivery_;
    Executor executor_;
    SlotActions actions_;
    std::deque<std::unique_ptr<Pending>> queue_;

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
        actions_.post(index, [this, index, work = std::move(work), promise] {
            promise->set_value(work(slots_[index]));
        });
        return {};
    });
    if (!posted) return std::unexpected(posted.error());
    return result.get();
}

}  // namespace llamapp::detail
