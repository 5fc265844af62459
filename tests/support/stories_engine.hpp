// An engine on the trained stories model, as the engine tests use it.
#pragma once

#include <string>
#include <vector>

#include "support/engine_helpers.hpp"

namespace llamapp::test {

inline EngineOptions stories_engine_options(int slots, std::int64_t n_ctx = 1024) {
    EngineOptions o;
    o.context.n_ctx = n_ctx;
    o.context.n_seq_max = slots;
    o.context.n_threads = 1;  // a tiny model; one thread never waits at a barrier for a
                              // descheduled partner when ctest runs two tests on two cores
    o.min_adopt_tokens = 4;
    return o;
}

inline const std::vector<std::string>& story_prompts() {
    static const std::vector<std::string> prompts = {
        "Once upon a time",
        "The little dog",
        "Lily wanted to play with her friend Tom in the park",
        "One day, a big bird",
        "Tim had a red ball. He liked to",
        "There was a girl named Sue",
        "The sun was hot and the cat",
        "Mom said it was time for bed, but Ben",
    };
    return prompts;
}

// The short names the engine test files use.
namespace stories {
inline EngineOptions options(int slots, std::int64_t n_ctx = 1024) {
    return stories_engine_options(slots, n_ctx);
}
inline Engine engine(EngineOptions o) {
    return create_engine(stories_model(), std::move(o));
}
inline const std::vector<std::string>& kPrompts = story_prompts();
}  // namespace stories

}  // namespace llamapp::test
