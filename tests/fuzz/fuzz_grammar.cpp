// JSON schema to GBNF (llama.cpp's converter behind llamapp's checks), and GBNF validation, over
// arbitrary text. Errors must be typed results, never a crash or an abort. The first byte picks.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "llamapp/grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 0) {
        auto grammar = llamapp::json_schema_to_gbnf(text);
        // What the converter makes must itself be a grammar llama.cpp takes.
        if (grammar && !llamapp::validate_gbnf(*grammar)) __builtin_trap();
    } else {
        (void)llamapp::validate_gbnf(text);
    }
    return 0;
}
