#include "llamapp/speculative.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <utility>

namespace llamapp {

namespace {

constexpr std::array<std::pair<DraftKind, std::string_view>, draft_kind_count> kind_names = {{
    {DraftKind::lookup, "lookup"},
    {DraftKind::ngram_simple, "ngram-simple"},
    {DraftKind::ngram_map_k, "ngram-map-k"},
    {DraftKind::ngram_map_k4v, "ngram-map-k4v"},
    {DraftKind::ngram_mod, "ngram-mod"},
    {DraftKind::ngram_cache, "ngram-cache"},
    {DraftKind::draft_simple, "draft-simple"},
}};

// llama.cpp keeps these lengths in 16 bits; far below that, longer keys never match.
constexpr int max_ngram_tokens = 1024;

Result<void> out_of_range(std::string_view field, int value, int low, int high) {
    return fail(ErrorCode::invalid_argument,
                fmt::format("{} must be in [{}, {}], got {}", field, low, high, value),
                std::string(field));
}

Result<void> check(std::string_view field, int value, int low, int high) {
    if (value < low || value > high) return out_of_range(field, value, low, high);
    return {};
}

Result<void> check(std::string_view kind, const NgramMapOptions& o) {
    if (auto ok = check(fmt::format("{} key_tokens", kind), o.key_tokens, 1, max_ngram_tokens); !ok)
        return ok;
    if (auto ok = check(fmt::format("{} draft_tokens", kind), o.draft_tokens, 1, max_draft_tokens);
        !ok)
        return ok;
    return check(fmt::format("{} min_hits", kind), o.min_hits, 1, max_ngram_tokens);
}

}  // namespace

std::string_view to_string(DraftKind kind) {
    for (const auto& [k, name] : kind_names)
        if (k == kind) return name;
    return "?";
}

std::optional<DraftKind> parse_draft_kind(std::string_view name) {
    for (const auto& [k, n] : kind_names)
        if (n == name) return k;
    return std::nullopt;
}

std::string draft_kind_names() {
    std::string names;
    for (const auto& [k, name] : kind_names) {
        if (!names.empty()) names += ", ";
        names += name;
    }
    return names;
}

std::string to_string(DraftKinds kinds) {
    std::string names;
    for (const auto& [k, name] : kind_names) {
        if (!kinds.has(k)) continue;
        if (!names.empty()) names += ',';
        names += name;
    }
    return names.empty() ? "none" : names;
}

bool SpeculativeOptions::uses(DraftKind kind) const {
    return enabled() && kinds.has(kind);
}

Result<void> SpeculativeOptions::validate() const {
    if (auto ok = check("speculative n_max", n_max, 0, max_draft_tokens); !ok) return ok;
    if (auto ok = check("speculative n_min", n_min, 0, std::max(n_max, 0)); !ok) return ok;
    if (auto ok = check("speculative batch_rows", batch_rows, 1, 1 << 16); !ok) return ok;
    if (auto ok = check("speculative lookup_match", lookup_match, 1, max_ngram_tokens); !ok)
        return ok;
    if (auto ok = check("ngram-simple", ngram_simple); !ok) return ok;
    if (auto ok = check("ngram-map-k", ngram_map_k); !ok) return ok;
    if (auto ok = check("ngram-map-k4v", ngram_map_k4v); !ok) return ok;
    if (auto ok = check("ngram-mod match", ngram_mod.match, 1, max_ngram_tokens); !ok) return ok;
    if (auto ok = check("ngram-mod n_max", ngram_mod.n_max, 1, max_draft_tokens); !ok) return ok;
    if (auto ok = check("ngram-mod n_min", ngram_mod.n_min, 0, ngram_mod.n_max); !ok) return ok;
    if (!(draft.p_min >= 0.0f && draft.p_min <= 1.0f))
        return fail(ErrorCode::invalid_argument,
                    fmt::format("speculative p_min must be in [0, 1], got {}", draft.p_min),
                    "speculative.p_min");
    if (auto ok = check("draft n_threads", draft.n_threads, 0, 1024); !ok) return ok;
    return check("draft n_threads_batch", draft.n_threads_batch, 0, 1024);
}

}  // namespace llamapp
