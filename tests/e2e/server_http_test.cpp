// The HTTP layer of `llamapp serve` under what a hostile or careless client sends: pipelined
// requests, heads over the limits, stalled requests, bodies that are not JSON, foreign Host and
// Origin headers, the Bearer scheme in any case, and TLS (SECURITY.md).
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <future>
#include <string_view>
#include <vector>

#include "support/command.hpp"
#include "support/http_helpers.hpp"
#include "support/paths.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using json = nlohmann::json;
using namespace llamapp::test;

const std::string stories = shared_model("stories260K.gguf").string();

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// The status line and JSON body of a raw answer.
struct RawAnswer {
    int status = 0;
    json body;
};
RawAnswer parse_answer(const std::string& raw) {
    RawAnswer a;
    if (raw.starts_with("HTTP/1.1 ")) a.status = std::atoi(raw.c_str() + 9);
    const auto split = raw.find("\r\n\r\n");
    if (split != std::string::npos) a.body = json::parse(raw.substr(split + 4), nullptr, false);
    return a;
}

// Sends `request` on a connection of its own and reads until the server closes it.
RawAnswer answer_closing(int port, const std::string& request) {
    RawConnection c(port);
    c.send(request);
    EXPECT_TRUE(c.read_to_close(std::chrono::seconds(30))) << "the connection stayed open";
    return parse_answer(c.received());
}

httplib::Headers with(std::string name, std::string value) {
    return {{std::move(name), std::move(value)}};
}

class HttpEdges : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        server_ = start_suite_server(
            {"-m", stories, "-c", "256", "-t", "1", "--parallel", "1", "--read-timeout", "1",
             "--max-body-bytes", "65536", "--cors-origin", "http://page.example"},
            start_error_);
    }
    void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static void expect_still_serving() {
        auto c = server_->client();
        auto r = c.Get("/health/live");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
    }
    static ServerProcess* server_;
    static std::string start_error_;
};
ServerProcess* HttpEdges::server_ = nullptr;
std::string HttpEdges::start_error_;

TEST_F(HttpEdges, PipelinedRequestsAreEachAnsweredInOrder) {
    auto client = server_->client();
    std::string requests;
    for (int i = 0; i < 10; ++i) requests += "GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n";
    std::vector<std::string> bodies;
    for (const char* word : {"one", "two", "three", "four", "five"}) {
        const std::string body = json{{"content", word}}.dump();
        requests += fmt::format(
            "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            "Content-Length: {}\r\n\r\n{}",
            body.size(), body);
        auto alone = client.Post("/tokenize", body, "application/json");
        ASSERT_TRUE(alone);
        bodies.push_back(alone->body);
    }
    RawConnection c(server_->port());
    ASSERT_TRUE(c.send(requests));  // all at once, before any answer is read
    ASSERT_TRUE(c.read_until(bodies.back(), std::chrono::seconds(30))) << c.received();
    EXPECT_EQ(count_of(c.received(), "HTTP/1.1 200 OK"), 15u) << c.received();
    std::size_t at = 0;
    for (const std::string& body : bodies) {
        at = c.received().find(body, at);
        ASSERT_NE(at, std::string::npos) << "answers out of order: " << c.received();
    }
    expect_still_serving();
}

TEST_F(HttpEdges, HeadsOverTheLimitsGet414And431) {
    const auto line = answer_closing(server_->port(), "GET /" + std::string(100'000, 'a') +
                                                          " HTTP/1.1\r\nHost: localhost\r\n\r\n");
    EXPECT_EQ(line.status, 414);
    EXPECT_EQ(line.body["error"]["code"], "request_line_too_long") << line.body;

    const auto big =
        answer_closing(server_->port(), "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " +
                                            std::string(20'000, 'b') + "\r\n\r\n");
    EXPECT_EQ(big.status, 431);
    EXPECT_EQ(big.body["error"]["code"], "headers_too_large") << big.body;

    std::string many = "GET /health HTTP/1.1\r\nHost: localhost\r\n";
    for (int i = 0; i < 200; ++i) many += fmt::format("X-Header-{}: v\r\n", i);
    EXPECT_EQ(answer_closing(server_->port(), many + "\r\n").status, 431);

    // Ollama's routes answer in Ollama's shape.
    const auto ollama = answer_closing(
        server_->port(), "POST /api/chat?" + std::string(10'000, 'q') + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(ollama.status, 414);
    EXPECT_TRUE(ollama.body["error"].is_string()) << ollama.body;
    expect_still_serving();
}

// A refused request may leave bytes httplib never read (an unknown method's body): they are not
// taken for a request, which would let one request smuggle another past a proxy's checks.
TEST_F(HttpEdges, NothingAfterARefusedRequestIsServed) {
    const std::string inner = "GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n";
    RawConnection c(server_->port());
    c.send(fmt::format("FOO / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{}",
                       inner.size(), inner));
    ASSERT_TRUE(c.read_to_close(std::chrono::seconds(30)));
    EXPECT_EQ(count_of(c.received(), "HTTP/1.1 "), 1u) << c.received();
    EXPECT_EQ(c.received().find("HTTP/1.1 200"), std::string::npos) << c.received();
    // Empty lines before a request line are ignored, as RFC 9112 asks.
    RawConnection blank(server_->port());
    blank.send("\r\n\r\n" + inner);
    ASSERT_TRUE(blank.read_until("\"ok\"", std::chrono::seconds(30))) << blank.received();
    EXPECT_TRUE(blank.received().starts_with("HTTP/1.1 200")) << blank.received();
}

// The suite's server reads with --read-timeout 1: a stalled client is answered, not left to
// hold its thread for a minute.
TEST_F(HttpEdges, AStalledRequestIsAnsweredOnceTheReadTimeoutPasses) {
    const auto head =
        answer_closing(server_->port(), "GET /health HTTP/1.1\r\nHost: localhost\r\n");
    EXPECT_EQ(head.status, 408);
    EXPECT_EQ(head.body["error"]["code"], "request_timeout") << head.body;

    // A body that stops arriving is a stalled request too, not a malformed one.
    const auto body = answer_closing(server_->port(),
                                     "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                     "application/json\r\nContent-Length: 100\r\n\r\n{\"content\"");
    EXPECT_EQ(body.status, 408);
    EXPECT_EQ(body.body["error"]["code"], "request_timeout") << body.body;
    // One that ends before its length is malformed.
    RawConnection shorter(server_->port());
    shorter.send(
        "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
        "\r\nContent-Length: 100\r\n\r\n{\"content\"");
    shorter.finish_sending();
    ASSERT_TRUE(shorter.read_to_close(std::chrono::seconds(30)));
    EXPECT_EQ(parse_answer(shorter.received()).status, 400) << shorter.received();
    expect_still_serving();
}

// The suite's server takes bodies up to 64 KiB. A larger one is refused without being read into
// memory: on its Content-Length, before the body (and before inviting it with 100 Continue), and
// a chunked one once it passes the limit.
TEST_F(HttpEdges, ABodyOverTheLimitIsRefusedBeforeItIsRead) {
    const std::string head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Type: application/json\r\n";
    for (const std::string expect : {"", "Expect: 100-continue\r\n"}) {
        RawConnection c(server_->port());
        c.send(head + "Content-Length: 52428800\r\n" + expect + "\r\n");
        ASSERT_TRUE(c.read_to_close(std::chrono::seconds(30))) << expect;
        EXPECT_TRUE(c.received().starts_with("HTTP/1.1 413")) << expect << c.received();
        EXPECT_EQ(parse_answer(c.received()).body["error"]["code"], "body_too_large")
            << c.received();
    }
    std::string chunked = head + "Transfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 16; ++i) chunked += "2000\r\n" + std::string(0x2000, ' ') + "\r\n";
    const auto refused = answer_closing(server_->port(), chunked + "0\r\n\r\n");
    EXPECT_EQ(refused.status, 413);
    // Within the limit, announced or chunked, a body is read as before.
    auto c = server_->client();
    const std::string within = json{{"content", std::string(60'000, 'a')}}.dump();
    auto whole = c.Post("/tokenize", within, "application/json");
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->status, 200) << whole->body;
    const std::string small = json{{"content", "hello"}}.dump();
    const auto in_chunks = answer_closing(
        server_->port(),
        fmt::format("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                    "application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
                    "\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                    small.size(), small));
    EXPECT_EQ(in_chunks.status, 200);
    expect_still_serving();
}

// A line ended by LF alone is answered 400, not met with silence (nor read as a proxy might not).
TEST_F(HttpEdges, ALineEndedByABareLineFeedGets400) {
    for (const std::string request :
         {"GET /health HTTP/1.1\n\n", "GET /health HTTP/1.1\r\nHost: localhost\n\r\n",
          "POST /api/chat HTTP/1.1\nHost: localhost\n\n"}) {
        const auto answer = answer_closing(server_->port(), request);
        EXPECT_EQ(answer.status, 400) << request;
        EXPECT_FALSE(answer.body.is_discarded()) << request;
    }
    expect_still_serving();
}

// The server's resident memory in MB, from /proc.
double resident_mb(pid_t pid) {
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    for (std::string line; std::getline(status, line);)
        if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024;
    return 0;
}

// A chunked body is read up to the limit before it is refused. glibc would keep each such
// buffer in the arena of the connection thread that read it (24 MB each, up to 8 arenas a core):
// `serve` makes buffers that large come from mmap, so they leave the process when freed.
TEST(HttpMemory, OversizedChunkedBodiesLeaveNothingResident) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "a sanitizer's allocator, not glibc's, holds the memory here";
#endif
    ServerProcess server({"-m", stories, "-c", "256", "-t", "1", "--parallel", "1"});
    const std::string head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
        "application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    std::string chunks;
    for (int i = 0; i < 16; ++i) chunks += "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
    const double before = resident_mb(server.pid());
    for (int round = 0; round < 3; ++round) {
        // Eight at once, so that eight connection threads each read one.
        std::vector<std::future<std::string>> answers;
        for (int i = 0; i < 8; ++i)
            answers.push_back(std::async(std::launch::async, [&] {
                RawConnection c(server.port());
                // 9 MiB, past the default 8 MiB limit; the server may close before the end.
                bool sending = c.send(head);
                for (int mib = 0; sending && mib < 9; ++mib) sending = c.send(chunks);
                c.read_to_close(std::chrono::seconds(60));
                return c.received();
            }));
        for (auto& a : answers) EXPECT_TRUE(a.get().starts_with("HTTP/1.1 413"));
    }
    const double after = resident_mb(server.pid());
    EXPECT_LT(after - before, 48) << "resident " << before << " MB, then " << after << " MB";
}

// A body labelled other than JSON is what a page of another site can send without asking
// (SECURITY.md): refused when an Origin of another site came with it, read as JSON when none did
// (curl -d labels JSON a form).
TEST_F(HttpEdges, BodiesNotLabelledJsonAreTakenOnlyFromNonBrowsers) {
    auto c = server_->client();
    const std::string body = R"({"content": "hello"})";
    const httplib::Headers page = {{"Origin", "http://page.example"}};
    for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x", "text/json"}) {
        auto r = c.Post("/tokenize", page, body, type);
        expect_error_shape(r, 415, type);
        EXPECT_EQ(json::parse(r->body)["error"]["code"], "unsupported_media_type");
        if (std::string_view(type).starts_with("multipart/")) continue;  // httplib parses those
        auto curl = c.Post("/tokenize", body, type);
        ASSERT_TRUE(curl);
        EXPECT_EQ(curl->status, 200) << type << ": " << curl->body;
    }
    // Not JSON whatever its label: the parser's 400, not a 415.
    auto form = c.Post("/tokenize", "content=hello", "application/x-www-form-urlencoded");
    expect_error_shape(form, 400, "a form");
    for (const char* type : {"application/json", "application/json; charset=utf-8",
                             "Application/JSON", "application/vnd.api+json"}) {
        auto r = c.Post("/tokenize", page, body, type);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << type << ": " << r->body;
    }
    // No Content-Type at all: JSON, as curl and scripts that leave it out mean.
    RawConnection raw(server_->port());
    raw.send(
        fmt::format("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{}",
                    body.size(), body));
    ASSERT_TRUE(raw.read_until("tokens", std::chrono::seconds(30))) << raw.received();
    EXPECT_EQ(parse_answer(raw.received()).status, 200);
    // A request without a body has nothing to misread, whatever its type says.
    auto empty = c.Post("/cache/clear", page, "", "application/x-www-form-urlencoded");
    ASSERT_TRUE(empty);
    EXPECT_NE(empty->status, 415) << empty->body;
    // Each protocol's shape.
    auto ollama = c.Post("/api/chat", page, body, "text/plain");
    ASSERT_TRUE(ollama);
    EXPECT_EQ(ollama->status, 415);
    EXPECT_TRUE(json::parse(ollama->body)["error"].is_string()) << ollama->body;
    auto anthropic = c.Post("/v1/messages", page, body, "text/plain");
    ASSERT_TRUE(anthropic);
    EXPECT_EQ(anthropic->status, 415);
    EXPECT_EQ(json::parse(anthropic->body)["type"], "error") << anthropic->body;
}

TEST_F(HttpEdges, ALoopbackServerAnswersOnlyLoopbackHostNames) {
    auto c = server_->client();
    for (const char* host :
         {"evil.example", "evil.example:80", "localhost.evil.example", "10.0.0.1"}) {
        auto r = c.Get("/v1/models", with("Host", host));
        expect_error_shape(r, 403, host);
        EXPECT_EQ(json::parse(r->body)["error"]["code"], "host_not_allowed");
    }
    const std::string port = std::to_string(server_->port());
    for (const std::string& host :
         std::vector<std::string>{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port,
                                  "app.localhost", "LOCALHOST", "127.1.2.3"}) {
        auto r = c.Get("/v1/models", with("Host", host));
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << host << ": " << r->body;
    }
    // HTTP/1.0 sends no Host.
    RawConnection raw(server_->port());
    raw.send("GET /v1/models HTTP/1.0\r\n\r\n");
    ASSERT_TRUE(raw.read_to_close(std::chrono::seconds(30)));
    EXPECT_TRUE(raw.received().starts_with("HTTP/1.1 200")) << raw.received();
}

TEST_F(HttpEdges, ABrowserPageOfAnotherOriginIsRefused) {
    auto c = server_->client();
    const std::string body = R"({"content": "hello"})";
    auto tokenize =
        c.Post("/tokenize", with("Origin", "http://evil.example"), body, "application/json");
    expect_error_shape(tokenize, 403, "tokenize");
    EXPECT_EQ(json::parse(tokenize->body)["error"]["code"], "origin_not_allowed");
    auto clear = c.Post("/cache/clear", with("Origin", "null"), "", "application/json");
    expect_error_shape(clear, 403, "cache/clear");
    auto models = c.Get("/v1/models", with("Origin", "http://evil.example"));
    expect_error_shape(models, 403, "models");
    // A page of the server's own origin.
    const std::string own = fmt::format("http://127.0.0.1:{}", server_->port());
    auto same = c.Post("/tokenize", with("Origin", own), body, "application/json");
    ASSERT_TRUE(same);
    EXPECT_EQ(same->status, 200) << same->body;
    // A preflight gets none of the CORS headers that would let the page go on.
    auto preflight = c.Options("/v1/chat/completions", with("Origin", "http://evil.example"));
    ASSERT_TRUE(preflight);
    EXPECT_FALSE(preflight->has_header("Access-Control-Allow-Origin"));
}

// Origins named, "*", a Host allowed by name and an API key, on one server.
TEST(HttpAccess, NamedOriginsReachOperatorRoutesAndAnyOriginTheOthers) {
    ServerProcess server({"-m", stories, "-c", "256", "-t", "1", "--parallel", "1",
                          "--cors-origins", "http://app.example,*", "--allowed-hosts",
                          "api.example", "--api-key", "secret"});
    auto c = server.client();
    const auto call = [&](const std::string& path, const std::string& origin,
                          const std::string& auth = "Bearer secret") {
        httplib::Headers h{{"Origin", origin}, {"Authorization", auth}};
        return c.Post(path, h, R"({"content": "hi"})", "application/json");
    };
    auto named = call("/cache/clear", "http://app.example");
    ASSERT_TRUE(named);
    EXPECT_NE(named->status, 403) << named->body;
    auto any = call("/tokenize", "http://other.example");
    ASSERT_TRUE(any);
    EXPECT_EQ(any->status, 200) << any->body;
    EXPECT_EQ(any->get_header_value("Access-Control-Allow-Origin"), "http://other.example");
    for (const char* path : {"/cache/clear", "/models/load", "/models/unload", "/api/pull",
                             "/api/copy", "/slots/0?action=erase"}) {
        auto r = call(path, "http://other.example");
        ASSERT_TRUE(r) << path;
        EXPECT_EQ(r->status, 403) << path << ": " << r->body;
    }
    auto host = c.Get("/health", with("Host", "API.example:443"));
    ASSERT_TRUE(host);
    EXPECT_EQ(host->status, 200) << host->body;

    // RFC 9110: the scheme's name is case-insensitive.
    for (const char* auth : {"bearer secret", "BEARER   secret", "Bearer\tsecret"}) {
        auto r = call("/tokenize", "http://app.example", auth);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << auth << ": " << r->body;
    }
    for (const char* auth : {"Basic secret", "Bearersecret", "Bearer", "Bearer secret2"}) {
        auto r = call("/tokenize", "http://app.example", auth);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 401) << auth;
    }
}

// A self-signed certificate for 127.0.0.1, made with the openssl command.
void make_certificate(const std::filesystem::path& dir, const std::string& name) {
    const std::string cmd = fmt::format(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
        "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout {0}/{1}.key -out {0}/{1}.pem "
        "2>&1",
        dir.string(), name);
    const CommandResult made = run_command(cmd);
    ASSERT_EQ(made.status, 0) << cmd << "\n" << made.out;
}

TEST(HttpTls, ServesHttpsWithTheCertificateGiven) {
    TempDir dir;
    ASSERT_NO_FATAL_FAILURE(make_certificate(dir.path(), "server"));
    const std::string cert = (dir.path() / "server.pem").string();
    const std::string key = (dir.path() / "server.key").string();
    ServerProcess server({"-m", stories, "-c", "256", "-t", "1", "--parallel", "1",
                          "--ssl-cert-file", cert, "--ssl-key-file", key});
    EXPECT_NE(server.log().find("https://127.0.0.1:"), std::string::npos) << server.log();

    httplib::SSLClient c("127.0.0.1", server.port());
    c.set_ca_cert_path(cert);
    c.enable_server_certificate_verification(true);
    c.set_read_timeout(std::chrono::seconds(60));
    auto health = c.Get("/health");
    ASSERT_TRUE(health) << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
    json completion = {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}};
    auto r = c.Post("/completion", completion.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_FALSE(json::parse(r->body)["content"].get<std::string>().empty());

    // Plain HTTP on the TLS port gets no answer, and the server goes on.
    auto plain = server.client(std::chrono::seconds(5));
    auto refused = plain.Get("/health");
    EXPECT_TRUE(!refused || refused->status >= 400);
    EXPECT_TRUE(c.Get("/health"));
}

TEST(HttpTls, AKeyThatIsNotTheCertificatesIsAnErrorAtStart) {
    TempDir dir;
    ASSERT_NO_FATAL_FAILURE(make_certificate(dir.path(), "one"));
    ASSERT_NO_FATAL_FAILURE(make_certificate(dir.path(), "two"));
    const std::string cert = (dir.path() / "one.pem").string();
    const auto start = [&](std::vector<std::string> tls) {
        std::vector<std::string> args = {"-m", stories, "-c", "256"};
        args.insert(args.end(), tls.begin(), tls.end());
        try {
            ServerProcess server(args);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("it started");
    };
    EXPECT_NE(start({"--ssl-cert-file", cert, "--ssl-key-file", (dir.path() / "two.key").string()})
                  .find("cannot use the TLS certificate or key"),
              std::string::npos);
    EXPECT_NE(start({"--ssl-cert-file", cert}).find("go together"), std::string::npos);
    EXPECT_NE(start({"--ssl-cert-file", cert, "--ssl-key-file", "/nonexistent.key"})
                  .find("cannot read the file"),
              std::string::npos);
}

}  // namespace
