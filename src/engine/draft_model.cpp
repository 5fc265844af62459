#include "engine/draft_model.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/internals.hpp"

namespace llamapp {

namespace {

// llama.cpp's own limits for a draft's vocabulary (common/speculative.cpp).
constexpr int max_vocab_difference = 128;
constexpr int first_compared_token = 5;

Result<void> mismatch(std::string what) {
    return fail(ErrorCode::invalid_argument,
                "the draft model's vocabulary differs from the model's: " + std::move(what),
                "speculative.draft");
}

Result<void> check_special(const char* name, bool add_t, bool add_d, Token t, Token d) {
    if (add_t != add_d || (add_t && t != d))
        return mismatch(
            fmt::format("{} (model: add {} id {}, draft: add {} id {})", name, add_t, t, add_d, d));
    return {};
}

}  // namespace

// llama.cpp's draft-simple throws on a mismatch; checked first so the error names what differs.
Result<void> check_draft_vocabulary(const Model& target, const Model& draft) {
    using detail::model_state;
    const llama_vocab* t = llama_model_get_vocab(model_state(target).model.get());
    const llama_vocab* d = llama_model_get_vocab(model_state(draft).model.get());
    if (llama_vocab_type(t) != llama_vocab_type(d))
        return mismatch(fmt::format("tokenizer type {} vs {}",
                                    static_cast<int>(llama_vocab_type(t)),
                                    static_cast<int>(llama_vocab_type(d))));
    if (auto ok = check_special("BOS", llama_vocab_get_add_bos(t), llama_vocab_get_add_bos(d),
                                llama_vocab_bos(t), llama_vocab_bos(d));
        !ok)
        return ok;
    if (auto ok = check_special("EOS", llama_vocab_get_add_eos(t), llama_vocab_get_add_eos(d),
                                llama_vocab_eos(t), llama_vocab_eos(d));
        !ok)
        return ok;
    const int n_t = llama_vocab_n_tokens(t);
    const int n_d = llama_vocab_n_tokens(d);
    if (std::abs(n_t - n_d) > max_vocab_difference)
        return mismatch(fmt::format("{} tokens vs {}", n_t, n_d));
    for (int i = first_compared_token; i < std::min(n_t, n_d); ++i) {
        const char* a = llama_vocab_get_text(t, i);
        const char* b = llama_vocab_get_text(d, i);
        if (std::strcmp(a, b) != 0)
            return mismatch(fmt::format("token {} is '{}' vs '{}'", i, a, b));
    }
    return {};
}

}  // namespace llamapp

namespace llamapp::detail {

Result<std::unique_ptr<DraftModel>> DraftModel::create(const Model& target,
                                                       const ContextState& target_state,
                                                       const DraftModelOptions& options) {
    if (!options.model)
        return fail(ErrorCode::invalid_argument,
                    "draft-simple needs a draft model (-md, SpeculativeOptions::draft.model)",
                    "speculative.draft");
    const Model& draft = *options.model;
    if (auto ok = check_draft_vocabulary(target, draft); !ok) return std::unexpected(ok.error());
    ContextOptions o = target_state.options;
    o.n_ctx = target_state.n_ctx();
    o.n_batch = target_state.n_batch();
    o.n_ubatch = target_state.n_ubatch();
    o.n_seq_max = target_state.n_seq_max();
    o.kv_unified = true;
    o.type_k = options.type_k;
    o.type_v = options.type_v;
    if (options.n_threads > 0) o.n_threads = options.n_threads;
    if (options.n_threads_batch > 0 || options.n_threads > 0)
        o.n_threads_batch = options.n_threads_batch > 0 ? options.n_threads_batch : o.n_threads;
    o.embeddings = false;
    o.decode_timeout = {};
    auto context = Context::create(draft, o);
    if (!context) {
        Error e = context.error();
        e.message = "the draft model's context: " + e.message;
        return std::unexpected(std::move(e));
    }
    auto made = std::unique_ptr<DraftModel>(new DraftModel(std::move(*context)));
    made->share_threads(target_state, options);
    // A draft not taken is cut off the draft's cells as off the target's.
    const ReuseModes modes =
        made->state_.sequences.probe(draft.tokenizer().vocab_size(), draft.info().sliding_window);
    if (!modes.trim_tail)
        return fail(ErrorCode::unsupported_operation,
                    "the draft model's memory cannot drop positions (recurrent or sliding-window "
                    "state): it cannot draft",
                    draft.info().architecture);
    return made;
}

DraftModel::DraftModel(Context context)
    : context_(std::move(context)), state_(context_state(context_)), batch_(state_.n_batch()) {}

// The draft decodes on the engine's threads, one model after the other on the decode thread: a
// pool of its own would spin beside the engine's after each graph (ggml's threads poll for a
// while), and on a small machine the two pools halved both models' speed (docs/performance.md).
void DraftModel::share_threads(const ContextState& target, const DraftModelOptions& options) {
    if (!target.threads || options.n_threads > 0 || options.n_threads_batch > 0) return;
    llama_attach_threadpool(
        state_.ctx.get(), target.threads.get(),
        target.threads_batch ? target.threads_batch.get() : target.threads.get());
    state_.threads.reset();
    state_.threads_batch.reset();
}

DraftModel::~DraftModel() {
    if (target_) target_->mirror_to(nullptr);
}

void DraftModel::follow(SequenceMemory& target) {
    target_ = &target;
    state_.sequences.clear();
    target.mirror_to(&state_.sequences);
}

void DraftModel::drop_drafts(int seq) {
    static_cast<void>(state_.sequences.rewind_to_held(seq));
}

// One sequence's rows, after the positions its draft cells lag behind, if `room` has them all;
// else as much of the lag as fits.
void DraftModel::add_run(std::span<const DecodedRow> run, int room) {
    const int seq = run.front().seq;
    std::size_t from = state_.sequences.size(seq);
    const auto first = static_cast<std::size_t>(run.front().pos);
    if (from > first) {  // cannot happen while the mirror holds; stay a prefix regardless
        drop_drafts(seq);
        if (!state_.sequences.trim(seq, first)) state_.sequences.remove(seq);
        from = state_.sequences.size(seq);
    }
    const std::span<const Token> held = target_->tokens(seq);
    const std::size_t lag = first - from;
    const bool whole = lag + run.size() <= static_cast<std::size_t>(room);
    const std::size_t take =
        whole ? lag : std::min<std::size_t>(lag, static_cast<std::size_t>(room));
    if (take == 0 && !whole) return;
    Added& added = added_.emplace_back(Added{seq, {}});
    for (std::size_t p = from; p < from + take; ++p) {
        batch_.add(held[p], static_cast<int>(p), seq, false);
        added.tokens.push_back(held[p]);
    }
    if (!whole) return;
    for (const DecodedRow& row : run) {
        batch_.add(row.token, row.pos, seq, false);
        added.tokens.push_back(row.token);
    }
}

void DraftModel::decoded(std::span<const DecodedRow> rows,
                         const std::function<bool(const llama_batch&)>& decode) {
    batch_.clear();
    added_.clear();
    // In-step sequences first, so that a long catch-up cannot push them out of step.
    for (const bool lagging : {false, true}) {
        for (std::size_t i = 0; i < rows.size();) {
            std::size_t j = i + 1;
            while (j < rows.size() && rows[j].seq == rows[i].seq) ++j;
            const std::span<const DecodedRow> run = rows.subspan(i, j - i);
            i = j;
            const bool lags = !in_step(run.front().seq, static_cast<std::size_t>(run.front().pos));
            if (lags != lagging) continue;
            const int room = state_.n_batch() - batch_.batch.n_tokens;
            if (room <= 0) break;
            add_run(run, room);
        }
    }
    if (batch_.batch.n_tokens == 0) return;
    const bool ok = decode(batch_.batch);
    for (const Added& a : added_) {
        if (ok)
            state_.sequences.append(a.seq, a.tokens);
        else
            drop_drafts(a.seq);
    }
}

}  // namespace llamapp::detail
