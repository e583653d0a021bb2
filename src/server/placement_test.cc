// Placement (placement.h): a task's request, and what every placement does
// first — approvals past their expiry withdrawn, blocked MIG GPUs left out
// and named — plus the tier of a GPU and what a learning policy is told.
#include "server/placement.h"

#include <gtest/gtest.h>

#include <memory>

#include "scheduler/policy/best_fit.h"
#include "server/ledger_test_base.h"

namespace hf::server {
namespace {

class PlacementTest : public LedgerTestBase {
 protected:
  void SetUp() override {
    LedgerTestBase::SetUp();
    if (HasFatalFailure()) return;
    tenancy_ = std::make_unique<LedgerTenancy>(*ledger_, queue_, wall_);
    node_.id = 7;
    node_.name = "n1";
    for (int i = 0; i < 2; ++i) {
      store::GpuRow g = A100(7, i, i == 0 ? "GPU-a" : "GPU-b");
      g.mps_capable = true;
      ASSERT_TRUE(inventory_->SyncGpu(node_, g).ok());
    }
    for (store::RowId t : {1, 2}) {
      store::TenantRow row;
      row.id = t;
      ASSERT_TRUE(tenancy_->SyncTenant(row).ok());
    }
  }

  // Places with the given policy (the learned hf-frag, or Best-Fit).
  std::unique_ptr<Placement> Make(bool learned) {
    scheduler::MadePolicy made;
    if (learned) {
      auto m = scheduler::MakePolicy("hf-frag");
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      made = std::move(*m);
    }
    return std::make_unique<Placement>(*ledger_, *inventory_, *tenancy_, mig_,
                                       mono_, std::move(made),
                                       learned ? nullptr : &best_fit_);
  }

  static store::TaskRow SliceTask(store::RowId id, store::RowId tenant,
                                  std::int64_t memory) {
    store::TaskRow t;
    t.id = id;
    t.tenant_id = tenant;
    t.memory_mib = memory;
    t.compute_percent = 10;
    return t;
  }

  int GpuIndexOf(const ledger::PlacementResult& r) const {
    return inventory_->KeyOf(r.allocation.gpus.front()).index;
  }

  FakeClock wall_{1'000};
  FakeClock mono_{50};
  MigBook mig_;
  std::unique_ptr<LedgerTenancy> tenancy_;
  store::NodeRow node_;
  scheduler::BestFitPolicy best_fit_;
};

TEST_F(PlacementTest, ATaskBecomesItsRequest) {
  auto p = Make(false);
  store::TaskRow t = SliceTask(1, 2, 4096);
  t.gpu_type = "nvidia";
  ledger::PlacementRequest r = p->RequestFor(t);
  EXPECT_EQ(r.tenant, TenantId(2));
  EXPECT_EQ(r.kind, ledger::RequestKind::kSlice);
  EXPECT_EQ(r.memory_mib, 4096);
  EXPECT_EQ(r.compute_percent, 10);
  EXPECT_TRUE(r.allowed_models.empty());  // every GPU is NVIDIA
  t.gpu_required = 2;
  t.gpu_type = "amd";
  r = p->RequestFor(t);
  EXPECT_EQ(r.kind, ledger::RequestKind::kWholeGpus);
  EXPECT_EQ(r.gpu_count, 2);
  EXPECT_EQ(r.allowed_models,
            std::vector<std::string>{"(no amd GPU in the cluster)"});
}

TEST_F(PlacementTest, ABlockedMigGpuIsLeftOutAndNamedWhenNothingElseFits) {
  auto p = Make(false);
  const GpuKey a{7, 0};
  mig_.MarkFull(a, /*until=*/1'000);
  EXPECT_EQ(p->Blocked().size(), 1U);
  // Best-Fit would take GPU 0 (the lower index on a tie): it is left out.
  ledger::PlacementResult first =
      p->Place(p->RequestFor(SliceTask(1, 1, 40960)));
  ASSERT_TRUE(first.placed()) << first.message;
  EXPECT_EQ(GpuIndexOf(first), 1);
  // GPU 1 cannot take another 60 GiB; GPU 0 could, but is blocked.
  ledger::PlacementResult second =
      p->Place(p->RequestFor(SliceTask(2, 1, 61440)));
  ASSERT_FALSE(second.placed());
  EXPECT_NE(second.message.find("MIG GPU GPU-a had no room"), std::string::npos)
      << second.message;
  // Whole GPUs are not partitions: the block does not apply.
  store::TaskRow whole = SliceTask(3, 1, 0);
  whole.gpu_required = 1;
  EXPECT_TRUE(p->Place(p->RequestFor(whole)).placed());
  EXPECT_EQ(p->PrepareTargets(), (std::set<GpuId>{*inventory_->Gpu(7, 0)}));
  mono_.Set(1'000);  // the block ran out
  EXPECT_TRUE(p->Blocked().empty());
}

TEST_F(PlacementTest, AnApprovalPastItsExpiryIsWithdrawnBeforeAnyPlacement) {
  auto p = Make(false);
  // Tenant 1 on both GPUs (the second does not fit next to the first).
  ASSERT_TRUE(p->Place(p->RequestFor(SliceTask(1, 1, 61440))).placed());
  ASSERT_TRUE(p->Place(p->RequestFor(SliceTask(2, 1, 61440))).placed());
  store::ApprovalRow approval;
  approval.id = 9;
  approval.tenant_a = 1;
  approval.tenant_b = 2;
  approval.expires_at = 2'000;
  ASSERT_TRUE(tenancy_->Apply(approval).ok());
  EXPECT_TRUE(p->Place(p->RequestFor(SliceTask(3, 2, 1024))).placed());
  wall_.Set(2'000);
  // Nothing else has noticed the expiry: the placement itself does.
  EXPECT_FALSE(p->Place(p->RequestFor(SliceTask(4, 2, 1024))).placed());
  EXPECT_TRUE(tenancy_->in_force().empty());
}

TEST_F(PlacementTest, TheHooksAvailabilityAndWholeGpusShapeTheTier) {
  auto p = Make(false);
  const GpuId gpu = *inventory_->Gpu(7, 0);
  EXPECT_EQ(p->QosFor(gpu).level, scheduler::QosLevel::kSilver);
  EXPECT_FALSE(p->QosFor(gpu).hook_eligible);
  inventory_->SetHook(7, true);
  EXPECT_TRUE(p->QosFor(gpu).hook_eligible);
  EXPECT_EQ(p->QosFor(gpu, /*whole_gpus=*/true).level,
            scheduler::QosLevel::kExclusive);
}

TEST_F(PlacementTest, ALearningPolicyIsToldOfEachTaskOnce) {
  auto p = Make(true);
  ASSERT_NE(p->learner(), nullptr);
  EXPECT_EQ(p->policy().name(), "hf-frag");
  const store::TaskRow t5 = SliceTask(5, 1, 4096);
  p->Learn(t5, p->RequestFor(t5));
  p->Learn(t5, p->RequestFor(t5));  // again: not told twice
  const store::TaskRow t3 = SliceTask(3, 1, 4096);
  p->Learn(t3, p->RequestFor(t3));  // older than one already told
  EXPECT_EQ(p->learner()->tasks_observed(), 1);
  // Recovery: forgotten, the history read again, then nothing older.
  p->ForgetLearned();
  EXPECT_EQ(p->learner()->tasks_observed(), 0);
  p->Learn(t3, p->RequestFor(t3));
  p->LearnedThrough(8);
  const store::TaskRow t7 = SliceTask(7, 1, 4096);
  p->Learn(t7, p->RequestFor(t7));
  EXPECT_EQ(p->learner()->tasks_observed(), 1);
  // With a policy for tests nothing is learned.
  EXPECT_EQ(Make(false)->learner(), nullptr);
}

}  // namespace
}  // namespace hf::server
