// Internal: what a Model owns. Shared by Model, Tokenizer and Context handles.
#pragma once

#include <memory>

#include "core/rpc_internal.hpp"
#include "llama.h"
#include "llamapp/model.hpp"

namespace llamapp::detail {

struct LlamaModelDeleter {
    void operator()(llama_model* m) const { llama_model_free(m); }
};

struct ModelState {
    std::unique_ptr<llama_model, LlamaModelDeleter> model;
    const llama_vocab* vocab = nullptr;  // owned by model
    ModelInfo info;
    RpcWatch rpc;  // the RPC servers the layers are on: a lost one voids every decode after it
};

}  // namespace llamapp::detail
