#include "llamapp/batch_strategy.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace llamapp {

namespace {

// Gives each decoding sequence its token while budget lasts; returns the budget left.
int take_decodes(std::span<const SequenceDemand> demand, int budget, std::span<int> take) {
    for (std::size_t i = 0; i < demand.size() && budget > 0; ++i) {
        if (demand[i].decoding) {
            take[i] = 1;
            --budget;
        }
    }
    return budget;
}

// Gives prompts chunks in admission order (oldest first) while budget lasts.
// Stops starting further prompts once `enough` rows are given.
int take_prefills(std::span<const SequenceDemand> demand, int budget, int chunk,
                  std::span<int> take, int enough = std::numeric_limits<int>::max()) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < demand.size(); ++i) {
        if (!demand[i].decoding && demand[i].prefill_left > 0) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return demand[a].admitted < demand[b].admitted;
    });
    int given = 0;
    for (std::size_t i : order) {
        if (budget <= 0 || given >= enough) break;
        const int n = std::min({demand[i].prefill_left, chunk, budget});
        take[i] = n;
        budget -= n;
        given += n;
    }
    return budget;
}

class DecodeMaximal final : public BatchStrategy {
  public:
    // `enough`: rows of prompt after which no further prompt starts in the same call.
    explicit DecodeMaximal(std::string_view name, int enough = std::numeric_limits<int>::max())
        : name_(name), enough_(enough) {}
    std::string_view name() const override { return name_; }
    void plan(std::span<const SequenceDemand> demand, const BatchBudget& budget,
              std::span<int> take) override {
        const int left = take_decodes(demand, budget.n_batch, take);
        // About one chunk of prompt per call, oldest prompt first, the streams' tokens included
        // (so a call is one ubatch when the chunk is n_ubatch): calls stay short for the
        // streams, and a burst of prompts finishes one after another instead of all at the end.
        const int decodes = budget.n_batch - left;
        const int prompt_rows = std::max(budget.prefill_chunk - decodes, budget.prefill_chunk / 2);
        take_prefills(demand, std::min(left, prompt_rows), budget.prefill_chunk, take, enough_);
    }

  private:
    std::string_view name_;
    int enough_;
};

class PrefillPriority final : public BatchStrategy {
  public:
    std::string_view name() const override { return "prefill_priority"; }
    void plan(std::span<const SequenceDemand> demand, const BatchBudget& budget,
              std::span<int> take) override {
        const int left = take_prefills(demand, budget.n_batch, budget.prefill_chunk, take);
        take_decodes(demand, left, take);
    }
};

class Balanced final : public BatchStrategy {
  public:
    std::string_view name() const override { return "balanced"; }
    void plan(std::span<const SequenceDemand> demand, const BatchBudget& budget,
              std::span<int> take) override {
        const int half = budget.n_batch / 2;
        const int decode_left = take_decodes(demand, std::max(1, half), take);
        const int used_by_decode = std::max(1, half) - decode_left;
        const int prefill_left =
            take_prefills(demand, budget.n_batch - used_by_decode, budget.prefill_chunk, take);
        // Streams that did not fit in their half take what the prompts left unused.
        int extra = prefill_left;
        for (std::size_t i = 0; i < demand.size() && extra > 0; ++i) {
            if (demand[i].decoding && take[i] == 0) {
                take[i] = 1;
                --extra;
            }
        }
    }
};

}  // namespace

std::shared_ptr<BatchStrategy> decode_maximal() {
    return std::make_shared<DecodeMaximal>("decode_maximal");
}
std::shared_ptr<BatchStrategy> first_token_first() {
    return std::make_shared<DecodeMaximal>("first_token_first", 64);
}
std::shared_ptr<BatchStrategy> prefill_priority() {
    return std::make_shared<PrefillPriority>();
}
std::shared_ptr<BatchStrategy> balanced() {
    return std::make_shared<Balanced>();
}

Result<std::shared_ptr<BatchStrategy>> batch_strategy(std::string_view name) {
    if (name == "decode_maximal") return decode_maximal();
    if (name == "prefill_priority") return prefill_priority();
    if (name == "balanced") return balanced();
    if (name == "first_token_first") return first_token_first();
    return fail(ErrorCode::invalid_argument, "unknown batch strategy '" + std::string(name) + "'",
                "allowed: decode_maximal, prefill_priority, balanced, first_token_first");
}

}  // namespace llamapp
