// The defragmentation planner (scheduler/defrag.h): moves only movable
// slices, never strands one, never changes the live ledger, and every
// target passes the ledger's own checks.
#include "scheduler/defrag.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/best_fit.h"

namespace hf::scheduler {
namespace {

using ledger::Ledger;
using ledger::PlacementRequest;

class DefragTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = Ledger::Create();
    ASSERT_TRUE(l.ok());
    ledger_ = std::move(*l);
  }

  // A node with `count` GPUs of `memory` MiB each.
  NodeId AddNode(const std::string& name, int count, MemoryMib memory) {
    ledger::NodeSpec spec;
    spec.name = name;
    spec.cpu_milli = 64000;
    spec.host_memory_mib = 1 << 20;
    auto node = ledger_->AddNode(spec);
    EXPECT_TRUE(node.ok());
    for (int i = 0; i < count; ++i) {
      ledger::GpuSpec g;
      g.uuid = name + "-gpu" + std::to_string(i);
      g.index = i;
      g.model = "V100";
      g.memory_mib = memory;
      auto gpu = ledger_->AddGpu(*node, g);
      EXPECT_TRUE(gpu.ok());
      gpus_.push_back(*gpu);
    }
    return *node;
  }

  // Places a slice of `memory` MiB / `compute` % pinned to `gpu`.
  SliceId PlaceOn(GpuId gpu, MemoryMib memory, ComputePercent compute,
                  bool movable, std::uint64_t task_id) {
    PlacementRequest r = PlacementRequest::Slice(kTenant, memory, compute);
    r.pinned_gpu = gpu;
    auto result = ledger_->Place(r, policy_);
    EXPECT_TRUE(result.placed()) << result.message;
    if (movable) {
      MovableSlice m;
      m.task_id = task_id;
      m.request = PlacementRequest::Slice(kTenant, memory, compute);
      request_.movable[result.allocation.id] = m;
    }
    return result.allocation.id;
  }

  static constexpr TenantId kTenant{1};
  std::unique_ptr<Ledger> ledger_;
  BestFitPolicy policy_;
  std::vector<GpuId> gpus_;
  DefragRequest request_;
};

TEST_F(DefragTest, MeasuresRoomAndFragmentation) {
  AddNode("n1", 2, 16384);
  PlaceOn(gpus_[0], 8192, 25, false, 1);
  PlaceOn(gpus_[1], 8192, 25, false, 2);
  ledger_->Read([&](const ledger::ClusterView& view) {
    RoomSummary room = MeasureRoom(view, std::nullopt);
    ASSERT_EQ(room.gpus.size(), 2u);
    EXPECT_EQ(room.gpus[0].largest_slice_mib, 8192);
    EXPECT_EQ(room.free_memory_mib, 16384);
    EXPECT_EQ(room.largest_slice_mib, 8192);
    EXPECT_DOUBLE_EQ(room.fragmentation, 0.5);
  });
}

TEST_F(DefragTest, MovesPreemptibleSlicesToFreeAGpu) {
  AddNode("n1", 2, 16384);
  // 8 GiB free on each GPU: a 12 GiB slice fits nowhere.
  const SliceId a = PlaceOn(gpus_[0], 8192, 25, true, 10);
  PlaceOn(gpus_[1], 8192, 25, false, 11);
  request_.goal_memory_mib = 12288;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].slice, a);
  EXPECT_EQ(plan->moves[0].task_id, 10u);
  EXPECT_EQ(plan->moves[0].from_gpu, gpus_[0]);
  EXPECT_EQ(plan->moves[0].to_gpu, gpus_[1]);
  EXPECT_EQ(plan->freed_gpu, gpus_[0]);
  EXPECT_EQ(plan->before.largest_slice_mib, 8192);
  EXPECT_EQ(plan->after.largest_slice_mib, 16384);
  EXPECT_DOUBLE_EQ(plan->after.fragmentation, 0.0);
  // The live ledger is untouched.
  auto live = ledger_->GetAllocation(a);
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->gpus[0], gpus_[0]);
  EXPECT_TRUE(ledger_->CheckInvariants().ok());
}

TEST_F(DefragTest, NeverMovesSlicesOfNonPreemptibleTasks) {
  AddNode("n1", 2, 16384);
  PlaceOn(gpus_[0], 8192, 25, false, 10);
  PlaceOn(gpus_[1], 8192, 25, false, 11);
  request_.goal_memory_mib = 12288;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(DefragTest, NoPlanWhenAMovedSliceWouldHaveNoTarget) {
  AddNode("n1", 2, 16384);
  // GPU 0: two movable 6 GiB slices; GPU 1: 12 GiB used, 4 GiB free.
  // Neither 6 GiB slice fits on GPU 1: no plan (no eviction).
  PlaceOn(gpus_[0], 6144, 25, true, 10);
  PlaceOn(gpus_[0], 6144, 25, true, 11);
  PlaceOn(gpus_[1], 12288, 25, false, 12);
  request_.goal_memory_mib = 16384;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(DefragTest, ComputeIsCheckedOnTargets) {
  AddNode("n1", 2, 16384);
  // GPU 1 has the memory for the moved slice but not the compute.
  PlaceOn(gpus_[0], 8192, 50, true, 10);
  PlaceOn(gpus_[1], 4096, 80, false, 11);
  request_.goal_memory_mib = 12288;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(plan.ok());
}

TEST_F(DefragTest, RespectsMaxMovesAndPicksTheFewestMoves) {
  AddNode("n1", 3, 16384);
  // GPU 0: three small movable slices; GPU 1: one large movable one; GPU 2
  // has room for everything that moves.
  PlaceOn(gpus_[0], 2048, 10, true, 1);
  PlaceOn(gpus_[0], 2048, 10, true, 2);
  PlaceOn(gpus_[0], 2048, 10, true, 3);
  const SliceId big = PlaceOn(gpus_[1], 6144, 10, true, 4);
  PlaceOn(gpus_[2], 4096, 10, false, 5);
  request_.goal_memory_mib = 16384;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].slice, big);
  request_.max_moves = 0;
  auto bad = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "max_moves");
}

TEST_F(DefragTest, NodeScopeFreesRoomOnThatNodeOnly) {
  const NodeId n1 = AddNode("n1", 1, 16384);
  AddNode("n2", 1, 16384);
  PlaceOn(gpus_[0], 8192, 25, true, 1);
  PlaceOn(gpus_[1], 4096, 25, false, 2);
  request_.node = n1;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].to_gpu, gpus_[1]);
  ASSERT_EQ(plan->after.gpus.size(), 1u);
  EXPECT_EQ(plan->after.gpus[0].largest_slice_mib, 16384);
  request_.node = NodeId(99);
  auto unknown = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
}

TEST_F(DefragTest, GoalThatFitsAlreadyNeedsNoPlan) {
  AddNode("n1", 2, 16384);
  PlaceOn(gpus_[0], 8192, 25, true, 1);
  request_.goal_memory_mib = 8192;
  auto plan = PlanDefrag(*ledger_, request_, policy_);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace hf::scheduler
