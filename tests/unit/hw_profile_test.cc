// Tests of the hardware profile table and the roofline cost.
#include <gtest/gtest.h>

#include "policy/cost.h"
#include "policy/hw_profile.h"

namespace karma::policy {
namespace {

TEST(HwProfile, PaperPlatformIsTheDefault) {
  const HwProfile& v100 = DefaultProfile();
  EXPECT_STREQ(v100.name, "v100-16g-pcie3");
  EXPECT_EQ(v100.memory_bytes, 16ull << 30);
  EXPECT_DOUBLE_EQ(v100.h2d_bw, 12e9);
  EXPECT_DOUBLE_EQ(v100.flops_per_s, 14e12);
  EXPECT_DOUBLE_EQ(v100.memory_bw, 900e9);
  auto a100 = FindProfile("a100-40g-pcie4");
  ASSERT_TRUE(a100.ok());
  EXPECT_DOUBLE_EQ(a100->h2d_bw, 24e9);
  auto h100 = FindProfile("h100-80g-pcie5");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->memory_bytes, 80ull << 30);
  // Managed memory over the same link, as measured: slower both ways than the copy engines, slowest to the host.
  auto um = FindProfile("h100-80g-um");
  ASSERT_TRUE(um.ok());
  EXPECT_LT(um->h2d_bw, h100->h2d_bw);
  EXPECT_LT(um->d2h_bw, um->h2d_bw);
  EXPECT_DOUBLE_EQ(um->flops_per_s, h100->flops_per_s);
  for (const HwProfile& p : AllProfiles()) EXPECT_LT(p.fault_bw, p.h2d_bw) << p.name;
}

TEST(HwProfile, UnknownNameListsTheKnownOnes) {
  auto r = FindProfile("k80");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("v100-16g-pcie3"), std::string::npos);
}

TEST(Cost, RooflineOrMeasured) {
  const HwProfile& hw = DefaultProfile();
  trace::Op op;
  op.flops = 14'000'000'000;  // 1 ms of compute
  op.bytes = 450'000'000;     // 0.5 ms of memory traffic
  EXPECT_DOUBLE_EQ(OpSeconds(op, hw), 1e-3);
  op.bytes = 1'800'000'000;  // now 2 ms: memory-bound
  EXPECT_DOUBLE_EQ(OpSeconds(op, hw), 2e-3);
  op.duration_ns = 123'000;
  EXPECT_DOUBLE_EQ(OpSeconds(op, hw), 123e-6);
  EXPECT_DOUBLE_EQ(CopySeconds(12'000'000'000ull, hw.h2d_bw), 1.0);
}

}  // namespace
}  // namespace karma::policy
