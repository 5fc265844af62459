#include "core/reuse_rules.hpp"

#include <algorithm>

namespace llamapp::detail {

std::size_t common_prefix(std::span<const Token> a, std::span<const Token> b) {
    const auto mismatch =
        std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin());
    return static_cast<std::size_t>(mismatch.first - a.begin());
}

std::size_t reusable_prefix(std::span<const Token> cached, std::span<const Token> prompt,
                            bool trim_tail) {
    if (prompt.empty()) return 0;
    const std::size_t n = std::min(common_prefix(cached, prompt), prompt.size() - 1);
    return trim_tail || n == cached.size() ? n : 0;
}

bool window_intact(int pos_min, std::size_t reused, int window) {
    if (window <= 0 || reused == 0) return true;
    return pos_min >= 0 && pos_min <= std::max(0, static_cast<int>(reused) - window);
}

}  // namespace llamapp::detail
