// A loopback stand-in for the Hugging Face hub: the refs, tree and search API, file downloads
// that redirect to a second "CDN" server, and knobs for the failures a client must survive
// (a token it requires, 429 with Retry-After, a transfer cut in the middle, wrong bytes, a
// connection closed after the redirect, downloads that redirect to the API host itself).
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llamapp/fingerprint.hpp"
#include "support/temp_dir.hpp"

namespace llamapp::test {

class FakeHub {
  public:
    static constexpr const char* commit = "0123456789abcdef0123456789abcdef01234567";

    struct File {
        std::string bytes;
        // What the listing claims: empty, the bytes' SHA-256 as an LFS file; 40 hex digits, a
        // git blob id of a file outside LFS.
        std::string digest;
        std::uint64_t size = 0;  // what the listing claims; 0: the bytes' size
    };

    FakeHub() {
        routes();
        // The API host serves the files too, for a hub whose downloads redirect to itself.
        for (httplib::Server* s : {&api_, &cdn_})
            s->Get(R"(/cdn/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
                serve_file(req, res);
            });
        port_ = api_.bind_to_any_port("127.0.0.1");
        cdn_port_ = cdn_.bind_to_any_port("127.0.0.1");
        api_thread_ = std::thread([this] { api_.listen_after_bind(); });
        cdn_thread_ = std::thread([this] { cdn_.listen_after_bind(); });
        api_.wait_until_ready();
        cdn_.wait_until_ready();
    }
    ~FakeHub() {
        {
            std::lock_guard lock(hold_mutex_);
            stopping_ = true;  // stalled downloads give up, so that the servers can stop
        }
        hold_changed_.notify_all();
        api_.stop();
        cdn_.stop();
        api_thread_.join();
        cdn_thread_.join();
    }
    FakeHub(const FakeHub&) = delete;
    FakeHub& operator=(const FakeHub&) = delete;

    std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }

    void add(const std::string& repo, const std::string& path, std::string bytes,
             std::string digest = {}, std::uint64_t listed_size = 0) {
        std::lock_guard lock(mutex_);
        repos_[repo][path] = File{std::move(bytes), std::move(digest), listed_size};
    }
    void add_file(const std::string& repo, const std::string& path,
                  const std::filesystem::path& from) {
        std::ifstream in(from, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        add(repo, path, s.str());
    }

    // Knobs, set before the client runs.
    std::string required_token;         // non-empty: API calls and downloads without it get 401
    std::atomic<int> throttle_next{0};  // this many API calls get 429 first
    std::atomic<int> fail_next{0};      // this many API calls get 503 first
    int retry_after_seconds = 1;
    std::string listed_commit = commit;      // what the refs say the main branch is
    std::atomic<int> cut_next_transfers{0};  // this many downloads stop half way
    // This many redirects lead to a host that closes every connection before answering.
    std::atomic<int> drop_after_redirect{0};
    bool redirect_to_self = false;  // downloads redirect to the API host, not to the "CDN"
    // This many downloads send the first half of the file (nothing, when asked for a range from
    // there), then go quiet with the connection open until the hub is destroyed.
    std::atomic<int> stall_next_transfers{0};

    // The next download sends half its bytes, then waits for release_transfer() (60 s at most).
    void hold_next_transfer() {
        std::lock_guard lock(hold_mutex_);
        hold_ = Hold::armed;
    }
    bool transfer_held() {
        std::lock_guard lock(hold_mutex_);
        return hold_ == Hold::waiting;
    }
    void release_transfer() {
        {
            std::lock_guard lock(hold_mutex_);
            hold_ = Hold::released;
        }
        hold_changed_.notify_all();
    }

    // What the client did.
    std::atomic<int> api_calls{0};
    std::atomic<int> file_requests{0};
    std::atomic<int> range_requests{0};

  private:
    void routes() {
        api_.Get(R"(/api/models/([^/]+/[^/]+)/refs)", [this](const auto& req, auto& res) {
            if (!admit(req, res)) return;
            if (!has_repo(req.matches[1])) return not_found(res);
            nlohmann::json j = {
                {"branches", {{{"name", "main"}, {"targetCommit", listed_commit}}}}};
            res.set_content(j.dump(), "application/json");
        });
        api_.Get(R"(/api/models/([^/]+/[^/]+)/tree/([0-9a-f]+))",
                 [this](const auto& req, auto& res) {
                     if (!admit(req, res)) return;
                     if (!has_repo(req.matches[1])) return not_found(res);
                     res.set_content(tree(req.matches[1]).dump(), "application/json");
                 });
        api_.Get("/api/models", [this](const auto& req, auto& res) {
            if (!admit(req, res)) return;
            const std::string q = req.get_param_value("search");
            nlohmann::json hits = nlohmann::json::array();
            std::lock_guard lock(mutex_);
            for (const auto& [repo, files] : repos_) {
                if (repo.find(q) == std::string::npos) continue;
                nlohmann::json hit = {{"id", repo}, {"downloads", 7}, {"likes", 3}};
                if (req.get_param_value("full") == "true") {
                    hit["siblings"] = nlohmann::json::array();
                    for (const auto& [path, f] : files)
                        hit["siblings"].push_back({{"rfilename", path}});
                }
                hits.push_back(std::move(hit));
            }
            res.set_content(hits.dump(), "application/json");
        });
        // Downloads redirect to another host, as the hub's resolve URLs redirect to its CDN.
        api_.Get(R"(/([^/]+/[^/]+)/resolve/([0-9a-f]+)/(.+))", [this](const auto& req, auto& res) {
            if (!authorized(req, res)) return;
            int port = redirect_to_self ? port_ : cdn_port_;
            if (drop_after_redirect > 0) {
                --drop_after_redirect;
                port = closer_.port();
            }
            res.set_redirect("http://127.0.0.1:" + std::to_string(port) + "/cdn/" +
                             std::string(req.matches[1]) + "/" + std::string(req.matches[3]));
        });
    }

    bool admit(const httplib::Request& req, httplib::Response& res) {
        ++api_calls;
        if (fail_next > 0) {
            --fail_next;
            res.status = 503;
            return false;
        }
        if (throttle_next > 0) {
            --throttle_next;
            res.status = 429;
            res.set_header("Retry-After", std::to_string(retry_after_seconds));
            return false;
        }
        return authorized(req, res);
    }

    bool authorized(const httplib::Request& req, httplib::Response& res) {
        if (required_token.empty() ||
            req.get_header_value("Authorization") == "Bearer " + required_token)
            return true;
        res.status = 401;
        res.set_content(R"({"error":"Invalid credentials in Authorization header"})",
                        "application/json");
        return false;
    }

    static void not_found(httplib::Response& res) {
        res.status = 404;
        res.set_content(R"({"error":"Repository not found"})", "application/json");
    }

    bool has_repo(const std::string& repo) {
        std::lock_guard lock(mutex_);
        return repos_.contains(repo);
    }

    nlohmann::json tree(const std::string& repo) {
        std::lock_guard lock(mutex_);
        nlohmann::json list = nlohmann::json::array();
        for (const auto& [path, f] : repos_.at(repo)) {
            const std::string digest = f.digest.empty() ? sha256_hex(f.bytes) : f.digest;
            const std::uint64_t size = f.size ? f.size : f.bytes.size();
            if (digest.size() == 40) {  // a git blob id: a file outside LFS
                list.push_back({{"type", "file"}, {"path", path}, {"size", size}, {"oid", digest}});
                continue;
            }
            list.push_back({{"type", "file"},
                            {"path", path},
                            {"size", size},
                            {"oid", "1111111111111111111111111111111111111111"},
                            {"lfs", {{"oid", digest}, {"size", size}}}});
        }
        return list;
    }

    void serve_file(const httplib::Request& req, httplib::Response& res) {
        const std::string rest = req.matches[1];
        const std::size_t second = rest.find('/', rest.find('/') + 1);
        const std::string repo = rest.substr(0, second), path = rest.substr(second + 1);
        std::string bytes;
        {
            std::lock_guard lock(mutex_);
            auto r = repos_.find(repo);
            if (r == repos_.end() || !r->second.contains(path)) return not_found(res);
            bytes = r->second.at(path).bytes;
        }
        if (req.method == "GET") ++file_requests;
        if (req.has_header("Range") && req.method == "GET") ++range_requests;
        if (req.method == "GET" && cut_next_transfers > 0 && !req.has_header("Range")) {
            --cut_next_transfers;
            // Announces the whole length, sends half, then breaks the connection.
            const std::size_t half = bytes.size() / 2;
            res.set_content_provider(
                bytes.size(), "application/octet-stream",
                [bytes, half](std::size_t offset, std::size_t, httplib::DataSink& sink) {
                    if (offset >= half) return false;
                    sink.write(bytes.data() + offset, half - offset);
                    return true;
                });
            return;
        }
        if (req.method == "GET" && take_hold()) return serve_held(bytes, res);
        if (req.method == "GET" && stall_next_transfers > 0) {
            --stall_next_transfers;
            return serve_stalled(bytes, res);
        }
        res.set_header("Accept-Ranges", "bytes");
        res.set_content(bytes, "application/octet-stream");
    }

    bool take_hold() {
        std::lock_guard lock(hold_mutex_);
        if (hold_ != Hold::armed) return false;
        hold_ = Hold::sending;
        return true;
    }

    // Sends the first half of `bytes` (from a range's start, when that is past it), then what
    // `rest` returns for the offset it stopped at: whether the transfer goes on.
    void serve_half_then(const std::string& bytes, httplib::Response& res,
                         std::function<bool(std::size_t, httplib::DataSink&)> rest) {
        const std::size_t half = bytes.size() / 2;
        res.set_content_provider(
            bytes.size(), "application/octet-stream",
            [bytes, half, rest](std::size_t offset, std::size_t, httplib::DataSink& sink) {
                if (offset < half) return sink.write(bytes.data() + offset, half - offset);
                return rest(offset, sink);
            });
    }

    void serve_held(const std::string& bytes, httplib::Response& res) {
        serve_half_then(bytes, res, [this, bytes](std::size_t offset, httplib::DataSink& sink) {
            std::unique_lock lock(hold_mutex_);
            hold_ = Hold::waiting;
            hold_changed_.wait_for(lock, std::chrono::seconds(60),
                                   [this] { return hold_ == Hold::released; });
            lock.unlock();
            return sink.write(bytes.data() + offset, bytes.size() - offset);
        });
    }

    void serve_stalled(const std::string& bytes, httplib::Response& res) {
        serve_half_then(bytes, res, [this](std::size_t, httplib::DataSink&) {
            std::unique_lock lock(hold_mutex_);
            hold_changed_.wait_for(lock, std::chrono::seconds(60), [this] { return stopping_; });
            return false;
        });
    }

    // Accepts connections and closes them at once: a peer gone after the redirect.
    class ClosingListener {
      public:
        ClosingListener() {
            fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in at{};
            at.sin_family = AF_INET;
            at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t len = sizeof at;
            if (::bind(fd_, reinterpret_cast<sockaddr*>(&at), len) != 0 || ::listen(fd_, 16) != 0 ||
                ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &len) != 0)
                throw std::runtime_error("the closing listener cannot listen");
            port_ = ntohs(at.sin_port);
            thread_ = std::thread([this] {
                for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0;) ::close(c);
            });
        }
        ~ClosingListener() {
            ::shutdown(fd_, SHUT_RDWR);  // accept() returns, and the thread ends
            thread_.join();
            ::close(fd_);
        }
        ClosingListener(const ClosingListener&) = delete;
        ClosingListener& operator=(const ClosingListener&) = delete;
        int port() const { return port_; }

      private:
        int fd_ = -1;
        int port_ = 0;
        std::thread thread_;
    };

    httplib::Server api_;
    httplib::Server cdn_;
    ClosingListener closer_;
    int port_ = 0;
    int cdn_port_ = 0;
    std::thread api_thread_;
    std::thread cdn_thread_;
    std::mutex mutex_;
    std::map<std::string, std::map<std::string, File>> repos_;
    enum class Hold { none, armed, sending, waiting, released };
    std::mutex hold_mutex_;
    std::condition_variable hold_changed_;
    Hold hold_ = Hold::none;
    bool stopping_ = false;  // guarded by hold_mutex_
};

// llama.cpp reads the hub cache's location once per process: one directory for every test in
// the process that pulls (LLAMA_CACHE), and a repository name of its own per test.
inline const std::filesystem::path& hub_cache_dir() {
    static const TempDir dir;
    static const bool set = ::setenv("LLAMA_CACHE", dir.path().c_str(), 1) == 0;
    (void)set;
    return dir.path();
}

}  // namespace llamapp::test
