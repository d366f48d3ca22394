// Tests of Status, Result and the propagation macros.
#include "ground/common/status.h"

#include <gtest/gtest.h>

namespace karma {
namespace {

Result<int> Half(int v) {
  if (v % 2) return InvalidArgument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  KARMA_ASSIGN_OR_RETURN(int h, Half(v));
  KARMA_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int v) {
  KARMA_RETURN_IF_ERROR(Half(v).status());
  return Status::Ok();
}

TEST(Status, PropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), Code::kInvalidArgument);
}

TEST(Status, ContextIsPrefixed) {
  Status s = Corrupt("bad record").WithContext("a.ktrace");
  EXPECT_EQ(s.message(), "a.ktrace: bad record");
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
  EXPECT_STREQ(CodeName(Code::kUnsupported), "unsupported");
}

}  // namespace
}  // namespace karma
