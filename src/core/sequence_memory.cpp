#include "core/sequence_memory.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <vector>

#include "core/context_state.hpp"

namespace llamapp::detail {

namespace {

llama_pos position(std::size_t n) {
    return static_cast<llama_pos>(n);
}

}  // namespace

SequenceMemory::SequenceMemory(llama_context* ctx, bool unified)
    : ctx_(ctx),
      memory_(ctx ? llama_get_memory(ctx) : nullptr),
      unified_(unified),
      held_(ctx ? llama_n_seq_max(ctx) : 0) {}

void SequenceMemory::clear() {
    if (mirror_) mirror_->clear();
    if (memory_) llama_memory_clear(memory_, true);
    for (auto& tokens : held_) tokens.clear();
}

void SequenceMemory::remove_cells(int seq) {
    llama_memory_seq_rm(memory_, seq, -1, -1);
}

bool SequenceMemory::trim_cells(int seq, std::size_t keep) {
    return llama_memory_seq_rm(memory_, seq, position(keep), -1);
}

void SequenceMemory::remove(int seq) {
    if (mirror_) mirror_->remove(seq);
    remove_cells(seq);
    held_[index(seq)].clear();
}

void SequenceMemory::append(int seq, std::span<const Token> tokens) {
    held_[index(seq)].insert(held_[index(seq)].end(), tokens.begin(), tokens.end());
}

bool SequenceMemory::trim(int seq, std::size_t keep) {
    if (!trim_cells(seq, keep)) return false;
    if (mirror_ && !mirror_->trim(seq, keep)) mirror_->remove(seq);
    std::vector<Token>& held = held_[index(seq)];
    if (keep < held.size()) held.resize(keep);
    return true;
}

bool SequenceMemory::rewind_to_held(int seq) {
    if (mirror_ && !mirror_->trim(seq, size(seq))) mirror_->remove(seq);
    return trim_cells(seq, size(seq));
}

void SequenceMemory::copy_prefix(int from, int to, std::size_t n) {
    remove(to);
    llama_memory_seq_cp(memory_, from, to, 0, position(n));
    const std::vector<Token>& source = held_[index(from)];
    held_[index(to)].assign(
        source.begin(), source.begin() + static_cast<std::ptrdiff_t>(std::min(n, source.size())));
    if (mirror_) mirror_->copy_prefix(from, to, std::min(n, mirror_->size(from)));
}

void SequenceMemory::copy_whole(int from, int to) {
    remove(to);
    if (mirror_) mirror_->copy_whole(from, to);
    if (unified_) {
        llama_memory_seq_cp(memory_, from, to, -1, -1);  // shares the cells: nothing to wait for
        held_[index(to)] = held_[index(from)];
        return;
    }
    std::vector<std::uint8_t> bytes(snapshot_size(from));
    if (!snapshot(from, bytes) ||
        llama_state_seq_set_data(ctx_, bytes.data(), bytes.size(), to) != bytes.size()) {
        remove(to);
        return;
    }
    held_[index(to)] = held_[index(from)];
}

int SequenceMemory::pos_min(int seq) const {
    return llama_memory_seq_pos_min(memory_, seq);
}

int SequenceMemory::pos_max(int seq) const {
    return llama_memory_seq_pos_max(memory_, seq);
}

bool SequenceMemory::window_intact(int seq, std::size_t reused, int window) const {
    if (window <= 0 || reused == 0) return true;
    return detail::window_intact(pos_min(seq), reused, window);
}

std::size_t SequenceMemory::kept_from(int seq, std::size_t held, int window) const {
    int from = std::max(0, pos_min(seq));
    if (window > 0) from = std::max(from, static_cast<int>(held) - window);
    return static_cast<std::size_t>(from);
}

std::size_t SequenceMemory::snapshot_size(int seq) const {
    return llama_state_seq_get_size(ctx_, seq);
}

bool SequenceMemory::snapshot(int seq, std::span<std::uint8_t> out) const {
    return llama_state_seq_get_data(ctx_, out.data(), out.size(), seq) == out.size();
}

bool SequenceMemory::restore(int seq, std::span<const std::uint8_t> bytes,
                             std::span<const Token> stored, std::size_t keep) {
    remove(seq);
    keep = std::min(keep, stored.size());
    bool ok = llama_state_seq_set_data(ctx_, bytes.data(), bytes.size(), seq) != 0;
    if (ok && keep < stored.size()) ok = trim_cells(seq, keep);
    ok = ok && pos_max(seq) == position(keep) - 1;
    if (!ok) {
        remove_cells(seq);
        return false;
    }
    held_[index(seq)].assign(stored.begin(), stored.begin() + static_cast<std::ptrdiff_t>(keep));
    return true;
}

ReuseModes SequenceMemory::probe(int vocab_size, int sliding_window) {
    ReuseModes modes;
    modes.sliding_window = sliding_window;
    if (!memory_ || vocab_size < 3) return modes;
    LlamaBatch batch(3);
    for (int i = 0; i < 3; ++i) batch.add(i, i, 0, i == 2);
    if (llama_decode(ctx_, batch.batch) != 0) {
        clear();
        return modes;
    }
    modes.trim_tail = trim(0, 2) && pos_max(0) == 1;
    if (llama_n_seq_max(ctx_) >= 2) {
        const int last = pos_max(0);
        copy_whole(0, 1);
        modes.copy_whole = pos_max(1) == last;
        remove(1);
        if (unified_) {
            copy_prefix(0, 1, 1);
            // A partial copy must hold exactly position 0; recurrent state copies whole or
            // nothing.
            modes.copy_prefix = modes.trim_tail && pos_max(1) == 0 && pos_min(1) == 0;
        }
    }
    clear();
    return modes;
}

}  // namespace llamapp::detail

namespace llamapp {

std::string ReuseModes::describe() const {
    std::string out = trim_tail ? "trim" : "exact-extension-only";
    if (copy_prefix) out += ", copy-prefix";
    if (copy_whole) out += ", copy-whole";
    if (sliding_window > 0) out += fmt::format(", sliding-window={}", sliding_window);
    return out;
}

}  // namespace llamapp
