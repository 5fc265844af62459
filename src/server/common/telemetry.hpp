// Internal: llama-server's timings and stream telemetry, which every protocol's requests may ask
// for (timings_per_token, return_progress).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "llamapp/engine.hpp"

namespace llamapp::detail {

// llama-server's timings object: of a finished generation, or of one so far.
nlohmann::json timings_json(const Completion& c);  // with its drafts, if any
nlohmann::json timings_json(const Progress& p);

// llama-server's stream telemetry, asked for per request: `timings_per_token` adds the timings
// so far to each chunk, `return_progress` sends chunks of prompt progress while the prompt is
// computed.
struct StreamTelemetry {
    bool timings_per_token = false;
    bool return_progress = false;

    bool any() const { return timings_per_token || return_progress; }
    // "timings" (timings_per_token) and, when `prompt` is set, "prompt_progress": {total, cache,
    // processed, time_ms}.
    void add(nlohmann::json& chunk, const std::optional<Progress>& so_far, bool prompt) const;
};

}  // namespace llamapp::detail
