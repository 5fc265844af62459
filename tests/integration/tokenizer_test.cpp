#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "llamapp/llamapp.hpp"
#include "support/paths.hpp"

using namespace llamapp;
namespace fs = std::filesystem;

namespace {

struct VocabCase {
    std::string input;
    std::vector<Token> expected;
};

// llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n", one line
// of space-separated ids per input.
std::vector<VocabCase> read_cases(const fs::path& gguf) {
    std::ifstream inp(gguf.string() + ".inp", std::ios::binary), out(gguf.string() + ".out");
    std::string raw((std::istreambuf_iterator<char>(inp)), std::istreambuf_iterator<char>());
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (std::size_t pos = 0; pos < raw.size();) {
        const std::size_t next = raw.find(sep, pos);
        inputs.push_back(
            raw.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
        if (next == std::string::npos) break;
        pos = next + sep.size();
    }
    std::vector<VocabCase> cases;
    std::string line;
    for (std::size_t i = 0; i < inputs.size() && std::getline(out, line); ++i) {
        VocabCase c{inputs[i], {}};
        std::istringstream ids(line);
        for (Token t; ids >> t;) c.expected.push_back(t);
        cases.push_back(std::move(c));
    }
    return cases;
}

std::vector<fs::path> vocab_files() {
    std::vector<fs::path> files;
    for (const fs::path& dir :
         {test::shared_models_dir() / "vocab", test::llama_source("models")}) {
        if (!fs::exists(dir)) continue;
        for (const auto& e : fs::directory_iterator(dir)) {
            const auto p = e.path();
            if (p.extension() == ".gguf" && fs::exists(p.string() + ".out") &&
                fs::exists(p.string() + ".inp")) {
                files.push_back(p);
            }
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

Model load_vocab(const fs::path& p) {
    set_log_level(LogLevel::none);
    ModelOptions o;
    o.vocab_only = true;
    auto m = Model::load(p, o);
    EXPECT_TRUE(m) << p << ": " << (m ? "" : m.error().describe());
    return std::move(*m);
}

}  // namespace

class VocabFixture : public ::testing::TestWithParam<fs::path> {};

TEST_P(VocabFixture, ReproducesLlamaCppExpectedIds) {
    const fs::path p = GetParam();
    Model model = load_vocab(p);
    const Tokenizer tok = model.tokenizer();
    const auto cases = read_cases(p);
    ASSERT_GE(cases.size(), 30u) << p;
    for (const auto& c : cases) {
        auto ids = tok.encode(c.input, {.add_special = false, .parse_special = false});
        ASSERT_TRUE(ids);
        EXPECT_EQ(*ids, c.expected) << p.filename() << " input: '" << c.input << "'";
    }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabFixture, ::testing::ValuesIn(vocab_files()),
                         [](const auto& param_info) {
                             std::string n = param_info.param.stem().string();
                             std::replace_if(
                                 n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); },
                                 '_');
                             return n + "_" + std::to_string(param_info.index);
                         });

// Found by tests/fuzz/fuzz_tokenizer: bytes that are not UTF-8 made a pre-tokenizer throw through
// llama_tokenize. Every vocabulary answers with tokens or a typed error.
TEST_P(VocabFixture, BytesThatAreNotUtf8AreTokensOrATypedError) {
    Model model = load_vocab(GetParam());
    const Tokenizer tok = model.tokenizer();
    const std::string bytes =
        "\xa9\xa9\xa9\xa9\xa9\xe9-\xa9\xa9[/IN" + std::string(3, '\0') + "t\xf6\xa9\xa9\xa9m";
    for (const bool special : {false, true}) {
        auto ids = tok.encode(bytes, {.add_special = special, .parse_special = special});
        if (!ids) {
            EXPECT_EQ(ids.error().code, ErrorCode::invalid_argument) << ids.error().describe();
        }
    }
}

TEST(VocabFixtures, SharedVocabsAreAllFound) {
    int shared = 0;
    for (const auto& p : vocab_files()) shared += p.parent_path() == test::shared_model("vocab");
    EXPECT_EQ(shared, 4);
}

TEST(Tokenizer, SpecialTextIsPlainTextUnlessAsked) {
    Model m = load_vocab(test::shared_model("vocab/ggml-vocab-phi-3.gguf"));
    const Tokenizer tok = m.tokenizer();
    const std::string text = "<|end|>";
    auto plain = tok.encode(text, {.add_special = false});
    auto special = tok.encode(text, {.add_special = false, .parse_special = true});
    ASSERT_TRUE(plain && special);
    ASSERT_EQ(special->size(), 1u);
    EXPECT_TRUE(tok.is_control(special->front()) || tok.is_end_of_generation(special->front()));
    EXPECT_GT(plain->size(), 1u);
    for (Token t : *plain) EXPECT_FALSE(tok.is_control(t));
}

TEST(Tokenizer, AddSpecialAddsBos) {
    Model m = load_vocab(test::shared_model("vocab/ggml-vocab-llama-spm.gguf"));
    auto with = m.tokenizer().encode("hi", {.add_special = true});
    auto without = m.tokenizer().encode("hi", {.add_special = false});
    ASSERT_TRUE(with && without);
    EXPECT_EQ(with->size(), without->size() + 1);
    EXPECT_EQ(with->front(), m.info().special.bos);
}

TEST(Tokenizer, DecodeRoundTripsAndRejectsBadIds) {
    Model m = load_vocab(test::shared_model("vocab/ggml-vocab-gpt-2.gguf"));
    const Tokenizer tok = m.tokenizer();
    const std::string text = "Hello world! \xF0\x9F\xA6\x99 caf\xC3\xA9";
    auto ids = tok.encode(text, {.add_special = false});
    ASSERT_TRUE(ids);
    EXPECT_EQ(tok.decode(*ids).value_or(""), text);
    const std::vector<Token> bad = {1, -4};
    auto r = tok.decode(bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_FALSE(tok.piece(tok.vocab_size()));
}

TEST(Detokenizer, StreamsMultiByteCharactersWhole) {
    Model m = load_vocab(test::shared_model("vocab/ggml-vocab-gpt-2.gguf"));
    const Tokenizer tok = m.tokenizer();
    // Byte-level BPE splits these characters into several single-byte tokens.
    const std::string text = "\xF0\x9F\xA6\x99\xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC";
    auto ids = tok.encode(text, {.add_special = false});
    ASSERT_TRUE(ids);
    Detokenizer d(tok);
    std::string out;
    int partial_tokens = 0;
    for (Token t : *ids) {
        auto piece = d.push(t);
        ASSERT_TRUE(piece);
        partial_tokens += piece->empty();
        EXPECT_EQ(utf8_sanitize(*piece), *piece) << "broken UTF-8 emitted";
        out += *piece;
    }
    out += d.flush();
    EXPECT_EQ(out, text);
    EXPECT_GT(partial_tokens, 0) << "the fixture should split a character across tokens";
}

// A reranker without a rerank template gets llama-server's layout, as the vocabulary's flags
// say: the llama SPM vocabulary adds BOS and neither EOS nor SEP.
TEST(Tokenizer, ARerankPairWithoutATemplateIsLaidOutByTheVocabulary) {
    Model m = load_vocab(test::shared_model("vocab/ggml-vocab-llama-spm.gguf"));
    const Tokenizer tok = m.tokenizer();
    const SpecialTokens& s = m.info().special;
    ASSERT_TRUE(s.add_bos && !s.add_eos && !s.add_sep);
    auto q = tok.encode("what is a cat", {.add_special = false});
    auto d = tok.encode("a small animal", {.add_special = false});
    auto pair = tok.rerank_prompt("what is a cat", "a small animal");
    ASSERT_TRUE(q && d && pair);
    std::vector<Token> expected = {s.bos};
    expected.insert(expected.end(), q->begin(), q->end());
    expected.insert(expected.end(), d->begin(), d->end());
    EXPECT_EQ(*pair, expected);
}
