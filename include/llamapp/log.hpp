// Logging: llamapp's own messages and llama.cpp/ggml's log lines go through one sink.
#pragma once

#include <functional>
#include <string_view>

namespace llamapp {

enum class LogLevel { debug, info, warning, error, none };

// Lines below this level are dropped. Default: warning. Thread-safe.
void set_log_level(LogLevel level);
LogLevel log_level();

// Replaces the default sink (stderr). The sink may be called from any thread, including
// llama.cpp's worker threads; it must be thread-safe. Pass an empty function to restore stderr.
using LogSink = std::function<void(LogLevel, std::string_view line)>;
void set_log_sink(LogSink sink);

// Parses "debug", "info", "warning", "error", "none".
bool parse_log_level(std::string_view name, LogLevel& out);

}  // namespace llamapp
