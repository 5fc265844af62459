// The HTTP layer's decisions without a socket: where a request's head ends or breaks a limit, and
// which Host, Origin, Content-Type and Authorization headers a request may carry.
#include <gtest/gtest.h>

#include <cctype>

#include "llamapp/fingerprint.hpp"
#include "server/http/access_policy.hpp"
#include "server/http/connection.hpp"

namespace {

using namespace llamapp::detail;

TEST(HttpHead, AHeadIsCompleteAtItsBlankLine) {
    const ConnectionLimits limits;
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nHost: a\r\n\r\n", limits), HeadScan::complete);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\n\r\nbody", limits), HeadScan::complete);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nHost: a\r\n", limits), HeadScan::incomplete);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nHost: a\r", limits), HeadScan::incomplete);
    EXPECT_EQ(scan_head("", limits), HeadScan::incomplete);
    // A line ended by a bare LF is refused, in the request line or a header, never waited on.
    EXPECT_EQ(scan_head("GET / HTTP/1.1\n\n", limits), HeadScan::bare_line_feed);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nHost: a\n\r\n", limits), HeadScan::bare_line_feed);
    EXPECT_EQ(scan_head("\n", limits), HeadScan::bare_line_feed);
}

TEST(HttpHead, TheAnnouncedLengthIsReadFromTheHead) {
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\nContent-Length: 52428800\r\n\r\n"), 52428800u);
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\ncontent-LENGTH:\t7 \r\nHost: a\r\n\r\n"), 7u);
    EXPECT_EQ(announced_length("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), std::nullopt);
    // The same value twice is one length; two values, a sign or junk are left to httplib's 400.
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
              5u);
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
              std::nullopt);
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), std::nullopt);
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n"), std::nullopt);
    // Past the blank line is the body, not a header.
    EXPECT_EQ(announced_length("POST / HTTP/1.1\r\n\r\nContent-Length: 9\r\n"), std::nullopt);
}

TEST(HttpHead, EachLimitHasItsStatus) {
    ConnectionLimits limits;
    limits.max_request_line = 20;
    limits.max_header_line = 16;
    limits.max_headers = 2;
    limits.max_head_bytes = 64;
    // The request line: too long whether or not its end has arrived.
    EXPECT_EQ(scan_head("GET /" + std::string(30, 'a'), limits), HeadScan::uri_too_long);
    EXPECT_EQ(scan_head("GET /" + std::string(30, 'a') + "\r\n\r\n", limits),
              HeadScan::uri_too_long);
    EXPECT_EQ(scan_head("GET /" + std::string(15, 'a') + "\r\n\r\n", limits), HeadScan::complete);
    // A header line of 16 bytes with its CRLF passes; 17 does not, ended or not.
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nX: 12345678901\r\n\r\n", limits), HeadScan::complete);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nX: 123456789012\r\n\r\n", limits),
              HeadScan::headers_too_large);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nX: 123456789012345", limits),
              HeadScan::headers_too_large);
    // Two headers pass, three do not.
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", limits), HeadScan::complete);
    EXPECT_EQ(scan_head("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", limits),
              HeadScan::headers_too_large);
    // The whole head.
    limits.max_headers = 100;
    std::string head = "GET / HTTP/1.1\r\n";
    while (head.size() < 64) head += "A: 1\r\n";
    EXPECT_EQ(scan_head(head + "\r\n", limits), HeadScan::headers_too_large);
}

TEST(HttpHead, ANewScanWaitsForALineEndOrAKilobyte) {
    const std::string first = "POST / HTTP/1.1\r\nHost: a\r";
    EXPECT_TRUE(head_worth_scanning(first, std::nullopt));
    EXPECT_FALSE(head_worth_scanning(first + "X", first.size()));
    // The head's end and the body in one read: the line that ended is seen.
    EXPECT_TRUE(head_worth_scanning(first + "\n\r\n{\"content\": 1}", first.size()));
    EXPECT_TRUE(head_worth_scanning(first + std::string(1024, 'x'), first.size()));
}

TEST(HttpPolicy, BearerIsCaseInsensitive) {
    EXPECT_EQ(bearer_token("Bearer abc"), "abc");
    EXPECT_EQ(bearer_token("bearer abc"), "abc");
    EXPECT_EQ(bearer_token("BEARER \t abc "), "abc");
    EXPECT_EQ(bearer_token("Bearerabc"), "");
    EXPECT_EQ(bearer_token("Bearer"), "");
    EXPECT_EQ(bearer_token("Bearer   "), "");
    EXPECT_EQ(bearer_token("Basic abc"), "");
}

TEST(HttpPolicy, KeysAreHeldAsDigestsAndADigestMayStandForItsKey) {
    const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    std::string upper = abc;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const auto digests = key_digests({"abc", "sha256:" + upper, "sha256:abc"});
    ASSERT_EQ(digests.size(), 3u);
    EXPECT_EQ(digests[0], abc);
    EXPECT_EQ(digests[1], abc);  // the digest given, in lower case
    EXPECT_EQ(digests[2],
              llamapp::sha256_hex("sha256:abc"));  // not 64 hex digits: a key like any other
}

TEST(HttpPolicy, LoopbackNames) {
    for (const char* yes :
         {"localhost", "LocalHost", "a.localhost", "127.0.0.1", "127.255.0.9", "::1", "[::1]"})
        EXPECT_TRUE(loopback_name(yes)) << yes;
    for (const char* no : {"localhost.evil", "evil-localhost", "128.0.0.1", "0.0.0.0",
                           "::", "example.com", "", "127.0.0.1.evil"})
        EXPECT_FALSE(loopback_name(no)) << no;
}

httplib::Request request(std::string method, std::string path, httplib::Headers headers) {
    httplib::Request r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.headers = std::move(headers);
    return r;
}

std::string refusal(const AccessPolicy& p, const httplib::Request& r) {
    const auto no = p.refuse(r);
    return no ? std::to_string(no->status) + " " + no->code : "ok";
}

TEST(HttpPolicy, HostIsCheckedOnlyOnLoopbackListeners) {
    llamapp::ServerOptions o;
    const auto get = request("GET", "/v1/models", {{"Host", "evil.example:8080"}});
    EXPECT_EQ(refusal(AccessPolicy(o), get), "403 host_not_allowed");
    o.allowed_hosts = {"Evil.Example"};
    EXPECT_EQ(refusal(AccessPolicy(o), get), "ok");
    o.allowed_hosts = {"*"};
    EXPECT_EQ(refusal(AccessPolicy(o), get), "ok");
    o.allowed_hosts = {};
    o.host = "127.0.0.1,::1";
    EXPECT_EQ(refusal(AccessPolicy(o), get), "403 host_not_allowed");
    o.host = "127.0.0.1,192.168.1.5";  // reachable from the network: any name may be its
    EXPECT_EQ(refusal(AccessPolicy(o), get), "ok");
    o.host = "0.0.0.0";
    EXPECT_EQ(refusal(AccessPolicy(o), get), "ok");
    o.host = "127.0.0.1";
    o.unix_socket = "/tmp/llamapp.sock";
    EXPECT_EQ(refusal(AccessPolicy(o), get), "ok");
}

TEST(HttpPolicy, OriginsAndOperatorRoutes) {
    llamapp::ServerOptions o;
    o.cors_origins = {"http://app.example", "*"};
    const AccessPolicy p(o);
    const auto from = [](std::string origin, std::string method, std::string path) {
        return request(std::move(method), std::move(path),
                       {{"Host", "localhost:8080"}, {"Origin", std::move(origin)}});
    };
    EXPECT_EQ(refusal(p, from("http://app.example", "POST", "/cache/clear")), "ok");
    EXPECT_EQ(refusal(p, from("http://other.example", "POST", "/v1/chat/completions")), "ok");
    EXPECT_EQ(refusal(p, from("http://other.example", "GET", "/cache")), "ok");
    for (const auto& [method, path] :
         std::vector<std::pair<std::string, std::string>>{{"POST", "/cache/clear"},
                                                          {"POST", "/cache/prune"},
                                                          {"POST", "/models"},
                                                          {"DELETE", "/models"},
                                                          {"POST", "/models/load"},
                                                          {"POST", "/slots/0"},
                                                          {"DELETE", "/api/delete"},
                                                          {"POST", "/api/pull"},
                                                          {"POST", "/api/copy"}})
        EXPECT_EQ(refusal(p, from("http://other.example", method, path)), "403 origin_not_allowed")
            << method << " " << path;
    EXPECT_EQ(refusal(p, from("http://localhost:8080", "POST", "/cache/clear")), "ok");  // its own

    llamapp::ServerOptions none;
    EXPECT_EQ(refusal(AccessPolicy(none), from("http://other.example", "GET", "/v1/models")),
              "403 origin_not_allowed");
    EXPECT_EQ(refusal(AccessPolicy(none), from("http://other.example", "OPTIONS", "/v1/models")),
              "ok");
}

// A body not labelled JSON is refused only where a browser could have sent it unasked: with an
// Origin of another site. Browsers send Origin with every POST; curl and SDKs send none, and
// `curl -d '{...}'` labels its JSON a form.
TEST(HttpPolicy, BodiesLabelledOtherThanJsonAreRefusedFromOtherSitesOnly) {
    llamapp::ServerOptions o;
    o.cors_origins = {
        "*"};  // so that the Origin check lets the other site's request reach this one
    const AccessPolicy p(o);
    const auto post = [](std::string type, std::string length, std::string origin = "") {
        httplib::Headers h{{"Host", "localhost:8080"}, {"Content-Length", std::move(length)}};
        if (!type.empty()) h.emplace("Content-Type", std::move(type));
        if (!origin.empty()) h.emplace("Origin", std::move(origin));
        return request("POST", "/v1/chat/completions", std::move(h));
    };
    const std::string other = "http://other.example";
    EXPECT_EQ(refusal(p, post("text/plain;charset=UTF-8", "10", other)),
              "415 unsupported_media_type");
    EXPECT_EQ(refusal(p, post("application/x-www-form-urlencoded", "10", other)),
              "415 unsupported_media_type");
    EXPECT_EQ(refusal(p, post("application/jsonp", "10", other)), "415 unsupported_media_type");
    EXPECT_EQ(refusal(p, post("text/plain", "10", "null")), "415 unsupported_media_type");
    EXPECT_EQ(refusal(p, post("application/json", "10", other)), "ok");
    EXPECT_EQ(refusal(p, post(" application/problem+json ; q=1", "10", other)), "ok");
    EXPECT_EQ(refusal(p, post("", "10", other)), "ok");
    EXPECT_EQ(refusal(p, post("text/plain", "0", other)), "ok");
    EXPECT_EQ(refusal(p, post("text/plain", "000", other)), "ok");
    auto chunked = post("text/plain", "", other);
    chunked.headers.emplace("Transfer-Encoding", "chunked");
    EXPECT_EQ(refusal(p, chunked), "415 unsupported_media_type");
    // No Origin (curl, an SDK) or the server's own page: the body is read as JSON.
    EXPECT_EQ(refusal(p, post("application/x-www-form-urlencoded", "10")), "ok");
    EXPECT_EQ(refusal(p, post("text/plain", "10", "http://localhost:8080")), "ok");
}

}  // namespace
