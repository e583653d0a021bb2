// NodeWork (node_work.h): per-node generations, waits that end when their
// node's generation moves (and only then), the bound on waiters, Stop.
// Waits that must end early are given a minute: a wait that is not woken
// fails on its generation, not on time.
#include "server/node_work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hf::server {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong(60'000);

// Starts a wait for node 7's work after generation 1 on a thread of its
// own, into `out`; returns once the wait is held.
std::thread HeldWait(NodeWork& work, NodeWork::Waited& out) {
  const int held = work.waiters() + 1;
  std::thread waiter([&work, &out] { out = work.Wait(7, 1, kLong); });
  while (work.waiters() != held) std::this_thread::yield();
  return waiter;
}

TEST(NodeWorkTest, EachNodeHasAGenerationThatMovesWithItsWork) {
  NodeWork work(4);
  EXPECT_EQ(work.Generation(7), 1u);
  work.Changed(7);
  work.Changed(7);
  EXPECT_EQ(work.Generation(7), 3u);
  EXPECT_EQ(work.Generation(8), 1u);
  // A wait whose generation is behind returns at once, without waiting.
  const NodeWork::Waited behind = work.Wait(7, 1, kLong);
  EXPECT_EQ(behind.generation, 3u);
  EXPECT_FALSE(behind.waited);
  // Nothing new within the wait: the same generation, after waiting.
  const NodeWork::Waited idle = work.Wait(7, 3, milliseconds(20));
  EXPECT_EQ(idle.generation, 3u);
  EXPECT_TRUE(idle.waited);
  // No wait asked for: at once.
  EXPECT_FALSE(work.Wait(7, 3, milliseconds(0)).waited);
}

TEST(NodeWorkTest, AWaitEndsWhenItsNodeHasWorkNotAnother) {
  NodeWork work(4);
  NodeWork::Waited got;
  std::thread waiter = HeldWait(work, got);
  work.Changed(8);  // another node: the wait goes on
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(work.waiters(), 1);
  work.Changed(7);
  waiter.join();
  EXPECT_EQ(got.generation, 2u);
  EXPECT_TRUE(got.waited);
  EXPECT_EQ(work.waiters(), 0);
}

TEST(NodeWorkTest, PastTheBoundAWaitReturnsAtOnce) {
  NodeWork work(1);
  NodeWork::Waited first;
  std::thread waiter = HeldWait(work, first);
  const NodeWork::Waited second = work.Wait(8, 1, kLong);
  EXPECT_FALSE(second.waited);
  EXPECT_EQ(second.generation, 1u);
  work.Changed(7);
  waiter.join();
  EXPECT_TRUE(first.waited);
  // The bound is on waits held at once: the next one waits.
  EXPECT_TRUE(work.Wait(8, 1, milliseconds(10)).waited);
}

TEST(NodeWorkTest, StopEndsEveryWaitNowAndLater) {
  NodeWork work(4);
  NodeWork::Waited got;
  std::thread waiter = HeldWait(work, got);
  work.Stop();
  waiter.join();
  EXPECT_FALSE(got.waited);
  EXPECT_EQ(got.generation, 1u);
  EXPECT_FALSE(work.Wait(7, 1, kLong).waited);
}

}  // namespace
}  // namespace hf::server
