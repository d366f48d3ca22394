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
  EXPECT_DOUBLE_EQ(v100.h2d_bw(), 12e9);
  EXPECT_DOUBLE_EQ(v100.flops_per_s, 14e12);
  EXPECT_DOUBLE_EQ(v100.memory_bw, 900e9);
  auto a100 = FindProfile("a100-40g-pcie4");
  ASSERT_TRUE(a100.ok());
  EXPECT_DOUBLE_EQ(a100->h2d_bw(), 24e9);
  for (const HwProfile& p : AllProfiles()) {
    EXPECT_LT(p.fault_bw, p.h2d_bw()) << p.name;
    EXPECT_EQ(p.moves, MovePath::kManaged) << p.name;  // libkarma.so moves memory as managed memory
    EXPECT_GT(p.host.launch_s, 0) << p.name;
  }
}

// The H100 carries both of its links: the copy engines, and managed memory as measured (slower both ways, slowest
// to the host). Plans move over managed memory unless the profile says the copy engines.
TEST(HwProfile, TheH100CarriesBothLinks) {
  auto h100 = FindProfile("h100-80g");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->memory_bytes, 80ull << 30);
  EXPECT_DOUBLE_EQ(h100->copy.h2d_bw, 50e9);
  EXPECT_DOUBLE_EQ(h100->managed.h2d_bw, 20e9);
  EXPECT_DOUBLE_EQ(h100->managed.d2h_bw, 7e9);
  EXPECT_LT(h100->managed.h2d_bw, h100->copy.h2d_bw);
  EXPECT_LT(h100->managed.d2h_bw, h100->managed.h2d_bw);
  EXPECT_DOUBLE_EQ(h100->h2d_bw(), h100->managed.h2d_bw);
  // The names of earlier tables: the same GPU, with the moves each planned.
  auto um = FindProfile("h100-80g-um");
  ASSERT_TRUE(um.ok());
  EXPECT_STREQ(um->name, "h100-80g");
  EXPECT_EQ(ProfileLabel(*um), "h100-80g");
  auto pcie5 = FindProfile("h100-80g-pcie5");
  ASSERT_TRUE(pcie5.ok());
  EXPECT_EQ(pcie5->moves, MovePath::kCopy);
  EXPECT_DOUBLE_EQ(pcie5->h2d_bw(), 50e9);
  EXPECT_EQ(ProfileLabel(*pcie5), "h100-80g link 50/50 GB/s");
  // Measured rates replace the rates of the link the moves use, and only those.
  const HwProfile slow = WithLink(*pcie5, 30e9, 0);
  EXPECT_DOUBLE_EQ(slow.copy.h2d_bw, 30e9);
  EXPECT_DOUBLE_EQ(slow.managed.h2d_bw, 20e9);
}

TEST(HwProfile, UnknownNameListsTheKnownOnes) {
  auto r = FindProfile("k80");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("v100-16g-pcie3"), std::string::npos);
}

// Link rates in GB/s: one figure for both directions or H2D/D2H; anything else is refused.
TEST(HwProfile, LinkRatesParse) {
  auto both = ParseLinkRates("4");
  ASSERT_TRUE(both.ok());
  EXPECT_DOUBLE_EQ(both->first, 4e9);
  EXPECT_DOUBLE_EQ(both->second, 4e9);
  auto two = ParseLinkRates("6/3.5");
  ASSERT_TRUE(two.ok());
  EXPECT_DOUBLE_EQ(two->first, 6e9);
  EXPECT_DOUBLE_EQ(two->second, 3.5e9);
  for (const char* bad : {"", "fast", "6/", "0", "-2/3", "6/3/1", "6GB/s", "/4"}) {
    auto r = ParseLinkRates(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("GB/s"), std::string::npos);
  }
}

// A profile with other link rates keeps its name and gets a label naming the rates, from which the same profile
// comes back; the profiles of the table are labelled by their names. Measured rates are rounded to two digits.
TEST(HwProfile, OtherLinkRatesAreNamedInTheLabel) {
  const HwProfile& hw = DefaultProfile();  // 12 GB/s each way
  for (const HwProfile& p : AllProfiles()) EXPECT_EQ(ProfileLabel(p), p.name);
  EXPECT_EQ(ProfileLabel(WithLink(hw, 0, 0)), hw.name);
  EXPECT_EQ(ProfileLabel(WithLink(hw, hw.h2d_bw(), hw.d2h_bw())), hw.name);
  const HwProfile slow = WithLink(hw, 6e9, 0);  // only to the device
  EXPECT_STREQ(slow.name, hw.name);
  EXPECT_DOUBLE_EQ(slow.h2d_bw(), 6e9);
  EXPECT_DOUBLE_EQ(slow.d2h_bw(), hw.d2h_bw());
  EXPECT_EQ(ProfileLabel(slow), "v100-16g-pcie3 link 6/12 GB/s");
  const HwProfile odd = WithLink(hw, 0.55e9, 123.4e9);
  EXPECT_EQ(ProfileLabel(odd), "v100-16g-pcie3 link 0.55/123.4 GB/s");
  EXPECT_DOUBLE_EQ(RoundedRate(6.04e9), 6e9);
  EXPECT_DOUBLE_EQ(RoundedRate(3.96e9), 4e9);
  EXPECT_DOUBLE_EQ(RoundedRate(123.4e9), 120e9);
  EXPECT_DOUBLE_EQ(RoundedRate(0), 0);
  EXPECT_EQ(ProfileLabel(WithLink(hw, RoundedRate(5.86e9), RoundedRate(3.96e9))), "v100-16g-pcie3 link 5.9/4 GB/s");
  HwProfile back;
  for (const HwProfile& p : {slow, odd}) {
    ASSERT_TRUE(ProfileFromLabel(hw, ProfileLabel(p), &back)) << ProfileLabel(p);
    EXPECT_DOUBLE_EQ(back.h2d_bw(), p.h2d_bw());
    EXPECT_DOUBLE_EQ(back.d2h_bw(), p.d2h_bw());
  }
  for (const std::string& bad : {std::string(hw.name), std::string("a100-40g-pcie4 link 6/12 GB/s"),
                                 std::string(hw.name) + " link 6 GB/s", std::string(hw.name) + " link 6/x GB/s",
                                 std::string(hw.name) + " link 6/12 MB/s", std::string(hw.name) + " link 0/12 GB/s",
                                 std::string(hw.name) + " link 6.0/12 GB/s"}) {
    EXPECT_FALSE(ProfileFromLabel(hw, bad, &back)) << bad;
  }
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
  EXPECT_DOUBLE_EQ(CopySeconds(12'000'000'000ull, hw.h2d_bw()), 1.0);
}

}  // namespace
}  // namespace karma::policy
