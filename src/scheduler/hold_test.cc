// ChooseHold (scheduler/hold.h): the GPUs held for a waiting task are ones
// it fits once they drain, the ones that drain soonest, and none where it
// could never fit.
#include "scheduler/hold.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/best_fit.h"

namespace hf::scheduler {
namespace {

using ledger::GpuHealth;
using ledger::Ledger;
using ledger::PlacementRequest;

class HoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = Ledger::Create();
    ASSERT_TRUE(l.ok());
    ledger_ = std::move(*l);
  }

  // A node with `count` GPUs of `memory` MiB each, of `model`.
  NodeId AddNode(const std::string& name, int count, MemoryMib memory,
                 const std::string& model = "V100", CpuMilli cpu = 64000) {
    ledger::NodeSpec spec;
    spec.name = name;
    spec.cpu_milli = cpu;
    spec.host_memory_mib = 1 << 20;
    auto node = ledger_->AddNode(spec);
    EXPECT_TRUE(node.ok());
    for (int i = 0; i < count; ++i) {
      ledger::GpuSpec g;
      g.uuid = name + "-gpu" + std::to_string(i);
      g.index = i;
      g.model = model;
      g.memory_mib = memory;
      auto gpu = ledger_->AddGpu(*node, g);
      EXPECT_TRUE(gpu.ok());
      gpus_.push_back(*gpu);
    }
    return *node;
  }

  // Places a slice of `memory` MiB on `gpu`.
  void PlaceOn(GpuId gpu, MemoryMib memory, ComputePercent compute = 10) {
    PlacementRequest r = PlacementRequest::Slice(kTenant, memory, compute);
    r.pinned_gpu = gpu;
    auto result = ledger_->Place(r, policy_);
    ASSERT_TRUE(result.placed()) << result.message;
  }

  std::vector<GpuId> Choose(const PlacementRequest& request) {
    std::vector<GpuId> out;
    ledger_->Read([&](const ledger::ClusterView& view) {
      out = ChooseHold(view, request);
    });
    return out;
  }

  static constexpr TenantId kTenant{1};
  std::unique_ptr<Ledger> ledger_;
  BestFitPolicy policy_;
  std::vector<GpuId> gpus_;
};

TEST_F(HoldTest, ASliceGetsTheGpuWithTheLeastMemoryInUseThatItFitsOnceEmpty) {
  AddNode("small", 1, 16384);  // gpus_[0]: too small for 20 GB even empty
  AddNode("big", 3, 40960);    // gpus_[1..3]
  PlaceOn(gpus_[0], 1024);
  PlaceOn(gpus_[1], 30000);
  PlaceOn(gpus_[2], 10000);
  PlaceOn(gpus_[2], 10000);
  PlaceOn(gpus_[3], 20000);
  const PlacementRequest big = PlacementRequest::Slice(kTenant, 20480, 50);
  // gpus_[2] and [3] have 20000 in use; [3] holds fewer allocations.
  EXPECT_EQ(Choose(big), std::vector<GpuId>{gpus_[3]});
  // A lost GPU, an excluded one and one of another model are never held.
  ASSERT_TRUE(ledger_->SetGpuHealth(gpus_[3], GpuHealth::kLost).ok());
  EXPECT_EQ(Choose(big), std::vector<GpuId>{gpus_[2]});
  PlacementRequest excluding = big;
  excluding.excluded_gpus = {gpus_[2]};
  EXPECT_EQ(Choose(excluding), std::vector<GpuId>{gpus_[1]});
  AddNode("other", 1, 81920, "A100");
  PlacementRequest v100_only = big;
  v100_only.allowed_models = {"V100"};
  EXPECT_EQ(Choose(v100_only), std::vector<GpuId>{gpus_[2]});
  // The A100 is empty: it drains soonest for a request it may take.
  EXPECT_EQ(Choose(big), std::vector<GpuId>{gpus_[4]});
}

TEST_F(HoldTest, NothingIsHeldWhereTheTaskCouldNeverFit) {
  AddNode("n1", 2, 16384, "V100", /*cpu=*/4000);
  PlaceOn(gpus_[0], 8192);
  // Larger than any GPU (the 90% rule), more CPU than the node has, a
  // model that is not there, a task without GPUs.
  EXPECT_TRUE(
      Choose(PlacementRequest::Slice(kTenant, 16000, std::nullopt)).empty());
  PlacementRequest cpu = PlacementRequest::Slice(kTenant, 4096, 10);
  cpu.cpu_milli = 8000;
  EXPECT_TRUE(Choose(cpu).empty());
  PlacementRequest model = PlacementRequest::Slice(kTenant, 4096, 10);
  model.allowed_models = {"A100"};
  EXPECT_TRUE(Choose(model).empty());
  EXPECT_TRUE(Choose(PlacementRequest::NodeOnly(kTenant, 1000, 0)).empty());
  EXPECT_TRUE(Choose(PlacementRequest::WholeGpus(kTenant, 3)).empty());
  // Within what the node has, the empty GPU.
  cpu.cpu_milli = 4000;
  EXPECT_EQ(Choose(cpu), std::vector<GpuId>{gpus_[1]});
}

TEST_F(HoldTest, WholeGpusAreHeldOnTheNodeWhoseChosenGpusDrainSoonest) {
  AddNode("a", 4, 40960);  // gpus_[0..3]
  AddNode("b", 2, 40960);  // gpus_[4..5]
  PlaceOn(gpus_[0], 4096);
  PlaceOn(gpus_[1], 8192);
  PlaceOn(gpus_[2], 30000);
  PlaceOn(gpus_[3], 2048);
  PlaceOn(gpus_[4], 8192);
  PlaceOn(gpus_[5], 8192);
  // Node a's two least used (2048 + 4096) beat node b's (8192 + 8192).
  EXPECT_EQ(Choose(PlacementRequest::WholeGpus(kTenant, 2)),
            (std::vector<GpuId>{gpus_[0], gpus_[3]}));
  // Three GPUs: only node a has them (2048 + 4096 + 8192).
  EXPECT_EQ(Choose(PlacementRequest::WholeGpus(kTenant, 3)),
            (std::vector<GpuId>{gpus_[0], gpus_[1], gpus_[3]}));
  EXPECT_TRUE(Choose(PlacementRequest::WholeGpus(kTenant, 5)).empty());
}

}  // namespace
}  // namespace hf::scheduler
