// Internal logging entry points and llama.cpp log capture.
#pragma once

#include <fmt/core.h>

#include <string>
#include <string_view>

#include "llamapp/log.hpp"

namespace llamapp::detail {

void log_line(LogLevel level, std::string_view line);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (level < log_level()) return;
    log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

void capture_line(LogLevel level, std::string_view line);

// While alive on a thread, llama.cpp warning and error lines logged by that thread are also
// collected, so a failed llama.cpp call can be turned into a specific error message.
class LogCapture {
  public:
    LogCapture();
    ~LogCapture();
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    const std::string& errors() const { return errors_; }     // error and warning lines, joined
    std::string last_error() const;                           // the last error line, trimmed
    std::string first_error() const { return first_error_; }  // usually the most specific one

  private:
    friend void capture_line(LogLevel level, std::string_view line);
    std::string errors_;
    std::string last_error_;
    std::string first_error_;
    LogCapture* previous_;
};

// While alive on a thread, llama.cpp's warning lines from that thread are logged at debug: a
// probe load (the footprint estimate, the fit) repeats what the real load will say. Per thread,
// unlike swapping llama.cpp's process-wide log callback, so other models' lines are untouched.
class QuietLlamaWarnings {
  public:
    QuietLlamaWarnings();
    ~QuietLlamaWarnings();
    QuietLlamaWarnings(const QuietLlamaWarnings&) = delete;
    QuietLlamaWarnings& operator=(const QuietLlamaWarnings&) = delete;

  private:
    bool previous_;
};

// Installs llama.cpp's and ggml's log callbacks (called by ensure_backend()).
void install_llama_log_bridge();

}  // namespace llamapp::detail
