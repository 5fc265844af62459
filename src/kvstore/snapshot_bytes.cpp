#include "kvstore/snapshot_bytes.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace llamapp::detail {

namespace {

// Whole 2 MiB blocks, the last one also where the buffer fills at least 7/8 of it; the rest in
// pages of the system's size.
std::size_t huge_part(std::size_t bytes) {
    const std::size_t whole = bytes / huge_page_bytes * huge_page_bytes;
    const std::size_t rounded = whole + huge_page_bytes;
    return bytes > whole && rounded - bytes <= bytes / 8 ? rounded : whole;
}

std::size_t mapped_bytes(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return std::max(huge_part(bytes), (bytes + page - 1) / page * page);
}

}  // namespace

void* map_snapshot_buffer(std::size_t bytes) {
    // One block more than needed, so that an aligned start lies within; the rest is given back.
    const std::size_t length = mapped_bytes(bytes) + huge_page_bytes;
    void* mapped =
        mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    auto* raw = static_cast<std::uint8_t*>(mapped);
    const auto address = reinterpret_cast<std::uintptr_t>(raw);
    auto* start = raw + ((huge_page_bytes - address % huge_page_bytes) % huge_page_bytes);
    auto* end = start + mapped_bytes(bytes);
    if (start > raw) munmap(raw, static_cast<std::size_t>(start - raw));
    if (raw + length > end) munmap(end, static_cast<std::size_t>(raw + length - end));
#ifdef MADV_HUGEPAGE
    // Where the kernel has no transparent huge pages this fails and changes nothing.
    if (const std::size_t huge = huge_part(bytes); huge > 0) madvise(start, huge, MADV_HUGEPAGE);
#endif
    return start;
}

void unmap_snapshot_buffer(void* p, std::size_t bytes) noexcept {
    munmap(p, mapped_bytes(bytes));
}

}  // namespace llamapp::detail
