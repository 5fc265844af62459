// Internal: options → llama.cpp parameters, shared by loading and by the memory estimate, so
// that an estimate describes exactly what a load would allocate.
#pragma once

#include <vector>

#include "llama.h"
#include "llamapp/context.hpp"
#include "llamapp/model.hpp"

namespace llamapp::detail {

[[nodiscard]] Result<void> validate_model_options(const ModelOptions& options);
// `split` holds tensor_split's storage for as long as the returned parameters are used.
llama_model_params model_params(const ModelOptions& options, std::vector<float>& split);

// `info` may be partial (only what the GGUF header says): checks that need more are skipped.
[[nodiscard]] Result<void> validate_context_options(const ModelInfo& info,
                                                    const ContextOptions& options);
llama_context_params context_params(const ModelInfo& info, const ContextOptions& options);

}  // namespace llamapp::detail
