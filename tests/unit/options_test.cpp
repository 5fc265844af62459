#include <gtest/gtest.h>

#include "llamapp/backend.hpp"
#include "llamapp/context.hpp"
#include "llamapp/fingerprint.hpp"
#include "llamapp/log.hpp"

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
