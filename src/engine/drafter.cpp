#include "engine/drafter.hpp"

#include <algorithm>
#include <utility>

#include "engine/draft_model.hpp"
#include "engine/ngram_draft.hpp"
#include "speculative.h"

namespace llamapp::detail {

namespace {

// llama.cpp's kinds, in the order it tries them whatever order they were given in.
constexpr std::pair<DraftKind, common_speculative_type> common_kinds[] = {
    {DraftKind::ngram_simple, COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE},
    {DraftKind::ngram_map_k, COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K},
    {DraftKind::ngram_map_k4v, COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V},
    {DraftKind::ngram_mod, COMMON_SPECULATIVE_TYPE_NGRAM_MOD},
    {DraftKind::ngram_cache, COMMON_SPECULATIVE_TYPE_NGRAM_CACHE},
    {DraftKind::draft_simple, COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE},
};

common_params_speculative_ngram_map to_common(const NgramMapOptions& o) {
    common_params_speculative_ngram_map m;
    m.size_n = static_cast<std::uint16_t>(o.key_tokens);
    m.size_m = static_cast<std::uint16_t>(o.draft_tokens);
    m.min_hits = static_cast<std::uint16_t>(o.min_hits);
    return m;
}

common_params_speculative common_params(const SpeculativeOptions& o, common_speculative_type type) {
    common_params_speculative p;
    p.types = {type};
    p.draft.n_max = o.n_max;
    p.draft.n_min = o.n_min;
    p.ngram_simple = to_common(o.ngram_simple);
    p.ngram_map_k = to_common(o.ngram_map_k);
    p.ngram_map_k4v = to_common(o.ngram_map_k4v);
    p.ngram_mod.n_match = o.ngram_mod.match;
    p.ngram_mod.n_min = o.ngram_mod.n_min;
    p.ngram_mod.n_max = o.ngram_mod.n_max;
    p.draft.p_min = o.draft.p_min;
    return p;
}

}  // namespace

struct Drafter::Common {
    DraftKind kind = DraftKind::ngram_simple;
    common_speculative_ptr spec;
    std::vector<std::vector<std::int32_t>> results;  // per sequence
};

Drafter::Drafter(const SpeculativeOptions& options, int n_seq, DraftModel* draft,
                 llama_context* target)
    : options_(options), sequences_(static_cast<std::size_t>(n_seq)) {
    if (!options_.enabled()) return;
    for (const auto& [kind, type] : common_kinds) {
        if (!options_.uses(kind)) continue;
        common_params_speculative params = common_params(options_, type);
        if (kind == DraftKind::draft_simple) {
            if (!draft) continue;
            draft_ = draft;
            params.draft.ctx_tgt = target;
            params.draft.ctx_dft = draft->context();
        }
        Common c;
        c.kind = kind;
        // Null only for a kind llama.cpp does not know, which the table above rules out; the
        // draft model's vocabulary and sequences were checked before (DraftModel::create).
        c.spec.reset(common_speculative_init(params, static_cast<std::uint32_t>(n_seq)));
        if (!c.spec) continue;
        c.results.resize(static_cast<std::size_t>(n_seq));
        common_.push_back(std::move(c));
    }
}

Drafter::~Drafter() = default;

// Keeps llama.cpp's copy of the sequence in step: appended while the same request grows it,
// started afresh (the drafters' `begin`) for a new request or a sequence that got shorter.
void Drafter::follow(Sequence& s, const Want& want) {
    if (s.request == want.request && want.history.size() >= s.history.size()) {
        s.history.insert(s.history.end(),
                         want.history.begin() + static_cast<std::ptrdiff_t>(s.history.size()),
                         want.history.end());
        return;
    }
    s.request = want.request;
    s.history.assign(want.history.begin(), want.history.end());
    for (Common& c : common_) common_speculative_begin(c.spec.get(), want.seq, s.history);
}

// The shortest proposal decoded: the request's n_min, else the engine's, and at least one token.
int Drafter::least(const Want& want) const {
    return std::max(1, want.n_min >= 0 ? want.n_min : options_.n_min);
}

bool Drafter::lookup(const Want& want, std::vector<Token>& out) const {
    ngram_draft(want.history, want.next, static_cast<std::size_t>(options_.lookup_match),
                static_cast<std::size_t>(want.n_max), out);
    if (static_cast<int>(out.size()) < least(want)) out.clear();
    return !out.empty();
}

void Drafter::propose(std::span<const Want> wants, std::span<Proposal> out) {
    pending_.clear();
    for (std::size_t i = 0; i < wants.size(); ++i) {
        const Want& want = wants[i];
        Sequence& s = sequences_[static_cast<std::size_t>(want.seq)];
        s.proposed_by.reset();
        out[i].tokens.clear();
        if (!common_.empty()) follow(s, want);
        if (want.n_max <= 0) continue;
        if (options_.uses(DraftKind::lookup) && lookup(want, out[i].tokens)) {
            out[i].kind = DraftKind::lookup;
            continue;
        }
        pending_.push_back(i);
    }
    for (std::size_t k = 0; k < common_.size() && !pending_.empty(); ++k) {
        Common& c = common_[k];
        draft_with(c, wants);
        std::erase_if(pending_, [&](std::size_t i) {
            const Want& want = wants[i];
            const auto& result = c.results[static_cast<std::size_t>(want.seq)];
            if (static_cast<int>(result.size()) < least(want)) return false;
            out[i].tokens.assign(
                result.begin(),
                result.begin() + std::min<std::ptrdiff_t>(
                                     static_cast<std::ptrdiff_t>(result.size()), want.n_max));
            out[i].kind = c.kind;
            sequences_[static_cast<std::size_t>(want.seq)].proposed_by = k;
            return true;
        });
    }
}

bool Drafter::can_draft(const Common& c, const Want& want) const {
    return c.kind != DraftKind::draft_simple || draft_->in_step(want.seq, want.history.size());
}

// One llama.cpp kind's pass over the pending wants it can draft for.
void Drafter::draft_with(Common& c, std::span<const Want> wants) {
    bool any = false;
    for (std::size_t i : pending_) {
        const Want& want = wants[i];
        auto& result = c.results[static_cast<std::size_t>(want.seq)];
        result.clear();
        if (!can_draft(c, want)) continue;
        common_speculative_draft_params& dp =
            common_speculative_get_draft_params(c.spec.get(), want.seq);
        dp.drafting = true;
        dp.n_max = want.n_max;
        dp.pos0 = static_cast<llama_pos>(want.history.size());
        dp.id_last = want.next;
        dp.prompt = &sequences_[static_cast<std::size_t>(want.seq)].history;
        dp.result = &result;
        any = true;
    }
    if (!any) return;
    common_speculative_draft(c.spec.get());
    if (c.kind != DraftKind::draft_simple) return;
    // The draft model decoded the lead and its drafts on its cells; the target decodes them next.
    for (std::size_t i : pending_) draft_->drop_drafts(wants[i].seq);
}

void Drafter::decoded(std::span<const DecodedRow> rows) {
    if (!draft_) return;
    for (Common& c : common_)
        if (c.kind == DraftKind::draft_simple)
            draft_->decoded(rows, [&](const llama_batch& batch) {
                return common_speculative_process(c.spec.get(), batch);
            });
}

void Drafter::accepted(int seq, int accepted) {
    Sequence& s = sequences_[static_cast<std::size_t>(seq)];
    if (!s.proposed_by) return;
    common_speculative_accept(common_[*s.proposed_by].spec.get(), seq,
                              static_cast<std::uint16_t>(accepted));
    s.proposed_by.reset();
}

}  // namespace llamapp::detail
