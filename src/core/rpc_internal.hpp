// Internal: noticing that an RPC server a model is placed on went away.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llamapp::detail {

// The failed-connection counts of a model's RPC endpoints when it was loaded. ggml's RPC client
// (as patched by scripts/llama-patches) no longer aborts when a server dies: its messages complete
// unsent with zeroed outputs, so whatever was read back after the count moved is void.
class RpcWatch {
  public:
    RpcWatch() = default;
    explicit RpcWatch(std::vector<std::string> endpoints);

    // An endpoint whose connection failed since the watch began.
    std::optional<std::string> lost() const;
    bool empty() const { return endpoints_.empty(); }

  private:
    std::vector<std::string> endpoints_;
    std::vector<std::uint64_t> failures_;
};

}  // namespace llamapp::detail
