#include "llamapp/embedder.hpp"

#include <fmt/core.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

namespace llamapp {

namespace detail {

struct EmbedderState {
    struct Job {
        std::vector<std::vector<Token>> inputs;
        EmbedOptions options;
        std::promise<Result<std::vector<std::vector<float>>>> done;
    };

    EmbedderState(Model m, EmbedderOptions o) : model(std::move(m)), options(std::move(o)) {}

    const Model model;
    const EmbedderOptions options;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Job> jobs;            // guarded by mutex
    bool stop = false;               // guarded by mutex
    std::optional<Context> context;  // the worker's own
    std::thread worker;

    void run();
    Result<std::vector<std::vector<float>>> serve(Job& job);
};

void EmbedderState::run() {
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex);
            wake.wait(lock, [&] { return stop || !jobs.empty(); });
            if (stop) break;
            job = std::move(jobs.front());
            jobs.pop_front();
        }
        job.done.set_value(serve(job));
    }
    std::deque<Job> left;
    {
        std::lock_guard lock(mutex);
        left.swap(jobs);
    }
    for (auto& job : left)
        job.done.set_value(fail(ErrorCode::shutting_down, "the embedder stopped"));
}

Result<std::vector<std::vector<float>>> EmbedderState::serve(Job& job) {
    if (!context) {
        ContextOptions o = options.context;
        o.embeddings = true;
        auto made = Context::create(model, o);
        if (!made) return std::unexpected(made.error());  // tried again on the next request
        context.emplace(std::move(*made));
    }
    return context->embed_batch(std::span<const std::vector<Token>>(job.inputs), job.options);
}

}  // namespace detail

Embedder::Embedder(std::unique_ptr<detail::EmbedderState> state) : state_(std::move(state)) {}
Embedder::Embedder(Embedder&&) noexcept = default;
Embedder& Embedder::operator=(Embedder&&) noexcept = default;

Embedder::~Embedder() {
    if (!state_) return;
    {
        std::lock_guard lock(state_->mutex);
        state_->stop = true;
    }
    state_->wake.notify_one();
    state_->worker.join();
}

Result<Embedder> Embedder::create(const Model& model, EmbedderOptions options) {
    if (options.max_queued == 0)
        return fail(ErrorCode::invalid_argument, "max_queued must be >= 1", "max_queued");
    auto state = std::make_unique<detail::EmbedderState>(model, std::move(options));
    detail::EmbedderState* s = state.get();
    state->worker = std::thread([s] { s->run(); });
    return Embedder(std::move(state));
}

std::int64_t Embedder::max_input_tokens() const {
    return state_->options.context.n_ctx;
}

Result<std::vector<std::vector<float>>> Embedder::embed(std::vector<std::vector<Token>> inputs,
                                                        const EmbedOptions& options) {
    detail::EmbedderState& s = *state_;
    std::future<Result<std::vector<std::vector<float>>>> result;
    {
        std::lock_guard lock(s.mutex);
        if (s.stop) return fail(ErrorCode::shutting_down, "the embedder stopped");
        if (s.jobs.size() >= s.options.max_queued) {
            return fail(ErrorCode::queue_full, "too many embedding requests are waiting",
                        fmt::format("max_queued={}", s.options.max_queued));
        }
        s.jobs.push_back({std::move(inputs), options, {}});
        result = s.jobs.back().done.get_future();
    }
    s.wake.notify_one();
    return result.get();
}

}  // namespace llamapp
