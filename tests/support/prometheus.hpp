// Reads one series from Prometheus text exposition, for tests that check metric values.
#pragma once

#include <optional>
#include <string>

namespace llamapp::test {

// The value of `series` (name plus labels, exactly as exposed), or nothing when it is absent.
inline std::optional<double> prometheus_value(const std::string& text, const std::string& series) {
    const std::string line = series + " ";
    std::size_t at = 0;
    if (!text.starts_with(line)) {
        at = text.find("\n" + line);
        if (at == std::string::npos) return std::nullopt;
        ++at;  // past the newline
    }
    return std::stod(text.substr(at + line.size()));
}

}  // namespace llamapp::test
