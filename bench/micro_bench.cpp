// Google Benchmark micro-benchmarks of llamapp's per-token hot path: the work done between two
// llama_decode calls (stop-string matching, UTF-8 holding, detokenizing, tokenizing).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/stop_strings.hpp"
#include "llamapp/chat_stream.hpp"
#include "llamapp/llamapp.hpp"

using namespace llamapp;

namespace {

std::optional<Model> load_vocab(const char* path) {
    set_log_level(LogLevel::none);
    ModelOptions o;
    o.vocab_only = true;
    auto m = Model::load(path, o);
    return m ? std::optional<Model>(std::move(*m)) : std::nullopt;
}

const Model* vocab_model() {
    static std::optional<Model> model = load_vocab(LLAMAPP_BENCH_VOCAB);
    return model ? &*model : nullptr;
}

const Model* qwen_vocab_model() {
    static std::optional<Model> model = load_vocab(LLAMAPP_BENCH_QWEN_VOCAB);
    return model ? &*model : nullptr;
}

void BM_StopMatcherPerPiece(benchmark::State& state) {
    detail::StopMatcher m({"</s>", "\n\nUser:", "###"});
    for (auto _ : state) {
        auto step = m.feed(" word");
        benchmark::DoNotOptimize(step);
    }
}
BENCHMARK(BM_StopMatcherPerPiece);

void BM_Utf8CompletePrefix(benchmark::State& state) {
    const std::string text = "a piece of text \xE6\x97\xA5\xE6\x9C";
    for (auto _ : state) benchmark::DoNotOptimize(utf8_complete_prefix(text));
}
BENCHMARK(BM_Utf8CompletePrefix);

void BM_DetokenizePerToken(benchmark::State& state) {
    const Model* m = vocab_model();
    if (!m) return state.SkipWithError("vocab model missing");
    Detokenizer d(m->tokenizer());
    Token t = 1000;
    for (auto _ : state) {
        auto piece = d.push(t);
        benchmark::DoNotOptimize(piece);
        t = t == 20000 ? 1000 : t + 1;
    }
}
BENCHMARK(BM_DetokenizePerToken);

void BM_TokenizeParagraph(benchmark::State& state) {
    const Model* m = vocab_model();
    if (!m) return state.SkipWithError("vocab model missing");
    const std::string text =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. "
        "One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
    for (auto _ : state) benchmark::DoNotOptimize(m->tokenizer().encode(text));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_TokenizeParagraph);

// A whole streamed reply of `range(0)` pieces through the chat parser (Qwen3's template, which
// splits reasoning from the answer), parsing at most `range(1)` percent of the time (100: after
// every piece): the per-reply cost of streaming deltas on the HTTP thread.
void BM_ChatStreamReply(benchmark::State& state) {
    const Model* m = qwen_vocab_model();
    if (!m) return state.SkipWithError("qwen vocab model missing");
    std::ifstream file(LLAMAPP_BENCH_QWEN_TEMPLATE);
    std::stringstream source;
    source << file.rdbuf();
    auto tmpl = ChatTemplate::create(*m, source.str());
    if (!tmpl) return state.SkipWithError("template does not parse");
    auto prompt = tmpl->render({{.role = "user", .content = "Tell me a story."}});
    if (!prompt) return state.SkipWithError("template does not render");
    const auto pieces = state.range(0);
    for (auto _ : state) {
        ChatStreamParser parser(*prompt, static_cast<double>(state.range(1)) / 100.0);
        parser.push("<think>\nLet me think.\n</think>\n\n");
        for (std::int64_t i = 0; i < pieces; ++i) benchmark::DoNotOptimize(parser.push(" word"));
        benchmark::DoNotOptimize(parser.finish());
    }
    state.SetItemsProcessed(state.iterations() * pieces);
}
BENCHMARK(BM_ChatStreamReply)
    ->ArgsProduct({{256, 1024, 4096}, {100, 5}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
