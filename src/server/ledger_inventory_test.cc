// Inventory (inventory.h): stored nodes and GPUs reach the ledger once
// each, a different card swaps in only while its GPU holds nothing, fenced
// GPUs (a registration in flight, a slice recovery could not restore) take
// nothing new and come back as they were, and a task's gpu_type turns into
// allowed models.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "scheduler/policy/best_fit.h"
#include "server/inventory.h"
#include "server/ledger_test_base.h"

namespace hf::server {
namespace {

class InventoryTest : public LedgerTestBase {
 protected:
  void SetUp() override {
    LedgerTestBase::SetUp();
    if (HasFatalFailure()) return;
    node_.id = 7;
    node_.name = "n1";
  }

  static store::GpuRow Card(int index, const std::string& uuid,
                            std::int64_t memory = 81920) {
    return A100(7, index, uuid, memory);
  }

  wire::NodeReport Report(const std::vector<store::GpuRow>& gpus) const {
    wire::NodeReport r;
    r.name = node_.name;
    for (const store::GpuRow& g : gpus) {
      wire::GpuReport w;
      w.index = g.index;
      w.uuid = g.uuid;
      w.vendor = g.vendor;
      w.model = g.model;
      w.memory_mib = g.memory_mib;
      w.cc_major = g.cc_major;
      w.cc_minor = g.cc_minor;
      w.lost = g.lost;
      r.gpus.push_back(w);
    }
    return r;
  }

  ledger::GpuSpec Spec(int index) {
    auto gpu = inventory_->Gpu(node_.id, index);
    EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
    ledger::GpuSpec spec;
    ledger_->Read(
        [&](const ledger::ClusterView& view) { spec = view.gpu(*gpu).spec; });
    return spec;
  }

  // A 1 GiB slice asked of the ledger: where it lands, or -1.
  int PlaceOne() {
    ledger::PlacementRequest r;
    r.tenant = TenantId(1);
    r.kind = ledger::RequestKind::kSlice;
    r.memory_mib = 1024;
    r.compute_percent = 10;
    ledger::PlacementResult placed = ledger_->Place(r, policy_);
    if (!placed.placed()) return -1;
    return inventory_->KeyOf(placed.allocation.gpus.front()).index;
  }

  store::NodeRow node_;
  scheduler::BestFitPolicy policy_;
};

TEST_F(InventoryTest, NodesAndGpusReachTheLedgerOnceEachAndMapBothWays) {
  const std::uint64_t before = queue_.generation();
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(1, "GPU-b")).ok());
  EXPECT_GT(queue_.generation(), before);  // new capacity wakes the scheduler
  EXPECT_EQ(inventory_->nodes().size(), 1U);
  EXPECT_EQ(inventory_->gpus().size(), 2U);
  const auto node = inventory_->FindNode(node_.id);
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(inventory_->NodeRowOf(*node), node_.id);
  auto gpu = inventory_->Gpu(node_.id, 1);
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(inventory_->KeyOf(*gpu), (GpuKey{node_.id, 1}));
  EXPECT_EQ(inventory_->Gpu(node_.id, 2).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(inventory_->FindNode(99).has_value());
  EXPECT_EQ(names_.GpuUuid(GpuKey{node_.id, 1}, /*read_store=*/false), "GPU-b");
}

TEST_F(InventoryTest, ADifferentCardSwapsInOnlyWhileItsGpuHoldsNothing) {
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  store::NodeRow other = node_;
  other.id = 8;  // its larger GPU 0 holds nothing (Best-Fit)
  other.name = "n2";
  ASSERT_TRUE(inventory_->SyncGpu(other, Card(0, "GPU-o", 163840)).ok());
  EXPECT_TRUE(inventory_->Occupied(node_.id).empty());
  ASSERT_EQ(PlaceOne(), 0);
  EXPECT_EQ(inventory_->Occupied(node_.id), std::set<int>{0});
  EXPECT_TRUE(inventory_->Occupied(other.id).empty());
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-new", 40960)).ok());
  EXPECT_EQ(Spec(0).uuid, "GPU-a");  // a slice holds it: the old card stays
  for (const ledger::Allocation& a : ledger_->Allocations()) {
    ASSERT_TRUE(ledger_->Release(a.id).ok());
  }
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-new", 40960)).ok());
  EXPECT_EQ(Spec(0).uuid, "GPU-new");
  EXPECT_EQ(Spec(0).memory_mib, 40960);
}

TEST_F(InventoryTest, ARegistrationFencesTheCardsItChangesUntilItEnds) {
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(1, "GPU-b")).ok());
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(2, "GPU-c")).ok());
  // GPU 0 unchanged, GPU 1 another card, GPU 2 no longer reported.
  const std::vector<GpuKey> fenced = inventory_->FenceRegistration(
      node_.id, Report({Card(0, "GPU-a"), Card(1, "GPU-other")}));
  EXPECT_EQ(fenced, (std::vector<GpuKey>{{node_.id, 1}, {node_.id, 2}}));
  EXPECT_FALSE(inventory_->Fenced(GpuKey{node_.id, 0}));
  EXPECT_TRUE(inventory_->Fenced(GpuKey{node_.id, 1}));
  EXPECT_EQ(Spec(1).health, ledger::GpuHealth::kLost);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(PlaceOne(), 0);  // only GPU 0 takes
  inventory_->EndRegistration(fenced);
  EXPECT_FALSE(inventory_->Fenced(GpuKey{node_.id, 1}));
  EXPECT_EQ(Spec(1).health, ledger::GpuHealth::kOk);
  EXPECT_EQ(Spec(2).health, ledger::GpuHealth::kOk);
  // A GPU a recovery fence holds stays lost when the registration ends.
  const std::vector<GpuKey> again = inventory_->FenceRegistration(
      node_.id, Report({Card(0, "GPU-a"), Card(1, "GPU-b")}));
  EXPECT_EQ(again, (std::vector<GpuKey>{{node_.id, 2}}));
  ASSERT_TRUE(inventory_->FenceUnrestored(41, {GpuKey{node_.id, 2}}).ok());
  inventory_->EndRegistration(again);
  EXPECT_EQ(Spec(2).health, ledger::GpuHealth::kLost);
}

TEST_F(InventoryTest, ARecoveryFenceHoldsUntilTheSliceIsGone) {
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  ASSERT_TRUE(inventory_->FenceUnrestored(41, {GpuKey{node_.id, 0}}).ok());
  EXPECT_TRUE(inventory_->Unrestored(41));
  EXPECT_EQ(PlaceOne(), -1);
  // The report says healthy: the fence still holds it.
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  EXPECT_EQ(PlaceOne(), -1);
  ASSERT_TRUE(inventory_->Unfence(41, node_, {Card(0, "GPU-a")}).ok());
  EXPECT_FALSE(inventory_->Unrestored(41));
  EXPECT_EQ(PlaceOne(), 0);
}

TEST_F(InventoryTest, AGpuTypeBecomesTheModelsOfItsVendor) {
  ASSERT_TRUE(inventory_->SyncGpu(node_, Card(0, "GPU-a")).ok());
  EXPECT_TRUE(inventory_->AllowedModels("nvidia").empty());  // every GPU
  store::GpuRow other = Card(1, "GPU-x");
  other.vendor = "amd";
  other.model = "MI300X";
  ASSERT_TRUE(inventory_->SyncGpu(node_, other).ok());
  EXPECT_EQ(inventory_->AllowedModels("nvidia"),
            std::vector<std::string>{"NVIDIA A100-SXM4-80GB"});
  EXPECT_EQ(inventory_->AllowedModels("intel"),
            std::vector<std::string>{"(no intel GPU in the cluster)"});
}

}  // namespace
}  // namespace hf::server
