// Internal: builds the engine's view of the KV store (namespace, lookup rules, save policy).
#pragma once

#include "engine/engine_core.hpp"

namespace llamapp::detail {

// The model's fingerprint is computed here (once per file, then cached).
Result<Persistence> make_persistence(const Model& model, const EngineOptions& options,
                                     const ReuseModes& modes, int n_ctx_seq);

}  // namespace llamapp::detail
