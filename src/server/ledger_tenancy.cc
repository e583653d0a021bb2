#include "server/ledger_tenancy.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace hf::server {

using store::ApprovalRow;
using store::RowId;

Status LedgerTenancy::DefineGroup(RowId group) {
  return ledger_.DefineGroup(GroupId(group));
}

Status LedgerTenancy::SyncTenant(const store::TenantRow& tenant) {
  auto it = tenant_groups_.find(tenant.id);
  if (it != tenant_groups_.end() && it->second == tenant.group_id) {
    return Status::Ok();
  }
  std::optional<GroupId> group;
  if (tenant.group_id) group = GroupId(*tenant.group_id);
  HF_RETURN_IF_ERROR(ledger_.SetTenantGroup(TenantId(tenant.id), group));
  tenant_groups_[tenant.id] = tenant.group_id;
  queue_.CapacityFreed();
  return Status::Ok();
}

Status LedgerTenancy::RemoveGroup(RowId group,
                                  const std::vector<RowId>& members) {
  for (RowId t : members) tenant_groups_[t] = std::nullopt;
  // Members share with nobody from now on (fail-closed).
  HF_RETURN_IF_ERROR(ledger_.RemoveGroup(GroupId(group)));
  queue_.CapacityFreed();
  return Status::Ok();
}

Status LedgerTenancy::Apply(const ApprovalRow& approval) {
  if (!approval.ActiveAt(clock_.NowMillis())) return Status::Ok();
  if (in_force_.contains(approval.id)) return Status::Ok();
  HF_RETURN_IF_ERROR(ledger_.ApproveSharing(TenantId(approval.tenant_a),
                                            TenantId(approval.tenant_b)));
  in_force_.emplace(approval.id, approval);
  next_expiry_ = std::min(next_expiry_, approval.expires_at);
  queue_.CapacityFreed();
  return Status::Ok();
}

Status LedgerTenancy::Withdraw(RowId id) {
  auto it = in_force_.find(id);
  if (it == in_force_.end()) return Status::Ok();
  HF_RETURN_IF_ERROR(ledger_.WithdrawSharing(TenantId(it->second.tenant_a),
                                             TenantId(it->second.tenant_b)));
  in_force_.erase(it);
  next_expiry_ = std::numeric_limits<store::Millis>::max();
  for (const auto& [other, row] : in_force_) {
    next_expiry_ = std::min(next_expiry_, row.expires_at);
  }
  return Status::Ok();
}

void LedgerTenancy::ExpireDue() {
  const store::Millis now = clock_.NowMillis();
  if (now < next_expiry_) return;
  std::vector<RowId> expired;
  for (const auto& [id, row] : in_force_) {
    if (!row.ActiveAt(now)) expired.push_back(id);
  }
  for (RowId id : expired) {
    const Status s = Withdraw(id);
    if (s.ok()) {
      spdlog::info("sharing approval {} expired", id);
    } else {
      spdlog::error("sharing approval {}: {}", id, s.ToString());
    }
  }
}

Status LedgerTenancy::BeginRestore(const std::vector<ApprovalRow>& approvals) {
  for (const ApprovalRow& a : approvals) {
    HF_RETURN_IF_ERROR(
        ledger_.ApproveSharing(TenantId(a.tenant_a), TenantId(a.tenant_b)));
  }
  return Status::Ok();
}

Status LedgerTenancy::EndRestore(const std::vector<ApprovalRow>& approvals) {
  for (const ApprovalRow& a : approvals) {
    HF_RETURN_IF_ERROR(
        ledger_.WithdrawSharing(TenantId(a.tenant_a), TenantId(a.tenant_b)));
    HF_RETURN_IF_ERROR(Apply(a));
  }
  return Status::Ok();
}

}  // namespace hf::server
