// Which file a hub reference names, decided from a listing without a network.
#include <gtest/gtest.h>

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

}  // namespace
