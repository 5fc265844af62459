#include "core/stop_strings.hpp"

#include <algorithm>

namespace llamapp::detail {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Step StopMatcher::feed(std::string_view text) {
    Step step;
    held_.append(text);
    if (stops_.empty()) {
        step.emit.swap(held_);
        return step;
    }
    // The earliest full match wins; text before it is emitted, the rest discarded.
    std::size_t best = std::string::npos;
    for (const auto& s : stops_) {
        const std::size_t at = held_.find(s);
        if (at != std::string::npos && at < best) {
            best = at;
            step.stop = s;
        }
    }
    if (best != std::string::npos) {
        step.matched = true;
        step.emit = held_.substr(0, best);
        held_.clear();
        return step;
    }
    // Keep the longest suffix that is a proper prefix of some stop string.
    std::size_t keep = 0;
    for (const auto& s : stops_) {
        const std::size_t max_len = std::min(s.size() - 1, held_.size());
        for (std::size_t len = max_len; len > keep; --len) {
            if (std::string_view(held_).substr(held_.size() - len) ==
                std::string_view(s).substr(0, len)) {
                keep = len;
                break;
            }
        }
    }
    step.emit = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return step;
}

std::string StopMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace llamapp::detail
