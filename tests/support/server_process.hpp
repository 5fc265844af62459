// Starts the real `llamapp serve` binary on a free loopback port and stops it with SIGTERM.
#pragma once

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/paths.hpp"

namespace llamapp::test {

class ServerProcess {
  public:
    // Returns once the server serves (its models loaded), or with `Until::listening` as soon as
    // it listens (its load-on-start models may still be loading).
    enum class Until { serving, listening };
    explicit ServerProcess(std::vector<std::string> args, Until until_state = Until::serving) {
        int err[2];
        if (::pipe(err) != 0) throw std::runtime_error("pipe");
        std::vector<std::string> argv = {binary("llamapp").string(), "serve", "--port", "0"};
        argv.insert(argv.end(), args.begin(), args.end());
        pid_ = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test that crashed
            ::dup2(err[1], 2);
            ::close(err[0]);
            ::close(err[1]);
            std::vector<char*> raw;
            for (auto& a : argv) raw.push_back(a.data());
            raw.push_back(nullptr);
            ::execv(raw[0], raw.data());
            ::_exit(127);
        }
        ::close(err[1]);
        err_ = err[0];
        // The listening and serving lines name the port (or the unix socket).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(180);
        const char* line = until_state == Until::serving ? "serving on " : " on ";
        bool listening = false;
        while (!listening && std::chrono::steady_clock::now() < until) {
            if (!read_some(200)) {
                if (exited()) break;
                continue;
            }
            const auto at = log_.find("://127.0.0.1:");  // http or https
            if (at != std::string::npos) port_ = std::stoi(log_.substr(at + 13));
            listening = (port_ != 0 || log_.find("on unix socket") != std::string::npos) &&
                        log_.find(line) != std::string::npos;
        }
        if (!listening) throw std::runtime_error("the server did not start:\n" + log_);
    }
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;
    ~ServerProcess() {
        if (!reaped_) {
            ::kill(pid_, SIGKILL);
            wait_exit(std::chrono::seconds(10));
        }
        ::close(err_);
    }

    int port() const { return port_; }
    httplib::Client client(std::chrono::seconds timeout = std::chrono::seconds(60)) const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(timeout);
        c.set_connection_timeout(std::chrono::seconds(5));
        return c;
    }
    pid_t pid() const { return pid_; }
    void signal(int sig) { ::kill(pid_, sig); }
    // Exit status, or -1 if it did not exit in time.
    int wait_exit(std::chrono::seconds timeout) {
        const auto until = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < until) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                reaped_ = true;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            read_some(50);
        }
        return -1;
    }
    const std::string& log() {
        while (read_some(0)) {
        }
        return log_;
    }

  private:
    bool read_some(int timeout_ms) {
        pollfd p{err_, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0) return false;
        char buf[4096];
        const ssize_t n = ::read(err_, buf, sizeof buf);
        if (n <= 0) return false;
        log_.append(buf, static_cast<std::size_t>(n));
        return true;
    }
    bool exited() {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            reaped_ = true;
            return true;
        }
        return false;
    }

    pid_t pid_ = -1;
    int err_ = -1;
    int port_ = 0;
    bool reaped_ = false;
    std::string log_;
};

// A server for a whole test suite, started in SetUpTestSuite. gtest reports the tests of a
// suite whose SetUpTestSuite threw as skipped, not failed, so the error is kept instead and
// each test's SetUp fails with it.
inline ServerProcess* start_suite_server(std::vector<std::string> args, std::string& error) {
    try {
        return new ServerProcess(std::move(args));
    } catch (const std::exception& e) {
        error = e.what();
        return nullptr;
    }
}

}  // namespace llamapp::test
