#include "llamapp/tokenizer.hpp"

#include <algorithm>

namespace llamapp {
namespace {

// Expected length of a UTF-8 sequence from its lead byte; 0 for a continuation or invalid byte.
std::size_t sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return lead >= 0xC2 ? 2 : 0;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return lead <= 0xF4 ? 4 : 0;
    return 0;
}

bool is_continuation(unsigned char b) {
    return (b & 0xC0) == 0x80;
}

}  // namespace

std::size_t utf8_complete_prefix(std::string_view bytes) {
    const std::size_t n = bytes.size();
    // Only the last three bytes can belong to an unfinished sequence.
    for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<unsigned char>(bytes[n - back]);
        if (is_continuation(b)) continue;
        const std::size_t need = sequence_length(b);
        if (need > back) {
            // Hold back only if everything after the lead byte is a valid continuation so far.
            for (std::size_t i = n - back + 1; i < n; ++i) {
                if (!is_continuation(static_cast<unsigned char>(bytes[i]))) return n;
            }
            return n - back;
        }
        return n;
    }
    return n;
}

std::string utf8_sanitize(std::string_view bytes) {
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    while (i < bytes.size()) {
        const auto lead = static_cast<unsigned char>(bytes[i]);
        const std::size_t need = sequence_length(lead);
        bool ok = need > 0 && i + need <= bytes.size();
        for (std::size_t k = 1; ok && k < need; ++k) {
            ok = is_continuation(static_cast<unsigned char>(bytes[i + k]));
        }
        if (ok && need >= 3) {
            // Reject overlong forms, surrogates and code points above U+10FFFF.
            const auto second = static_cast<unsigned char>(bytes[i + 1]);
            if (lead == 0xE0 && second < 0xA0) ok = false;
            if (lead == 0xED && second >= 0xA0) ok = false;
            if (lead == 0xF0 && second < 0x90) ok = false;
            if (lead == 0xF4 && second >= 0x90) ok = false;
        }
        if (ok) {
            out.append(bytes.substr(i, need));
            i += need;
        } else {
            out.append(replacement);
            ++i;
        }
    }
    return out;
}

Detokenizer::Detokenizer(Tokenizer tokenizer, bool render_special, std::vector<Token> shown)
    : tokenizer_(std::move(tokenizer)), render_special_(render_special), shown_(std::move(shown)) {
    std::sort(shown_.begin(), shown_.end());
}

Result<std::string> Detokenizer::push(Token token) {
    const bool render = render_special_ || std::binary_search(shown_.begin(), shown_.end(), token);
    auto piece = tokenizer_.piece(token, render);
    if (!piece) return std::unexpected(piece.error());
    pending_ += *piece;
    const std::size_t complete = utf8_complete_prefix(pending_);
    std::string out = utf8_sanitize(std::string_view(pending_).substr(0, complete));
    pending_.erase(0, complete);
    return out;
}

std::string Detokenizer::flush() {
    std::string out = utf8_sanitize(pending_);
    pending_.clear();
    return out;
}

}  // namespace llamapp
