// LedgerTenancy: the ledger's side of tenancy (docs/CONTRACT.md section 7).
// Tenancy (tenancy.h) keeps tenants, groups and sharing approvals as
// stored; this unit makes the ledger count what is in force: each tenant's
// group, the defined groups, and the approvals active now, each withdrawn
// the moment it expires (ExpireDue, which every placement calls first) or
// is revoked. Slices already sharing a GPU stay; the GPU takes no new slice
// that would need a withdrawn approval. Whatever widens who may share wakes
// the scheduler (SchedulerQueue::CapacityFreed).
//
// Thread-safety: none of its own. It changes the ledger, so the control
// plane holds it under its ledger lock (`mu_`, HF_GUARDED_BY), like
// Inventory.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "ledger/ledger.h"
#include "server/scheduler_queue.h"
#include "store/store.h"

namespace hf::server {

class LedgerTenancy {
 public:
  // `ledger`, `queue` and `clock` (the wall clock approvals expire by) must
  // outlive it.
  LedgerTenancy(ledger::Ledger& ledger, SchedulerQueue& queue,
                const Clock& clock)
      : ledger_(ledger), queue_(queue), clock_(clock) {}

  Status DefineGroup(store::RowId group);
  // The ledger puts `tenant` in its stored group (or none); nothing when
  // it is there already.
  Status SyncTenant(const store::TenantRow& tenant);
  // `group` was deleted: its `members` share with nobody from now on.
  Status RemoveGroup(store::RowId group,
                     const std::vector<store::RowId>& members);

  // Makes `approval` count in the ledger if it is active now (once).
  Status Apply(const store::ApprovalRow& approval);
  // Stops approval `id` counting, if it does.
  Status Withdraw(store::RowId id);
  // Withdraws the approvals past their expiry; cheap when none is due.
  void ExpireDue();

  // Restart recovery: every stored approval counts while the live slices
  // are restored (a slice placed under one that has since expired or been
  // revoked is still live and must be restored); EndRestore then keeps only
  // those in force. The same `approvals` to both.
  Status BeginRestore(const std::vector<store::ApprovalRow>& approvals);
  Status EndRestore(const std::vector<store::ApprovalRow>& approvals);

  // The approvals counting now, by id.
  const std::map<store::RowId, store::ApprovalRow>& in_force() const {
    return in_force_;
  }

 private:
  ledger::Ledger& ledger_;
  SchedulerQueue& queue_;
  const Clock& clock_;
  // The group the ledger holds for each tenant it was told of.
  std::map<store::RowId, std::optional<store::RowId>> tenant_groups_;
  std::map<store::RowId, store::ApprovalRow> in_force_;
  store::Millis next_expiry_ = std::numeric_limits<store::Millis>::max();
};

}  // namespace hf::server
