#include "llamapp/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>

#include "core/log_internal.hpp"
#include "ggml.h"
#include "llama.h"
#include "log.h"  // llama.cpp common's logger

namespace llamapp {
namespace {

std::atomic<LogLevel> g_level{LogLevel::warning};
std::mutex g_sink_mutex;
LogSink g_sink;  // guarded by g_sink_mutex; empty = spdlog to stderr

spdlog::logger& stderr_logger() {
    static auto logger = [] {
        auto l = spdlog::stderr_color_mt("llamapp");
        l->set_pattern("%^[%H:%M:%S.%e %L]%$ %v");
        l->set_level(spdlog::level::trace);
        return l;
    }();
    return *logger;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
    switch (level) {
        case LogLevel::debug:
            return spdlog::level::debug;
        case LogLevel::info:
            return spdlog::level::info;
        case LogLevel::warning:
            return spdlog::level::warn;
        case LogLevel::error:
            return spdlog::level::err;
        case LogLevel::none:
            return spdlog::level::off;
    }
    return spdlog::level::info;
}

thread_local detail::LogCapture* t_capture = nullptr;
// llama.cpp emits a line in fragments (GGML_LOG_LEVEL_CONT); assemble per thread.
thread_local std::string t_partial;
thread_local LogLevel t_partial_level = LogLevel::info;
thread_local bool t_quiet_warnings = false;

void llama_log_callback(ggml_log_level level, const char* text, void*) {
    LogLevel ours = t_partial_level;
    switch (level) {
        case GGML_LOG_LEVEL_DEBUG:
            ours = LogLevel::debug;
            break;
        case GGML_LOG_LEVEL_INFO:
            // Model metadata, buffer sizes and the like: some 160 lines per load, which would
            // bury a server's own info lines. Visible at debug.
            ours = LogLevel::debug;
            break;
        case GGML_LOG_LEVEL_WARN:
            ours = t_quiet_warnings ? LogLevel::debug : LogLevel::warning;
            break;
        case GGML_LOG_LEVEL_ERROR:
            ours = LogLevel::error;
            break;
        case GGML_LOG_LEVEL_NONE:
        case GGML_LOG_LEVEL_CONT:
            break;
    }
    t_partial_level = ours;
    t_partial += text ? text : "";
    std::size_t newline;
    while ((newline = t_partial.find('\n')) != std::string::npos) {
        std::string line = t_partial.substr(0, newline);
        t_partial.erase(0, newline + 1);
        if (line.empty()) continue;
        LogLevel shown = ours;
        // Return code 2 (and ggml's status 1, GGML_STATUS_ABORTED, on the lines before it) is
        // an abort: llamapp's own abort callback stopped the computation for a cancelled
        // request or a deadline, which the request's own outcome reports. Not an error of
        // llama.cpp's.
        if (line.ends_with("failed to decode, ret = 2") ||
            line.ends_with("failed to encode, ret = 2")) {
            shown = LogLevel::debug;
            line = line.substr(0, line.find(':')) + ": stopped for a cancellation or deadline";
        } else if (line.ends_with("graph_compute_async failed with error 1") ||
                   line.ends_with("failed to compute graph, compute status: 1")) {
            shown = LogLevel::debug;
        }
        detail::capture_line(shown, line);
        if (shown >= g_level.load(std::memory_order_relaxed)) detail::log_line(shown, line);
    }
}

// llama.cpp common (its fit, its n-gram drafters) prints through a logger of its own, to the
// terminal, with no callback to bridge. Its threshold follows llamapp's level, its info lines
// shown only at debug like llama.cpp's own (a server's stdout is not theirs).
void follow_in_common_log(LogLevel level) {
    switch (level) {
        case LogLevel::debug:
            common_log_set_verbosity_thold(LOG_LEVEL_DEBUG);
            break;
        case LogLevel::info:
        case LogLevel::warning:
            common_log_set_verbosity_thold(LOG_LEVEL_WARN);
            break;
        case LogLevel::error:
            common_log_set_verbosity_thold(LOG_LEVEL_ERROR);
            break;
        case LogLevel::none:
            common_log_set_verbosity_thold(-1);
            break;
    }
}

}  // namespace

void set_log_level(LogLevel level) {
    g_level.store(level, std::memory_order_relaxed);
    follow_in_common_log(level);
}
LogLevel log_level() {
    return g_level.load(std::memory_order_relaxed);
}

void set_log_sink(LogSink sink) {
    std::lock_guard lock(g_sink_mutex);
    g_sink = std::move(sink);
}

bool parse_log_level(std::string_view name, LogLevel& out) {
    if (name == "debug")
        out = LogLevel::debug;
    else if (name == "info")
        out = LogLevel::info;
    else if (name == "warning" || name == "warn")
        out = LogLevel::warning;
    else if (name == "error")
        out = LogLevel::error;
    else if (name == "none")
        out = LogLevel::none;
    else
        return false;
    return true;
}

namespace detail {

void log_line(LogLevel level, std::string_view line) {
    if (level == LogLevel::none || level < log_level()) return;
    {
        std::lock_guard lock(g_sink_mutex);
        if (g_sink) {
            g_sink(level, line);
            return;
        }
    }
    stderr_logger().log(to_spdlog(level), "{}", line);
}

void capture_line(LogLevel level, std::string_view line) {
    LogCapture* capture = t_capture;
    if (!capture || level < LogLevel::warning) return;
    capture->errors_.append(line).push_back('\n');
    if (level == LogLevel::error) {
        capture->last_error_ = std::string(line);
        if (capture->first_error_.empty()) capture->first_error_ = capture->last_error_;
    }
}

LogCapture::LogCapture() : previous_(t_capture) {
    t_capture = this;
}
LogCapture::~LogCapture() {
    t_capture = previous_;
}

std::string LogCapture::last_error() const {
    std::string s = last_error_;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

QuietLlamaWarnings::QuietLlamaWarnings() : previous_(t_quiet_warnings) {
    t_quiet_warnings = true;
}
QuietLlamaWarnings::~QuietLlamaWarnings() {
    t_quiet_warnings = previous_;
}

void install_llama_log_bridge() {
    llama_log_set(llama_log_callback, nullptr);
    ggml_log_set(llama_log_callback, nullptr);
    follow_in_common_log(log_level());
}

}  // namespace detail
}  // namespace llamapp
