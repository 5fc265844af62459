// Internal: the plain-HTTP listener's connection loop. cpp-httplib's own loop reads each request
// through a new stream, which drops bytes already read ahead (a pipelined request), and it closes
// without an answer on a request line over its buffer. This loop keeps one stream per connection,
// reads a request's whole head before httplib parses it, and answers a head over the limits
// itself: 414 for the request line, 431 for the headers, 408 for a head that does not arrive,
// 400 for a line not ended by CRLF, 413 for a Content-Length over the body limit.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

namespace llamapp::detail {

struct ConnectionLimits {
    // Below httplib's own limits (8 KB per header line, 100 headers), so that a head over them
    // is answered here with its status, never refused by httplib as a bare 400.
    std::size_t max_request_line = 8192;     // longer: 414
    std::size_t max_header_line = 8192;      // longer, its CRLF included: 431
    std::size_t max_headers = 100;           // more: 431
    std::size_t max_head_bytes = 64 * 1024;  // the request line and headers together: 431
    // A request's whole head must arrive within this once its first byte has, and a body may
    // pause no longer between two reads: a client that stops sending holds a thread this long.
    std::chrono::milliseconds read_timeout{10'000};
    std::chrono::milliseconds write_timeout{60'000};
    std::chrono::seconds keep_alive{5};  // an idle connection waits this long for its next request
    std::size_t max_requests = 100;      // per connection, then it is closed
    std::size_t max_body_bytes = 8u << 20;  // a larger Content-Length: 413 before the body
};

// How far the bytes buffered at the start of a request go toward its head.
enum class HeadScan {
    complete,           // the head and its blank line are there
    incomplete,         // within the limits so far: read on
    uri_too_long,       // 414
    headers_too_large,  // 431
    bare_line_feed,     // a line ended by LF alone: 400, as a proxy may read the lines otherwise
};
HeadScan scan_head(std::string_view buffered, const ConnectionLimits& limits);

// The Content-Length a complete head announces; nullopt when it has none, or when its value is
// malformed or given twice differently (which httplib then refuses itself).
std::optional<std::uint64_t> announced_length(std::string_view head);

// Whether the request this thread is reading stopped arriving: its body's read timed out.
// Reset at each request; the error handler answers 408 instead of 400 for it.
bool body_stalled();

// Whether a head whose first `scanned` bytes were scanned (nothing yet: nullopt) is worth a new
// scan: a line may have ended in what came since, or 1 KB more came. A client sending a byte at
// a time must not make each byte cost a scan of everything before it.
bool head_worth_scanning(std::string_view buffered, std::optional<std::size_t> scanned);

// Tells the connection loop the status of the response its thread just wrote (from the
// listener's logger, which httplib calls for every response): a connection closes after one of
// 400 or more.
void record_status(int status);

// Thread-safe as httplib::Server is: each connection runs on one thread of its pool.
class Listener : public httplib::Server {
  public:
    // Fills the body of an answer to a request whose head broke a limit (status already set);
    // called with what could be read of its method and path. Also the place to log it.
    using Refusal = std::function<void(const httplib::Request&, httplib::Response&)>;

    Listener(const ConnectionLimits& limits, Refusal refuse);

  private:
    bool process_and_close_socket(socket_t sock) override;

    ConnectionLimits limits_;
    Refusal refuse_;
};

}  // namespace llamapp::detail
