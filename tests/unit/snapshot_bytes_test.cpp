// The KV snapshot buffers: large ones mapped on their own, aligned for huge pages.
#include "kvstore/snapshot_bytes.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace llamapp {
namespace {

std::uintptr_t address(const Bytes& b) {
    return reinterpret_cast<std::uintptr_t>(b.data());
}

TEST(SnapshotBytes, LargeBuffersStartOnAHugePageBoundaryAndHoldWhatIsWritten) {
    // Below one block, a block and a bit, several blocks: each a mapping of its own.
    for (std::size_t size : {std::size_t{1} << 20, std::size_t{2017512}, std::size_t{5} << 20}) {
        Bytes b(size);
        EXPECT_EQ(address(b) % detail::huge_page_bytes, 0u) << size;
        std::iota(b.begin(), b.end(), std::uint8_t{7});
        Bytes copy = b;
        EXPECT_EQ(address(copy) % detail::huge_page_bytes, 0u) << size;
        for (std::size_t i = 0; i < size; i += 4093) ASSERT_EQ(copy[i], b[i]) << i;
        EXPECT_EQ(copy.back(), static_cast<std::uint8_t>(7 + size - 1));
    }
}

TEST(SnapshotBytes, GrowingMovesFromTheHeapToAMapping) {
    Bytes b(100, 1);
    b.resize(3 << 20, 2);
    EXPECT_EQ(b[99], 1);
    EXPECT_EQ(b[100], 2);
    EXPECT_EQ(b.back(), 2);
    EXPECT_EQ(address(b) % detail::huge_page_bytes, 0u);
}

}  // namespace
}  // namespace llamapp
