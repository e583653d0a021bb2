// LedgerTenancy (ledger_tenancy.h): who may share a GPU in the ledger
// follows the stored groups and the approvals in force — an approval counts
// from its grant until it expires or is withdrawn, a deleted group's
// members share with nobody, and restart recovery counts every approval
// only while it restores slices.
#include "server/ledger_tenancy.h"

#include <gtest/gtest.h>

#include <memory>

#include "scheduler/policy/best_fit.h"
#include "server/inventory.h"
#include "server/ledger_test_base.h"

namespace hf::server {
namespace {

class LedgerTenancyTest : public LedgerTestBase {
 protected:
  void SetUp() override {
    LedgerTestBase::SetUp();
    if (HasFatalFailure()) return;
    tenancy_ = std::make_unique<LedgerTenancy>(*ledger_, queue_, clock_);
    store::NodeRow node;
    node.id = 7;
    node.name = "n1";
    // One GPU: a second tenant there must share it.
    ASSERT_TRUE(inventory_->SyncGpu(node, A100(7, 0, "GPU-a")).ok());
    for (store::RowId t : {1, 2}) {
      store::TenantRow row;
      row.id = t;
      ASSERT_TRUE(tenancy_->SyncTenant(row).ok());
    }
    ASSERT_TRUE(Place(1));  // tenant 1 holds the GPU
  }

  // A 1 GiB slice of `tenant`, asked of the ledger; whether it landed.
  bool Place(store::RowId tenant) {
    ledger::PlacementRequest r;
    r.tenant = TenantId(tenant);
    r.kind = ledger::RequestKind::kSlice;
    r.memory_mib = 1024;
    r.compute_percent = 5;
    return ledger_->Place(r, policy_).placed();
  }

  static store::ApprovalRow Approval(
      store::RowId id, store::Millis expires,
      std::optional<store::Millis> revoked = std::nullopt) {
    store::ApprovalRow a;
    a.id = id;
    a.tenant_a = 1;
    a.tenant_b = 2;
    a.expires_at = expires;
    a.revoked_at = revoked;
    return a;
  }

  FakeClock clock_{1'000};
  std::unique_ptr<LedgerTenancy> tenancy_;
  scheduler::BestFitPolicy policy_;
};

TEST_F(LedgerTenancyTest, AnApprovalCountsFromItsGrantUntilItExpires) {
  EXPECT_FALSE(Place(2));
  const std::uint64_t before = queue_.generation();
  ASSERT_TRUE(tenancy_->Apply(Approval(5, 10'000)).ok());
  EXPECT_GT(queue_.generation(), before);  // waiting tasks may fit now
  ASSERT_TRUE(tenancy_->Apply(Approval(5, 10'000)).ok());  // once only
  EXPECT_EQ(tenancy_->in_force().size(), 1U);
  EXPECT_TRUE(Place(2));
  clock_.Set(9'999);
  tenancy_->ExpireDue();
  EXPECT_TRUE(Place(2));
  clock_.Set(10'000);
  tenancy_->ExpireDue();
  EXPECT_TRUE(tenancy_->in_force().empty());
  EXPECT_FALSE(Place(2));  // the slices placed under it stay; no new one
}

TEST_F(LedgerTenancyTest, AnApprovalNotInForceNeverCounts) {
  ASSERT_TRUE(tenancy_->Apply(Approval(5, 1'000)).ok());        // expired now
  ASSERT_TRUE(tenancy_->Apply(Approval(6, 10'000, 500)).ok());  // revoked
  EXPECT_TRUE(tenancy_->in_force().empty());
  EXPECT_FALSE(Place(2));
}

TEST_F(LedgerTenancyTest,
       AWithdrawnApprovalStopsCountingAndTheNextExpiryHolds) {
  ASSERT_TRUE(tenancy_->Apply(Approval(5, 5'000)).ok());
  ASSERT_TRUE(tenancy_->Apply(Approval(6, 20'000)).ok());  // the same pair
  ASSERT_TRUE(tenancy_->Withdraw(5).ok());
  ASSERT_TRUE(tenancy_->Withdraw(5).ok());   // twice: nothing more
  ASSERT_TRUE(tenancy_->Withdraw(99).ok());  // never counted: nothing
  EXPECT_TRUE(Place(2));                     // approval 6 still counts
  clock_.Set(19'999);
  tenancy_->ExpireDue();
  EXPECT_TRUE(Place(2));
  clock_.Set(20'000);
  tenancy_->ExpireDue();
  EXPECT_FALSE(Place(2));
}

TEST_F(LedgerTenancyTest, GroupMembersShareUntilTheGroupIsDeleted) {
  ASSERT_TRUE(tenancy_->DefineGroup(3).ok());
  for (store::RowId t : {1, 2}) {
    store::TenantRow row;
    row.id = t;
    row.group_id = 3;
    ASSERT_TRUE(tenancy_->SyncTenant(row).ok());
  }
  EXPECT_TRUE(Place(2));
  const std::uint64_t before = queue_.generation();
  store::TenantRow same;
  same.id = 2;
  same.group_id = 3;
  ASSERT_TRUE(tenancy_->SyncTenant(same).ok());  // as held: nothing
  EXPECT_EQ(queue_.generation(), before);
  ASSERT_TRUE(tenancy_->RemoveGroup(3, {1, 2}).ok());
  EXPECT_FALSE(Place(2));
  // Held as in no group now: joining another group is a change.
  ASSERT_TRUE(tenancy_->DefineGroup(4).ok());
  same.group_id = 4;
  ASSERT_TRUE(tenancy_->SyncTenant(same).ok());
  EXPECT_GT(queue_.generation(), before);
}

TEST_F(LedgerTenancyTest, RecoveryCountsEveryApprovalOnlyWhileRestoring) {
  const std::vector<store::ApprovalRow> stored = {
      Approval(5, 500),           // expired
      Approval(6, 10'000, 700)};  // revoked
  ASSERT_TRUE(tenancy_->BeginRestore(stored).ok());
  EXPECT_TRUE(Place(2));  // a slice placed under them is restored
  ASSERT_TRUE(tenancy_->EndRestore(stored).ok());
  EXPECT_TRUE(tenancy_->in_force().empty());
  EXPECT_FALSE(Place(2));
  // One still in force keeps counting after the restore.
  const std::vector<store::ApprovalRow> active = {Approval(7, 10'000)};
  ASSERT_TRUE(tenancy_->BeginRestore(active).ok());
  ASSERT_TRUE(tenancy_->EndRestore(active).ok());
  EXPECT_TRUE(Place(2));
}

}  // namespace
}  // namespace hf::server
