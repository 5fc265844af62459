#include "llamapp/backend.hpp"

#include <mutex>

#include "build-info.h"
#include "core/log_internal.hpp"
#include "ggml-backend.h"
#include "llama.h"

namespace llamapp {

void ensure_backend() {
    static std::once_flag once;
    std::call_once(once, [] {
        detail::install_llama_log_bridge();
        llama_backend_init();
        // Deliberately never freed: models and contexts may be destroyed during static
        // destruction, after which a backend teardown would pull the ground from under them.
    });
}

std::string llama_build_info() {
    ensure_backend();
    return std::string("llama.cpp ") + llama_version() + " (commit " + llama_commit() + ")";
}

std::string llama_build_tag() {
    return ::llama_build_info();
}

}  // namespace llamapp
