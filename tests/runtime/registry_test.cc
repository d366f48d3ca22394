// The allocation registry: interval lookups, removal, accounting, concurrent readers.
#include "runtime/observe/registry.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace karma::rt {
namespace {

TEST(RegistryTest, FindsTheBufferContainingAnAddress) {
  Registry r;
  const uint64_t a = r.Insert(0x1000, 0x100, Origin::kArena, 0);
  const uint64_t b = r.Insert(0x1100, 0x80, Origin::kDevice, 7);
  EXPECT_NE(a, b);
  BufferEntry e;
  ASSERT_TRUE(r.Find(0x1000, &e));
  EXPECT_EQ(e.serial, a);
  ASSERT_TRUE(r.Find(0x10ff, &e));
  EXPECT_EQ(e.serial, a);
  ASSERT_TRUE(r.Find(0x1100, &e));  // the next buffer starts right at the end of the first
  EXPECT_EQ(e.serial, b);
  EXPECT_EQ(e.site, 7u);
  EXPECT_FALSE(r.Find(0x1180, &e));
  EXPECT_FALSE(r.Find(0xfff, &e));
  EXPECT_FALSE(r.Find(0, &e));
  EXPECT_EQ(r.bytes(Origin::kArena), 0x100u);
  EXPECT_EQ(r.bytes(Origin::kDevice), 0x80u);
}

TEST(RegistryTest, EraseAndReinsertGivesANewIdentity) {
  Registry r;
  const uint64_t a = r.Insert(0x1000, 0x100, Origin::kArena, 0);
  BufferEntry removed;
  ASSERT_TRUE(r.Erase(0x1000, &removed));
  EXPECT_EQ(removed.serial, a);
  EXPECT_FALSE(r.Erase(0x1000));
  BufferEntry e;
  EXPECT_FALSE(r.Find(0x1010, &e));
  const uint64_t b = r.Insert(0x1000, 0x100, Origin::kArena, 0);
  EXPECT_GT(b, a);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.bytes(Origin::kArena), 0x100u);
}

TEST(RegistryTest, AStaleEntryAtTheSameStartIsReplaced) {
  Registry r;
  r.Insert(0x1000, 0x100, Origin::kDevice, 0);
  r.Insert(0x1000, 0x40, Origin::kArena, 0);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.bytes(Origin::kDevice), 0u);
  BufferEntry e;
  EXPECT_FALSE(r.Find(0x1050, &e));
}

TEST(RegistryTest, ReadersAndWritersOnManyThreads) {
  Registry r;
  for (uint64_t i = 0; i < 1000; ++i) r.Insert(0x100000 + i * 0x1000, 0x800, Origin::kArena, 0);
  std::vector<std::thread> threads;
  std::atomic<int> misses{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 1000; ++i) {
        Registry::Reader reader(r);
        if (reader.Find(0x100000 + i * 0x1000 + 0x10) == nullptr) misses++;
      }
      for (uint64_t i = 0; i < 100; ++i) r.Insert(0x900000000 + (t * 100 + i) * 0x1000, 0x100, Origin::kArena, 0);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(misses.load(), 0);
  EXPECT_EQ(r.size(), 1400u);
}

}  // namespace
}  // namespace karma::rt
