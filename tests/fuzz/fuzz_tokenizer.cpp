// Tokenizer encode and decode on each fixture vocabulary (../shared/models/vocab) over arbitrary
// bytes: invalid UTF-8, special-token text, anything. The first byte picks the vocabulary and
// whether special tokens are parsed; the rest is the text, and read as token ids for decode.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include "llamapp/log.hpp"
#include "llamapp/model.hpp"

namespace {

std::vector<llamapp::Model> load_vocabularies() {
    llamapp::set_log_level(llamapp::LogLevel::none);
    std::vector<llamapp::Model> out;
    for (const auto& e : std::filesystem::directory_iterator(LLAMAPP_SHARED_MODELS_DIR "/vocab")) {
        if (e.path().extension() != ".gguf") continue;
        llamapp::ModelOptions o;
        o.vocab_only = true;
        if (auto m = llamapp::Model::load(e.path(), o)) out.push_back(std::move(*m));
    }
    if (out.empty()) __builtin_trap();  // the fixtures are missing: nothing would be fuzzed
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<llamapp::Model> vocabularies = load_vocabularies();
    if (size == 0) return 0;
    const llamapp::Model& model = vocabularies[data[0] % vocabularies.size()];
    const bool special = data[0] & 0x80;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    const llamapp::Tokenizer tokenizer = model.tokenizer();
    llamapp::TokenizeOptions options;
    options.add_special = special;
    options.parse_special = special;
    if (auto tokens = tokenizer.encode(text, options)) (void)tokenizer.decode(*tokens, special);
    // The same bytes as token ids, in range or not.
    std::vector<llamapp::Token> ids((size - 1) / sizeof(llamapp::Token));
    if (!ids.empty()) std::memcpy(ids.data(), data + 1, ids.size() * sizeof(llamapp::Token));
    (void)tokenizer.decode(ids);
    return 0;
}
