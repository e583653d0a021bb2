// Nodes (nodes.h) on the real SQLite store and a real ledger
// (GuardedLedger), writing through a LeaderWriter that can refuse: a
// registration reaches the store and then the ledger's inventory, a report
// older than the newest applied changes nothing, a GPU no longer reported
// is lost; a task reported running without a slice gets a ledger-only
// slice (the compensation path), and when that write fails the ledger's
// reservation is undone; the hook's report of an attached hook adds "hook"
// to the slice's enforcement and the reply carries the slice's quota.
#include "server/nodes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "server/unit_fixture.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;
using wire::GpuReport;
using wire::NodeReport;
using wire::ReportNumber;
using wire::RunningTask;

class NodesTest : public UnitFixture {
 protected:
  NodesTest() : UnitFixture("hf-nodes-test") {}

  void SetUp() override {
    UnitFixture::SetUp();
    AddTenant();  // the node registers itself
    nodes_ = std::make_unique<Nodes>(
        store_.get(), &clock_, &clock_, NodesOptions{}, core_.get(), &beats_,
        &usage_, &names_, &queue_, mig_.get(), &telemetry_, /*fence=*/nullptr,
        writer_.get());
  }

  static NodeReport Report(std::int64_t seq, const std::vector<int>& gpus) {
    NodeReport r;
    r.name = "n1";
    r.number = ReportNumber{1, seq};
    r.hook_available = true;
    for (int index : gpus) {
      GpuReport g;
      g.index = index;
      g.uuid = "GPU-" + std::to_string(index);
      g.model = "NVIDIA A100-SXM4-80GB";
      g.memory_mib = 81920;
      g.cc_major = 8;
      r.gpus.push_back(g);
    }
    return r;
  }

  std::vector<store::GpuRow> StoredGpus() {
    std::vector<store::GpuRow> out;
    EXPECT_TRUE(store_
                    ->Read([&](store::Txn& txn) -> Status {
                      auto g = txn.ListGpus(std::nullopt);
                      if (!g.ok()) return g.status();
                      out = *g;
                      return Status::Ok();
                    })
                    .ok());
    return out;
  }

  bool LedgerHasGpu(RowId node, int index) {
    MutexLock lock(core_->mu());
    return core_->inventory().Gpu(node, index).ok();
  }

  NodeBeats beats_{15'000};
  SliceUsage usage_;
  std::unique_ptr<Nodes> nodes_;
};

TEST_F(NodesTest, ARegistrationReachesTheStoreThenTheLedgerAndAnOlderOneNot) {
  auto applied = nodes_->Register(admin_, Report(2, {0}));
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_FALSE(applied->newer_applied.has_value());
  const RowId node = applied->node.id;
  ASSERT_EQ(StoredGpus().size(), 1u);
  EXPECT_TRUE(LedgerHasGpu(node, 0));

  // Sent before the one applied, delivered after it: none of it counts.
  auto late = nodes_->Register(admin_, Report(1, {0, 1}));
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  ASSERT_TRUE(late->newer_applied.has_value());
  EXPECT_EQ(*late->newer_applied, (ReportNumber{1, 2}));
  EXPECT_EQ(StoredGpus().size(), 1u);
  EXPECT_FALSE(LedgerHasGpu(node, 1));

  // A newer report without GPU 0: it is lost, its row kept.
  auto without = nodes_->Register(admin_, Report(3, {}));
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  const auto gpus = StoredGpus();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_TRUE(gpus[0].lost);

  // A refused write changes neither the store nor the ledger.
  writer_->refuse = true;
  EXPECT_FALSE(nodes_->Register(admin_, Report(4, {0, 1})).ok());
  EXPECT_EQ(StoredGpus().size(), 1u);
  EXPECT_FALSE(LedgerHasGpu(node, 1));
}

TEST_F(NodesTest, ARunningTaskWithoutASliceIsRecordedLedgerOnlyOnceWritten) {
  auto applied = nodes_->Register(admin_, Report(1, {0}));
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  const RowId task = PendingTask(20'480, 25).id;
  RunningTask running;
  running.task_id = task;
  running.state = "running";
  running.gpu_indices = {0};

  // The compensation's write fails: the slice reserved for it is undone.
  // (The heartbeats repeat the registration, numbered on: answered from
  // memory, without a write.)
  writer_->refuse = true;
  auto refused = nodes_->Heartbeat(admin_, Report(2, {0}), {running});
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(Allocations(), 0u);
  EXPECT_FALSE(StoredTask(*store_, task).slice_id.has_value());

  writer_->refuse = false;
  auto reply = nodes_->Heartbeat(admin_, Report(3, {0}), {running});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(Allocations(), 1u);
  const TaskRow t = StoredTask(*store_, task);
  ASSERT_TRUE(t.slice_id.has_value());
  EXPECT_EQ(t.state, TaskState::kRunning);
  const SliceRow s = StoredSlice(*store_, *t.slice_id);
  EXPECT_EQ(s.origin, "compensation");
  EXPECT_TRUE(s.enforcement.empty());  // nothing was injected
  EXPECT_EQ(s.memory_mib, 20'480);
  // The hook's region must hold the slice's quota.
  ASSERT_EQ(reply->quotas.size(), 1u);
  EXPECT_EQ(reply->quotas[0].slice_id, s.id);
  EXPECT_EQ(reply->quotas[0].memory_mib, 20'480);

  // Reported again, now with an attached hook: "hook" is enforced.
  wire::HookReport hook;
  hook.attached = true;
  hook.attaches = 1;
  hook.processes = 1;
  running.hook = hook;
  ASSERT_TRUE(nodes_->Heartbeat(admin_, Report(4, {0}), {running}).ok());
  const SliceRow hooked = StoredSlice(*store_, s.id);
  EXPECT_NE(std::ranges::find(hooked.enforcement, "hook"),
            hooked.enforcement.end());
  EXPECT_EQ(Allocations(), 1u);  // recorded once
}

}  // namespace
}  // namespace hf::server
