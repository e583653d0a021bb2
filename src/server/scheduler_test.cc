// Scheduler (scheduler.h) on the real SQLite store and a real ledger
// (GuardedLedger) with one 80 GB A100, writing through a LeaderWriter that
// can fail like a full disk: a task that fits is bound in one write (its slice,
// env and history); one that does not keeps a reason and waits; a failed write
// undoes every placement of its batch and the tasks stay pending, bound by
// the next pass.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/unit_fixture.h"

namespace hf::server {
namespace {

using store::RowId;
using store::TaskRow;
using store::TaskState;

class SchedulerTest : public UnitFixture {
 protected:
  SchedulerTest() : UnitFixture("hf-scheduler-test") {}

  void SetUp() override {
    UnitFixture::SetUp();
    AddTenant();
    AddNode(1);
    SchedulerOptions options;
    options.bind_batch = 16;
    scheduler_ = std::make_unique<Scheduler>(
        store_.get(), &clock_, options, core_.get(), &queue_, mig_.get(),
        &telemetry_, /*fence=*/nullptr, writer_.get(), &stub_);
  }

  // A pending task asking for `memory_mib` of one GPU, handed to the
  // scheduler's queue as the task API does.
  RowId Create(std::int64_t memory_mib) {
    const TaskRow task = PendingTask(memory_mib, 10);
    queue_.Created(task);
    return task.id;
  }
  TaskRow Task(RowId id) { return StoredTask(*store_, id); }

  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, WhatFitsIsBoundInOneWriteAndTheRestWaitsWithAReason) {
  const RowId fits = Create(51'200);
  const RowId waits = Create(51'200);  // the card has 80 GB
  auto bound = scheduler_->BindPendingOnce();
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(*bound, 1);
  const TaskRow b = Task(fits);
  EXPECT_EQ(b.state, TaskState::kScheduled);
  ASSERT_TRUE(b.slice_id.has_value());
  EXPECT_EQ(b.env.at("HETEROFLOW_SLICE_ID"), std::to_string(*b.slice_id));
  EXPECT_EQ(b.gpu_indices, std::vector<int>{0});
  const TaskRow w = Task(waits);
  EXPECT_EQ(w.state, TaskState::kPending);
  EXPECT_FALSE(w.pending_reason.empty());
  EXPECT_EQ(scheduler_->pending(), 1);
  EXPECT_EQ(Allocations(), 1u);

  // Nothing changed: the waiting task is not tried again before the retry
  // interval, and nothing more is bound.
  auto again = scheduler_->BindPendingOnce();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(Allocations(), 1u);
}

TEST_F(SchedulerTest, AFailedWriteUndoesEveryPlacementOfItsBatch) {
  const RowId a = Create(20'480);
  const RowId b = Create(20'480);
  writer_->refuse = true;  // the write fails
  auto failed = scheduler_->BindPendingOnce();
  EXPECT_FALSE(failed.ok());
  writer_->refuse = false;
  // The ledger holds what the store holds: nothing.
  EXPECT_EQ(Allocations(), 0u);
  EXPECT_EQ(Task(a).state, TaskState::kPending);
  EXPECT_EQ(Task(b).state, TaskState::kPending);
  EXPECT_EQ(scheduler_->pending(), 2);
  // The undone placements freed capacity: the next pass binds both.
  auto bound = scheduler_->BindPendingOnce();
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(*bound, 2);
  EXPECT_EQ(Allocations(), 2u);
  EXPECT_EQ(Task(a).state, TaskState::kScheduled);
  EXPECT_EQ(Task(b).state, TaskState::kScheduled);
}

}  // namespace
}  // namespace hf::server
