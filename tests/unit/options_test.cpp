#include <gtest/gtest.h>

#include "llamapp/backend.hpp"
#include "llamapp/context.hpp"
#include "llamapp/fingerprint.hpp"
#include "llamapp/log.hpp"
#include "support/temp_dir.hpp"

#include <chrono>
#include <fstream>

using namespace llamapp;

TEST(KvType, ParsesEveryTypeLlamaCppAccepts) {
    for (const char* name :
         {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}) {
        auto t = parse_kv_type(name);
        ASSERT_TRUE(t) << name;
        EXPECT_EQ(to_string(*t), name);
    }
}

TEST(KvType, UnknownTypeIsInvalidArgument) {
    auto t = parse_kv_type("q3_k");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, ErrorCode::invalid_argument);
}

TEST(Pooling, Parses) {
    EXPECT_EQ(*parse_pooling("mean"), Pooling::mean);
    EXPECT_EQ(*parse_pooling("default"), Pooling::model_default);
    EXPECT_FALSE(parse_pooling("max"));
}

TEST(LogLevel, ParsesNames) {
    LogLevel l{};
    EXPECT_TRUE(parse_log_level("debug", l));
    EXPECT_EQ(l, LogLevel::debug);
    EXPECT_TRUE(parse_log_level("none", l));
    EXPECT_EQ(l, LogLevel::none);
    EXPECT_FALSE(parse_log_level("loud", l));
}

TEST(Devices, CpuIsAlwaysListed) {
    auto devices = list_devices();
    ASSERT_FALSE(devices.empty());
    bool has_cpu = false;
    for (const auto& d : devices) has_cpu |= d.type == DeviceType::cpu;
    EXPECT_TRUE(has_cpu);
}

TEST(Fingerprint, Sha256OfKnownBytes) {
    EXPECT_EQ(sha256_hex("abc"),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Fingerprint, CachedPerPathSizeAndModificationTime) {
    test::TempDir dir;
    const auto file = dir.path() / "model.bin";
    std::ofstream(file) << "abc";
    EXPECT_EQ(file_sha256(file), sha256_hex("abc"));
    // Same size, same modification time: the cached value, not the new content's.
    const auto mtime = std::filesystem::last_write_time(file);
    std::ofstream(file, std::ios::trunc) << "abd";
    std::filesystem::last_write_time(file, mtime);
    EXPECT_EQ(file_sha256(file), sha256_hex("abc"));
    // A new modification time, or a new size, is a new file.
    std::filesystem::last_write_time(file, mtime + std::chrono::seconds(10));
    EXPECT_EQ(file_sha256(file), sha256_hex("abd"));
    std::ofstream(file, std::ios::trunc) << "abcd";
    std::filesystem::last_write_time(file, mtime + std::chrono::seconds(10));
    EXPECT_EQ(file_sha256(file), sha256_hex("abcd"));
    EXPECT_FALSE(file_sha256(dir.path() / "missing"));
}
