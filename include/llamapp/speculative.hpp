// Speculative decoding: where an engine's drafts come from, and how many it decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "llamapp/context.hpp"
#include "llamapp/error.hpp"

namespace llamapp {

// Where drafts come from. `lookup` is llamapp's own prompt lookup; the others are llama.cpp
// common's drafters under llama-server's names (--spec-type).
enum class DraftKind {
    lookup,         // the latest earlier occurrence of the sequence's last few tokens
    ngram_simple,   // the same idea with llama.cpp's key and draft lengths
    ngram_map_k,    // a map of key n-grams to what followed them, per sequence
    ngram_map_k4v,  // the same, keeping up to four continuations per key
    ngram_mod,      // a hashed table of n-grams shared by all sequences
    ngram_cache,    // llama.cpp's lookup cache of the sequence's own n-grams
    draft_simple,   // a smaller model with the same vocabulary (SpeculativeOptions::draft)
};
inline constexpr std::size_t draft_kind_count = 7;

// A set of kinds (the order they are tried in is fixed: SpeculativeOptions::kinds).
class DraftKinds {
  public:
    constexpr DraftKinds() = default;
    constexpr DraftKinds(std::initializer_list<DraftKind> kinds) {
        for (DraftKind k : kinds) add(k);
    }
    constexpr void add(DraftKind kind) { bits_ |= bit(kind); }
    constexpr void remove(DraftKind kind) { bits_ &= ~bit(kind); }
    constexpr bool has(DraftKind kind) const { return (bits_ & bit(kind)) != 0; }
    constexpr bool empty() const { return bits_ == 0; }
    bool operator==(const DraftKinds&) const = default;

  private:
    static constexpr std::uint32_t bit(DraftKind kind) {
        return std::uint32_t{1} << static_cast<unsigned>(kind);
    }
    std::uint32_t bits_ = 0;
};
std::string_view to_string(DraftKind kind);
std::optional<DraftKind> parse_draft_kind(std::string_view name);
// Every kind's name, comma-separated (for help texts and errors).
std::string draft_kind_names();
// Those of `kinds`, in the order they are tried; "none" for none.
std::string to_string(DraftKinds kinds);

inline constexpr int max_draft_tokens = 256;  // per stream and step

// llama.cpp's ngram-simple / ngram-map-k / ngram-map-k4v parameters (--spec-ngram-*-size-n, ...).
struct NgramMapOptions {
    int key_tokens = 12;    // size_n: the n-gram looked up
    int draft_tokens = 48;  // size_m: the most it proposes
    int min_hits = 1;       // how often a key must have been seen (map kinds)
};

// llama.cpp's ngram-mod parameters (--spec-ngram-mod-*).
struct NgramModOptions {
    int match = 24;  // n-gram length
    int n_min = 48;  // shorter proposals are dropped
    int n_max = 64;
};

// A draft model (llama-server's -md and its --spec-draft-* flags). Its context is the engine's
// twin: as many positions and sequences, the same batch sizes, one cache for all sequences.
struct DraftModelOptions {
    // Needed by draft_simple; must share the target's vocabulary (both checked at Engine::create).
    std::optional<Model> model;
    int n_threads = 0;        // 0 = the engine's
    int n_threads_batch = 0;  // 0 = n_threads
    KvType type_k = KvType::f16;
    KvType type_v = KvType::f16;
    // A draft token is proposed only while the draft model gives it at least this probability
    // (--spec-draft-p-min); 0 proposes n_max tokens every time.
    float p_min = 0.0f;
};

// Whether `draft` can draft for `target`: llama.cpp's rules for a draft model's vocabulary (the
// tokenizer type, BOS and EOS, sizes within 128 tokens, the same text for every token from id 5).
// invalid_argument names the first difference. Models loaded vocab_only suffice.
[[nodiscard]] Result<void> check_draft_vocabulary(const Model& target, const Model& draft);

struct SpeculativeOptions {
    // The kinds tried for a stream, in this order: lookup, then llama.cpp's in its own
    // (ngram-simple, -map-k, -map-k4v, -mod, -cache, draft-simple); the first that proposes
    // drafts. Empty: no
    // drafts. Drafts are kept while each equals what the request's own sampler picks from the
    // logits computed for it, so a reply is the one it would be without them.
    DraftKinds kinds = {DraftKind::lookup};
    int n_max = 3;  // most drafts per stream and step (--spec-draft-n-max); 0 = none
    int n_min = 0;  // a shorter proposal is not decoded (--spec-draft-n-min)
    // Drafts ride along only while the streams' decode call holds at most this many rows
    // (streams + drafts; a stream decoding alone takes all it asks for): on a CPU a decode's cost
    // grows with its rows, so drafting pays for one or two streams and loses once several
    // streams fill the batch; a GPU can take far more
    // (docs/performance.md). With a cache per slot (EngineOptions::kv_layout), only a stream
    // decoding alone drafts: llama.cpp would give a lead and its drafts beside other streams a
    // pass of its own.
    int batch_rows = 4;
    int lookup_match = 3;  // lookup: tokens that must repeat before it proposes what followed
    NgramMapOptions ngram_simple;
    NgramMapOptions ngram_map_k;
    NgramMapOptions ngram_map_k4v;
    NgramModOptions ngram_mod;
    DraftModelOptions draft;  // for draft_simple

    bool enabled() const { return n_max > 0 && !kinds.empty(); }
    bool uses(DraftKind kind) const;
    [[nodiscard]] Result<void> validate() const;
};

}  // namespace llamapp
