// Internal: the state behind the public handles, for the layers above core. The public headers
// only name detail::Internals as a friend; what it hands out is defined here, outside include/.
#pragma once

#include "core/context_state.hpp"
#include "core/model_state.hpp"

namespace llamapp::detail {

struct Internals {
    // Shared with contexts, so that a model outlives every context made from it.
    static const std::shared_ptr<const ModelState>& shared_state(const Model& model) {
        return model.state_;
    }
    static ContextState& state(Context& context) { return *context.state_; }
};

inline const ModelState& model_state(const Model& model) {
    return *Internals::shared_state(model);
}

inline ContextState& context_state(Context& context) {
    return Internals::state(context);
}

}  // namespace llamapp::detail
