// SchedulerQueue (scheduler_queue.h): what a bind pass takes, the task
// feed's reports of tasks created here, the safety sweep, and the waits
// (work, capacity, stop).
#include "server/scheduler_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hf::server {
namespace {

using std::chrono::milliseconds;

store::TaskRow Task(store::RowId id) {
  store::TaskRow t;
  t.id = id;
  return t;
}

TEST(SchedulerQueueTest, AFreshQueueAsksForARescanOnce) {
  SchedulerQueue q(30'000);
  EXPECT_TRUE(q.Take().resync);
  EXPECT_FALSE(q.Take().resync);
}

TEST(SchedulerQueueTest, TheFeedsReportOfATaskCreatedHereIsNotReadAgain) {
  SchedulerQueue q(30'000);
  q.SetFeedActive(true);
  (void)q.Take();
  q.Created(Task(7));
  q.Committed(7);  // the feed's report of task 7: queued already
  q.Committed(9);  // created elsewhere
  SchedulerQueue::Work w = q.Take();
  ASSERT_EQ(w.created.size(), 1U);
  EXPECT_EQ(w.created[0].id, 7);
  EXPECT_EQ(w.committed, std::vector<store::RowId>{9});
  EXPECT_FALSE(w.resync);
  // Without a feed nothing is remembered: a later report is read.
  q.SetFeedActive(false);
  q.Created(Task(11));
  q.Committed(11);
  EXPECT_EQ(q.Take().committed, std::vector<store::RowId>{11});
}

TEST(SchedulerQueueTest, AReportOfMissedTasksAsksForARescan) {
  SchedulerQueue q(30'000);
  q.SetFeedActive(true);
  (void)q.Take();
  q.Created(Task(3));
  q.Committed(0);  // the feed reconnected: reports may be lost
  EXPECT_TRUE(q.Take().resync);
  // The ids remembered were dropped with it: a late report of 3 is read
  // (harmless: the pass keeps one entry per task).
  q.Committed(3);
  EXPECT_EQ(q.Take().committed, std::vector<store::RowId>{3});
}

TEST(SchedulerQueueTest, TheSweepRescansEveryIntervalAndWhenTheClockGoesBack) {
  SchedulerQueue q(1'000);
  (void)q.Take();
  q.SweepIfDue(10'000);  // starts counting
  EXPECT_FALSE(q.Take().resync);
  q.SweepIfDue(10'999);
  EXPECT_FALSE(q.Take().resync);
  q.SweepIfDue(11'000);
  EXPECT_TRUE(q.Take().resync);
  q.SweepIfDue(5'000);  // the wall clock stepped back
  EXPECT_TRUE(q.Take().resync);
}

TEST(SchedulerQueueTest, WaitsEndOnWorkOnCapacityAndOnStop) {
  SchedulerQueue q(30'000);
  (void)q.Take();
  const std::uint64_t seen = q.generation();
  // Nothing to do: the wait runs out.
  EXPECT_TRUE(q.WaitForWork(seen, milliseconds(10)));
  EXPECT_FALSE(q.Take().resync);

  std::thread freer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    q.CapacityFreed();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(q.WaitForWork(seen, milliseconds(10'000)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5'000));
  EXPECT_NE(q.generation(), seen);
  freer.join();

  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    q.Stop();
  });
  EXPECT_FALSE(q.Sleep(milliseconds(10'000)));
  stopper.join();
  EXPECT_FALSE(q.WaitForWork(q.generation(), milliseconds(10'000)));
  q.Resume();
  EXPECT_TRUE(q.Sleep(milliseconds(1)));
}

}  // namespace
}  // namespace hf::server
