// Child of the KV store crash test: saves entries until it is killed, printing the index of
// each one after put() returned (published and synced).
#include <cstdio>
#include <cstdlib>

#include "support/crash_entries.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: kvstore_crash_child DIR ROUND\n");
        return 2;
    }
    llamapp::KvStoreOptions options;
    options.ram_bytes = 0;
    options.directories.push_back({"", argv[1], 0});
    auto store = llamapp::KvStore::open(options);
    if (!store) {
        std::fprintf(stderr, "%s\n", store.error().describe().c_str());
        return 1;
    }
    const int round = std::atoi(argv[2]);
    for (int i = 0; i < 100000; ++i) {
        auto ok = llamapp::detail::KvStoreClient(*store).put(
            llamapp::test::crash_namespace(), llamapp::test::crash_tokens(round, i),
            llamapp::test::crash_payload(round, i));
        if (!ok) {
            std::fprintf(stderr, "%s\n", ok.error().describe().c_str());
            return 1;
        }
        std::printf("%d\n", i);
        std::fflush(stdout);
    }
    return 0;
}
