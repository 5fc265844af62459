#include "server/common/telemetry.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

double per(double amount, double count) {
    return count > 0 ? amount / count : 0.0;
}

// cache_n + prompt_n = the prompt (computed so far); the first generated token comes with the
// prompt's compute, so the generation rates count the tokens after it, as llama-server's do.
json timings_json(int cached, int computed, int predicted, double prompt_ms, double predicted_ms) {
    const int steps = std::max(0, predicted - 1);
    return {{"cache_n", cached},
            {"prompt_n", computed},
            {"prompt_ms", prompt_ms},
            {"prompt_per_token_ms", per(prompt_ms, computed)},
            {"prompt_per_second", per(1000.0 * computed, prompt_ms)},
            {"predicted_n", predicted},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", per(predicted_ms, steps)},
            {"predicted_per_second", per(1000.0 * steps, predicted_ms)}};
}

}  // namespace

json timings_json(const Completion& c) {
    const Generation& g = c.generation;
    json t = timings_json(g.usage.cached_tokens, g.usage.prompt_tokens - g.usage.cached_tokens,
                          g.usage.completion_tokens, g.timings.prefill_ms, g.timings.decode_ms);
    if (c.draft_tokens > 0) {  // as llama-server: only where drafts were decoded
        t["draft_n"] = c.draft_tokens;
        t["draft_n_accepted"] = c.draft_accepted;
    }
    return t;
}

json timings_json(const Progress& p) {
    return timings_json(p.cached_tokens, p.processed_tokens - p.cached_tokens, p.completion_tokens,
                        p.prompt_ms, p.decode_ms);
}

void StreamTelemetry::add(json& chunk, const std::optional<Progress>& so_far, bool prompt) const {
    if (!so_far) return;
    if (timings_per_token) chunk["timings"] = timings_json(*so_far);
    if (prompt)
        chunk["prompt_progress"] = {{"total", so_far->prompt_tokens},
                                    {"cache", so_far->cached_tokens},
                                    {"processed", so_far->processed_tokens},
                                    {"time_ms", so_far->prompt_ms}};
}

}  // namespace llamapp::detail
