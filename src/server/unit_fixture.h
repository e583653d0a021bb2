// For the tests of the control plane's units over the real SQLite store and
// a real ledger (GuardedLedger, placing with Best-Fit): the store, a
// LeaderWriter straight onto it whose releases the ledger learns after
// the commit (and which can refuse, like a failed write), the MIG channel
// and the release path, and the rows most tests start from: tenant "acme"
// and node "n1" with 80 GB A100s, stored and known to the ledger.
// Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/policy/registry.h"
#include "server/defrag.h"
#include "server/guarded_ledger.h"
#include "server/ledger_test_base.h"
#include "server/mig_channel.h"
#include "server/operator_slices.h"
#include "server/releases.h"
#include "server/scheduler.h"
#include "server/store_test_rows.h"
#include "server/telemetry.h"
#include "store/testing/temp_store.h"

namespace hf::server {

// The control plane as the units' hosts see it: the env of a slice (its
// id, GPU, tier, quota and the task's compute mode), a slice read back as
// stored, the MIG channel's node lookups.
class StubHost : public MigChannelHost,
                 public SchedulerHost,
                 public DefragHost,
                 public OperatorSlicesHost {
 public:
  StatusOr<store::SliceRow> GetSlice(const Caller& /*caller*/,
                                     store::RowId id) override {
    return StoredSlice(*store, id);
  }
  std::string GpuUuid(store::RowId /*node*/, int /*index*/) override {
    return "GPU-a";
  }
  SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                            const store::TaskRow& task) override {
    SliceEnvInput in;
    in.slice_id = slice.id;
    in.gpu_index = slice.gpu_indices.empty() ? 0 : slice.gpu_indices[0];
    in.gpu_uuids = "GPU-a";
    in.vendor = "nvidia";
    in.qos_level = slice.qos_level;
    in.memory_mib = slice.memory_mib;
    in.compute_mode = task.gpu_compute_mode;
    in.mig_device_id = slice.mig_device_id;
    return in;
  }
  StatusOr<store::NodeRow> NodeForAgent(const Caller& /*caller*/,
                                        const std::string& node) override {
    return Status::NotFound(node);
  }

  store::Store* store = nullptr;  // the slices GetSlice reads
};

class UnitFixture : public LedgerTestBase {
 protected:
  explicit UnitFixture(std::string dir) : dir_(std::move(dir)) {}

  void SetUp() override {
    LedgerTestBase::SetUp();
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    stub_.store = store_.get();
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    mig_ = std::make_unique<MigChannel>(store_.get(), &clock_, &clock_,
                                        /*command_deadline_ms=*/120'000,
                                        &telemetry_, &queue_, writer_.get(),
                                        &stub_);
    releases_ = std::make_unique<Releases>(&clock_, mig_.get(), &telemetry_);
    auto made = scheduler::MakePolicy("best-fit", {});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    core_ = std::make_unique<GuardedLedger>(std::move(ledger_), names_, queue_,
                                            mig_->book(), clock_, clock_,
                                            std::move(*made), nullptr);
    // As the control plane's ledger learns a release after its commit.
    writer_->learned = [this](store::RowId id) {
      MutexLock lock(core_->mu());
      (void)core_->ledger().Release(SliceId(static_cast<std::uint64_t>(id)));
    };
    admin_.role = store::Role::kAdmin;
    admin_.token_id = 1;
  }

  // Tenant "acme", stored and known to the ledger.
  void AddTenant() {
    store::TenantRow tenant;
    tenant.name = "acme";
    ASSERT_TRUE(Write([&](store::Txn& txn) -> Status {
      auto t = txn.InsertTenant(tenant);
      if (!t.ok()) return t.status();
      tenant = *t;
      return Status::Ok();
    }));
    tenant_ = tenant.id;
    MutexLock lock(core_->mu());
    ASSERT_TRUE(core_->tenancy().SyncTenant(tenant).ok());
  }

  // Node "n1" with `gpus` 80 GB A100s (indices from 0), stored and known
  // to the ledger.
  void AddNode(int gpus) {
    store::NodeRow node;
    std::vector<store::GpuRow> rows;
    node.name = "n1";
    ASSERT_TRUE(Write([&](store::Txn& txn) -> Status {
      auto n = txn.UpsertNode(node);
      if (!n.ok()) return n.status();
      node = *n;
      for (int index = 0; index < gpus; ++index) {
        auto g =
            txn.UpsertGpu(A100(node.id, index, "GPU-" + std::to_string(index)));
        if (!g.ok()) return g.status();
        rows.push_back(*g);
      }
      return Status::Ok();
    }));
    node_ = node.id;
    MutexLock lock(core_->mu());
    ASSERT_TRUE(core_->inventory().SyncNode(node).ok());
    for (const store::GpuRow& g : rows) {
      ASSERT_TRUE(core_->inventory().SyncGpu(node, g).ok());
    }
  }

  // A pending task of the tenant asking for `memory_mib` of one GPU and
  // `compute_percent` of its compute, stored.
  store::TaskRow PendingTask(std::int64_t memory_mib, int compute_percent) {
    store::TaskRow task;
    task.tenant_id = tenant_;
    task.name = "t";
    task.image = "img";
    task.command = {"run"};
    task.memory_mib = memory_mib;
    task.compute_percent = compute_percent;
    task.created_at = clock_.NowMillis();
    task.updated_at = task.created_at;
    Write([&](store::Txn& txn) -> Status {
      auto t = txn.InsertTask(task);
      if (!t.ok()) return t.status();
      task = *t;
      return Status::Ok();
    });
    return task;
  }

  // A write of the test's own, straight onto the store.
  bool Write(const std::function<Status(store::Txn&)>& fn) {
    const Status s = store_->Write(fn);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok();
  }

  std::size_t Allocations() {
    MutexLock lock(core_->mu());
    return core_->ledger().allocation_count();
  }

  store::sqlite_testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  FakeClock clock_{1'000'000};
  Telemetry telemetry_;
  StubHost stub_;
  std::unique_ptr<StoreWriterForTest> writer_;
  std::unique_ptr<MigChannel> mig_;
  std::unique_ptr<Releases> releases_;
  std::unique_ptr<GuardedLedger> core_;
  store::RowId tenant_ = 0;
  store::RowId node_ = 0;
  Caller admin_;
};

}  // namespace hf::server
