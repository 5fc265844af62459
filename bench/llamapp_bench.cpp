// Single-stream prefill and decode speed of llamapp next to llama-bench, measured alternately in
// one run on the same model and threads; prints medians and ratios.
//
// llamapp is measured through its public API, so the figures include what a user pays on top of
// llama_decode: sampling, detokenization, stop-string handling and bookkeeping.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "bench_util.hpp"
#include "llamapp/llamapp.hpp"

using namespace llamapp;

namespace {

using bench::median;

struct Samples {
    std::vector<double> pp, tg;
};

// Runs llama-bench once (it repeats each test `reps` times) and collects its per-run tokens/s.
bool run_llama_bench(const std::string& exe, const std::string& model, int threads, int n_prompt,
                     int n_gen, int reps, const std::string& fa, Samples& out) {
    const std::string cmd = exe + " -m '" + model + "' -t " + std::to_string(threads) + " -p " +
                            std::to_string(n_prompt) + " -n " + std::to_string(n_gen) + " -r " +
                            std::to_string(reps) + " -fa " + fa + " -o json 2>/dev/null";
    auto text = bench::run_command(cmd);
    if (!text) return false;
    auto results = nlohmann::json::parse(*text, nullptr, false);
    if (!results.is_array()) return false;
    for (const auto& r : results) {
        auto& dest = r["n_gen"].get<int>() > 0 ? out.tg : out.pp;
        for (double ts : r["samples_ts"]) dest.push_back(ts);
    }
    return true;
}

bool run_llamapp(const Model& model, int threads, int n_prompt, int n_gen, int reps,
                 FlashAttention fa, Samples& out) {
    ContextOptions co;
    co.n_ctx = n_prompt + n_gen + 8;
    co.n_threads = threads;
    co.flash_attn = fa;
    auto ctx = Context::create(model, co);
    if (!ctx) {
        std::fprintf(stderr, "llamapp context: %s\n", ctx.error().describe().c_str());
        return false;
    }
    // Like llama-bench: random prompt tokens, and generation that never stops early.
    std::mt19937 rng(1234);
    std::uniform_int_distribution<Token> pick(0, model.info().n_vocab - 1);
    std::vector<Token> prompt(n_prompt);
    for (auto& t : prompt) t = pick(rng);
    const std::vector<Token> one = {model.info().special.bos >= 0 ? model.info().special.bos : 0};

    GenerateOptions pp;
    pp.sampling = SamplingParams::greedy();
    pp.max_tokens = 1;
    pp.reuse_prefix = false;
    GenerateOptions tg = pp;
    tg.max_tokens = n_gen;
    tg.ignore_eos = true;

    if (!ctx->generate(prompt, pp) || !ctx->generate(one, tg)) return false;  // warm-up
    for (int i = 0; i < reps; ++i) {
        auto r = ctx->generate(prompt, pp);
        if (!r) return false;
        out.pp.push_back(n_prompt * 1000.0 / r->timings.prefill_ms);
    }
    for (int i = 0; i < reps; ++i) {
        auto r = ctx->generate(one, tg);
        if (!r) return false;
        // Every generated token after the first costs one decode plus sampling and detokenizing;
        // count exactly those against the wall time they took.
        const double ms = r->timings.total_ms - r->timings.ttft_ms;
        out.tg.push_back((r->usage.completion_tokens - 1) * 1000.0 / ms);
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"llamapp-bench: llamapp vs llama-bench, single stream"};
    std::string model_path, llama_bench = "llama-bench", fa = "auto";
    int threads = 2, n_prompt = 128, n_gen = 64, reps = 5, rounds = 3;
    bool json = false;
    app.add_option("-m,--model", model_path, "GGUF model")->required();
    app.add_option("--llama-bench", llama_bench,
                   "path to llama-bench from the same llama.cpp tree");
    app.add_option("-t,--threads", threads)->capture_default_str();
    app.add_option("-p,--n-prompt", n_prompt)->capture_default_str();
    app.add_option("-n,--n-gen", n_gen)->capture_default_str();
    app.add_option("-r,--repetitions", reps, "runs per test per round")->capture_default_str();
    app.add_option("--rounds", rounds, "alternating rounds of llama-bench and llamapp")
        ->capture_default_str();
    app.add_option("--flash-attn", fa)->check(CLI::IsMember({"auto", "on", "off"}));
    app.add_flag("--json", json, "print the result as JSON");
    CLI11_PARSE(app, argc, argv);

    set_log_level(LogLevel::error);
    auto model = Model::load(model_path);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    const FlashAttention fa_mode = fa == "on"    ? FlashAttention::on
                                   : fa == "off" ? FlashAttention::off
                                                 : FlashAttention::automatic;
    Samples ref, ours;
    for (int round = 0; round < rounds; ++round) {
        // Alternate who goes first so drift in machine speed hits both sides alike.
        for (int side = 0; side < 2; ++side) {
            if ((side == 0) == (round % 2 == 0)) {
                if (!run_llama_bench(llama_bench, model_path, threads, n_prompt, n_gen, reps, fa,
                                     ref)) {
                    std::fprintf(stderr, "error: llama-bench failed (%s)\n", llama_bench.c_str());
                    return 1;
                }
            } else if (!run_llamapp(*model, threads, n_prompt, n_gen, reps, fa_mode, ours)) {
                std::fprintf(stderr, "error: llamapp run failed\n");
                return 1;
            }
        }
        std::fprintf(stderr, "round %d/%d done\n", round + 1, rounds);
    }
    const double ref_pp = median(ref.pp), ref_tg = median(ref.tg);
    const double our_pp = median(ours.pp), our_tg = median(ours.tg);
    if (json) {
        nlohmann::json out = {{"model", model_path},
                              {"threads", threads},
                              {"n_prompt", n_prompt},
                              {"n_gen", n_gen},
                              {"samples", ref.pp.size()},
                              {"llama_bench", {{"pp", ref_pp}, {"tg", ref_tg}}},
                              {"llamapp", {{"pp", our_pp}, {"tg", our_tg}}},
                              {"ratio", {{"pp", our_pp / ref_pp}, {"tg", our_tg / ref_tg}}}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("model %s, %d threads, %zu samples per cell (medians, tokens/s)\n",
                model_path.c_str(), threads, ref.pp.size());
    std::printf(
        "| test   | llama-bench | llamapp | ratio |\n|--------|------------:|--------:|------:|\n");
    std::printf("| pp%-4d | %11.1f | %7.1f | %5.3f |\n", n_prompt, ref_pp, our_pp, our_pp / ref_pp);
    std::printf("| tg%-4d | %11.1f | %7.1f | %5.3f |\n", n_gen, ref_tg, our_tg, our_tg / ref_tg);
    return 0;
}
