// PendingTasks (pending_tasks.h): which waiting tasks a bind pass tries,
// what a rescan keeps, and the counts the stats and metrics read.
#include "server/pending_tasks.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace hf::server {
namespace {

using store::RowId;

store::TaskRow Task(RowId id, std::int64_t version = 1,
                    std::string reason = "") {
  store::TaskRow t;
  t.id = id;
  t.version = version;
  t.pending_reason = std::move(reason);
  return t;
}

std::vector<RowId> Ids(const std::vector<store::TaskRow>& rows) {
  std::vector<RowId> ids;
  ids.reserve(rows.size());
  for (const store::TaskRow& r : rows) ids.push_back(r.id);
  return ids;
}

constexpr store::Millis kRetry = 5'000;

TEST(PendingTasksTest, NewTasksAreDueOldestFirstUpToTheLimit) {
  PendingTasks p;
  p.Add(Task(9));
  p.Add(Task(3));
  p.Add(Task(5));
  EXPECT_EQ(p.size(), 3);
  EXPECT_EQ(Ids(p.Due(1, 0, kRetry, 2)), (std::vector<RowId>{3, 5}));
  EXPECT_EQ(Ids(p.Due(1, 0, kRetry, 10)), (std::vector<RowId>{3, 5, 9}));
}

TEST(PendingTasksTest,
     AWaitingTaskIsTriedAgainWhenCapacityMovesOrItsRetryIsDue) {
  PendingTasks p;
  p.Add(Task(1));
  p.Add(Task(2));
  p.Waited(1, nullptr, /*generation=*/4, /*now=*/1'000);
  // Same generation, retry not due: only the new task 2.
  EXPECT_EQ(Ids(p.Due(4, 1'000 + kRetry - 1, kRetry, 10)),
            std::vector<RowId>{2});
  // Capacity moved since task 1 failed.
  EXPECT_EQ(Ids(p.Due(5, 1'001, kRetry, 10)), (std::vector<RowId>{1, 2}));
  // Its retry interval passed.
  EXPECT_EQ(Ids(p.Due(4, 1'000 + kRetry, kRetry, 10)),
            (std::vector<RowId>{1, 2}));
}

TEST(PendingTasksTest, AddingATaskHeldAlreadyKeepsItsRetryState) {
  PendingTasks p;
  p.Add(Task(1));
  p.Waited(1, nullptr, 2, 100);
  p.Add(Task(1));  // the task feed's late report of it
  EXPECT_TRUE(p.Due(2, 100, kRetry, 10).empty());
  EXPECT_EQ(p.size(), 1);
}

TEST(PendingTasksTest, ARescanKeepsTheRetryStateOfUnchangedTasksOnly) {
  PendingTasks p;
  p.Add(Task(1, 1));
  p.Add(Task(2, 1));
  p.Add(Task(3, 1));
  p.Waited(1, nullptr, 2, 100);
  p.Waited(2, nullptr, 2, 100);
  p.Waited(3, nullptr, 2, 100);
  // Task 1 unchanged, task 2 written since (version 2), task 3 gone (bound
  // or cancelled elsewhere), task 4 new.
  p.Replace({Task(1, 1), Task(2, 2), Task(4, 1)});
  EXPECT_EQ(p.size(), 3);
  EXPECT_EQ(Ids(p.Due(2, 100, kRetry, 10)), (std::vector<RowId>{2, 4}));
  EXPECT_TRUE(p.Unknown({3}) == std::vector<RowId>{3});
}

TEST(PendingTasksTest, AWaitedTaskTakesItsStoredRowAndARemovedOneIsGone) {
  PendingTasks p;
  p.Add(Task(1, 1));
  p.Add(Task(2, 1, "insufficient GPU memory: 0 of 8 GPUs fit 4096 MB"));
  p.Add(Task(3));
  EXPECT_EQ(p.ByReasonClass(),
            (std::map<std::string, int>{{"memory", 1}, {"not_tried", 2}}));
  store::TaskRow stored = Task(1, 2, "never fits in this cluster: no GPUs");
  p.Waited(1, &stored, 3, 10);
  p.Remove(3);
  EXPECT_EQ(p.ByReasonClass(),
            (std::map<std::string, int>{{"infeasible", 1}, {"memory", 1}}));
  EXPECT_EQ(p.Due(4, 10, kRetry, 10).front().version, 2);
  p.Remove(2);
  p.Remove(2);                  // twice: nothing more happens
  p.Waited(2, nullptr, 3, 10);  // not held: nothing
  EXPECT_EQ(p.size(), 1);
  EXPECT_EQ(Ids(p.Due(4, 10, kRetry, 10)), std::vector<RowId>{1});
}

TEST(PendingTasksTest, UnknownNamesTheIdsNotHeldOnceEach) {
  PendingTasks p;
  p.Add(Task(2));
  EXPECT_EQ(p.Unknown({5, 2, 1, 5}), (std::vector<RowId>{1, 5}));
  EXPECT_TRUE(p.Unknown({}).empty());
}

}  // namespace
}  // namespace hf::server
