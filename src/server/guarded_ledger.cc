// GuardedLedger (guarded_ledger.h).
#include "server/guarded_ledger.h"

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

}  // namespace hf::server
