// ChooseHold (scheduler/hold.h): the GPUs held for a waiting task are ones
// it fits once they drain, the ones that drain soonest, and none where it
// could never fit.
#include "scheduler/hold.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hf::scheduler
