// Recovery (recovery.h) on the real SQLite store into an empty
// GuardedLedger: the stored inventory and live slices come back (released
// ones do not), the slice-id counter moves past every stored id, a slice
// whose GPU the ledger cannot take back fences that GPU with a
// `recovery_refused` entry, and every node's silence counts from now.
#include "server/recovery.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/ledger_test_base.h"
#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRow;
using store::SliceState;

class RecoveryTest : public LedgerTestBase {
 protected:
  void SetUp() override {
    LedgerTestBase::SetUp();
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    auto made = scheduler::MakePolicy("best-fit", {});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    core_ = std::make_unique<GuardedLedger>(std::move(ledger_), names_, queue_,
                                            mig_, clock_, monotonic_,
                                            std::move(*made), nullptr);
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    recovery_ = std::make_unique<Recovery>(
        store_.get(), &clock_, &monotonic_, core_.get(), &names_, &beats_,
        &mig_, &telemetry_, /*learn_half_life_tasks=*/100, writer_.get());
  }

  SliceRow Slice(RowId id, int gpu_index, std::int64_t memory_mib,
                 SliceState state) const {
    SliceRow s;
    s.id = id;
    s.tenant_id = tenant_;
    s.node_id = node_;
    s.gpu_indices = {gpu_index};
    s.memory_mib = memory_mib;
    s.compute_percent = 10;
    s.qos_level = "bronze";
    s.origin = "admin";
    s.state = state;
    return s;
  }

  // One node with one A100 (index 0), and the slices given.
  void Store(const std::vector<SliceRow>& slices) {
    Status s = store_->Write([&](store::Txn& txn) -> Status {
      auto rows = InsertTenantAndNodes(txn, {"n1"});
      if (!rows.ok()) return rows.status();
      tenant_ = rows->tenant;
      node_ = rows->nodes[0];
      auto g = txn.UpsertGpu(A100(node_, 0, "GPU-a"));
      if (!g.ok()) return g.status();
      for (SliceRow slice : slices) {
        slice.tenant_id = tenant_;
        slice.node_id = node_;
        HF_RETURN_IF_ERROR(txn.InsertSlice(slice));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  store::sqlite_testing::TempDir dir_{"hf-recovery-test"};
  std::unique_ptr<store::Store> store_;
  FakeClock clock_{1'000'000};
  FakeClock monotonic_{7'000};
  MigBook mig_;
  NodeBeats beats_{15'000};
  Telemetry telemetry_;
  std::unique_ptr<StoreWriterForTest> writer_;
  std::unique_ptr<GuardedLedger> core_;
  std::unique_ptr<Recovery> recovery_;
  RowId tenant_ = 0;
  RowId node_ = 0;
};

TEST_F(RecoveryTest, LiveSlicesComeBackAndIdsAreNeverReused) {
  Store({Slice(3, 0, 10'240, SliceState::kAllocated),
         Slice(9, 0, 30'720, SliceState::kReleasing),
         Slice(12, 0, 20'480, SliceState::kReleased)});
  ASSERT_TRUE(recovery_->Run().ok());
  MutexLock lock(core_->mu());
  ledger::Ledger& ledger = core_->ledger();
  EXPECT_EQ(ledger.allocation_count(), 2u);  // 3 and 9; 12 was released
  EXPECT_TRUE(ledger.GetAllocation(SliceId(3)).has_value());
  EXPECT_TRUE(ledger.GetAllocation(SliceId(9)).has_value());
  EXPECT_FALSE(ledger.GetAllocation(SliceId(12)).has_value());
  // The next slice gets an id past every stored one, released ones too.
  ledger::PlacementRequest request;
  request.tenant = TenantId(tenant_);
  request.memory_mib = 1024;
  ledger::PlacementResult placed = core_->placement().Place(request);
  ASSERT_TRUE(placed.placed()) << placed.message;
  EXPECT_GT(placed.allocation.id.value(), 12u);
  // Silence counts from the recovery.
  const auto seen = beats_.SeenTimes();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].second, monotonic_.NowMillis());
}

TEST_F(RecoveryTest, ASliceTheLedgerCannotTakeBackFencesItsGpu) {
  // Together the two would oversell the 80 GB card: the second is refused.
  Store({Slice(1, 0, 61'440, SliceState::kAllocated),
         Slice(2, 0, 30'720, SliceState::kAllocated)});
  ASSERT_TRUE(recovery_->Run().ok());
  {
    MutexLock lock(core_->mu());
    EXPECT_EQ(core_->ledger().allocation_count(), 1u);
    EXPECT_TRUE(core_->inventory().Fenced(GpuKey{node_, 0}));
  }
  std::vector<store::HistoryRow> history;
  ASSERT_TRUE(store_
                  ->Read([&](store::Txn& txn) -> Status {
                    store::HistoryFilter f;
                    f.slice_id = 2;
                    auto rows = txn.ListHistory(f);
                    if (!rows.ok()) return rows.status();
                    history = *rows;
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].op, "recovery_refused");
  EXPECT_NE(history[0].reason.find("DELETE /api/v1/slices/2"),
            std::string::npos)
      << history[0].reason;
}

}  // namespace
}  // namespace hf::server
