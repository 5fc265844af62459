// Model manager benchmarks (bench/run-models.sh):
//   footprint   the no-allocation estimate of one model against the RSS its load really adds
//   cycles      RSS and open file descriptors over N load/unload cycles
//   ondemand    time to first token of a request that loads its model, against the load alone
//   interleave  two models serving at once: each one's greedy text against its solo run, and
//               each one's tokens/s beside the other against alone
#include <dirent.h>
#include <fmt/core.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "bench_util.hpp"
#include "llamapp/llamapp.hpp"

using namespace llamapp;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

struct Common {
    int threads = 2;
    int n_ctx = 2048;
    int slots = 2;
};

std::uint64_t rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
}

// Bytes the process has taken from malloc (arenas and mmap'd chunks), touched or not.
std::uint64_t heap_bytes() {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

int open_fds() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d)) ++n;
        closedir(d);
    }
    return n - 2;  // . and ..
}

double mib(double bytes) {
    return bytes / (1 << 20);
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

ModelSpec spec(const std::string& id, const std::string& path, const Common& c) {
    ModelSpec s;
    s.id = id;
    s.path = path;
    s.engine.context.n_ctx = c.n_ctx;
    s.engine.context.n_seq_max = c.slots;
    s.engine.context.n_threads = c.threads;
    s.engine.speculative.n_max = 0;
    return s;
}

std::unique_ptr<ModelManager> manager() {
    auto m = ModelManager::create();
    if (!m) throw std::runtime_error(m.error().describe());
    return std::move(*m);
}

EngineRequest greedy(int tokens) {
    EngineRequest r;
    r.options.sampling = SamplingParams::greedy();
    r.options.max_tokens = tokens;
    r.options.ignore_eos = true;
    return r;
}

// Text, and seconds to the first token and to the end.
struct Run {
    std::string text;
    double first = 0, total = 0;
    int tokens = 0;
};

Run generate(const ModelLease& lease, const std::string& prompt, int tokens,
             Clock::time_point from = Clock::now()) {
    auto h = lease.engine().submit(prompt, greedy(tokens));
    if (!h) throw std::runtime_error(h.error().describe());
    Run r;
    EngineEvent e;
    while (h->next(e)) {
        if (e.final()) continue;
        if (r.tokens++ == 0) r.first = seconds_since(from);
        r.text += e.piece.text;
    }
    r.total = seconds_since(from);
    return r;
}

ModelLease acquire(ModelManager& m, const std::string& id) {
    auto l = m.acquire(id);
    if (!l) throw std::runtime_error(l.error().describe());
    return std::move(*l);
}

// Estimate (engine context only: embeddings off) against the RSS a warm load adds.
int footprint(const std::string& path, const Common& c) {
    auto m = manager();
    ModelSpec s = spec("m", path, c);
    s.embed = false;
    if (auto ok = m->add(s); !ok) throw std::runtime_error(ok.error().describe());
    const std::uint64_t before = rss_bytes(), heap_before = heap_bytes();
    std::uint64_t heap_loaded = 0;
    {
        ModelLease lease = acquire(*m, "m");
        // Every weight page and the compute buffers are touched by full prompt batches.
        std::string prompt;
        for (int i = 0; prompt.size() < 3000; ++i) prompt += fmt::format("word{} ", i);
        generate(lease, prompt, 4);
        heap_loaded = heap_bytes();
    }
    const std::uint64_t after = rss_bytes();
    const auto listed = m->find("m");
    const DeviceFootprint& host = listed->footprint->devices.back();
    const double estimate = static_cast<double>(host.total());
    const double measured = static_cast<double>(after - before);
    // Mapped weights are file pages, not heap: allocated = the file's tensors + heap taken.
    const double allocated = static_cast<double>(listed->footprint->devices.back().weights) +
                             static_cast<double>(heap_loaded - heap_before);
    fmt::print(
        "| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:+.1f}% | {:.1f} | {:+.1f}% |\n",
        listed->architecture, mib(host.weights), mib(host.context), mib(host.compute),
        mib(estimate), mib(measured), 100.0 * (estimate - measured) / measured, mib(allocated),
        100.0 * (estimate - allocated) / allocated);
    return 0;
}

int cycles(const std::string& path, const Common& c, int n) {
    auto m = manager();
    if (auto ok = m->add(spec("m", path, c)); !ok) throw std::runtime_error(ok.error().describe());
    auto cycle = [&] {
        {
            ModelLease lease = acquire(*m, "m");
            generate(lease, "Once upon a time", 8);
        }
        if (auto ok = m->unload("m"); !ok) throw std::runtime_error(ok.error().describe());
    };
    cycle();  // the allocator's and the backend's one-time state
    const std::uint64_t base_rss = rss_bytes();
    const int base_fds = open_fds();
    std::uint64_t peak = base_rss;
    std::vector<double> load_s;
    for (int i = 0; i < n; ++i) {
        const auto t = Clock::now();
        cycle();
        load_s.push_back(seconds_since(t));
        peak = std::max(peak, rss_bytes());
    }
    fmt::print(
        "{} cycles of {}: RSS {:.1f} MiB before, {:.1f} MiB after ({:+.1f} MiB), {:.1f} "
        "MiB the highest after an unload; fds {} before, {} after; a cycle {:.0f} ms "
        "(median)\n",
        n, std::filesystem::path(path).filename().string(), mib(base_rss), mib(rss_bytes()),
        mib(static_cast<double>(rss_bytes()) - base_rss), mib(peak), base_fds, open_fds(),
        1000 * median(load_s));
    return 0;
}

int ondemand(const std::string& path, const Common& c, int rounds) {
    auto m = manager();
    if (auto ok = m->add(spec("m", path, c)); !ok) throw std::runtime_error(ok.error().describe());
    std::vector<double> load, ttft, warm;
    for (int i = 0; i < rounds; ++i) {
        auto t = Clock::now();
        { ModelLease lease = acquire(*m, "m"); }  // the load alone
        load.push_back(seconds_since(t));
        {
            ModelLease lease = acquire(*m, "m");
            warm.push_back(generate(lease, "Once upon a time", 1).first);
        }
        (void)m->unload("m");
        t = Clock::now();
        {
            ModelLease lease = acquire(*m, "m");  // the request's own load
            ttft.push_back(generate(lease, "Once upon a time", 1, t).first);
        }
        (void)m->unload("m");
    }
    fmt::print(
        "{}: load {:.0f} ms, TTFT with the load {:.0f} ms, TTFT when loaded {:.1f} ms "
        "(medians of {}); the request adds {:.0f} ms to the load\n",
        std::filesystem::path(path).filename().string(), 1000 * median(load), 1000 * median(ttft),
        1000 * median(warm), rounds, 1000 * (median(ttft) - median(load)));
    return 0;
}

int interleave(const std::string& a, const std::string& b, const Common& c, int requests,
               int tokens) {
    auto m = manager();
    for (const auto& [id, p] : {std::pair{"a", a}, std::pair{"b", b}})
        if (auto ok = m->add(spec(id, p, c)); !ok) throw std::runtime_error(ok.error().describe());
    ModelLease la = acquire(*m, "a"), lb = acquire(*m, "b");
    auto prompt = [](int i) { return fmt::format("Request {} says once upon a time", i); };
    auto serial = [&](const ModelLease& l, std::vector<std::string>& texts) {
        const auto t = Clock::now();
        int produced = 0;
        for (int i = 0; i < requests; ++i) {
            Run r = generate(l, prompt(i), tokens);
            texts.push_back(r.text);
            produced += r.tokens;
        }
        return produced / seconds_since(t);
    };
    std::vector<std::string> solo_a, solo_b, both_a, both_b;
    const double alone_a = serial(la, solo_a), alone_b = serial(lb, solo_b);
    auto fa = std::async(std::launch::async, [&] { return serial(la, both_a); });
    auto fb = std::async(std::launch::async, [&] { return serial(lb, both_b); });
    const double with_a = fa.get(), with_b = fb.get();
    fmt::print(
        "interleaved: {} of {} greedy replies of A and {} of {} of B equal their solo runs; "
        "A {:.1f} tok/s alone, {:.1f} beside B ({:.2f}); B {:.1f} alone, {:.1f} beside A "
        "({:.2f}); together {:.1f} tok/s\n",
        std::count_if(both_a.begin(), both_a.end(),
                      [&, i = 0](const std::string& t) mutable { return t == solo_a[i++]; }),
        requests,
        std::count_if(both_b.begin(), both_b.end(),
                      [&, i = 0](const std::string& t) mutable { return t == solo_b[i++]; }),
        requests, alone_a, with_a, with_a / alone_a, alone_b, with_b, with_b / alone_b,
        with_a + with_b);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"llamapp-models-bench: the model manager's costs"};
    Common c;
    app.add_option("-t,--threads", c.threads)->capture_default_str();
    app.add_option("-c,--ctx-size", c.n_ctx)->capture_default_str();
    app.add_option("--slots", c.slots)->capture_default_str();
    app.require_subcommand(1);
    std::string path, other;
    int n = 50, rounds = 5, requests = 8, tokens = 32;
    auto* fp = app.add_subcommand("footprint", "estimate against measured RSS");
    fp->add_option("-m,--model", path)->required();
    auto* cy = app.add_subcommand("cycles", "RSS and fds over load/unload cycles");
    cy->add_option("-m,--model", path)->required();
    cy->add_option("-n", n)->capture_default_str();
    auto* od = app.add_subcommand("ondemand", "TTFT of a request that loads its model");
    od->add_option("-m,--model", path)->required();
    od->add_option("--rounds", rounds)->capture_default_str();
    auto* il = app.add_subcommand("interleave", "two models at once");
    il->add_option("-a", path)->required();
    il->add_option("-b", other)->required();
    il->add_option("--requests", requests)->capture_default_str();
    il->add_option("--tokens", tokens)->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    set_log_level(LogLevel::none);
    try {
        if (*fp) return footprint(path, c);
        if (*cy) return cycles(path, c, n);
        if (*od) return ondemand(path, c, rounds);
        return interleave(path, other, c, requests, tokens);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
