// Engine benchmarks, measured through the public API on the same model and threads as
// llama.cpp's own tools:
//   throughput  aggregate decode tokens/s at several widths next to llama-batched-bench
//   multiturn   TTFT of multi-turn conversations sharing a system prompt, reuse on vs off
//   overhead    per-token cost of the engine over the foundation's single-stream generate
//   kvstore     TTFT of a long prompt: cold, KV store RAM hit, disk hit after a restart
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "bench_util.hpp"
#include "llamapp/llamapp.hpp"

using namespace llamapp;
using bench::median;

namespace {

struct Common {
    std::string model_path;
    int threads = 2;
    int rounds = 3;
    std::string flash_attn = "auto";
    // Off by default: the single-stream paths and llama.cpp's tools compared here do one token
    // per decode, and prompt-lookup drafts on random tokens would inflate the engine's rate.
    int draft_tokens = 0;
    bool json = false;

    FlashAttention fa() const {
        return flash_attn == "on"    ? FlashAttention::on
               : flash_attn == "off" ? FlashAttention::off
                                     : FlashAttention::automatic;
    }
};

std::vector<Token> random_tokens(std::mt19937& rng, int n, int vocab) {
    // Ids above the first hundred avoid control tokens in common vocabularies.
    std::uniform_int_distribution<Token> pick(100, vocab - 1);
    std::vector<Token> out(static_cast<std::size_t>(n));
    for (auto& t : out) t = pick(rng);
    return out;
}

EngineRequest greedy_request(std::vector<Token> prompt, int max_tokens) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.options.sampling = SamplingParams::greedy();
    r.options.max_tokens = max_tokens;
    r.options.ignore_eos = true;
    return r;
}

Engine make_engine(const Model& model, const Common& c, int slots, int n_ctx, bool reuse,
                   bool unified = true) {
    EngineOptions o;
    o.kv_layout = unified ? EngineOptions::KvLayout::unified : EngineOptions::KvLayout::per_slot;
    o.context.flash_attn = c.fa();
    o.context.n_ctx = n_ctx;
    o.context.n_seq_max = slots;
    o.context.n_threads = c.threads;
    o.prefix_reuse = reuse;
    o.speculative.n_max = c.draft_tokens;
    o.max_queued_requests = 1024;
    auto e = Engine::create(model, o);
    if (!e) throw std::runtime_error(e.error().describe());
    return std::move(*e);
}

std::vector<int> parse_list(const std::string& s) {
    std::vector<int> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
    return out;
}

// ---- throughput ---------------------------------------------------------------------------

// One width on the engine: B requests admitted together, prefilled in one step, then decoded in
// lockstep. Counts the decode steps after the first token, like llama-batched-bench's S_TG.
double engine_s_tg(Engine& engine, std::mt19937& rng, int width, int npp, int ntg) {
    std::vector<EngineRequest> requests;
    const int vocab = engine.model().info().n_vocab;
    for (int i = 0; i < width; ++i) {
        auto r = greedy_request(random_tokens(rng, npp, vocab), ntg);
        r.options.reuse_prefix = false;
        requests.push_back(std::move(r));
    }
    auto handles = engine.submit_all(std::move(requests));
    if (!handles) throw std::runtime_error(handles.error().describe());
    double first = 0, last = 0;
    for (auto& h : *handles) {
        Completion c = h.wait();
        if (c.generation.usage.completion_tokens != ntg)
            throw std::runtime_error("a benchmark request ended early");
        first = std::max(first, c.generation.timings.ttft_ms);
        last = std::max(last, c.generation.timings.total_ms);
    }
    return width * (ntg - 1) * 1000.0 / (last - first);
}

std::map<int, std::vector<double>> batched_bench(const std::string& exe, const Common& c, int n_ctx,
                                                 int npp, int ntg, const std::string& npl,
                                                 bool unified) {
    const std::string cmd =
        exe + " -m '" + c.model_path + "' -c " + std::to_string(n_ctx) + " -b 2048 -ub 512 -npp " +
        std::to_string(npp) + " -ntg " + std::to_string(ntg) + " -npl " + npl + " -t " +
        std::to_string(c.threads) + " -tb " + std::to_string(c.threads) + " -fa " + c.flash_attn +
        (unified ? " -kvu" : "") + " --output-format jsonl 2>/dev/null";
    auto text = bench::run_command(cmd);
    if (!text) throw std::runtime_error("llama-batched-bench failed: " + cmd);
    std::map<int, std::vector<double>> out;
    std::stringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("speed_tg"))
            out[j["pl"].get<int>()].push_back(j["speed_tg"].get<double>());
    }
    return out;
}

int run_throughput(const Common& c, const Model& model, const std::string& exe,
                   const std::string& npl_text, int npp, int ntg, int n_ctx, bool unified) {
    const auto widths = parse_list(npl_text);
    const int slots = *std::max_element(widths.begin(), widths.end());
    std::map<int, std::vector<double>> ours, ref;
    std::mt19937 rng(42);
    for (int round = 0; round < c.rounds; ++round) {
        for (int side = 0; side < 2; ++side) {
            if ((side == 0) == (round % 2 == 0)) {
                for (auto& [pl, v] : batched_bench(exe, c, n_ctx, npp, ntg, npl_text, unified))
                    ref[pl].insert(ref[pl].end(), v.begin(), v.end());
            } else {
                // A fresh engine per width starts from an empty cache, as llama-batched-bench
                // does: on a unified cache, cells other sequences hold widen every attention.
                for (int w : widths) {
                    Engine engine = make_engine(model, c, slots, n_ctx, false, unified);
                    engine_s_tg(engine, rng, 1, 4, 4);  // warm-up, then free its cells
                    engine.shutdown();
                    Engine fresh = make_engine(model, c, slots, n_ctx, false, unified);
                    ours[w].push_back(engine_s_tg(fresh, rng, w, npp, ntg));
                }
            }
        }
        std::fprintf(stderr, "round %d/%d done\n", round + 1, c.rounds);
    }
    nlohmann::json rows = nlohmann::json::array();
    if (!c.json) {
        std::printf(
            "S_TG tokens/s, PP %d, TG %d, %d threads, medians of %d rounds, %s KV cache "
            "on both sides\n",
            npp, ntg, c.threads, c.rounds, unified ? "unified (-kvu)" : "split");
        std::printf("| width | llama-batched-bench | llamapp engine | ratio |\n");
        std::printf("|------:|--------------------:|---------------:|------:|\n");
    }
    for (int w : widths) {
        const double r = median(ref[w]), o = median(ours[w]);
        rows.push_back({{"width", w}, {"batched_bench", r}, {"engine", o}, {"ratio", o / r}});
        if (!c.json) std::printf("| %5d | %19.1f | %14.1f | %5.3f |\n", w, r, o, o / r);
    }
    if (c.json) std::printf("%s\n", rows.dump(2).c_str());
    return 0;
}

// ---- multi-turn -----------------------------------------------------------------------------

struct TurnStats {
    std::vector<double> ttft_ms;
    std::vector<double> queue_ms;  // the part of TTFT spent waiting for a slot
    long prompt_tokens = 0;
    long reused_tokens = 0;
    int hits = 0;
    int requests = 0;
};

TurnStats run_conversations(const Model& model, const Common& c, bool reuse, int slots,
                            int conversations, int turns, int system_len, int user_len,
                            int reply_len, unsigned seed) {
    const int n_ctx = 8192;
    Engine engine = make_engine(model, c, slots, n_ctx, reuse);
    const int vocab = model.info().n_vocab;
    std::mt19937 rng(seed);
    const std::vector<Token> system = random_tokens(rng, system_len, vocab);
    std::vector<std::vector<std::vector<Token>>> user(static_cast<std::size_t>(conversations));
    for (auto& conv : user)
        for (int t = 0; t < turns; ++t) conv.push_back(random_tokens(rng, user_len, vocab));

    TurnStats stats;
    std::mutex mu;
    auto conversation = [&](int id) {
        std::vector<Token> history = system;
        for (int t = 0; t < turns; ++t) {
            const auto& msg = user[static_cast<std::size_t>(id)][static_cast<std::size_t>(t)];
            history.insert(history.end(), msg.begin(), msg.end());
            auto h = engine.submit(greedy_request(history, reply_len));
            if (!h) throw std::runtime_error(h.error().describe());
            Completion done = h->wait();
            const auto& g = done.generation;
            history.insert(history.end(), g.tokens.begin(), g.tokens.end());
            std::lock_guard lock(mu);
            stats.ttft_ms.push_back(g.timings.ttft_ms);
            stats.queue_ms.push_back(done.queue_ms);
            stats.prompt_tokens += g.usage.prompt_tokens;
            stats.reused_tokens += g.usage.cached_tokens;
            stats.hits += g.usage.cached_tokens > 0 ? 1 : 0;
            ++stats.requests;
        }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < conversations; ++i) threads.emplace_back(conversation, i);
    for (auto& t : threads) t.join();
    return stats;
}

int run_multiturn(const Common& c, const Model& model, int slots, int conversations, int turns,
                  int system_len, int user_len, int reply_len) {
    TurnStats on, off;
    for (int round = 0; round < c.rounds; ++round) {
        for (int side = 0; side < 2; ++side) {
            const bool reuse = (side == 0) == (round % 2 == 0);
            TurnStats s = run_conversations(model, c, reuse, slots, conversations, turns,
                                            system_len, user_len, reply_len, 7 + round);
            TurnStats& into = reuse ? on : off;
            into.ttft_ms.insert(into.ttft_ms.end(), s.ttft_ms.begin(), s.ttft_ms.end());
            into.queue_ms.insert(into.queue_ms.end(), s.queue_ms.begin(), s.queue_ms.end());
            into.prompt_tokens += s.prompt_tokens;
            into.reused_tokens += s.reused_tokens;
            into.hits += s.hits;
            into.requests += s.requests;
        }
        std::fprintf(stderr, "round %d/%d done\n", round + 1, c.rounds);
    }
    const double ttft_on = median(on.ttft_ms), ttft_off = median(off.ttft_ms);
    const double queue_on = median(on.queue_ms), queue_off = median(off.queue_ms);
    const double token_hit = static_cast<double>(on.reused_tokens) / on.prompt_tokens;
    const double request_hit = static_cast<double>(on.hits) / on.requests;
    if (c.json) {
        nlohmann::json out = {{"ttft_ms_reuse", ttft_on},        {"ttft_ms_no_reuse", ttft_off},
                              {"queue_ms_reuse", queue_on},      {"queue_ms_no_reuse", queue_off},
                              {"speedup", ttft_off / ttft_on},   {"token_hit_ratio", token_hit},
                              {"request_hit_ratio", request_hit}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf(
        "%d conversations x %d turns on %d slots, %d-token system prompt, %d-token user "
        "turns, %d-token replies, %d threads, %d rounds\n",
        conversations, turns, slots, system_len, user_len, reply_len, c.threads, c.rounds);
    std::printf(
        "| prefix reuse | median TTFT ms | median queue wait ms | prompt tokens reused | "
        "requests with a hit |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    std::printf("| off | %.1f | %.1f | 0%% | 0%% |\n", ttft_off, queue_off);
    std::printf("| on | %.1f | %.1f | %.1f%% | %.1f%% |\n", ttft_on, queue_on, token_hit * 100,
                request_hit * 100);
    std::printf("speed-up of median TTFT: %.1fx\n", ttft_off / ttft_on);
    return 0;
}

// ---- overhead -------------------------------------------------------------------------------

double decode_rate(const Generation& g) {
    return (g.usage.completion_tokens - 1) * 1000.0 / (g.timings.total_ms - g.timings.ttft_ms);
}

int run_overhead(const Common& c, const Model& model, int npp, int ntg, int reps) {
    std::mt19937 rng(99);
    const int vocab = model.info().n_vocab;
    std::vector<double> single, engine_rates;
    ContextOptions co;
    co.n_ctx = 1024;
    co.n_threads = c.threads;
    co.flash_attn = c.fa();
    auto ctx = Context::create(model, co);
    if (!ctx) throw std::runtime_error(ctx.error().describe());
    Engine engine = make_engine(model, c, 1, 1024, false);
    for (int round = 0; round < c.rounds; ++round) {
        for (int side = 0; side < 2; ++side) {
            const bool use_engine = (side == 0) == (round % 2 == 0);
            for (int i = 0; i < reps + 1; ++i) {  // the first run of each batch warms up
                auto req = greedy_request(random_tokens(rng, npp, vocab), ntg);
                req.options.reuse_prefix = false;
                double rate = 0;
                if (use_engine) {
                    auto h = engine.submit(req);
                    if (!h) throw std::runtime_error(h.error().describe());
                    rate = decode_rate(h->wait().generation);
                } else {
                    auto g = ctx->generate(req.prompt, req.options);
                    if (!g) throw std::runtime_error(g.error().describe());
                    rate = decode_rate(*g);
                }
                if (i > 0) (use_engine ? engine_rates : single).push_back(rate);
            }
        }
        std::fprintf(stderr, "round %d/%d done\n", round + 1, c.rounds);
    }
    const double s = median(single), e = median(engine_rates);
    const double overhead_us = 1e6 / e - 1e6 / s;
    if (c.json) {
        nlohmann::json out = {{"single_stream_tokens_per_s", s},
                              {"engine_tokens_per_s", e},
                              {"ratio", e / s},
                              {"overhead_us_per_token", overhead_us}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("decode after a %d-token prompt, %d tokens, %d threads, %zu runs each\n", npp, ntg,
                c.threads, single.size());
    std::printf("| path | tokens/s | us/token |\n|------|---------:|---------:|\n");
    std::printf("| Context::generate | %8.1f | %8.1f |\n", s, 1e6 / s);
    std::printf("| Engine, one request | %8.1f | %8.1f |\n", e, 1e6 / e);
    std::printf("engine/single ratio %.3f, overhead %.1f us per token\n", e / s, overhead_us);
    return 0;
}

// ---- kv store -------------------------------------------------------------------------------

// One process's share of the restart scenario. `first`: empty the store, time the prompt cold,
// then on a new engine (so no live sequence serves it) from the store's RAM tier. `restart`: a
// new process times the same prompt from the disk tier. The script runs both, several rounds.
int run_kvstore(const Common& c, const Model& model, const std::string& dir,
                const std::string& phase, int prompt_tokens, int min_tokens, unsigned seed) {
    KvStoreOptions so;
    so.policy.min_tokens = min_tokens;
    so.policy.min_restore_tokens = std::min(so.policy.min_restore_tokens, min_tokens);
    so.directories.push_back({"disk", dir, 0});
    auto store = KvStore::open(so);
    if (!store) throw std::runtime_error(store.error().describe());
    std::mt19937 rng(seed);
    const auto prompt = random_tokens(rng, prompt_tokens, model.info().n_vocab);
    auto once = [&](const char* expect_tier) {
        EngineOptions o;
        o.context.flash_attn = c.fa();
        o.context.n_ctx = 4096;
        o.context.n_seq_max = 1;
        o.context.n_threads = c.threads;
        o.kv_store = *store;
        auto engine = Engine::create(model, o);
        if (!engine) throw std::runtime_error(engine.error().describe());
        auto h = engine->submit(greedy_request(prompt, 1));
        if (!h) throw std::runtime_error(h.error().describe());
        const Completion done = h->wait();
        engine->shutdown();
        if (done.cache.tier != expect_tier) {
            throw std::runtime_error(fmt::format("expected a {} hit, got source {} tier '{}'",
                                                 *expect_tier ? expect_tier : "cold",
                                                 to_string(done.cache.source), done.cache.tier));
        }
        return done.generation.timings.ttft_ms;
    };
    nlohmann::json out = {{"phase", phase}, {"prompt_tokens", prompt_tokens}};
    if (phase == "first") {
        (*store)->clear();
        out["cold_ms"] = once("");
        out["ram_ms"] = once("ram");
    } else {
        out["disk_ms"] = once("disk");
    }
    const auto stats = (*store)->stats();
    out["entries"] = stats.tiers.back().entries;
    out["bytes"] = stats.tiers.back().bytes;
    std::printf("%s\n", out.dump().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"llamapp-engine-bench: the engine next to llama.cpp's tools"};
    Common c;
    app.add_option("-m,--model", c.model_path, "GGUF model")->required();
    app.add_option("-t,--threads", c.threads)->capture_default_str();
    app.add_option("--rounds", c.rounds, "alternating rounds")->capture_default_str();
    app.add_option("--flash-attn", c.flash_attn)
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    app.add_option("--draft-tokens", c.draft_tokens,
                   "the engine's prompt-lookup drafting (0 = off, as llama.cpp's tools run)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--json", c.json, "print the result as JSON");
    app.require_subcommand(1);

    auto* tp = app.add_subcommand("throughput", "aggregate S_TG vs llama-batched-bench");
    std::string exe = "llama-batched-bench", npl = "1,2,4,8,16";
    int npp = 128, ntg = 64, n_ctx = 4096;
    bool split = false;
    tp->add_option("--batched-bench", exe, "llama-batched-bench from the same tree");
    tp->add_option("--npl", npl, "widths")->capture_default_str();
    tp->add_option("--npp", npp)->capture_default_str();
    tp->add_option("--ntg", ntg)->capture_default_str();
    tp->add_option("-c,--ctx-size", n_ctx)->capture_default_str();
    tp->add_flag("--split-kv", split,
                 "a KV stream per slot on both sides (llama-batched-bench's default) instead of "
                 "one unified cache (-kvu, the engine's default)");

    auto* mt = app.add_subcommand("multiturn", "TTFT with prefix reuse on and off");
    int slots = 4, conversations = 8, turns = 4, system_len = 1000, user_len = 32, reply_len = 32;
    mt->add_option("--slots", slots)->capture_default_str();
    mt->add_option("--conversations", conversations)->capture_default_str();
    mt->add_option("--turns", turns)->capture_default_str();
    mt->add_option("--system", system_len, "system prompt tokens")->capture_default_str();
    mt->add_option("--user", user_len, "tokens per user turn")->capture_default_str();
    mt->add_option("--reply", reply_len, "tokens per reply")->capture_default_str();

    auto* oh = app.add_subcommand("overhead", "engine vs single-stream generate, per token");
    int o_npp = 128, o_ntg = 128, reps = 5;
    oh->add_option("--npp", o_npp)->capture_default_str();
    oh->add_option("--ntg", o_ntg)->capture_default_str();
    oh->add_option("-r,--repetitions", reps)->capture_default_str();

    auto* kv =
        app.add_subcommand("kvstore", "one phase of the restart scenario (see run-kvstore.sh)");
    std::string kv_dir, phase = "first";
    int kv_tokens = 2000;
    unsigned kv_seed = 1;
    kv->add_option("--cache-disk", kv_dir, "the disk tier's directory")->required();
    kv->add_option("--phase", phase)->check(CLI::IsMember({"first", "restart"}));
    kv->add_option("--prompt-tokens", kv_tokens)->capture_default_str();
    int kv_min_tokens = SavePolicy{}.min_tokens;
    kv->add_option("--min-tokens", kv_min_tokens, "SavePolicy::min_tokens")->capture_default_str();
    kv->add_option("--seed", kv_seed)->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    set_log_level(LogLevel::error);
    auto model = Model::load(c.model_path);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    try {
        if (*kv) return run_kvstore(c, *model, kv_dir, phase, kv_tokens, kv_min_tokens, kv_seed);
        if (*tp) return run_throughput(c, *model, exe, npl, npp, ntg, n_ctx, !split);
        if (*mt)
            return run_multiturn(c, *model, slots, conversations, turns, system_len, user_len,
                                 reply_len);
        return run_overhead(c, *model, o_npp, o_ntg, reps);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
