// Remote devices over ggml RPC on loopback: `llamapp rpc-server` processes holding a model's
// layers for `llamapp run` and `llamapp serve`, and what happens when one of them dies.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.hpp"
#include "support/eventually.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using llamapp::test::binary;
using llamapp::test::eventually;
using llamapp::test::run_command;
using llamapp::test::ServerProcess;

const char* const golden = "Once upon a time, there was a little girl named Lily.";

std::string stories() {
    return llamapp::test::shared_model("stories260K.gguf").string();
}

// A loopback port nobody listens on at the moment of asking.
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

bool accepts(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

// `llamapp rpc-server` serving this machine's CPU on a loopback port, killed with the test.
class RpcServer {
  public:
    RpcServer() : port_(free_port()) {
        pid_ = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            // ggml's server prints a line per connection on stdout.
            if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, 1);
            const std::string exe = binary("llamapp").string(), port = std::to_string(port_);
            ::execl(exe.c_str(), exe.c_str(), "rpc-server", "--port", port.c_str(), "-t", "1",
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
        // The server takes one client at a time; a probe that connects and hangs up is dropped.
        if (!eventually([&] { return accepts(port_); }, std::chrono::seconds(60)))
            throw std::runtime_error("rpc-server did not listen");
    }
    ~RpcServer() { kill(); }
    RpcServer(const RpcServer&) = delete;
    RpcServer& operator=(const RpcServer&) = delete;

    std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
    void kill() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }

  private:
    int port_;
    pid_t pid_ = -1;
};

llamapp::test::CommandResult llamapp_cli(const std::string& args) {
    return run_command(binary("llamapp").string() + " " + args + " 2>&1");
}

}  // namespace

// The model's layers split over two servers and the local CPU give the text the CPU alone gives
// (greedy): the RPC backend computes the same graph, only elsewhere.
TEST(Rpc, AModelSplitOverTwoServersGivesTheLocalGreedyText) {
    RpcServer a, b;
    const std::string rpc = a.endpoint() + "," + b.endpoint();
    auto listed = llamapp_cli("devices --rpc " + rpc);
    ASSERT_EQ(listed.status, 0) << listed.out;
    EXPECT_NE(listed.out.find("RPC0"), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find(b.endpoint()), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find("layers go to: RPC0, RPC1, then the CPU"), std::string::npos)
        << listed.out;

    // Five layers: 2 and 2 on the servers (the -ts shares), the last on the CPU (-ngl 4).
    auto r = llamapp_cli("run -m " + stories() + " --rpc " + rpc +
                         " -ngl 4 -ts 1,1 -p 'Once upon a time' -n 30 --temp 0 --verbose");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(golden), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("RPC0"), std::string::npos) << "llama.cpp placed nothing remotely:\n"
                                                     << r.out;
    EXPECT_NE(r.out.find("RPC1"), std::string::npos) << r.out;

    // The layers remote, their KV cache in host memory (-nkvo).
    auto host_kv = llamapp_cli("run -m " + stories() + " --rpc " + rpc +
                               " -nkvo -p 'Once upon a time' -n 30 --temp 0");
    ASSERT_EQ(host_kv.status, 0) << host_kv.out;
    EXPECT_NE(host_kv.out.find(golden), std::string::npos) << host_kv.out;

    // Named devices, in the order given.
    auto named = llamapp_cli("run -m " + stories() + " --rpc " + rpc +
                             " -dev RPC1 -p 'Once upon a time' -n 30 --temp 0");
    ASSERT_EQ(named.status, 0) << named.out;
    EXPECT_NE(named.out.find(golden), std::string::npos) << named.out;
}

// What llama.cpp would abort on, or drop silently, is one line naming what is wrong.
TEST(Rpc, BadEndpointsAndDevicesAreOneClearLine) {
    const int closed = free_port();
    const std::pair<std::string, std::string> cases[] = {
        {"--rpc 127.0.0.1:" + std::to_string(closed),
         "cannot use the RPC server at 127.0.0.1:" + std::to_string(closed)},
        {"--rpc nohost", "host:port"},
        {"--rpc 127.0.0.1:99999", "host:port"},
        {"-dev RPC7", "RPC7 is not a device layers can be placed on"},
        {"-dev CPU", "CPU is not a device layers can be placed on"},
        {"-ts 1,1", "tensor_split has more entries than offload devices"},
    };
    for (const auto& [args, says] : cases) {
        auto r = llamapp_cli("run -m " + stories() + " " + args + " -p hi -n 2");
        EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
        EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
    }
}

// A server that dies mid-request fails that request with device_lost, and later ones on the same
// model with 503; the process and its other model keep serving.
TEST(Rpc, AKilledServerFailsItsModelsRequestsAndTheRestKeepsServing) {
    RpcServer remote;
    llamapp::test::TempDir dir;
    std::ofstream(dir / "models.ini")
        << "[*]\nctx-size = 512\n\n[remote]\nmodel = " << stories()
        << "\nload-on-startup = true\n\n[local]\nmodel = " << stories()
        << "\ndevice = none\nload-on-startup = true\n";
    ServerProcess server({"--models-preset", (dir / "models.ini").string(), "--rpc",
                          remote.endpoint(), "-t", "1", "--parallel", "1"});
    auto c = server.client();
    const auto body = [](const std::string& model, int n) {
        return json{{"model", model},   {"prompt", "Once upon a time"}, {"max_tokens", n},
                    {"temperature", 0}, {"ignore_eos", true},           {"stream", true}}
            .dump();
    };
    auto before = c.Post("/v1/completions", body("remote", 8), "application/json");
    ASSERT_TRUE(before);
    ASSERT_EQ(before->status, 200) << before->body;

    std::atomic<bool> streaming{false};
    std::string streamed;
    std::thread killer([&] {
        if (eventually([&] { return streaming.load(); }, std::chrono::seconds(60))) remote.kill();
    });
    auto during = c.Post("/v1/completions", httplib::Headers{}, body("remote", 480),
                         "application/json", [&](const char* data, std::size_t n) {
                             streamed.append(data, n);
                             streaming = true;
                             return true;
                         });
    killer.join();
    ASSERT_TRUE(during);
    EXPECT_NE(streamed.find("device_lost"), std::string::npos) << streamed.substr(0, 2000);

    auto local = c.Post("/v1/completions", body("local", 8), "application/json");
    ASSERT_TRUE(local);
    EXPECT_EQ(local->status, 200) << local->body;
    auto after = c.Post("/v1/completions",
                        json{{"model", "remote"}, {"prompt", "Once"}, {"max_tokens", 4}}.dump(),
                        "application/json");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->status, 503) << after->body;
    EXPECT_NE(after->body.find("device_lost"), std::string::npos) << after->body;
}

// A KV store entry does not depend on where the cache lived: saved by a run on the CPU alone, it
// is restored into a cache placed on two servers (and the other way round), with the same text.
TEST(Rpc, AStoredPromptRestoresOnAnotherPlacement) {
    RpcServer a, b;
    const std::string prompt =
        " -p 'Once upon a time, there was a little girl named Lily. She loved to play outside in "
        "the park with her friends.'";
    const std::pair<std::string, std::string> placements[] = {
        {"-dev none", "--rpc " + a.endpoint() + "," + b.endpoint() + " -ts 1,2"},
        {"--rpc " + a.endpoint(), "-ngl 0"},
    };
    for (const auto& [first, second] : placements) {
        llamapp::test::TempDir dir;
        const std::string args = "run -m " + stories() +
                                 " --json --temp 0 -n 16 --cache-ram 0 --cache-min-tokens 16 "
                                 "--cache-disk " +
                                 dir.path().string() + prompt + " ";
        auto cold = run_command(binary("llamapp").string() + " " + args + first + " 2>/dev/null");
        ASSERT_EQ(cold.status, 0) << first << "\n" << cold.out;
        auto warm = run_command(binary("llamapp").string() + " " + args + second + " 2>/dev/null");
        ASSERT_EQ(warm.status, 0) << second << "\n" << warm.out;
        const json c = json::parse(cold.out), w = json::parse(warm.out);
        EXPECT_EQ(c["cache"]["source"], "none") << first;
        EXPECT_EQ(w["cache"]["source"], "stored") << second;
        EXPECT_EQ(w["cache"]["reused_tokens"].get<int>(),
                  c["usage"]["prompt_tokens"].get<int>() - 1);
        EXPECT_EQ(w["text"], c["text"]) << first << " then " << second;
    }
}

// A budget per device covers remote ones: a model that does not fit the budget of the server its
// layers go to is refused, naming that device, the bytes it needs and those available.
TEST(Rpc, AModelOverARemoteDevicesBudgetIsRefusedNamingIt) {
    RpcServer remote;
    auto r = llamapp_cli("serve --port 0 -m " + stories() + " --rpc " + remote.endpoint() +
                         " --memory-budget RPC0=100K");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(" MiB on RPC0, 0.1 MiB are available"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[insufficient_memory]"), std::string::npos) << r.out;
    auto unknown = llamapp_cli("serve --port 0 -m " + stories() + " --memory-budget GPU9=1G");
    EXPECT_EQ(unknown.status, 1) << unknown.out;
    EXPECT_NE(unknown.out.find("a memory budget names no device of this process"),
              std::string::npos)
        << unknown.out;
}

// llama.cpp's fit (--fit, on by default) keeps each device's margin free: with a margin larger
// than the server's memory, every layer stays on the CPU, in `run` and in `serve`; --fit off
// places them as asked.
TEST(Rpc, FitKeepsLayersOffADeviceWithoutRoomForThem) {
    RpcServer remote;
    const std::string base = "run -m " + stories() + " --rpc " + remote.endpoint() +
                             " -p 'Once upon a time' -n 30 --temp 0 --verbose";
    auto fitted = llamapp_cli(base + " --fit-target 100000000");
    ASSERT_EQ(fitted.status, 0) << fitted.out;
    EXPECT_NE(fitted.out.find("with 0 layers on the devices"), std::string::npos) << fitted.out;
    EXPECT_NE(fitted.out.find("offloaded 0/6 layers"), std::string::npos) << fitted.out;
    EXPECT_NE(fitted.out.find(golden), std::string::npos) << fitted.out;
    auto asked = llamapp_cli(base + " --fit off --fit-target 100000000");
    ASSERT_EQ(asked.status, 0) << asked.out;
    EXPECT_EQ(asked.out.find("layers on the devices"), std::string::npos) << asked.out;
    EXPECT_NE(asked.out.find("offloaded 6/6 layers"), std::string::npos) << asked.out;

    ServerProcess server(
        {"-m", stories(), "--rpc", remote.endpoint(), "--fit-target", "100000000", "-t", "1"});
    auto c = server.client();
    auto r =
        c.Post("/v1/completions",
               json{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}.dump(),
               "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_NE(server.log().find("with 0 layers on the devices"), std::string::npos) << server.log();
}
