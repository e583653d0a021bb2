// OperatorSlices (operator_slices.h) on the real SQLite store and a real
// ledger (GuardedLedger) with one 80 GB A100, writing through a
// LeaderWriter that can refuse: a reservation is placed by the ledger and
// undone when its write fails; a pinned GPU that cannot take it is named;
// a raise takes capacity before its write (given back when the write
// fails), a lowering gives it back only after the commit; DELETE releases
// after the commit.
#include "server/operator_slices.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/unit_fixture.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRow;
using store::TaskRow;

class NoLedger : public TenancyLedger {
  Status GroupCreated(const store::GroupRow& /*group*/) override { return {}; }
  Status TenantChanged(const store::TenantRow& /*tenant*/) override {
    return {};
  }
  Status GroupDeleted(RowId /*group*/,
                      const std::vector<RowId>& /*members*/) override {
    return {};
  }
  Status ApprovalGranted(const store::ApprovalRow& /*approval*/) override {
    return {};
  }
  Status ApprovalRevoked(RowId /*approval*/) override { return {}; }
};

class OperatorSlicesTest : public UnitFixture {
 protected:
  OperatorSlicesTest() : UnitFixture("hf-operator-slices-test") {}

  void SetUp() override {
    UnitFixture::SetUp();
    AddTenant();
    AddNode(1);
    tenancy_ = std::make_unique<Tenancy>(store_.get(), &clock_, writer_.get(),
                                         &no_ledger_);
    slices_ = std::make_unique<OperatorSlices>(
        store_.get(), &clock_, core_.get(), tenancy_.get(), releases_.get(),
        &queue_, &telemetry_, writer_.get(), &stub_);
  }

  SliceCreate Reservation(std::int64_t memory_mib) const {
    SliceCreate c;
    c.tenant = "acme";
    c.memory_mib = memory_mib;
    c.compute_percent = 10;
    return c;
  }

  // The memory the ledger accounts on the card.
  std::int64_t LedgerMemory() {
    MutexLock lock(core_->mu());
    std::int64_t sum = 0;
    for (const ledger::Allocation& a : core_->ledger().Allocations()) {
      sum += a.memory_mib;
    }
    return sum;
  }

  NoLedger no_ledger_;
  std::unique_ptr<Tenancy> tenancy_;
  std::unique_ptr<OperatorSlices> slices_;
};

TEST_F(OperatorSlicesTest, AReservationIsUndoneWhenItsWriteFails) {
  writer_->refuse = true;
  EXPECT_FALSE(slices_->Create(admin_, Reservation(20'480)).ok());
  EXPECT_EQ(LedgerMemory(), 0);
  writer_->refuse = false;
  auto made = slices_->Create(admin_, Reservation(20'480));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->origin, "admin");
  EXPECT_EQ(StoredSlice(*store_, made->id).memory_mib, 20'480);
  EXPECT_EQ(LedgerMemory(), 20'480);

  // Pinned to a GPU that cannot take it: the GPU is named.
  SliceCreate pinned = Reservation(71'680);
  pinned.node = "n1";
  pinned.gpu_index = 0;
  auto refused = slices_->Create(admin_, pinned);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("GPU 0 of node 'n1'"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(LedgerMemory(), 20'480);
}

TEST_F(OperatorSlicesTest, AResizeHoldsTheLargerSizeWhileItsWriteIsOpen) {
  auto made = slices_->Create(admin_, Reservation(20'480));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const RowId id = made->id;

  // A raise whose write fails gives the capacity back.
  writer_->refuse = true;
  EXPECT_FALSE(slices_->Resize(admin_, id, {40'960, "more"}).ok());
  EXPECT_EQ(LedgerMemory(), 20'480);
  // A lowering whose write fails never reached the ledger.
  EXPECT_FALSE(slices_->Resize(admin_, id, {10'240, "less"}).ok());
  EXPECT_EQ(LedgerMemory(), 20'480);
  writer_->refuse = false;

  auto raised = slices_->Resize(admin_, id, {40'960, "more"});
  ASSERT_TRUE(raised.ok()) << raised.status().ToString();
  EXPECT_EQ(StoredSlice(*store_, id).memory_mib, 40'960);
  EXPECT_EQ(LedgerMemory(), 40'960);
  // More than the card has left: refused, nothing changed.
  auto too_big = slices_->Resize(admin_, id, {102'400, ""});
  EXPECT_EQ(too_big.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(LedgerMemory(), 40'960);
  auto lowered = slices_->Resize(admin_, id, {10'240, "less"});
  ASSERT_TRUE(lowered.ok()) << lowered.status().ToString();
  EXPECT_FALSE(lowered->warnings.empty());  // the task may hit OOM
  EXPECT_EQ(LedgerMemory(), 10'240);

  // DELETE: released once written.
  writer_->refuse = true;
  EXPECT_FALSE(slices_->Delete(admin_, id, "done").ok());
  EXPECT_EQ(LedgerMemory(), 10'240);
  writer_->refuse = false;
  auto deleted = slices_->Delete(admin_, id, "done");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(StoredSlice(*store_, id).state, store::SliceState::kReleased);
  EXPECT_EQ(LedgerMemory(), 0);
}

}  // namespace
}  // namespace hf::server
