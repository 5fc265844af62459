// A loopback forward proxy for plain-http targets: it takes absolute-form requests
// ("GET http://host:port/path"), fetches them itself and answers with what came back, so a
// test can tell that a client went through it. A Range is answered by the proxy (from the whole
// file), since its own HTTP server applies every request's Range to the answer.
#pragma once

#include <httplib.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace llamapp::test {

class FakeProxy {
  public:
    FakeProxy() {
        server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
            forward(req, res);
        });
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        server_.wait_until_ready();
    }
    ~FakeProxy() {
        server_.stop();
        thread_.join();
    }
    FakeProxy(const FakeProxy&) = delete;
    FakeProxy& operator=(const FakeProxy&) = delete;

    // "http://user:password@127.0.0.1:port" for the *_PROXY variables.
    std::string url(const std::string& credentials = "") const {
        return "http://" + (credentials.empty() ? "" : credentials + "@") +
               "127.0.0.1:" + std::to_string(port_);
    }

    std::atomic<int> requests{0};
    std::string proxy_authorization() {
        std::lock_guard lock(mutex_);
        return proxy_authorization_;
    }
    std::string last_range() {
        std::lock_guard lock(mutex_);
        return last_range_;
    }

  private:
    void forward(const httplib::Request& req, httplib::Response& res) {
        ++requests;
        {
            std::lock_guard lock(mutex_);
            proxy_authorization_ = req.get_header_value("Proxy-Authorization");
            if (req.has_header("Range")) last_range_ = req.get_header_value("Range");
        }
        const std::string& target = req.target;  // absolute-form, the query included
        if (target.rfind("http://", 0) != 0) {
            res.status = 400;
            return;
        }
        const std::size_t slash = target.find('/', 7);
        httplib::Client upstream(target.substr(0, slash));
        httplib::Headers headers;
        for (const char* name : {"Authorization", "User-Agent", "Accept"})
            if (req.has_header(name)) headers.emplace(name, req.get_header_value(name));
        auto r = upstream.Get(slash == std::string::npos ? "/" : target.substr(slash), headers);
        if (!r) {
            res.status = 502;
            return;
        }
        res.status = r->status;
        for (const char* name : {"Location", "Accept-Ranges", "Retry-After"})
            if (r->has_header(name)) res.set_header(name, r->get_header_value(name));
        res.set_content(r->body, r->get_header_value("Content-Type"));
    }

    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    std::mutex mutex_;
    std::string proxy_authorization_;
    std::string last_range_;
};

}  // namespace llamapp::test
