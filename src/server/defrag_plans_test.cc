// Defrag (defrag.h) on the real SQLite store and a real ledger
// (GuardedLedger, rebuilt from the store by Recovery), writing through a
// LeaderWriter that can refuse: two preemptible 30 GB tasks on two 80 GB
// cards, and a plan that frees one card by moving a task. Applying it
// reserves the target in the ledger with the step's write, the task moves
// only once its node reported it stopped, and the plan ends applied with
// the ledger holding the two tasks once each; a step whose write fails
// gives its reservation back and is tried again.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/defrag.h"
#include "server/recovery.h"
#include "server/unit_fixture.h"

namespace hf::server {
namespace {

using nlohmann::json;
using store::RowId;
using store::SliceRow;
using store::SliceState;
using store::TaskRow;
using store::TaskState;

class DefragTest : public UnitFixture {
 protected:
  DefragTest() : UnitFixture("hf-defrag-test") {}

  void SetUp() override {
    UnitFixture::SetUp();
    defrag_ = std::make_unique<Defrag>(
        store_.get(), &clock_, &clock_, DefragOptions{}, core_.get(), &queue_,
        mig_.get(), releases_.get(), &names_, writer_.get(), &stub_);
    StoreCluster();
    Recovery recovery(store_.get(), &clock_, &clock_, core_.get(), &names_,
                      &beats_, &mig_->book(), &telemetry_,
                      /*learn_half_life_tasks=*/100, writer_.get());
    ASSERT_TRUE(recovery.Run().ok());
    ASSERT_EQ(Allocations(), 2u);
  }

  // Node n1 with two 80 GB A100s, each running one preemptible 30 GB task
  // on a slice of its own.
  void StoreCluster() {
    Status s = store_->Write([&](store::Txn& txn) -> Status {
      store::TenantRow tenant;
      tenant.name = "acme";
      auto t = txn.InsertTenant(tenant);
      if (!t.ok()) return t.status();
      store::NodeRow node;
      node.name = "n1";
      auto n = txn.UpsertNode(node);
      if (!n.ok()) return n.status();
      node_ = n->id;
      for (int index : {0, 1}) {
        auto g =
            txn.UpsertGpu(A100(node_, index, "GPU-" + std::to_string(index)));
        if (!g.ok()) return g.status();
        TaskRow task;
        task.tenant_id = t->id;
        task.name = "t" + std::to_string(index);
        task.image = "img";
        task.command = {"run"};
        task.memory_mib = 30'720;
        task.compute_percent = 20;
        task.preemptible = true;
        task.state = TaskState::kRunning;
        task.node_id = node_;
        task.gpu_indices = {index};
        task.slice_id = 10 + index;
        auto inserted = txn.InsertTask(task);
        if (!inserted.ok()) return inserted.status();
        SliceRow slice;
        slice.id = 10 + index;
        slice.task_id = inserted->id;
        slice.tenant_id = t->id;
        slice.node_id = node_;
        slice.gpu_indices = {index};
        slice.memory_mib = 30'720;
        slice.compute_percent = 20;
        slice.qos_level = "bronze";
        slice.origin = "scheduler";
        slice.state = SliceState::kAllocated;
        HF_RETURN_IF_ERROR(txn.InsertSlice(slice));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // A proposed plan freeing a whole card, applied.
  json ProposeAndApply() {
    DefragPlanCreate request;
    request.goal_memory_mib = 61'440;
    auto plan = defrag_->Propose(admin_, request);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return {};
    EXPECT_EQ((*plan)["moves"].size(), 1u) << plan->dump();
    auto applied = defrag_->Apply(admin_, (*plan)["id"].get<RowId>());
    EXPECT_TRUE(applied.ok()) << applied.status().ToString();
    return applied.ok() ? *applied : json{};
  }

  json Plan(RowId id) {
    auto plan = defrag_->Get(admin_, id);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? *plan : json{};
  }

  // The task's node reports it stopped, as ReportTaskStates writes it: its
  // source slice released, the move landed.
  void NodeReportsStopped(RowId task_id, RowId source) {
    auto written = writer_->WriteReleases(
        [&](store::Txn& txn, std::vector<RowId>& released) -> Status {
          auto t = txn.GetTask(task_id);
          if (!t.ok()) return t.status();
          TaskRow task = *t;
          auto s = txn.GetSlice(source);
          if (!s.ok()) return s.status();
          SliceRow slice = *s;
          slice.state = SliceState::kAllocated;  // the node confirmed
          HF_RETURN_IF_ERROR(releases_->ReleaseInTxn(
              txn, slice, "agent:n1", "task cancelled", released));
          auto landed = defrag_->LandMoveInTxn(txn, task, source,
                                               /*rebind=*/true, released);
          if (!landed.ok()) return landed.status();
          EXPECT_TRUE(*landed);
          return txn.UpdateTask(task).status();
        });
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }

  NodeBeats beats_{15'000};
  std::unique_ptr<Defrag> defrag_;
};

TEST_F(DefragTest, AMoveReservesItsTargetAndLandsTheTaskOnceItsNodeStopped) {
  const json applying = ProposeAndApply();
  ASSERT_EQ(applying["state"], "applying");
  const json& move = applying["moves"][0];
  const RowId task = move["task_id"].get<RowId>();
  const RowId source = move["slice_id"].get<RowId>();
  const RowId id = applying["id"].get<RowId>();

  // One step: the target is reserved, the source asked to stop.
  ASSERT_TRUE(defrag_->TickOnce().ok());
  json plan = Plan(id);
  ASSERT_EQ(plan["moves"][0]["state"], "moving");
  const RowId target = plan["moves"][0]["target_slice_id"].get<RowId>();
  EXPECT_EQ(Allocations(), 3u);
  EXPECT_EQ(StoredSlice(*store_, source).state, SliceState::kReleasing);
  EXPECT_EQ(StoredTask(*store_, task).slice_id, source);  // not moved yet
  // Until the node reports, the plan waits.
  ASSERT_TRUE(defrag_->TickOnce().ok());
  EXPECT_EQ(Plan(id)["moves"][0]["state"], "moving");

  NodeReportsStopped(task, source);
  const TaskRow moved = StoredTask(*store_, task);
  EXPECT_EQ(moved.slice_id, target);
  EXPECT_EQ(moved.state, TaskState::kScheduled);
  EXPECT_EQ(moved.env.at("HETEROFLOW_SLICE_ID"), std::to_string(target));
  EXPECT_EQ(StoredSlice(*store_, target).task_id, task);
  EXPECT_EQ(Allocations(), 2u);  // each task once: the source released
  EXPECT_EQ(Plan(id)["moves"][0]["state"], "moved");

  // It runs on the target: the move is done, then the plan applied.
  Status running = store_->Write([&](store::Txn& txn) -> Status {
    auto t = txn.GetTask(task);
    if (!t.ok()) return t.status();
    TaskRow row = *t;
    row.state = TaskState::kRunning;
    return txn.UpdateTask(row).status();
  });
  ASSERT_TRUE(running.ok()) << running.ToString();
  ASSERT_TRUE(defrag_->TickOnce().ok());
  ASSERT_TRUE(defrag_->TickOnce().ok());
  plan = Plan(id);
  EXPECT_EQ(plan["moves"][0]["state"], "done");
  EXPECT_EQ(plan["state"], "applied");
  EXPECT_EQ(Allocations(), 2u);
}

TEST_F(DefragTest, AStepWhoseWriteFailsGivesItsReservationBack) {
  const json applying = ProposeAndApply();
  const RowId id = applying["id"].get<RowId>();
  const RowId source = applying["moves"][0]["slice_id"].get<RowId>();
  writer_->refuse = true;
  EXPECT_FALSE(defrag_->TickOnce().ok());
  EXPECT_EQ(Allocations(), 2u);  // nothing reserved is left behind
  writer_->refuse = false;
  EXPECT_EQ(Plan(id)["moves"][0]["state"], "pending");
  EXPECT_EQ(StoredSlice(*store_, source).state, SliceState::kAllocated);
  // Tried again on the next tick.
  ASSERT_TRUE(defrag_->TickOnce().ok());
  EXPECT_EQ(Plan(id)["moves"][0]["state"], "moving");
  EXPECT_EQ(Allocations(), 3u);
}

}  // namespace
}  // namespace hf::server
