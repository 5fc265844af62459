// Internal: the two text operations header values need, shared by the connection loop (which
// reads a head before httplib parses it) and the access policy.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace llamapp::detail {

// A header value without the blanks (spaces, tabs) around it.
inline std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// ASCII lower case: header names, schemes and host names compare without case.
inline std::string lower_case(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

}  // namespace llamapp::detail
