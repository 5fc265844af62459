#include "run_output.hpp"

#include <fmt/core.h>

#include <cstdio>

namespace llamapp::cli {

nlohmann::json completion_json(const Completion& c) {
    const Generation& g = c.generation;
    nlohmann::json out = {
        {"text", g.text},
        {"tokens", g.tokens},
        {"finish_reason", std::string(to_string(g.finish_reason))},
        {"usage",
         {{"prompt_tokens", g.usage.prompt_tokens},
          {"cached_tokens", g.usage.cached_tokens},
          {"completion_tokens", g.usage.completion_tokens}}},
        {"timings",
         {{"prefill_ms", g.timings.prefill_ms},
          {"prefill_tokens_per_s", g.timings.prefill_tokens_per_s},
          {"decode_ms", g.timings.decode_ms},
          {"decode_tokens_per_s", g.timings.decode_tokens_per_s},
          {"ttft_ms", g.timings.ttft_ms},
          {"total_ms", g.timings.total_ms}}},
    };
    out["cache"] = {{"reused_tokens", c.cache.reused_tokens},
                    {"source", std::string(to_string(c.cache.source))},
                    {"tier", c.cache.tier}};
    if (!g.stop_sequence.empty()) out["stop_sequence"] = g.stop_sequence;
    if (g.error)
        out["error"] = {{"code", std::string(to_string(g.error->code))},
                        {"message", g.error->describe()}};
    return out;
}

void print_summary(const Completion& done) {
    std::fflush(stdout);  // after the text, also when stdout is a pipe
    const Generation& g = done.generation;
    std::string cache = "cold";
    if (done.cache.reused_tokens > 0) {
        cache = fmt::format("{} cached ({}{}{})", done.cache.reused_tokens,
                            to_string(done.cache.source), done.cache.tier.empty() ? "" : ": ",
                            done.cache.tier);
    }
    const std::string drafts =
        done.draft_tokens > 0
            ? fmt::format(", drafts {} of {} kept", done.draft_accepted, done.draft_tokens)
            : "";
    std::fprintf(stderr,
                 "[%d prompt tokens, %s, %d generated, ttft %.1f ms, prefill %.1f tok/s, decode "
                 "%.1f tok/s%s, %s]\n",
                 g.usage.prompt_tokens, cache.c_str(), g.usage.completion_tokens, g.timings.ttft_ms,
                 g.timings.prefill_tokens_per_s, g.timings.decode_tokens_per_s, drafts.c_str(),
                 std::string(to_string(g.finish_reason)).c_str());
}

}  // namespace llamapp::cli
