// Internal: the buffers that hold KV snapshots. Plain heap memory: with the RAM tier growing, a
// 2 MB buffer in new memory took 1.3-1.6 ms in 4 KiB pages on this project's VM against 3-5 ms
// as transparent huge pages, whose 2 MiB blocks came from memory the host had not yet backed
// (docs/performance.md). Heap memory an earlier snapshot freed is reused without faults.
#pragma once

#include <cstdint>
#include <vector>

namespace llamapp {

using Bytes = std::vector<std::uint8_t>;

}  // namespace llamapp
