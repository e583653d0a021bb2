// Scheduler (scheduler.h) on the real SQLite store and a real ledger
// (GuardedLedger) with one 80 GB A100, with a host whose writes can fail
// like a full disk: a task that fits is bound in one write (its slice, env
// and history); one that does not keeps a reason and waits; a failed write
// undoes every placement of its batch and the tasks stay pending, bound by
// the next pass.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/ledger_test_base.h"
#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;

class Host : public SchedulerHost, public MigChannelHost {
 public:
  SliceEnvInput SliceEnvFor(const SliceRow& slice,
                            const TaskRow& task) override {
    SliceEnvInput in;
    in.slice_id = slice.id;
    in.gpu_uuids = "GPU-a";
    in.vendor = "nvidia";
    in.qos_level = slice.qos_level;
    in.memory_mib = slice.memory_mib;
    in.compute_mode = task.gpu_compute_mode;
    return in;
  }
  std::string GpuUuid(RowId /*node*/, int /*index*/) override {
    return "GPU-a";
  }
  StatusOr<store::NodeRow> NodeForAgent(const Caller& /*caller*/,
                                        const std::string& node) override {
    return Status::NotFound(node);
  }
  void TasksRequeued() override {}
};

class SchedulerTest : public LedgerTestBase {
 protected:
  void SetUp() override {
    LedgerTestBase::SetUp();
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    mig_ = std::make_unique<MigChannel>(store_.get(), &clock_, &clock_, 120'000,
                                        &telemetry_, writer_.get(), &host_);
    auto made = scheduler::MakePolicy("best-fit", {});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    core_ = std::make_unique<GuardedLedger>(std::move(ledger_), names_, queue_,
                                            mig_->book(), clock_, clock_,
                                            std::move(*made), nullptr);
    store::TenantRow tenant;
    store::NodeRow node;
    store::GpuRow gpu;
    ASSERT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      tenant.name = "acme";
                      auto t = txn.InsertTenant(tenant);
                      if (!t.ok()) return t.status();
                      tenant = *t;
                      node.name = "n1";
                      auto n = txn.UpsertNode(node);
                      if (!n.ok()) return n.status();
                      node = *n;
                      auto g = txn.UpsertGpu(A100(node.id, 0, "GPU-a"));
                      if (!g.ok()) return g.status();
                      gpu = *g;
                      return Status::Ok();
                    })
                    .ok());
    tenant_ = tenant.id;
    {
      MutexLock lock(core_->mu());
      ASSERT_TRUE(core_->tenancy().SyncTenant(tenant).ok());
      ASSERT_TRUE(core_->inventory().SyncNode(node).ok());
      ASSERT_TRUE(core_->inventory().SyncGpu(node, gpu).ok());
    }
    SchedulerOptions options;
    options.bind_batch = 16;
    scheduler_ = std::make_unique<Scheduler>(
        store_.get(), &clock_, options, core_.get(), &queue_, mig_.get(),
        &telemetry_, /*fence=*/nullptr, writer_.get(), &host_);
  }

  // A pending task asking for `memory_mib` of one GPU, handed to the
  // scheduler's queue as the task API does.
  RowId Create(std::int64_t memory_mib) {
    TaskRow task;
    task.tenant_id = tenant_;
    task.name = "t";
    task.image = "img";
    task.command = {"run"};
    task.memory_mib = memory_mib;
    task.compute_percent = 10;
    task.created_at = clock_.NowMillis();
    task.updated_at = task.created_at;
    EXPECT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      auto t = txn.InsertTask(task);
                      if (!t.ok()) return t.status();
                      task = *t;
                      return Status::Ok();
                    })
                    .ok());
    queue_.Created(task);
    return task.id;
  }
  TaskRow Task(RowId id) { return StoredTask(*store_, id); }

  std::size_t Allocations() {
    MutexLock lock(core_->mu());
    return core_->ledger().allocation_count();
  }

  store::sqlite_testing::TempDir dir_{"hf-scheduler-test"};
  std::unique_ptr<store::Store> store_;
  FakeClock clock_{1'000'000};
  Telemetry telemetry_;
  std::unique_ptr<StoreWriterForTest> writer_;
  Host host_;
  std::unique_ptr<MigChannel> mig_;
  std::unique_ptr<GuardedLedger> core_;
  std::unique_ptr<Scheduler> scheduler_;
  RowId tenant_ = 0;
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
