// Which file a hub reference names, decided from a listing without a network.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "hub/hub_internal.hpp"

namespace {

using llamapp::ErrorCode;
using llamapp::HubRef;
using llamapp::HubRepoFiles;

HubRepoFiles listing(std::vector<std::string> paths) {
    HubRepoFiles l{"o/r"};
    for (auto& p : paths) l.files.push_back(llamapp::HubFile{p, 1});
    llamapp::detail::classify_files(l);
    return l;
}

TEST(HubChoice, QuantTagsAreReadFromNames) {
    using llamapp::detail::quant_of;
    EXPECT_EQ(quant_of("Qwen3-0.6B-Q4_K_M.gguf"), "Q4_K_M");
    EXPECT_EQ(quant_of("model.q8_0.gguf"), "Q8_0");
    EXPECT_EQ(quant_of("sub/llama-IQ4_XS-00001-of-00002.gguf"), "IQ4_XS");
    EXPECT_EQ(quant_of("gemma-bf16.gguf"), "BF16");
    EXPECT_EQ(quant_of("plain.gguf"), "");
    EXPECT_EQ(quant_of("Qwen.gguf"), "");
}

TEST(HubChoice, SplitNamesAndSidecarsAreRecognised) {
    const auto s = llamapp::detail::split_of("a/big-Q8_0-00002-of-00005.gguf");
    EXPECT_EQ(s.prefix, "a/big-Q8_0");
    EXPECT_EQ(s.part, 2);
    EXPECT_EQ(s.count, 5);
    EXPECT_EQ(llamapp::detail::split_of("x.gguf").count, 1);
    EXPECT_FALSE(llamapp::detail::is_model_file("mmproj-F16.gguf"));
    EXPECT_FALSE(llamapp::detail::is_model_file("big-Q8_0-00002-of-00005.gguf"));
    EXPECT_FALSE(llamapp::detail::is_model_file("mtp-model-Q8_0.gguf"));
    EXPECT_FALSE(llamapp::detail::is_model_file("README.md"));
    EXPECT_TRUE(llamapp::detail::is_model_file("big-Q8_0-00001-of-00005.gguf"));
}

TEST(HubChoice, TagFileAndDefaultChoices) {
    const auto l = listing({"m-F16.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-Q4_K_M.gguf"});
    EXPECT_EQ(llamapp::hub_choose_file(HubRef{"o/r"}, l)->path, "m-Q4_K_M.gguf");
    EXPECT_EQ(llamapp::hub_choose_file(HubRef{"o/r", "", "q8_0"}, l)->path, "m-Q8_0.gguf");
    EXPECT_EQ(llamapp::hub_choose_file(HubRef{"o/r", "m-F16.gguf"}, l)->path, "m-F16.gguf");
    const auto none = llamapp::hub_choose_file(HubRef{"o/r", "", "Q5_K_M"}, l);
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().code, ErrorCode::not_found);
    EXPECT_NE(none.error().message.find("m-Q8_0.gguf"), std::string::npos);
    const auto only_f16 = listing({"x-F16.gguf", "y-BF16.gguf"});
    EXPECT_EQ(llamapp::hub_choose_file(HubRef{"o/r"}, only_f16)->path, "x-F16.gguf");
}

TEST(HubChoice, ATagMatchingSeveralModelsIsAnErrorNamingThem) {
    const auto l = listing({"a/m-Q4_K_M.gguf", "b/m-Q4_K_M.gguf", "m-Q4_K_M-00001-of-00002.gguf",
                            "m-Q4_K_M-00002-of-00002.gguf"});
    const auto r = llamapp::hub_choose_file(HubRef{"o/r", "", "Q4_K_M"}, l);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("3 files"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("b/m-Q4_K_M.gguf"), std::string::npos);
    EXPECT_EQ(llamapp::hub_choose_file(HubRef{"o/r", "b/m-Q4_K_M.gguf"}, l)->path,
              "b/m-Q4_K_M.gguf");
    EXPECT_FALSE(llamapp::hub_choose_file(HubRef{"o/r"}, listing({"README.md"})));
}

// Proxies from an environment given as a table.
llamapp::Result<std::optional<llamapp::detail::HubProxy>> proxy_for(
    const std::string& url, std::map<std::string, std::string> env) {
    return llamapp::detail::hub_proxy_for(url, [env](const char* name) {
        auto it = env.find(name);
        return it == env.end() ? std::string() : it->second;
    });
}

TEST(HubProxy, TheSchemesVariableThenAllProxyLowerCaseFirst) {
    auto none = proxy_for("https://huggingface.co/", {{"HTTP_PROXY", "http://p:1"}});
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
    auto https = proxy_for("https://huggingface.co/",
                           {{"HTTPS_PROXY", "http://upper:3128"}, {"https_proxy", "lower:8080"}});
    ASSERT_TRUE(https && *https);
    EXPECT_EQ((*https)->host, "lower");
    EXPECT_EQ((*https)->port, 8080);
    auto all = proxy_for("http://mirror.local/", {{"ALL_PROXY", "http://u:s%3Dx@[::1]:9"}});
    ASSERT_TRUE(all && *all);
    EXPECT_EQ((*all)->host, "::1");
    EXPECT_EQ((*all)->port, 9);
    EXPECT_EQ((*all)->user, "u");
    EXPECT_EQ((*all)->password, "s=x");
    auto bare = proxy_for("http://h/", {{"http_proxy", "proxy.corp"}});
    ASSERT_TRUE(bare && *bare);
    EXPECT_EQ((*bare)->port, 1080);
}

TEST(HubProxy, NoProxyNamesHostsAndTheirSubdomains) {
    const std::map<std::string, std::string> env{
        {"HTTPS_PROXY", "http://p:1"}, {"NO_PROXY", "localhost, .internal.org,cdn.example:443"}};
    for (const char* direct : {"https://localhost/", "https://hub.internal.org/",
                               "https://internal.org/", "https://cdn.example/x"}) {
        auto p = proxy_for(direct, env);
        ASSERT_TRUE(p);
        EXPECT_FALSE(*p) << direct;
    }
    for (const char* proxied : {"https://huggingface.co/", "https://notinternal.org/"}) {
        auto p = proxy_for(proxied, env);
        ASSERT_TRUE(p);
        EXPECT_TRUE(*p) << proxied;
    }
    auto star = proxy_for("https://huggingface.co/", {{"HTTPS_PROXY", "p:1"}, {"no_proxy", "*"}});
    ASSERT_TRUE(star);
    EXPECT_FALSE(*star);
}

TEST(HubProxy, WhatCannotBeUsedIsRefusedNamingTheVariable) {
    auto socks = proxy_for("https://h/", {{"HTTPS_PROXY", "socks5://p:1080"}});
    ASSERT_FALSE(socks);
    EXPECT_EQ(socks.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(socks.error().context, "HTTPS_PROXY");
    auto port = proxy_for("http://h/", {{"http_proxy", "http://p:99999"}});
    ASSERT_FALSE(port);
    EXPECT_EQ(port.error().context, "http_proxy");
    EXPECT_FALSE(proxy_for("http://h/", {{"http_proxy", "http://:80"}}));
}

}  // namespace
