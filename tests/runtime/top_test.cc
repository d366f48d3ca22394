// The live view end to end: the session's segment, read by `karma-trace top`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/base/live_view.h"

namespace karma::rt {
namespace {

struct Output {
  std::string text;
  int status = -1;
};

Output Top(const std::string& args) {
  Output o;
  FILE* f = popen((std::string(KARMA_TRACE) + " top " + args + " 2>&1").c_str(), "r");
  if (f == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) o.text.append(buf, n);
  const int st = pclose(f);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

TEST(TopTest, ShowsTheStatisticsOfARunningProcess) {
  auto lv = LiveView::Create(::getpid());
  ASSERT_TRUE(lv.ok()) << lv.status().ToString();
  live::Stats& s = *(*lv)->stats();
  std::snprintf(s.mode, sizeof(s.mode), "record");
  s.state = static_cast<uint32_t>(live::State::kRecorded);
  s.budget_bytes = 8ull << 30;
  s.used_bytes = 2ull << 30;
  s.peak_used_bytes = 3ull << 30;
  s.device_total_bytes = 16ull << 30;
  s.iteration = 7;
  s.period_ops = 347;
  s.recorded_iteration = 5;
  s.ops = 2500;
  const std::string pid = std::to_string(::getpid());

  Output text = Top(pid + " --once");
  EXPECT_EQ(text.status, 0) << text.text;
  EXPECT_NE(text.text.find("mode record, recorded, iteration 7 (347 ops each), recorded iteration 5"),
            std::string::npos)
      << text.text;
  EXPECT_NE(text.text.find("2.00 GiB used of 8.00 GiB (25.0%), peak 3.00 GiB"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find("stalls   not measured"), std::string::npos) << text.text;

  Output json = Top(pid + " --once --json");
  ASSERT_EQ(json.status, 0) << json.text;
  const auto j = nlohmann::json::parse(json.text);
  EXPECT_EQ(j["iteration"], 7);
  EXPECT_EQ(j["used_bytes"], 2ull << 30);
  EXPECT_EQ(j["state"], "recorded");
  EXPECT_EQ(j["stalls_measured"], false);

  // Replaying: the wall time the managed-memory calls held the application and the move threads, per iteration.
  s.state = static_cast<uint32_t>(live::State::kReplaying);
  s.measures_stalls = 1;
  s.replayed_iterations = 4;
  s.app_move_ns = 10'000'000;
  s.mover_move_ns = 30'000'000;
  text = Top(pid + " --once");
  EXPECT_NE(text.text.find("calls    managed-memory calls held the application 2.50 ms of wall clock per replayed "
                           "iteration, the move threads 7.50 ms (4 iterations)"),
            std::string::npos)
      << text.text;
  json = Top(pid + " --once --json");
  ASSERT_EQ(json.status, 0) << json.text;
  const auto r = nlohmann::json::parse(json.text);
  EXPECT_EQ(r["replayed_iterations"], 4);
  EXPECT_EQ(r["app_move_ns"], 10'000'000);
  EXPECT_EQ(r["mover_move_ns"], 30'000'000);

  // A live process refreshes until it exits; the first screen comes at once.
  (*lv)->Unlink();
  Output gone = Top(pid + " --once");
  EXPECT_EQ(gone.status, 1) << gone.text;
}

TEST(TopTest, MissingAndForeignSegmentsAreErrors) {
  Output o = Top("999999999 --once");
  EXPECT_EQ(o.status, 1) << o.text;
  EXPECT_NE(o.text.find("no KARMA statistics for pid 999999999"), std::string::npos) << o.text;
  // A segment of another version.
  namespace bip = boost::interprocess;
  const std::string name = live::SegmentName(999999998);
  bip::shared_memory_object::remove(name.c_str());
  {
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
    shm.truncate(sizeof(live::Stats));
    bip::mapped_region region(shm, bip::read_write);
    auto* s = new (region.get_address()) live::Stats();
    s->version = live::kVersion + 1;
  }
  o = Top("999999998 --once");
  bip::shared_memory_object::remove(name.c_str());
  EXPECT_EQ(o.status, 1) << o.text;
  EXPECT_NE(o.text.find("version"), std::string::npos) << o.text;
  EXPECT_EQ(Top("0 --once").status, 2);  // not a pid: a usage error
}

}  // namespace
}  // namespace karma::rt
