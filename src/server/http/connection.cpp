#include "server/http/connection.hpp"

#include <fmt/core.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include "server/http/header_text.hpp"

namespace llamapp::detail {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

thread_local int last_status = 0;        // of the response this thread wrote last (record_status)
thread_local bool read_stalled = false;  // this thread's request stopped arriving (body_stalled)

// True when `sock` has `events` within `timeout` (never negative).
bool wait_for(socket_t sock, short events, milliseconds timeout) {
    pollfd p{sock, events, 0};
    int got;
    do {
        got = ::poll(&p, 1, static_cast<int>(std::max<milliseconds::rep>(0, timeout.count())));
    } while (got < 0 && errno == EINTR);
    return got > 0;
}

milliseconds until(Clock::time_point deadline) {
    return std::chrono::ceil<milliseconds>(deadline - Clock::now());
}

void numeric_address(socket_t sock, bool peer, std::string& ip, int& port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    auto* a = reinterpret_cast<sockaddr*>(&addr);
    ip.clear();
    port = 0;
    if ((peer ? ::getpeername(sock, a, &len) : ::getsockname(sock, a, &len)) != 0) return;
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(a, len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return;
    ip = host;
    port = std::atoi(serv);
}

// One per connection, so that what is read past one request is the start of the next.
class ConnectionStream final : public httplib::Stream {
  public:
    ConnectionStream(socket_t sock, const ConnectionLimits& limits)
        : sock_(sock), read_timeout_(limits.read_timeout), write_timeout_(limits.write_timeout) {}

    bool is_readable() const override { return start_ < buffer_.size(); }
    bool wait_readable() const override {
        return is_readable() || wait_for(sock_, POLLIN, read_timeout_);
    }
    bool wait_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_); }
    // Alive while nothing says it closed: no bytes waiting, or bytes that are not an EOF.
    bool is_peer_alive() const override {
        if (!wait_for(sock_, POLLIN, milliseconds{0})) return true;
        char byte;
        return ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    }

    ssize_t read(char* ptr, std::size_t size) override {
        if (is_readable()) {
            const std::size_t n = std::min(size, buffer_.size() - start_);
            std::memcpy(ptr, buffer_.data() + start_, n);
            consume_buffered(n);
            return static_cast<ssize_t>(n);
        }
        if (!wait_for(sock_, POLLIN, read_timeout_)) {
            error_ = httplib::Error::Timeout;
            read_stalled = true;
            return -1;
        }
        const ssize_t n = receive(ptr, size);
        if (n <= 0) error_ = n == 0 ? httplib::Error::ConnectionClosed : httplib::Error::Read;
        return n;
    }

    ssize_t write(const char* ptr, std::size_t size) override {
        if (!wait_writable()) return -1;
        ssize_t n;
        do {
            n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        numeric_address(sock_, true, ip, port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        numeric_address(sock_, false, ip, port);
    }
    socket_t socket() const override { return sock_; }
    time_t duration() const override {
        return std::chrono::duration_cast<milliseconds>(Clock::now() - opened_).count();
    }
    void set_read_timeout(time_t sec, time_t usec) override {
        read_timeout_ = milliseconds{sec * 1000 + usec / 1000};
    }
    const char* buffered_data(std::size_t& size) const override {
        size = buffer_.size() - start_;
        return size ? buffer_.data() + start_ : nullptr;
    }
    void consume_buffered(std::size_t size) override {
        start_ += std::min(size, buffer_.size() - start_);
        if (start_ == buffer_.size()) {
            buffer_.clear();
            start_ = 0;
        }
    }

    std::string_view buffered() const { return std::string_view(buffer_).substr(start_); }

    // Until a request's first byte is here. False once the peer closes, `idle` passes, or
    // `stopped()` (asked every 100 ms) says the server is stopping.
    template <typename Stopped>
    bool await_request(milliseconds idle, Stopped&& stopped) {
        const auto deadline = Clock::now() + idle;
        for (;;) {
            // Empty lines before a request line are ignored (RFC 9112, 2.2).
            while (buffered().starts_with("\r\n")) consume_buffered(2);
            if (is_readable() && buffered() != "\r") return true;
            if (stopped() || Clock::now() >= deadline) return false;
            if (wait_for(sock_, POLLIN, std::min(milliseconds{100}, until(deadline))) && !fill())
                return false;
        }
    }

    enum class Head { complete, closed, timed_out, uri_too_long, headers_too_large, bad_line_end };

    // Reads on until the buffer holds a whole head, or it breaks a limit, or its time is up.
    Head read_head(const ConnectionLimits& limits) {
        const auto deadline = Clock::now() + limits.read_timeout;
        std::optional<std::size_t> scanned;  // how much was buffered at the last scan
        for (;;) {
            if (head_worth_scanning(buffered(), scanned)) {
                switch (scan_head(buffered(), limits)) {
                    case HeadScan::complete:
                        return Head::complete;
                    case HeadScan::uri_too_long:
                        return Head::uri_too_long;
                    case HeadScan::headers_too_large:
                        return Head::headers_too_large;
                    case HeadScan::bare_line_feed:
                        return Head::bad_line_end;
                    case HeadScan::incomplete:
                        break;
                }
                scanned = buffered().size();
            }
            if (!wait_for(sock_, POLLIN, until(deadline))) return Head::timed_out;
            if (!fill()) return Head::closed;
        }
    }

    // Writes all of `bytes`; false when the peer stops taking them.
    bool write_all(std::string_view bytes) {
        while (!bytes.empty()) {
            const ssize_t n = write(bytes.data(), bytes.size());
            if (n <= 0) return false;
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }

  private:
    ssize_t receive(char* ptr, std::size_t size) {
        ssize_t n;
        do {
            n = ::recv(sock_, ptr, size, 0);
        } while (n < 0 && errno == EINTR);
        return n;
    }

    // Appends what has arrived, after dropping what was consumed; false on EOF or an error.
    bool fill() {
        buffer_.erase(0, start_);
        start_ = 0;
        char chunk[16 * 1024];
        const ssize_t n = receive(chunk, sizeof chunk);
        if (n > 0) buffer_.append(chunk, static_cast<std::size_t>(n));
        return n > 0;
    }

    socket_t sock_;
    milliseconds read_timeout_;
    milliseconds write_timeout_;
    Clock::time_point opened_ = Clock::now();
    std::string buffer_;
    std::size_t start_ = 0;
};

// What can be read of a refused head's method and path, for its answer's shape and the log.
httplib::Request refused_request(std::string_view head) {
    httplib::Request req;
    const std::size_t space = head.find(' ');
    if (space == std::string_view::npos || space > 16) return req;
    req.method = std::string(head.substr(0, space));
    std::string_view target = head.substr(space + 1, 256);
    req.path = std::string(target.substr(0, target.find_first_of(" ?\r\n")));
    return req;
}

// Answers a request refused before httplib saw it, and says the connection closes after it.
void answer_refused(ConnectionStream& strm, const Listener::Refusal& refuse, int status) {
    httplib::Request req = refused_request(strm.buffered());
    httplib::Response res;
    res.status = status;
    refuse(req, res);
    std::string out =
        fmt::format("HTTP/1.1 {} {}\r\n", res.status, httplib::status_message(res.status));
    for (const auto& [name, value] : res.headers) out += name + ": " + value + "\r\n";
    out += fmt::format("Content-Length: {}\r\nConnection: close\r\n\r\n", res.body.size());
    out += res.body;
    strm.write_all(out);
}

int refusal_status(ConnectionStream::Head head) {
    using Head = ConnectionStream::Head;
    switch (head) {
        case Head::uri_too_long:
            return httplib::UriTooLong_414;
        case Head::headers_too_large:
            return httplib::RequestHeaderFieldsTooLarge_431;
        case Head::bad_line_end:
            return httplib::BadRequest_400;
        default:
            return httplib::RequestTimeout_408;
    }
}

// Half-closes, then reads what the peer still sends for a moment: closing with unread bytes
// makes the kernel send a reset, which can destroy the answer just written before it is read.
void close_gracefully(socket_t sock) {
    ::shutdown(sock, SHUT_WR);
    const auto deadline = Clock::now() + milliseconds{100};
    char scratch[16 * 1024];
    for (std::size_t total = 0; total < (1u << 20);) {
        if (!wait_for(sock, POLLIN, until(deadline))) break;
        const ssize_t n = ::recv(sock, scratch, sizeof scratch, 0);
        if (n <= 0) break;
        total += static_cast<std::size_t>(n);
    }
    ::close(sock);
}

}  // namespace

bool head_worth_scanning(std::string_view buffered, std::optional<std::size_t> scanned) {
    return !scanned || buffered.size() >= *scanned + 1024 ||
           buffered.find('\n', *scanned) != std::string_view::npos;
}

void record_status(int status) {
    last_status = status;
}

HeadScan scan_head(std::string_view bytes, const ConnectionLimits& limits) {
    constexpr auto none = std::string_view::npos;
    std::size_t at = 0;
    for (std::size_t line_number = 0;; ++line_number) {
        const std::size_t lf = bytes.find('\n', at);
        if (lf != none && (lf == 0 || bytes[lf - 1] != '\r')) return HeadScan::bare_line_feed;
        const std::size_t end = lf == none ? none : lf - 1;  // where the line's CRLF starts
        if (line_number == 0) {
            if ((end == none ? bytes.size() : end) > limits.max_request_line)
                return HeadScan::uri_too_long;
        } else {
            const std::size_t line = (end == none ? bytes.size() : end + 2) - at;
            if (line > limits.max_header_line || line_number - 1 > limits.max_headers ||
                at + line > limits.max_head_bytes)
                return HeadScan::headers_too_large;
        }
        if (end == none) return HeadScan::incomplete;
        if (line_number > 0 && end == at) return HeadScan::complete;
        at = end + 2;
    }
}

std::optional<std::uint64_t> announced_length(std::string_view head) {
    std::optional<std::uint64_t> length;
    std::size_t at = head.find("\r\n");
    while (at != std::string_view::npos && at + 2 < head.size()) {
        const std::size_t begin = at + 2;
        at = head.find("\r\n", begin);
        const std::string_view line = head.substr(begin, at - begin);
        if (line.empty()) break;
        const std::size_t colon = line.find(':');
        if (colon == std::string_view::npos ||
            lower_case(line.substr(0, colon)) != "content-length")
            continue;
        const std::string_view digits = trim_blanks(line.substr(colon + 1));
        std::uint64_t value = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        if (ec != std::errc{} || end != digits.data() + digits.size() ||
            (length && *length != value))
            return std::nullopt;
        length = value;
    }
    return length;
}

bool body_stalled() {
    return read_stalled;
}

Listener::Listener(const ConnectionLimits& limits, Refusal refuse)
    : limits_(limits), refuse_(std::move(refuse)) {
    // What httplib's Keep-Alive header announces; the loop below keeps to it.
    set_keep_alive_max_count(limits.max_requests);
    set_keep_alive_timeout(limits.keep_alive.count());
}

bool Listener::process_and_close_socket(socket_t sock) {
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
    numeric_address(sock, true, remote_addr, remote_port);
    numeric_address(sock, false, local_addr, local_port);
    ConnectionStream strm(sock, limits_);
    const auto stopped = [this] { return svr_sock_ == INVALID_SOCKET; };
    const bool served = serve_guarded([&] {
        for (std::size_t left = limits_.max_requests; left > 0; --left) {
            if (!strm.await_request(limits_.keep_alive, stopped)) return true;
            using Head = ConnectionStream::Head;
            const Head head = strm.read_head(limits_);
            if (head == Head::closed) return true;
            if (head != Head::complete) {
                answer_refused(strm, refuse_, refusal_status(head));
                return true;
            }
            // Refused before a byte of the body is read (or invited by 100 Continue), so an
            // oversized upload costs neither memory nor the time it takes to send.
            if (const auto length = announced_length(strm.buffered());
                length && *length > limits_.max_body_bytes) {
                answer_refused(strm, refuse_, httplib::PayloadTooLarge_413);
                return true;
            }
            bool closed = false;
            last_status = 0;
            read_stalled = false;
            if (!process_request(strm, remote_addr, remote_port, local_addr, local_port, left == 1,
                                 closed, nullptr) ||
                closed)
                return true;
            // After a refusal httplib may not have read the whole request (a bad request line
            // leaves its headers and body): what follows is not trusted to be a request.
            if (last_status >= 400) return true;
        }
        return true;
    });
    close_gracefully(sock);
    return served;
}

}  // namespace llamapp::detail
