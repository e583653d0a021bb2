// Recovery (recovery.h): the ledger rebuilt from the store.
#include "server/recovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "server/internal.h"

namespace hf::server {

using store::GroupRow;
using store::RowId;
using store::TaskRow;
using store::TenantRow;
using store::Txn;

Status Recovery::LearnHistory() {
  if (ledger_->placement().learner() == nullptr) return Status::Ok();
  ledger_->placement().ForgetLearned();
  // Older tasks weigh under 2^-8 of the newest: not worth reading.
  const auto window =
      static_cast<RowId>(std::ceil(8 * std::max(1.0, learn_half_life_tasks_)));
  RowId newest = 0;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto m = txn.MaxTaskId();
    if (!m.ok()) return m.status();
    newest = *m;
    return Status::Ok();
  }));
  std::int64_t read = 0;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    store::TaskFilter f;
    f.after_id = newest > window ? newest - window : 0;
    f.limit = 1000;
    return ForEachTask(txn, f, [&](TaskRow& task) -> Status {
      ledger_->mu()
          .AssertHeld();  // the caller holds it while the store runs this
      ledger_->placement().Learn(task, ledger_->placement().RequestFor(task));
      ++read;
      return Status::Ok();
    });
  }));
  ledger_->placement().LearnedThrough(newest);
  spdlog::info("placement: {} learned its target workload from {} tasks",
               ledger_->placement().policy().name(), read);
  return Status::Ok();
}

Status Recovery::Run() {
  // The ledger is rebuilt from the store: every node's next report is
  // applied in full.
  beats_->Forget();
  std::vector<GroupRow> groups;
  std::vector<TenantRow> tenants;
  std::vector<store::NodeRow> nodes;
  std::vector<store::GpuRow> gpus;
  std::vector<store::ApprovalRow> approvals;
  RowId max_slice_id = 0;
  std::string orphans_text;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto ap = txn.ListApprovals();
    if (!ap.ok()) return ap.status();
    approvals = std::move(*ap);
    auto g = txn.ListGroups();
    if (!g.ok()) return g.status();
    groups = std::move(*g);
    auto t = txn.ListTenants();
    if (!t.ok()) return t.status();
    tenants = std::move(*t);
    auto n = txn.ListNodes();
    if (!n.ok()) return n.status();
    nodes = std::move(*n);
    auto gp = txn.ListGpus(std::nullopt);
    if (!gp.ok()) return gp.status();
    gpus = std::move(*gp);
    auto m = txn.MaxSliceId();
    if (!m.ok()) return m.status();
    max_slice_id = *m;
    auto noted = txn.GetMeta(kMigOrphansNotedKey);
    if (!noted.ok()) return noted.status();
    orphans_text = noted->value_or("");
    return Status::Ok();
  }));

  mig_->LoadNoted(orphans_text);
  MutexLock lock(ledger_->mu());
  names_->SetAll(groups, tenants, nodes);
  for (const GroupRow& g : groups) {
    HF_RETURN_IF_ERROR(ledger_->tenancy().DefineGroup(g.id));
  }
  for (const TenantRow& t : tenants) {
    HF_RETURN_IF_ERROR(ledger_->tenancy().SyncTenant(t));
  }
  std::map<RowId, const store::NodeRow*> node_by_id;
  for (const store::NodeRow& n : nodes) {
    node_by_id[n.id] = &n;
    beats_->Seen(n.id, monotonic_->NowMillis());  // silence counts from now
    auto id = ledger_->inventory().SyncNode(n);
    if (!id.ok()) return id.status();
  }
  for (const store::GpuRow& g : gpus) {
    auto it = node_by_id.find(g.node_id);
    if (it == node_by_id.end()) continue;
    HF_RETURN_IF_ERROR(ledger_->inventory().SyncGpu(*it->second, g));
  }
  ledger_->ledger().AdvanceSliceIdPast(
      SliceId(static_cast<std::uint64_t>(max_slice_id)));
  // Every approval counts while the slices are restored (slices placed
  // under one that has since expired or been revoked are still live); then
  // only those in force stay.
  HF_RETURN_IF_ERROR(ledger_->tenancy().BeginRestore(approvals));

  // Live slices, page by page.
  int restored = 0;
  int failed = 0;
  RowId after = 0;
  const RowId default_tenant = [&] {
    for (const TenantRow& t : tenants) {
      if (t.name == kDefaultTenant) return t.id;
    }
    return RowId{0};
  }();
  for (;;) {
    auto read = LiveSlicePage(*store_, after);
    if (!read.ok()) return read.status();
    std::vector<store::SliceRow>& page = *read;
    if (page.empty()) break;
    after = page.back().id;
    for (store::SliceRow& slice : page) {
      const bool tenant_known = std::any_of(
          tenants.begin(), tenants.end(),
          [&](const TenantRow& t) { return t.id == slice.tenant_id; });
      if (!tenant_known) {
        RowId owner = default_tenant;
        if (slice.task_id) {
          (void)store_->Read([&](Txn& txn) -> Status {
            auto task = txn.GetTask(*slice.task_id);
            if (task.ok()) owner = task->tenant_id;
            return Status::Ok();
          });
        }
        spdlog::warn("recovery: slice {} names unknown tenant {}; now {}",
                     slice.id, slice.tenant_id, owner);
        slice.tenant_id = owner;
        HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
          HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
          store::HistoryRow h = HistoryFor(slice, "normalise_tenant");
          h.at = clock_->NowMillis();
          h.actor = "recovery";
          h.reason = "slice named a tenant that no longer exists";
          return txn.AppendHistory(h).status();
        }));
      }
      // The slice exists: a tenancy that has changed since it was placed
      // does not unmake it (the GPU then takes no new slice of either).
      auto restored_alloc = ledger_->ledger().Restore(
          ledger_->AllocationOf(slice),
          ledger::Ledger::RestoreOptions{.check_tenancy = false});
      if (restored_alloc.ok()) {
        ++restored;
        if (restored_alloc->mig_profile != slice.mig_profile ||
            restored_alloc->mig_start != slice.mig_start) {
          // Recorded without its partition (before the ledger charged
          // partitions): the store learns the one the ledger gave it.
          slice.mig_profile = restored_alloc->mig_profile;
          slice.mig_start = restored_alloc->mig_start;
          slice.memory_mib = restored_alloc->memory_mib;
          slice.compute_percent = restored_alloc->compute_percent;
          slice.compute_defaulted = restored_alloc->compute_defaulted;
          HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
            HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
            store::HistoryRow h = HistoryFor(slice, "charge_partition");
            h.at = clock_->NowMillis();
            h.actor = "recovery";
            h.reason = "charged as the MIG partition " + slice.mig_profile +
                       " at memory slot " + std::to_string(slice.mig_start);
            return txn.AppendHistory(h).status();
          }));
        }
        telemetry_->SliceLive(slice);
      } else {
        ++failed;
        HF_RETURN_IF_ERROR(
            FenceUnrestored(slice, restored_alloc.status().message()));
      }
    }
  }
  HF_RETURN_IF_ERROR(ledger_->tenancy().EndRestore(approvals));
  if (restored > 0 || failed > 0) {
    spdlog::info("recovery: {} live slices restored, {} refused", restored,
                 failed);
  }
  HF_RETURN_IF_ERROR(LearnHistory().WithContext("reading task history"));
  return Status::Ok();
}

Status Recovery::FenceUnrestored(const store::SliceRow& slice,
                                 const std::string& why) {
  std::vector<GpuKey> keys;
  std::string gpus;
  for (int index : slice.gpu_indices) {
    const GpuKey key{slice.node_id, index};
    keys.push_back(key);
    gpus += (gpus.empty() ? "" : ", ") + std::to_string(index);
  }
  HF_RETURN_IF_ERROR(ledger_->inventory().FenceUnrestored(slice.id, keys));
  const std::string reason =
      "recovery could not restore slice " + std::to_string(slice.id) + " (" +
      why + "): GPU(s) " + gpus + " of node " + std::to_string(slice.node_id) +
      " take nothing new until the slice is deleted (DELETE "
      "/api/v1/slices/" +
      std::to_string(slice.id) + ")";
  spdlog::error("{}", reason);
  return writer_->LeaderWrite([&](Txn& txn) -> Status {
    store::HistoryRow h = HistoryFor(slice, "recovery_refused");
    h.at = clock_->NowMillis();
    h.actor = "recovery";
    h.reason = reason;
    return txn.AppendHistory(h).status();
  });
}

}  // namespace hf::server
