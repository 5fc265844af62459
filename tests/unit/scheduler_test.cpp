// The engine's decisions without a model: slots, requests and streams are plain data.
#include "engine/scheduler.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace llamapp::detail {
namespace {

using namespace std::chrono_literals;
const SteadyClock::time_point t0{};

std::vector<Token> tokens(int from, int n) {
    std::vector<Token> out;
    for (int i = 0; i < n; ++i) out.push_back(from + i);
    return out;
}

std::vector<Token> concat(std::vector<Token> a, const std::vector<Token>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

ReuseModes unified_modes() {
    return {.trim_tail = true, .copy_prefix = true, .copy_whole = true};
}

SchedulerOptions options(ReuseModes modes = unified_modes()) {
    SchedulerOptions o;
    o.modes = modes;
    o.min_adopt_tokens = 16;
    o.n_batch = 512;
    o.n_ctx_seq = 4096;
    o.prefill_chunk = 512;
    o.draft_rows = 4;
    return o;
}

// A slot holding `cached`, idle, last used at t0 + `age` (older = smaller).
struct SlotSpec {
    std::vector<Token> cached;
    SteadyClock::duration used = 0s;
    std::string session;
    std::string scope;
    bool running = false;
    std::vector<Token> prompt;  // running: what it computes
    std::size_t prompt_cached = 0;
};

struct Slots {
    std::vector<SlotSpec> specs;
    std::vector<SlotView> views;
    explicit Slots(std::vector<SlotSpec> s) : specs(std::move(s)) {
        for (std::size_t i = 0; i < specs.size(); ++i) {
            const SlotSpec& spec = specs[i];
            views.push_back({.seq = static_cast<int>(i),
                             .cached = spec.cached,
                             .session = spec.session,
                             .scope = spec.scope,
                             .last_used = t0 + spec.used,
                             .running = spec.running,
                             .prompt = spec.prompt,
                             .prompt_cached = spec.prompt_cached});
        }
    }
};

RequestView request(const std::vector<Token>& prompt, std::string_view session = {},
                    std::string_view scope = {}) {
    return {.prompt = prompt, .session = session, .scope = scope};
}

// ---- slot choice ----------------------------------------------------------------------------

TEST(Scheduler, ChoosesTheSlotWithTheLongestUsablePrefixOrElseTheLeastRecentlyUsed) {
    const auto system = tokens(100, 40);
    const auto prompt = concat(system, tokens(500, 10));
    struct Case {
        const char* name;
        std::vector<SlotSpec> slots;
        int slot;
        ReuseSource source;
        std::size_t reused;
    };
    const std::vector<Case> cases = {
        {"empty slots: least recently used",
         {{{}, 5s}, {{}, 1s}, {{}, 3s}},
         1,
         ReuseSource::none,
         0},
        {"the longest prefix wins over recency",
         {{tokens(100, 10), 1s}, {system, 9s}, {{}, 0s}},
         1,
         ReuseSource::same_slot,
         40},
        // 4 of 50 prompt tokens is under the 10% rule: the prefix is not worth a long cache.
        {"a match under 10% of the prompt is ignored",
         {{tokens(100, 4), 9s}, {tokens(900, 300), 1s}},
         1,
         ReuseSource::none,
         0},
        {"exactly 10% counts",
         {{tokens(100, 5), 9s}, {tokens(900, 300), 1s}},
         0,
         ReuseSource::same_slot,
         5},
        {"running slots are never chosen",
         {{system, 1s, "", "", true, system, 40}, {{}, 5s}},
         1,
         ReuseSource::other_slot,
         40},
    };
    Scheduler scheduler(options());
    for (const Case& c : cases) {
        Slots slots(c.slots);
        const auto a = scheduler.admit(slots.views, request(prompt));
        ASSERT_TRUE(a) << c.name;
        EXPECT_EQ(a->slot, c.slot) << c.name;
        EXPECT_EQ(a->source, c.source) << c.name;
        EXPECT_EQ(a->reuse_tokens, c.reused) << c.name;
        EXPECT_FALSE(a->reclaims_session) << c.name;
    }
}

// With a cache per slot, a request without a prefix to reuse goes where it closes a gap between
// running slots (each gap splits llama.cpp's ubatch), else beside one, else least recently used.
TEST(Scheduler, WithACachePerSlotANewRequestJoinsTheRunningSlots) {
    const SlotSpec busy{tokens(1, 4), 0s, "", "", true, tokens(1, 4), 4};
    struct Case {
        const char* name;
        std::vector<SlotSpec> slots;
        int packed;  // the choice with packing; without it, always the least recently used
        int lru;
    };
    const std::vector<Case> cases = {
        {"closes a gap", {busy, {{}, 1s}, busy, {{}, 5s}, {{}, 0s}}, 1, 4},
        {"extends a run", {{{}, 1s}, {{}, 5s}, busy, {{}, 8s}}, 1, 0},
        {"no slot runs: least recently used", {{{}, 3s}, {{}, 1s}, {{}, 2s}}, 1, 1},
        {"equal neighbours: least recently used", {{{}, 4s}, busy, {{}, 2s}}, 2, 2},
    };
    for (const Case& c : cases) {
        Slots slots(c.slots);
        const auto prompt = tokens(900, 20);  // shares nothing with any slot
        SchedulerOptions o = options();
        EXPECT_EQ(Scheduler(o).admit(slots.views, request(prompt))->slot, c.lru) << c.name;
        o.cache_per_slot = true;
        EXPECT_EQ(Scheduler(o).admit(slots.views, request(prompt))->slot, c.packed) << c.name;
    }
}

// llama-server's id_slot: the named slot or nothing, whatever the others hold.
TEST(Scheduler, ARequestThatNamesASlotRunsThereOnceItIsIdle) {
    const auto system = tokens(100, 40);
    const auto prompt = concat(system, tokens(500, 10));
    struct Case {
        const char* name;
        std::vector<SlotSpec> slots;
        std::optional<int> slot;
        ReuseSource source;
        std::size_t reused;
        bool reclaims;
    };
    const std::vector<Case> cases = {
        {"named over a better prefix elsewhere, which it copies",
         {{system, 1s}, {{}, 9s}},
         1,
         ReuseSource::other_slot,
         40,
         false},
        {"named slot keeps its own prefix",
         {{{}, 1s}, {tokens(100, 30), 9s}},
         1,
         ReuseSource::same_slot,
         30,
         false},
        {"a busy named slot makes it wait, though another is idle",
         {{{}, 1s}, {system, 9s, "", "", true, system, 40}},
         std::nullopt,
         ReuseSource::none,
         0,
         false},
        {"an idle session on the named slot gives it up",
         {{{}, 1s}, {tokens(900, 20), 9s, "chat"}},
         1,
         ReuseSource::none,
         0,
         true},
    };
    Scheduler scheduler(options());
    for (const Case& c : cases) {
        Slots slots(c.slots);
        RequestView r = request(prompt);
        r.slot = 1;
        const auto a = scheduler.admit(slots.views, r);
        ASSERT_EQ(a.has_value(), c.slot.has_value()) << c.name;
        if (!a) continue;
        EXPECT_EQ(a->slot, *c.slot) << c.name;
        EXPECT_EQ(a->source, c.source) << c.name;
        EXPECT_EQ(a->reuse_tokens, c.reused) << c.name;
        EXPECT_EQ(a->reclaims_session, c.reclaims) << c.name;
    }
}

TEST(Scheduler, ReusesAtMostAllButTheLastPromptToken) {
    const auto prompt = tokens(1, 30);
    Slots slots({{prompt}});
    const auto a = Scheduler(options()).admit(slots.views, request(prompt));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->source, ReuseSource::same_slot);
    EXPECT_EQ(a->reuse_tokens, 29u);
    EXPECT_EQ(a->kept(), 29u);
}

TEST(Scheduler, AdoptsFromAnotherSlotOnlyWhenItBeatsTheOwnPrefixByTheMargin) {
    const auto prompt = tokens(1, 100);
    struct Case {
        std::size_t own;
        std::size_t other;
        ReuseSource source;
        std::size_t reused;
    };
    // min_adopt_tokens = 16.
    const Case cases[] = {
        {0, 15, ReuseSource::same_slot, 0},  // 15 < 0 + 16, and nothing own: computed cold
        {0, 16, ReuseSource::other_slot, 16},
        {20, 35, ReuseSource::same_slot, 20},
        {20, 36, ReuseSource::other_slot, 36},
    };
    for (const Case& c : cases) {
        // Slot 0 is the least recently used, so it is chosen when no prefix decides.
        Slots slots(
            {{tokens(1, static_cast<int>(c.own)), 0s},
             {tokens(1, static_cast<int>(c.other)), 5s, "", "", true, tokens(1, 200), 200}});
        const auto a = Scheduler(options()).admit(slots.views, request(prompt));
        ASSERT_TRUE(a);
        EXPECT_EQ(a->slot, 0);
        const ReuseSource want = c.reused == 0 ? ReuseSource::none : c.source;
        EXPECT_EQ(a->source, want) << c.own << " own, " << c.other << " other";
        EXPECT_EQ(a->reuse_tokens, c.reused);
        if (want == ReuseSource::other_slot) {
            EXPECT_EQ(a->donor, 1);
            EXPECT_EQ(a->kept(), 0u);
        }
    }
}

TEST(Scheduler, WithoutPartialCopiesAdoptsOnlyWhatAWholeCopyCanServe) {
    const auto prompt = tokens(1, 100);
    // Recurrent state: no trim, whole copies only. The other slot's 40 tokens are all a prefix.
    const ReuseModes recurrent{.trim_tail = false, .copy_prefix = false, .copy_whole = true};
    Slots whole({{{}, 0s}, {tokens(1, 40), 5s, "", "", true, tokens(1, 200), 200}});
    auto a = Scheduler(options(recurrent)).admit(whole.views, request(prompt));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->source, ReuseSource::other_slot);
    EXPECT_EQ(a->reuse_tokens, 40u);
    // A longer sequence that diverges cannot be cut back: nothing to adopt.
    Slots diverging({{{}, 0s}, {concat(tokens(1, 40), tokens(900, 5)), 5s}});
    a = Scheduler(options(recurrent)).admit(diverging.views, request(prompt));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->source, ReuseSource::none);
}

TEST(Scheduler, AStoredEntryIsRestoredOnlyWhenItBeatsLiveSequencesByTheMargin) {
    const auto prompt = tokens(1, 200);
    struct Case {
        std::size_t stored;
        ReuseSource source;
        std::size_t reused;
    };
    const Case cases[] = {
        {0, ReuseSource::same_slot, 50},
        {65, ReuseSource::same_slot, 50},
        {66, ReuseSource::stored, 66},
    };
    for (const Case& c : cases) {
        Slots slots({{tokens(1, 50)}});
        RequestView r = request(prompt);
        r.stored_tokens = c.stored;
        const auto a = Scheduler(options()).admit(slots.views, r);
        ASSERT_TRUE(a);
        EXPECT_EQ(a->source, c.source) << c.stored;
        EXPECT_EQ(a->reuse_tokens, c.reused) << c.stored;
    }
}

TEST(Scheduler, NoReuseWhenTheEngineOrTheRequestTurnsItOff) {
    const auto prompt = tokens(1, 100);
    Slots slots({{tokens(1, 50), 9s}, {{}, 1s}});
    RequestView off = request(prompt);
    off.reuse = false;
    off.stored_tokens = 90;
    auto a = Scheduler(options()).admit(slots.views, off);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 1);  // the least recently used, not the one with the prefix
    EXPECT_EQ(a->source, ReuseSource::none);

    SchedulerOptions engine_off = options();
    engine_off.prefix_reuse = false;
    a = Scheduler(engine_off).admit(slots.views, request(prompt));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 1);
    EXPECT_EQ(a->source, ReuseSource::none);
}

// ---- sessions and scopes --------------------------------------------------------------------

TEST(Scheduler, ASessionRunsOnItsOwnSlotAndWaitsWhileItIsBusy) {
    const auto prompt = tokens(1, 100);
    Slots idle({{{}, 0s}, {tokens(1, 60), 5s, "chat", "tenant"}});
    auto a = Scheduler(options()).admit(idle.views, request(prompt, "chat", "tenant"));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 1);
    EXPECT_EQ(a->source, ReuseSource::same_slot);

    Slots busy({{{}, 0s}, {tokens(1, 60), 5s, "chat", "tenant", true, tokens(1, 80), 60}});
    EXPECT_FALSE(Scheduler(options()).admit(busy.views, request(prompt, "chat", "tenant")));
    // The same session id in another scope is another session: it gets a slot of its own.
    a = Scheduler(options()).admit(busy.views, request(prompt, "chat", "other"));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 0);
}

TEST(Scheduler, ScopesNeverShareCachedTokens) {
    const auto prompt = tokens(1, 100);
    Slots slots({{tokens(1, 90), 9s, "", "a"}, {{}, 1s, "", "b"}});
    auto a = Scheduler(options()).admit(slots.views, request(prompt, "", "b"));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 1);
    EXPECT_EQ(a->source, ReuseSource::none);
    a = Scheduler(options()).admit(slots.views, request(prompt, "", "a"));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 0);
    EXPECT_EQ(a->reuse_tokens, 90u);
}

TEST(Scheduler, WithoutAFreeSlotTheLeastRecentlyUsedIdleSessionIsReclaimed) {
    const auto prompt = tokens(1, 100);
    Slots slots({{tokens(1, 10), 5s, "s1"},
                 {tokens(300, 10), 2s, "s2"},
                 {{}, 0s, "", "", true, tokens(1, 5), 0}});
    const auto a = Scheduler(options()).admit(slots.views, request(prompt));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->slot, 1);
    EXPECT_TRUE(a->reclaims_session);

    Slots all_busy({{{}, 0s, "", "", true, tokens(1, 5), 0}});
    EXPECT_FALSE(Scheduler(options()).admit(all_busy.views, request(prompt)));
}

TEST(Scheduler, ForkGoesToAFreeSlotFirstThenToTheOldestIdleSession) {
    Slots slots({{tokens(1, 10), 1s, "source"}, {{}, 3s}, {{}, 2s, "", "", true}, {{}, 0s, "old"}});
    Scheduler scheduler(options());
    EXPECT_EQ(scheduler.fork_target(slots.views, 0), 1);
    Slots sessions_only({{tokens(1, 10), 1s, "source"}, {{}, 7s, "newer"}, {{}, 4s, "older"}});
    EXPECT_EQ(scheduler.fork_target(sessions_only.views, 0), 2);
    Slots none({{tokens(1, 10), 1s, "source"}, {{}, 1s, "", "", true}});
    EXPECT_FALSE(scheduler.fork_target(none.views, 0));
}

// ---- waiting for a donor ----------------------------------------------------------------------

TEST(Scheduler, WaitsForAnotherSlotsPrefillOfALongSharedPrefix) {
    const auto shared = tokens(1, 200);
    const auto theirs = concat(shared, tokens(900, 50));
    const auto mine = concat(shared, tokens(700, 20));
    // Slot 0 is computing `theirs` and has 30 of it so far.
    Slots computing({{tokens(1, 30), 1s, "", "", true, theirs, 30}, {{}, 0s}});
    Scheduler scheduler(options());
    EXPECT_FALSE(scheduler.admit(computing.views, request(mine)));
    // Not in the same scope: nothing to wait for.
    EXPECT_TRUE(scheduler.admit(computing.views, request(mine, "", "elsewhere")));
    // A stored entry that already serves the shared part: no reason to wait.
    RequestView stored = request(mine);
    stored.stored_tokens = 200;
    EXPECT_TRUE(scheduler.admit(computing.views, stored));
    // Under 64 shared tokens the wait does not pay off.
    const auto short_theirs = concat(tokens(1, 60), tokens(900, 50));
    Slots short_prefix({{tokens(1, 30), 1s, "", "", true, short_theirs, 30}, {{}, 0s}});
    EXPECT_TRUE(scheduler.admit(short_prefix.views, request(concat(tokens(1, 60), tokens(7, 9)))));
    // Its prefill is done: the prefix is copied now, not waited for.
    Slots done({{theirs, 1s, "", "", true, theirs, theirs.size()}, {{}, 0s}});
    const auto a = scheduler.admit(done.views, request(mine));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->source, ReuseSource::other_slot);
    EXPECT_EQ(a->reuse_tokens, 200u);
    // Without a way to copy there is nothing to wait for.
    const ReuseModes no_copy{.trim_tail = true};
    EXPECT_TRUE(Scheduler(options(no_copy)).admit(computing.views, request(mine)));
}

// ---- KV pressure ----------------------------------------------------------------------------

TEST(Scheduler, KvPressureEvictsPlainIdleSequencesBeforeSessionsOldestFirst) {
    struct Case {
        const char* name;
        std::vector<SlotSpec> slots;
        std::optional<int> victim;
    };
    const std::vector<Case> cases = {
        {"oldest plain first",
         {{tokens(1, 5), 3s}, {tokens(1, 5), 1s}, {tokens(1, 5), 0s, "s"}},
         1},
        {"then the oldest session",
         {{tokens(1, 5), 0s, "", "", true}, {tokens(1, 5), 4s, "a"}, {tokens(1, 5), 2s, "b"}},
         2},
        {"empty and running slots are never victims",
         {{{}, 0s}, {tokens(1, 5), 0s, "", "", true}},
         std::nullopt},
    };
    Scheduler scheduler(options());
    for (const Case& c : cases) {
        Slots slots(c.slots);
        EXPECT_EQ(scheduler.eviction_victim(slots.views), c.victim) << c.name;
    }
}

TEST(Scheduler, ADeepReusedPrefixGivesTokensBackRatherThanLeaveAShortPrefill) {
    SchedulerOptions o = options();
    o.prefill_rows = 32;
    const Scheduler scheduler(o);
    EXPECT_EQ(scheduler.widened_reuse(1000, 990), std::optional<std::size_t>(968))
        << "10 rows left: keep 968 so that 32 are computed";
    EXPECT_EQ(scheduler.widened_reuse(1000, 999), std::nullopt)
        << "one row takes the decode kernel";
    EXPECT_EQ(scheduler.widened_reuse(1000, 960), std::nullopt) << "40 rows are enough already";
    EXPECT_EQ(scheduler.widened_reuse(500, 490), std::nullopt) << "shallow: the slow path is cheap";
    SchedulerOptions at_depth = o;
    at_depth.widen_from_depth = 400;
    EXPECT_EQ(Scheduler(at_depth).widened_reuse(500, 490), std::optional<std::size_t>(468));
    SchedulerOptions no_trim = o;
    no_trim.modes.trim_tail = false;
    EXPECT_EQ(Scheduler(no_trim).widened_reuse(1000, 990), std::nullopt) << "cannot give back";
    SchedulerOptions no_rule = o;
    no_rule.prefill_rows = 0;
    EXPECT_EQ(Scheduler(no_rule).widened_reuse(1000, 990), std::nullopt) << "not on this backend";
}

TEST(Scheduler, WhenNoCellIsLeftTheRequestHoldingTheMostCellsIsPreempted) {
    Scheduler scheduler(options());
    // Slot 0 is stuck with 20 cells; slot 1 runs with 900, slot 2 with 300, slot 3 is idle with
    // 2000 (idle sequences are evicted before this is asked).
    Slots slots({{tokens(1, 20), 0s, "", "", true},
                 {tokens(1, 900), 0s, "", "", true},
                 {tokens(1, 300), 0s, "", "", true},
                 {tokens(1, 2000), 0s}});
    EXPECT_EQ(scheduler.preemption_victim(slots.views, 0), 1);
    EXPECT_EQ(scheduler.preemption_victim(slots.views, 2), 1);
    EXPECT_EQ(scheduler.preemption_victim(slots.views, 1), 1);
    // A tie: the stuck request itself.
    Slots tie({{tokens(1, 50), 0s, "", "", true}, {tokens(1, 50), 0s, "", "", true}});
    EXPECT_EQ(scheduler.preemption_victim(tie.views, 0), 0);
    EXPECT_EQ(scheduler.preemption_victim(tie.views, 1), 1);
}

TEST(Scheduler, APreemptedRequestResumesOnlyIfItFitsTheSharedCellsAloneAndAnotherGivesCellsBack) {
    SchedulerOptions shared = options();
    shared.n_cells = shared.n_ctx_seq;  // 4096, shared by the slots
    SchedulerOptions own = options();
    own.n_cells = 4 * own.n_ctx_seq;  // each slot its own 4096
    Slots slots({{tokens(1, 900), 0s, "", "", true}, {tokens(1, 300), 0s, "", "", true}});
    slots.views[0].most_cells = 1200;  // prompt and max_tokens
    EXPECT_TRUE(Scheduler(shared).resumes_after_preemption(slots.views, 0));
    EXPECT_FALSE(Scheduler(own).resumes_after_preemption(slots.views, 0))
        << "its cells are nobody else's room";
    slots.views[0].most_cells = 0;
    EXPECT_FALSE(Scheduler(shared).resumes_after_preemption(slots.views, 0))
        << "no max_tokens: would fill it again";
    slots.views[0].most_cells = 5000;
    EXPECT_FALSE(Scheduler(shared).resumes_after_preemption(slots.views, 0))
        << "does not fit alone";
    slots.views[0].most_cells = 1200;
    slots.views[1].preempted = true;
    EXPECT_FALSE(Scheduler(shared).resumes_after_preemption(slots.views, 0))
        << "nobody else runs to give cells back";
}

TEST(Scheduler, PreemptedRequestsResumeOldestFirstWhileWhatTheyNeedFits) {
    SchedulerOptions o = options();
    o.n_cells = 1000;
    o.n_ctx_seq = 1000;
    Scheduler scheduler(o);
    // Slot 0 runs holding 700 cells; slots 1-3 are preempted, slot 3 the oldest; slot 4 is idle
    // (its cells can be evicted).
    Slots slots({{tokens(1, 700), 0s, "", "", true},
                 {{}, 0s, "", "", true},
                 {{}, 0s, "", "", true},
                 {{}, 0s, "", "", true},
                 {tokens(1, 900), 0s}});
    const std::size_t needs[] = {0, 300, 150, 350};
    for (int i = 1; i <= 3; ++i) {
        slots.views[i].preempted = true;
        slots.views[i].cells_to_finish = needs[i];
        slots.views[i].admitted = t0 + std::chrono::seconds(10 - i);
    }
    std::vector<int> out;
    scheduler.resuming_preempted(slots.views, out);
    EXPECT_TRUE(out.empty()) << "the oldest needs 350 beside 700: it waits, and so do the younger";
    slots.views[0].cached = std::span<const Token>(slots.specs[0].cached).first(300);
    scheduler.resuming_preempted(slots.views, out);
    EXPECT_EQ(out, (std::vector<int>{3, 2})) << "300 + 350 + 150 fit, 300 more does not";
    slots.views[0].running = false;
    slots.views[3].cells_to_finish = 5000;  // cannot be: but alone, the oldest always starts
    scheduler.resuming_preempted(slots.views, out);
    EXPECT_EQ(out, (std::vector<int>{3}));
}

// ---- KV store saves ---------------------------------------------------------------------------

SchedulerOptions saving(bool any_prefix_restores, SavePolicy policy = {}) {
    SchedulerOptions o = options();
    o.saves = policy;  // defaults: min 256, prefill min 1024, trim 64, align 64
    o.any_prefix_restores = any_prefix_restores;
    return o;
}

TEST(Scheduler, ALongColdPromptIsSavedAtAnAlignedBoundaryOrWholeWhereAnyPrefixRestores) {
    SavePolicy off;
    off.on_prefill = false;
    SavePolicy small;
    small.min_tokens = 32;
    small.prefill_min_tokens = 64;
    struct Case {
        SchedulerOptions o;
        std::size_t prompt, reused, expected;
    };
    const std::vector<Case> cases = {
        {options(), 5000, 0, 0},             // no store
        {saving(false, off), 5000, 0, 0},    // prefill saves off
        {saving(false), 1023, 0, 0},         // too little computed from scratch
        {saving(false), 3000, 2000, 0},      // 1000 cold tokens: under prefill_min_tokens
        {saving(false), 1100, 0, 1024},      // 1100 - 64 = 1036, aligned down to 1024
        {saving(false), 5000, 100, 4928},    // (5000 - 64) / 64 * 64
        {saving(false), 5000, 4950, 0},      // the boundary falls inside what is reused
        {saving(true), 1100, 0, 1100},       // any prefix restores: the whole prompt
        {saving(true), 5000, 4500, 0},       // still needs enough cold tokens
        {saving(false, small), 100, 0, 0},   // boundary 0 is under min_tokens
        {saving(false, small), 160, 0, 64},  // (160 - 64) / 64 * 64 = 64
        {saving(false), 10, 20, 0},          // more reused than the prompt: nothing
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        EXPECT_EQ(Scheduler(c.o).prefill_save_at(c.prompt, c.reused), c.expected) << "case " << i;
    }
}

TEST(Scheduler, ASequenceAboutToBeDroppedIsSavedOnlyWhenItsLostTailIsWorthACopy) {
    SavePolicy no_evict;
    no_evict.on_evict = false;
    const std::size_t least = static_cast<std::size_t>(SavePolicy{}.min_tokens);
    struct Case {
        SchedulerOptions o;
        std::size_t cached, kept;
        bool finish_pending;
        std::optional<SaveReason> expected;
    };
    const std::vector<Case> cases = {
        {options(), 2000, 0, true, std::nullopt},            // no store
        {saving(false), 2000, 0, false, SaveReason::evict},  // all of it goes
        {saving(false), 2000, 0, true, SaveReason::finish},  // its finish save was deferred
        {saving(false), 2000, 2000, true, std::nullopt},     // nothing is lost
        {saving(false), 2000, 2000 - least + 1, false, std::nullopt},   // a shorter tail: recompute
        {saving(false), 2000, 2000 - least, false, SaveReason::evict},  // SavePolicy::min_tokens
        {saving(false, no_evict), 2000, 0, false, std::nullopt},
        {saving(false, no_evict), 2000, 0, true, SaveReason::finish},
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        EXPECT_EQ(Scheduler(c.o).save_before_losing(c.cached, c.kept, c.finish_pending), c.expected)
            << "case " << i;
    }
}

// ---- queue bounds and deadlines -------------------------------------------------------------

TEST(Scheduler, QueueBoundsCountRequestsAndTokensButLetALongPromptInAlone) {
    const QueueBounds bounds{.max_requests = 4, .max_prompt_tokens = 1000};
    struct Case {
        std::size_t queued, queued_tokens, adding, tokens;
        bool fits;
    };
    const Case cases[] = {
        {0, 0, 4, 100, true},   {3, 100, 1, 100, true}, {4, 100, 1, 1, false},
        {0, 0, 5, 1, false},    {1, 900, 1, 100, true}, {1, 900, 1, 101, false},
        {0, 0, 1, 50000, true},  // alone over the token bound: it may still run
    };
    for (const Case& c : cases) {
        auto r = fits_queue(bounds, c.queued, c.queued_tokens, c.adding, c.tokens);
        EXPECT_EQ(r.has_value(), c.fits)
            << c.queued << "+" << c.adding << ", " << c.queued_tokens << "+" << c.tokens;
        if (!r) {
            EXPECT_EQ(r.error().code, ErrorCode::queue_full);
        }
    }
}

TEST(Scheduler, DeadlinesEndQueuedAndRunningRequests) {
    const auto never = SteadyClock::time_point::max();
    const auto now = t0 + 10s;
    EXPECT_FALSE(queued_expiry(now, false, never, never).ends);
    auto e = queued_expiry(now, true, never, never);
    EXPECT_TRUE(e.ends);
    EXPECT_FALSE(e.error);  // a cancel is no error
    e = queued_expiry(now, false, t0 + 5s, never);
    ASSERT_TRUE(e.error);
    EXPECT_EQ(e.error->code, ErrorCode::timeout);
    EXPECT_EQ(e.error->context, "queue_timeout");
    e = queued_expiry(now, false, never, t0 + 5s);
    ASSERT_TRUE(e.error);
    EXPECT_EQ(e.error->context, "timeout");
    EXPECT_FALSE(queued_expiry(now, false, now, now).ends);  // not yet past

    EXPECT_FALSE(running_expiry(now, false, never).ends);
    e = running_expiry(now, false, t0 + 9s);
    ASSERT_TRUE(e.error);
    EXPECT_EQ(e.error->message, deadline_passed().message);
    EXPECT_TRUE(running_expiry(now, true, never).ends);
}

// ---- steps: strategies, clamps, drafts ------------------------------------------------------

struct StreamSpec {
    std::vector<Token> cached;
    std::vector<Token> prompt;
    std::size_t next_prompt = 0;
    Token to_decode = no_token;
    std::size_t save_at = 0;
    int draft_wait = 0;
    int draft_max = -1;
    int max_tokens = -1;
    int completion_tokens = 0;
    SteadyClock::duration admitted = 0s;
};

struct Streams {
    std::vector<StreamSpec> specs;
    std::vector<StreamView> views;
    explicit Streams(std::vector<StreamSpec> s) : specs(std::move(s)) {
        for (std::size_t i = 0; i < specs.size(); ++i) {
            const StreamSpec& spec = specs[i];
            views.push_back({.slot = static_cast<int>(i),
                             .request = 100 + i,
                             .admitted = t0 + spec.admitted,
                             .cached = spec.cached,
                             .prompt = spec.prompt,
                             .next_prompt = spec.next_prompt,
                             .to_decode = spec.to_decode,
                             .save_at = spec.save_at,
                             .draft_wait = spec.draft_wait,
                             .draft_max = spec.draft_max,
                             .max_tokens = spec.max_tokens,
                             .completion_tokens = spec.completion_tokens});
        }
    }
};

StreamSpec decoding(Token next, std::vector<Token> cached = tokens(1, 8)) {
    StreamSpec s;
    s.cached = std::move(cached);
    s.prompt = tokens(1, 4);
    s.next_prompt = 4;
    s.to_decode = next;
    return s;
}

StreamSpec prefilling(int prompt, std::size_t done = 0, SteadyClock::duration admitted = 0s) {
    StreamSpec s;
    s.prompt = tokens(1, prompt);
    s.cached = tokens(1, static_cast<int>(done));
    s.next_prompt = done;
    s.admitted = admitted;
    return s;
}

// Rows per slot: decode rows, prompt rows, drafts.
struct Counts {
    int decode = 0, prompt = 0, drafts = 0;
    bool operator==(const Counts&) const = default;
};
std::vector<Counts> counts(const StepPlan& plan, std::size_t slots) {
    std::vector<Counts> out(slots);
    for (const Row& r : plan.rows) {
        Counts& c = out[static_cast<std::size_t>(r.slot)];
        if (r.draft)
            ++c.drafts;
        else if (r.decode)
            ++c.decode;
        else
            ++c.prompt;
    }
    return out;
}

TEST(Scheduler, StepRowsFollowTheStrategyAndCarryPositionsAndLogits) {
    Streams streams({decoding(7), prefilling(300, 100)});
    SchedulerOptions o = options();
    o.prefill_chunk = 128;
    Scheduler scheduler(o);
    StepPlan plan;
    scheduler.plan_step(streams.views, 0, plan);
    // decode_maximal: the stream's token, then one chunk of prompt minus the stream's row.
    EXPECT_EQ(counts(plan, 2), (std::vector<Counts>{{1, 0, 0}, {0, 127, 0}}));
    ASSERT_FALSE(plan.rows.empty());
    EXPECT_EQ(plan.rows[0].token, 7);
    EXPECT_EQ(plan.rows[0].pos, 8);
    EXPECT_TRUE(plan.rows[0].logits);
    EXPECT_EQ(plan.rows[1].pos, 100);
    EXPECT_EQ(plan.rows[1].token, 101);
    EXPECT_FALSE(plan.rows.back().logits);  // the prompt is not finished in this step
    EXPECT_EQ(plan.rows.back().request, 101u);

    // The last chunk of a prompt asks for logits on its last row.
    Streams last({prefilling(110, 100)});
    scheduler.plan_step(last.views, 0, plan);
    ASSERT_EQ(plan.rows.size(), 10u);
    EXPECT_TRUE(plan.rows.back().logits);
    EXPECT_EQ(plan.rows.back().pos, 109);
}

TEST(Scheduler, EveryStrategyIsClampedToTheBatchAndFallsBackWhenItGivesNothing) {
    struct Greedy final : BatchStrategy {
        std::string_view name() const override { return "greedy"; }
        void plan(std::span<const SequenceDemand>, const BatchBudget&,
                  std::span<int> take) override {
            for (int& t : take) t = 100000;  // more than anybody can take
        }
    };
    struct Idle final : BatchStrategy {
        std::string_view name() const override { return "idle"; }
        void plan(std::span<const SequenceDemand>, const BatchBudget&, std::span<int>) override {}
    };
    Streams streams({decoding(7), prefilling(2000, 0, 1s), prefilling(2000, 0, 2s)});
    const std::vector<std::shared_ptr<BatchStrategy>> strategies = {
        decode_maximal(),    prefill_priority(),         balanced(),
        first_token_first(), std::make_shared<Greedy>(), std::make_shared<Idle>()};
    for (const auto& strategy : strategies) {
        SchedulerOptions o = options();
        o.strategy = strategy;
        o.prefill_chunk = 256;
        Scheduler scheduler(o);
        StepPlan plan;
        scheduler.plan_step(streams.views, 3, plan);
        const auto c = counts(plan, 3);
        EXPECT_LE(plan.rows.size(), 512u) << strategy->name();
        EXPECT_LE(c[0].decode, 1) << strategy->name();
        EXPECT_LE(c[1].prompt, 256) << strategy->name();  // the chunk bounds every prompt
        EXPECT_LE(c[2].prompt, 256) << strategy->name();
        EXPECT_GT(plan.rows.size(), 0u) << strategy->name() << ": the engine always progresses";
    }
}

TEST(Scheduler, APrefillStopsAtItsSaveBoundaryAndLeavesNoShortLastChunk) {
    SchedulerOptions o = options();
    o.prefill_chunk = 256;
    Scheduler scheduler(o);
    StepPlan plan;
    StreamSpec save = prefilling(1000, 100);
    save.save_at = 150;
    Streams saving({save});
    scheduler.plan_step(saving.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 50u);

    // prefill_rows = 64: 280 left with a 256 chunk would leave 24, so this chunk takes 216.
    o.prefill_rows = 64;
    Scheduler tiled(o);
    Streams rest({prefilling(380, 100)});
    tiled.plan_step(rest.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 216u);
    // ...unless that would make this chunk itself short: with a chunk of 100 and 110 left,
    // giving the rest 64 rows would leave this chunk 46.
    o.prefill_chunk = 100;
    Scheduler narrow(o);
    Streams small({prefilling(210, 100)});
    narrow.plan_step(small.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 100u);
    Streams wider({prefilling(230, 100)});  // 130 left: 66 now, 64 next
    narrow.plan_step(wider.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 66u);
}

// The plan leaves rows for a stream's drafts (the engine's drafter fills them, or takes them out).
TEST(Scheduler, DraftBudgetsFollowTheRowsLeftTheTokenLimitAndTheContext) {
    const auto history = concat(tokens(1, 8), tokens(1, 3));
    struct Case {
        const char* name;
        int draft_tokens = 3;
        int draft_max = -1;  // the request's
        int draft_rows = 4;
        int lone_draft_rows = 0;
        int max_tokens = -1;
        int completion_tokens = 0;
        int n_ctx_seq = 4096;
        int draft_wait = 0;
        int streams = 1;
        bool cache_per_slot = false;
        int drafts;
    };
    const Case cases[] = {
        {.name = "room for three", .drafts = 3},
        {.name = "drafting off", .draft_tokens = 0, .drafts = 0},
        {.name = "the request asks for one", .draft_max = 1, .drafts = 1},
        {.name = "the request asks for more", .draft_max = 8, .drafts = 3},
        {.name = "the request asks for none", .draft_max = 0, .drafts = 0},
        {.name = "the engine drafts nothing", .draft_tokens = 0, .draft_max = 2, .drafts = 0},
        {.name = "rows for two", .draft_rows = 3, .drafts = 2},
        {.name = "two streams fill the draft rows", .draft_rows = 2, .streams = 2, .drafts = 0},
        {.name = "alone, the request takes what it asks for beyond the rows",
         .draft_max = 8,
         .lone_draft_rows = 512,
         .drafts = 8},
        {.name = "two streams keep to the rows",
         .draft_rows = 2,
         .lone_draft_rows = 512,
         .streams = 2,
         .drafts = 0},
        {.name = "a cache per slot, two streams",
         .streams = 2,
         .cache_per_slot = true,
         .drafts = 0},
        {.name = "a cache per slot, one stream", .cache_per_slot = true, .drafts = 3},
        {.name = "one token left to the limit",
         .max_tokens = 10,
         .completion_tokens = 9,
         .drafts = 0},
        {.name = "three left to the limit", .max_tokens = 10, .completion_tokens = 7, .drafts = 2},
        {.name = "the context ends", .n_ctx_seq = 13, .drafts = 1},
        {.name = "waiting after misses", .draft_wait = 2, .drafts = 0},
    };
    for (const Case& c : cases) {
        SchedulerOptions o = options();
        o.draft_tokens = c.draft_tokens;
        o.draft_rows = c.draft_rows;
        o.lone_draft_rows = c.lone_draft_rows;
        o.n_ctx_seq = c.n_ctx_seq;
        o.cache_per_slot = c.cache_per_slot;
        Scheduler scheduler(o);
        std::vector<StreamSpec> specs;
        for (int i = 0; i < c.streams; ++i) {
            StreamSpec s = decoding(4, history);
            s.max_tokens = c.max_tokens;
            s.completion_tokens = c.completion_tokens;
            s.draft_wait = c.draft_wait;
            s.draft_max = c.draft_max;
            specs.push_back(s);
        }
        Streams streams(specs);
        StepPlan plan;
        scheduler.plan_step(streams.views, 0, plan);
        EXPECT_EQ(counts(plan, specs.size())[0].drafts, c.drafts) << c.name;
        EXPECT_EQ(plan.waited.size(), c.draft_wait > 0 ? 1u : 0u) << c.name;
        if (c.drafts > 0) {
            EXPECT_EQ(plan.rows[0].drafts, c.drafts) << c.name;
            EXPECT_TRUE(plan.rows[1].draft) << c.name;
            EXPECT_EQ(plan.rows[1].token, no_token) << c.name;
            EXPECT_EQ(plan.rows[1].pos, 12) << c.name;
            EXPECT_GE(plan.draft_room, c.drafts) << c.name;
        }
    }
}

TEST(Scheduler, NoDraftsWhereTheCacheCannotDropThemAgain) {
    const auto history = concat(tokens(1, 8), tokens(1, 3));
    Streams streams({decoding(4, history)});
    StepPlan plan;
    ReuseModes recurrent{.trim_tail = false, .copy_whole = true};
    SchedulerOptions o = options(recurrent);
    o.draft_tokens = 3;
    Scheduler(o).plan_step(streams.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 1u);
    // A sliding window with prompt rows in the same call could split a lead from its drafts.
    ReuseModes window = unified_modes();
    window.sliding_window = 64;
    o = options(window);
    o.draft_tokens = 3;
    Scheduler(o).plan_step(streams.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 1u);
    o.separate_prompt_rows = true;
    Scheduler(o).plan_step(streams.views, 0, plan);
    EXPECT_EQ(plan.rows.size(), 4u);
}

// A step of fewer rows than llama.cpp's flash attention tile takes its per-row path, where a
// prompt row (a restored prompt's last token, typically) costs what a stream's row does.
TEST(Scheduler, PromptRowsGetACallOfTheirOwnOnlyWhereTheTiledKernelWouldRun) {
    SchedulerOptions o = options();
    o.separate_prompt_rows = true;
    const Scheduler s(o);
    EXPECT_FALSE(s.separates_prompt_rows(4));
    EXPECT_FALSE(s.separates_prompt_rows(o.tile_rows - 1));
    EXPECT_TRUE(s.separates_prompt_rows(o.tile_rows));
    o.separate_prompt_rows = false;
    EXPECT_FALSE(Scheduler(o).separates_prompt_rows(200));
}

TEST(Scheduler, MissedDraftsBackOffDoublingAndAHitResetsIt) {
    using B = Scheduler::DraftBackoff;
    auto b = Scheduler::after_drafts(3, 0, B{0, 1});
    EXPECT_EQ(b.wait, 1);
    EXPECT_EQ(b.backoff, 2);
    b = Scheduler::after_drafts(3, 0, B{0, b.backoff});
    EXPECT_EQ(b.wait, 2);
    EXPECT_EQ(b.backoff, 4);
    b = Scheduler::after_drafts(2, 1, B{0, 32});
    EXPECT_EQ(b.backoff, 1);
    b = Scheduler::after_drafts(0, 0, B{0, 8});  // nothing drafted: unchanged
    EXPECT_EQ(b.backoff, 8);
    b = Scheduler::after_drafts(3, 0, B{0, Scheduler::max_draft_backoff});
    EXPECT_EQ(b.backoff, Scheduler::max_draft_backoff);
}

TEST(Scheduler, KvPressureGivesUpDraftsThenIdleCellsThenHalfTheBatchThenARunningRequest) {
    using R = Scheduler::Relief;
    EXPECT_EQ(Scheduler::relieve({.drafts = true, .idle_sequence = true, .live_rows = 8}),
              R::drop_drafts);
    EXPECT_EQ(Scheduler::relieve({.drafts = false, .idle_sequence = true, .live_rows = 8}),
              R::evict_idle);
    EXPECT_EQ(Scheduler::relieve({.drafts = false, .idle_sequence = false, .live_rows = 2}),
              R::halve_batch);
    // One row that cannot fit: only a running request's cells are left to give.
    EXPECT_EQ(Scheduler::relieve({.drafts = false, .idle_sequence = false, .live_rows = 1}),
              R::preempt);
    EXPECT_EQ(Scheduler::relieve({.drafts = true, .idle_sequence = false, .live_rows = 1}),
              R::drop_drafts);
}

}  // namespace
}  // namespace llamapp::detail
