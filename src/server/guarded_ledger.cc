// GuardedLedger (guarded_ledger.h).
#include "server/guarded_ledger.h"

#include <string>

#include "scheduler/qos.h"

namespace hf::server {

ledger::Allocation GuardedLedger::AllocationOf(const store::SliceRow& row) {
  ledger::Allocation a;
  a.id = SliceId(static_cast<std::uint64_t>(row.id));
  a.tenant = TenantId(row.tenant_id);
  a.kind =
      row.whole ? ledger::RequestKind::kWholeGpus : ledger::RequestKind::kSlice;
  for (int index : row.gpu_indices) {
    auto gpu = inventory_.Gpu(row.node_id, index);
    a.gpus.push_back(gpu.ok() ? *gpu : GpuId());
  }
  a.memory_mib = row.memory_mib;
  a.compute_percent = row.compute_percent;
  a.compute_defaulted = row.compute_defaulted;
  a.mig_profile = row.mig_profile;
  a.mig_start = row.mig_start;
  return a;
}

store::SliceRow GuardedLedger::SliceRowOf(const ledger::Allocation& a) {
  store::SliceRow row;
  row.id = static_cast<store::RowId>(a.id.value());
  row.tenant_id = static_cast<store::RowId>(a.tenant.value());
  row.node_id = inventory_.NodeRowOf(a.node);
  row.whole = a.kind == ledger::RequestKind::kWholeGpus;
  for (GpuId g : a.gpus) row.gpu_indices.push_back(inventory_.KeyOf(g).index);
  row.memory_mib = a.memory_mib;
  row.compute_percent = a.compute_percent;
  row.compute_defaulted = a.compute_defaulted;
  row.mig_profile = a.mig_profile;  // a partition: charged as its profile
  row.mig_start = a.mig_start;
  if (!a.gpus.empty()) {
    const scheduler::QosDecision qos =
        placement_.QosFor(a.gpus.front(), row.whole);
    row.qos_level = std::string(scheduler::QosLevelName(qos.level));
    row.enforcement = qos.enforcement;
  }
  return row;
}

}  // namespace hf::server
