// The allocation table: exact sizes back, kinds kept apart, growth and
// churn, reference counts, threads.
#include "hook/alloc_table.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace hf::hook {
namespace {

TEST(AllocTableTest, RemembersEachSizeAndForgetsOnRemove) {
  AllocTable t;
  for (uint64_t i = 1; i <= 10000; ++i) {
    ASSERT_TRUE(t.Insert(AllocKind::kDevicePointer, i << 21, i));
  }
  EXPECT_EQ(t.size(), 10000u);
  uint64_t bytes = 0;
  for (uint64_t i = 1; i <= 10000; ++i) {
    ASSERT_TRUE(t.Remove(AllocKind::kDevicePointer, i << 21, &bytes));
    EXPECT_EQ(bytes, i);
  }
  EXPECT_FALSE(t.Remove(AllocKind::kDevicePointer, 1 << 21, &bytes));
  EXPECT_EQ(t.size(), 0u);
}

TEST(AllocTableTest, KindsAreSeparateKeys) {
  AllocTable t;
  ASSERT_TRUE(t.Insert(AllocKind::kDevicePointer, 42, 1));
  ASSERT_TRUE(t.Insert(AllocKind::kVmmHandle, 42, 2));
  uint64_t bytes = 0;
  ASSERT_TRUE(t.Remove(AllocKind::kVmmHandle, 42, &bytes));
  EXPECT_EQ(bytes, 2u);
  ASSERT_TRUE(t.Remove(AllocKind::kDevicePointer, 42, &bytes));
  EXPECT_EQ(bytes, 1u);
}

TEST(AllocTableTest, ChurnDoesNotGrowWithoutBound) {
  AllocTable t;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    ASSERT_TRUE(
        t.Insert(AllocKind::kDevicePointer, 0x7f0000000000 + i * 256, 256));
    if (i >= 100) {
      ASSERT_TRUE(t.Remove(AllocKind::kDevicePointer,
                           0x7f0000000000 + (i - 100) * 256, &bytes));
    }
  }
  EXPECT_EQ(t.size(), 100u);
}

TEST(AllocTableTest, ReferenceCountsReleaseOnTheLastUnref) {
  AllocTable t;
  ASSERT_TRUE(t.Insert(AllocKind::kVmmHandle, 7, 2 << 20));
  ASSERT_TRUE(t.AddRef(AllocKind::kVmmHandle, 7));
  uint64_t bytes = 0;
  bool tracked = false;
  EXPECT_FALSE(t.Unref(AllocKind::kVmmHandle, 7, &bytes, &tracked));
  EXPECT_TRUE(tracked);
  EXPECT_TRUE(t.Unref(AllocKind::kVmmHandle, 7, &bytes, &tracked));
  EXPECT_EQ(bytes, uint64_t{2} << 20);
  EXPECT_FALSE(t.Unref(AllocKind::kVmmHandle, 7, &bytes, &tracked));
  EXPECT_FALSE(tracked);
  EXPECT_FALSE(t.AddRef(AllocKind::kVmmHandle, 8));
}

TEST(AllocTableTest, ThreadsInsertAndRemoveTheirOwnKeys) {
  AllocTable t;
  std::vector<std::thread> threads;
  for (uint64_t th = 0; th < 8; ++th) {
    threads.emplace_back([&t, th] {
      uint64_t bytes = 0;
      for (uint64_t i = 0; i < 50000; ++i) {
        const uint64_t key = (th << 40) | (i << 8);
        if (!t.Insert(AllocKind::kDevicePointer, key, i)) std::abort();
        if (!t.Remove(AllocKind::kDevicePointer, key, &bytes) || bytes != i) {
          std::abort();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.size(), 0u);
}

TEST(AllocTableTest, ResetAfterForkForgetsEverything) {
  AllocTable t;
  ASSERT_TRUE(t.Insert(AllocKind::kDevicePointer, 1, 1));
  t.ResetAfterFork();
  EXPECT_EQ(t.size(), 0u);
  ASSERT_TRUE(t.Insert(AllocKind::kDevicePointer, 1, 5));
  uint64_t bytes = 0;
  ASSERT_TRUE(t.Remove(AllocKind::kDevicePointer, 1, &bytes));
  EXPECT_EQ(bytes, 5u);
}

}  // namespace
}  // namespace hf::hook
