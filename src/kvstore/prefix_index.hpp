// Internal: a radix tree over the token sequences of stored entries, for longest-common-prefix
// lookups. Not thread-safe; the store guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "llamapp/tokenizer.hpp"

namespace llamapp::detail {

class PrefixIndex {
  public:
    using EntryHandle = std::uint64_t;
    // Return true to stop the walk.
    using Visit = std::function<bool(EntryHandle entry, std::size_t common_prefix)>;

    PrefixIndex();
    ~PrefixIndex();
    PrefixIndex(PrefixIndex&&) noexcept;
    PrefixIndex& operator=(PrefixIndex&&) noexcept;

    void insert(std::span<const Token> tokens, EntryHandle entry);
    void erase(std::span<const Token> tokens, EntryHandle entry);
    bool empty() const;

    // Every entry sharing a prefix with `prompt`, longest common prefix first.
    void by_common_prefix(std::span<const Token> prompt, const Visit& visit) const;
    // Entries whose whole token sequence is a prefix of `prompt`, longest first.
    void by_boundary(std::span<const Token> prompt, const Visit& visit) const;
    // Longest common prefix of `tokens` with any entry.
    std::size_t deepest_match(std::span<const Token> tokens) const;

  private:
    struct Node;
    struct Walk;
    Walk walk(std::span<const Token> prompt) const;
    std::unique_ptr<Node> root_;
};

}  // namespace llamapp::detail
