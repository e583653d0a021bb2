// ChooseHold (scheduler/hold.h): the GPUs held for a waiting task are ones
// it fits once they drain, the ones that drain soonest, and none where it
// could never fit. HoldBook: when a hold begins and ends, what the others
// are asked to leave alone, and that a hold that did not help is not given
// again.
#include "scheduler/hold.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "scheduler/policy/policy_test_util.h"

namespace hf::scheduler {
namespace {

using ledger::GpuHealth;
using ledger::PlacementRequest;
using policy_test::Cluster;
using policy_test::kSim;

std::vector<GpuId> Choose(Cluster& c, const PlacementRequest& request) {
  std::vector<GpuId> out;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    out = ChooseHold(view, request);
  });
  return out;
}

PlacementRequest Slice(MemoryMib memory) {
  return PlacementRequest::Slice(kSim, memory, 10);
}

TEST(ChooseHoldTest,
     ASliceGetsTheGpuWithTheLeastMemoryInUseThatItFitsOnceEmpty) {
  Cluster c;
  const NodeId a = c.Node(1, 64000, "G1");
  const NodeId b = c.Node(3, 64000, "G2");
  c.OccupySlice(c.Gpu(a, 0), 550);
  c.OccupySlice(c.Gpu(b, 0), 600);
  c.OccupySlice(c.Gpu(b, 1), 250);
  c.OccupySlice(c.Gpu(b, 1), 250);
  c.OccupySlice(c.Gpu(b, 2), 500);
  // B1 and B2 have the same memory in use; B2 holds fewer allocations.
  EXPECT_EQ(Choose(c, Slice(30000)), std::vector<GpuId>{c.Gpu(b, 2)});
  // A lost GPU, an excluded one and one of another model are never held.
  ASSERT_TRUE(c.ledger().SetGpuHealth(c.Gpu(b, 2), GpuHealth::kLost).ok());
  EXPECT_EQ(Choose(c, Slice(30000)), std::vector<GpuId>{c.Gpu(b, 1)});
  PlacementRequest excluding = Slice(30000);
  excluding.excluded_gpus = {c.Gpu(b, 1)};
  EXPECT_EQ(Choose(c, excluding), std::vector<GpuId>{c.Gpu(a, 0)});
  excluding.allowed_models = {"G2"};
  EXPECT_EQ(Choose(c, excluding), std::vector<GpuId>{c.Gpu(b, 0)});
  // An empty GPU in MIG mode drains soonest, where a partition covers the
  // slice.
  const NodeId mig = c.MigNode(1);
  EXPECT_EQ(Choose(c, Slice(30000)), std::vector<GpuId>{c.Gpu(mig, 0)});
}

TEST(ChooseHoldTest, NothingIsHeldWhereTheTaskCouldNeverFit) {
  Cluster c;
  const NodeId n = c.Node(2, /*cpu=*/4000);
  c.OccupySlice(c.Gpu(n, 0), 100);
  // More than 90% of the largest GPU, more CPU than the node has, a model
  // that is not there, a task without GPUs, more whole GPUs than a node has.
  EXPECT_TRUE(Choose(c, Slice(60000)).empty());
  PlacementRequest cpu = Slice(4096);
  cpu.cpu_milli = 8000;
  EXPECT_TRUE(Choose(c, cpu).empty());
  PlacementRequest model = Slice(4096);
  model.allowed_models = {"A100"};
  EXPECT_TRUE(Choose(c, model).empty());
  EXPECT_TRUE(Choose(c, PlacementRequest::NodeOnly(kSim, 1000, 0)).empty());
  EXPECT_TRUE(Choose(c, PlacementRequest::WholeGpus(kSim, 3)).empty());
  // Within what the node has: the empty GPU.
  cpu.cpu_milli = 4000;
  EXPECT_EQ(Choose(c, cpu), std::vector<GpuId>{c.Gpu(n, 1)});
}

TEST(ChooseHoldTest, WholeGpusAreHeldOnTheNodeWhoseChosenGpusDrainSoonest) {
  Cluster c;
  const NodeId a = c.Node(4);
  const NodeId b = c.Node(2);
  c.MigNode(2);  // empty, but never granted whole
  c.OccupySlice(c.Gpu(a, 0), 64);
  c.OccupySlice(c.Gpu(a, 1), 128);
  c.OccupySlice(c.Gpu(a, 2), 500);
  c.OccupySlice(c.Gpu(a, 3), 32);
  c.OccupySlice(c.Gpu(b, 0), 128);
  c.OccupySlice(c.Gpu(b, 1), 128);
  // Node a's two least used (32 + 64 milli in use) beat node b's (128 +
  // 128).
  EXPECT_EQ(Choose(c, PlacementRequest::WholeGpus(kSim, 2)),
            (std::vector<GpuId>{c.Gpu(a, 0), c.Gpu(a, 3)}));
  // Three GPUs: only node a has them.
  EXPECT_EQ(Choose(c, PlacementRequest::WholeGpus(kSim, 3)),
            (std::vector<GpuId>{c.Gpu(a, 0), c.Gpu(a, 1), c.Gpu(a, 3)}));
  EXPECT_TRUE(Choose(c, PlacementRequest::WholeGpus(kSim, 5)).empty());
}

TEST(ChooseHoldTest, AGpuOnANodeWithoutTheTasksCpuNowComesLast) {
  Cluster c;
  const NodeId starved = c.Node(2, /*cpu=*/8000);
  const NodeId roomy = c.Node(1, /*cpu=*/8000);
  // The starved node's CPU is taken by a task on its other GPU; its empty
  // GPU would drain at once, and the task still would not fit there.
  c.OccupySlice(c.Gpu(starved, 1), 100, /*cpu=*/6000);
  c.OccupySlice(c.Gpu(roomy, 0), 500, /*cpu=*/2000);
  PlacementRequest cpu = Slice(40000);
  cpu.cpu_milli = 4000;
  EXPECT_EQ(Choose(c, cpu), std::vector<GpuId>{c.Gpu(roomy, 0)});
  // Host memory counts the same way: a CPU-only task holds most of the
  // roomy node's.
  ledger::Allocation cpu_task;
  cpu_task.id = SliceId(1);
  cpu_task.tenant = kSim;
  cpu_task.kind = ledger::RequestKind::kNodeOnly;
  cpu_task.node = roomy;
  cpu_task.host_memory_mib = (1 << 20) - 1024;
  ASSERT_TRUE(c.ledger().Restore(cpu_task).ok());
  PlacementRequest host = Slice(40000);
  host.host_memory_mib = 2048;
  EXPECT_EQ(Choose(c, host), std::vector<GpuId>{c.Gpu(starved, 0)});
  // Where every node is short, the least memory in use as before.
  cpu.cpu_milli = 7000;
  EXPECT_EQ(Choose(c, cpu), std::vector<GpuId>{c.Gpu(starved, 0)});
}

// HoldBook::AfterWaiting on the cluster as it is now.
HoldChange AfterWaiting(Cluster& c, HoldBook& book, const HoldRules& rules,
                        std::int64_t task, const PlacementRequest& request,
                        std::int64_t waited_ms, bool for_room = true,
                        const std::set<GpuId>& excluded = {}) {
  HoldChange change = HoldChange::kNone;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    change = book.AfterWaiting(view, rules, task, request, for_room, waited_ms,
                               /*now=*/waited_ms, excluded);
  });
  return change;
}

TEST(HoldBookTest, AHoldBeginsOnlyForATaskThatWaitedLongEnoughForRoom) {
  Cluster c;
  const NodeId n = c.Node(2);
  c.OccupySlice(c.Gpu(n, 0), 600);
  c.OccupySlice(c.Gpu(n, 1), 700);
  const HoldRules rules{/*hold_after_ms=*/1000, /*max_holds=*/1};
  HoldBook book;
  // Not yet long enough; not for room; holds switched off.
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, Slice(40000), 999),
            HoldChange::kNone);
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, Slice(40000), 5000,
                         /*for_room=*/false),
            HoldChange::kNone);
  EXPECT_EQ(AfterWaiting(c, book, HoldRules{0, 1}, 7, Slice(40000), 5000),
            HoldChange::kNone);
  EXPECT_TRUE(book.holds().empty());
  // Long enough: the GPU with the least in use, since `now`.
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, Slice(40000), 1000),
            HoldChange::kBegan);
  ASSERT_NE(book.HoldOf(7), nullptr);
  EXPECT_EQ(book.HoldOf(7)->gpus, std::vector<GpuId>{c.Gpu(n, 0)});
  EXPECT_EQ(book.HoldOf(7)->since, 1000);
  EXPECT_EQ(book.HeldGpuCount(), 1);
  // One hold at a time: a second waiting task gets none.
  EXPECT_EQ(AfterWaiting(c, book, rules, 8, Slice(40000), 9000),
            HoldChange::kNone);
  EXPECT_EQ(book.HoldOf(8), nullptr);
  // With two allowed it gets the other GPU, never the held one; and a GPU
  // the caller leaves out is not held either.
  HoldBook two = book;
  EXPECT_EQ(AfterWaiting(c, two, HoldRules{1000, 2}, 8, Slice(40000), 9000,
                         true, {c.Gpu(n, 1)}),
            HoldChange::kNone);
  EXPECT_EQ(AfterWaiting(c, book, HoldRules{1000, 2}, 8, Slice(40000), 9000),
            HoldChange::kBegan);
  EXPECT_EQ(book.HoldOf(8)->gpus, std::vector<GpuId>{c.Gpu(n, 1)});
  // Each task is asked to leave the other's GPU alone, not its own.
  PlacementRequest asked = Slice(1024);
  book.ExcludeOthers(7, asked);
  EXPECT_EQ(asked.excluded_gpus, std::vector<GpuId>{c.Gpu(n, 1)});
  std::set<GpuId> held;
  book.AddHeldGpus(held);
  EXPECT_EQ(held, (std::set<GpuId>{c.Gpu(n, 0), c.Gpu(n, 1)}));
  // Placed: its hold ends, and it could have one again were it to wait.
  EXPECT_TRUE(book.End(7));
  EXPECT_FALSE(book.End(7));
  EXPECT_EQ(AfterWaiting(c, book, HoldRules{1000, 2}, 7, Slice(40000), 9000),
            HoldChange::kBegan);
}

TEST(HoldBookTest, AHoldThatDidNotHelpEndsAndIsNotGivenAgain) {
  Cluster c;
  const NodeId n = c.Node(1);
  c.OccupySlice(c.Gpu(n, 0), 300);  // slice 1000000
  const HoldRules rules{1000, 1};
  HoldBook book;
  // Whole GPUs: the one GPU, busy.
  const PlacementRequest whole = PlacementRequest::WholeGpus(kSim, 1);
  ASSERT_EQ(AfterWaiting(c, book, rules, 7, whole, 2000), HoldChange::kBegan);
  // Still draining: it lasts.
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, whole, 3000), HoldChange::kNone);
  EXPECT_NE(book.HoldOf(7), nullptr);
  // Drained, and the task still failed to place there (something else
  // stands in its way): the hold ends, and none is given again.
  ASSERT_TRUE(c.ledger().Release(SliceId(1000000)).ok());
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, whole, 4000),
            HoldChange::kEndedDrained);
  EXPECT_EQ(book.HoldOf(7), nullptr);
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, whole, 5000), HoldChange::kNone);
  EXPECT_EQ(book.HoldOf(7), nullptr);
  // Once forgotten (it no longer waits), it may have one again.
  book.ForgetIf([](std::int64_t task) { return task == 7; });
  c.OccupySlice(c.Gpu(n, 0), 300);
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, whole, 6000), HoldChange::kBegan);
  // Its GPU can no longer take it, even once empty (lost): it ends.
  ASSERT_TRUE(c.ledger().SetGpuHealth(c.Gpu(n, 0), GpuHealth::kLost).ok());
  EXPECT_EQ(AfterWaiting(c, book, rules, 7, whole, 7000),
            HoldChange::kEndedChanged);
  EXPECT_TRUE(book.holds().empty());
  // A task no GPU could ever take gets none, and is not asked again.
  EXPECT_EQ(AfterWaiting(c, book, rules, 9, Slice(60000), 9000),
            HoldChange::kNone);
  EXPECT_FALSE(book.MayBegin(rules, 9, true, 9000));
}

}  // namespace
}  // namespace hf::scheduler
