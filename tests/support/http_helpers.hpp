// What the server's end-to-end tests share: request bodies, error-shape checks, SSE splitting,
// metric lookup and a raw loopback connection for clients that hang up.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/prometheus.hpp"

namespace llamapp::test {

using json = nlohmann::json;

inline json chat_body(int max_tokens = 8) {
    return {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
}

inline void expect_error_shape(const httplib::Result& r, int status, const std::string& what) {
    ASSERT_TRUE(r) << what << ": no response";
    EXPECT_EQ(r->status, status) << what << ": " << r->body;
    auto j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << what;
    EXPECT_TRUE(e["type"].is_string()) << what;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << what;
}

// Events of an SSE body: each "data: ..." block.
inline std::vector<std::string> sse_events(const std::string& body) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < body.size()) {
        const auto end = body.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << "unterminated event: " << body.substr(at);
        if (end == std::string::npos) break;
        out.push_back(body.substr(at, end - at));
        at = end + 2;
    }
    return out;
}

// POSTs `body` as JSON, expects `status` and returns the parsed reply (discarded when not JSON).
inline json post_json(httplib::Client& c, const std::string& path, const json& body,
                      int status = 200) {
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return {};
    EXPECT_EQ(r->status, status) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
}

// GET returning a JSON body; an empty object when the server did not answer.
inline json get_json(httplib::Client& c, const std::string& path) {
    auto r = c.Get(path);
    EXPECT_TRUE(r) << "GET " << path << " got no response";
    return r ? json::parse(r->body, nullptr, false) : json::object();
}

inline std::string get_text(httplib::Client& c, const std::string& path) {
    auto r = c.Get(path);
    EXPECT_TRUE(r) << "GET " << path << " got no response";
    return r ? r->body : std::string();
}

// The value of one series in Prometheus text (0 when absent).
inline double metric(const std::string& text, const std::string& series) {
    return prometheus_value(text, series).value_or(0);
}

// A plain loopback connection, for what no HTTP client sends: pipelined requests, broken heads,
// a client that reads part of the answer and hangs up.
class RawConnection {
  public:
    explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
            hang_up();
    }
    RawConnection(const RawConnection&) = delete;
    RawConnection& operator=(const RawConnection&) = delete;
    ~RawConnection() { hang_up(); }

    // All of `bytes`, or false (the server may close once it has answered).
    bool send(const std::string& bytes) {
        std::size_t at = 0;
        while (fd_ >= 0 && at < bytes.size()) {
            const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
            if (n <= 0) return false;
            at += static_cast<std::size_t>(n);
        }
        return fd_ >= 0;
    }
    // Reads until `text` has arrived, the peer closes, or `timeout` passes.
    bool read_until(const std::string& text,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        const auto until = std::chrono::steady_clock::now() + timeout;
        while (got_.find(text) == std::string::npos && read_more(until)) {
        }
        return got_.find(text) != std::string::npos;
    }
    // Reads until the server closes the connection (true) or `timeout` passes.
    bool read_to_close(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        const auto until = std::chrono::steady_clock::now() + timeout;
        while (read_more(until)) {
        }
        return closed_;
    }
    const std::string& received() const { return got_; }
    // Says nothing more will be sent (a half-close); the answer can still be read.
    void finish_sending() {
        if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
    }
    void hang_up() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

  private:
    // One read of what has arrived by `until`; false on a close or when the time is up.
    bool read_more(std::chrono::steady_clock::time_point until) {
        if (fd_ < 0 || closed_) return false;
        // At least one look, even when the time is already up.
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count()))) <= 0) return false;
        char buf[4096];
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n <= 0) {
            closed_ = true;
            return false;
        }
        got_.append(buf, static_cast<std::size_t>(n));
        return true;
    }

    int fd_ = -1;
    bool closed_ = false;
    std::string got_;
};

// A JSON POST on a raw connection, so a test can read part of the answer and hang up.
class RawPost : public RawConnection {
  public:
    RawPost(int port, const std::string& path, const std::string& body) : RawConnection(port) {
        sent_ = send("POST " + path +
                     " HTTP/1.1\r\nHost: localhost\r\n"
                     "Content-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body);
    }
    bool sent() const { return sent_; }

  private:
    bool sent_ = false;
};

// Sends a streaming chat request, reads until the first event, and hangs up.
inline ::testing::AssertionResult stream_then_hang_up(int port, const std::string& body) {
    RawPost post(port, "/v1/chat/completions", body);
    if (post.sent() && post.read_until("data: ")) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "no event came; the server sent: " << post.received();
}

}  // namespace llamapp::test
