// The KV store's entry-file parser over arbitrary file contents: every defect must be reported
// as one, never read past the buffer, never trusted. The file name is the id a good entry of
// these bytes would have, so the parser gets past the name check when the bytes allow.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "kvstore/entry_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace fs = std::filesystem;
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("llamapp-fuzz-kv-" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    const fs::path file = dir / (std::string(64, 'a') + llamapp::detail::entry_extension);
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    llamapp::Bytes payload;
    const auto whole = llamapp::detail::read_entry(file, payload);
    const auto head = llamapp::detail::read_header(file);
    // A header read alone and a whole read agree up to the payload.
    if (whole.defect == llamapp::detail::EntryDefect::none &&
        head.defect != llamapp::detail::EntryDefect::none)
        __builtin_trap();
    return 0;
}
