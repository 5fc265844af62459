// Internal: the buffers that hold KV snapshots. A save fills its buffer on the decode thread
// while every stream waits, and the first touch of each 4 KiB page of a new buffer is a page
// fault: a 2 MB snapshot (160 tokens of the 125M benchmark model) took 5 ms to copy into a
// fresh buffer on the Firecracker VM this project is measured on, the copy itself 0.2 ms
// (docs/performance.md). So a buffer of 1 MiB or more is mapped on its own, 2 MiB-aligned, and
// its 2 MiB blocks are offered to the kernel's transparent huge pages (madvise, Debian's default
// mode): one fault per block. The last, partial block is a huge page too where the buffer fills
// at least 7/8 of it; otherwise it stays in 4 KiB pages, so a buffer is never more than an
// eighth more resident than its size. Smaller buffers come from the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace llamapp {
namespace detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
inline constexpr std::size_t mapped_from = std::size_t{1} << 20;

// An aligned private mapping of `bytes` as described above; throws std::bad_alloc.
void* map_snapshot_buffer(std::size_t bytes);
void unmap_snapshot_buffer(void* p, std::size_t bytes) noexcept;

template <class T>
struct SnapshotAllocator {
    using value_type = T;
    SnapshotAllocator() = default;
    template <class U>
    SnapshotAllocator(const SnapshotAllocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        const std::size_t bytes = n * sizeof(T);
        if (bytes >= mapped_from) return static_cast<T*>(map_snapshot_buffer(bytes));
        return static_cast<T*>(::operator new(bytes));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        const std::size_t bytes = n * sizeof(T);
        if (bytes >= mapped_from)
            unmap_snapshot_buffer(p, bytes);
        else
            ::operator delete(p);
    }
    friend bool operator==(const SnapshotAllocator&, const SnapshotAllocator&) { return true; }
};

}  // namespace detail

using Bytes = std::vector<std::uint8_t, detail::SnapshotAllocator<std::uint8_t>>;

}  // namespace llamapp
