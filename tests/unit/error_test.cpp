#include <gtest/gtest.h>

#include "llamapp/error.hpp"

using namespace llamapp;

TEST(Error, DescribeIncludesContextWhenPresent) {
    Error e{ErrorCode::invalid_argument, "n_ctx must be positive", "n_ctx=-1"};
    EXPECT_EQ(e.describe(), "n_ctx must be positive (n_ctx=-1)");
    Error bare{ErrorCode::internal, "oops", ""};
    EXPECT_EQ(bare.describe(), "oops");
}

TEST(Error, CodesHaveStableNames) {
    EXPECT_EQ(to_string(ErrorCode::file_not_found), "file_not_found");
    EXPECT_EQ(to_string(ErrorCode::invalid_model_file), "invalid_model_file");
    EXPECT_EQ(to_string(ErrorCode::context_overflow), "context_overflow");
    EXPECT_EQ(to_string(ErrorCode::insufficient_memory), "insufficient_memory");
    EXPECT_EQ(to_string(ErrorCode::model_unavailable), "model_unavailable");
    EXPECT_EQ(static_cast<int>(ErrorCode::invalid_argument), 1);
    EXPECT_EQ(to_string(ErrorCode::checksum_mismatch), "checksum_mismatch");
    EXPECT_EQ(static_cast<int>(ErrorCode::shutting_down), 22);
    EXPECT_EQ(static_cast<int>(ErrorCode::checksum_mismatch), 28);
    EXPECT_EQ(to_string(ErrorCode::device_lost), "device_lost");
    EXPECT_EQ(static_cast<int>(ErrorCode::device_lost), 29);
}

TEST(Error, FailBuildsUnexpected) {
    Result<int> r = fail(ErrorCode::timeout, "late", "deadline=5ms");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::timeout);
    EXPECT_EQ(r.error().context, "deadline=5ms");
}
