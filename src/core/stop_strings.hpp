// Internal: holds back generated text that might be the start of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llamapp::detail {

class StopMatcher {
  public:
    explicit StopMatcher(std::vector<std::string> stops);

    struct Step {
        std::string emit;      // text that is now safe to show
        bool matched = false;  // a stop string was found; nothing after it is emitted
        std::string stop;      // which one
    };

    Step feed(std::string_view text);
    std::string flush();  // what is held back, at the end of generation

  private:
    std::vector<std::string> stops_;
    std::string held_;
};

}  // namespace llamapp::detail
