// The ledger's side of tenancy (docs/CONTRACT.md section 7): what it learns
// after a change Tenancy (server/tenancy.h) committed, and the sharing
// approvals in force. An admin lets two tenants outside one shared group
// share GPUs, with a reason and an expiry. The record is the truth; the
// ledger counts the approvals that are in force
// (ControlPlane::applied_approvals_), and an approval stops counting the
// moment it expires or is revoked. Slices already sharing a GPU stay (they
// are released the usual ways); the GPU takes no new slice that would need
// the approval.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "server/control_plane.h"
#include "server/internal.h"

namespace hf::server {

using store::ApprovalRow;
using store::GroupRow;
using store::Millis;
using store::TenantRow;

Status ControlPlane::ApplyApprovalLocked(const ApprovalRow& row) {
  if (!row.ActiveAt(clock_->NowMillis())) return Status::Ok();
  if (applied_approvals_.contains(row.id)) return Status::Ok();
  HF_RETURN_IF_ERROR(
      ledger_->ApproveSharing(TenantId(row.tenant_a), TenantId(row.tenant_b)));
  applied_approvals_.emplace(row.id, row);
  next_approval_expiry_ = std::min(next_approval_expiry_, row.expires_at);
  return Status::Ok();
}

Status ControlPlane::WithdrawApprovalLocked(RowId id) {
  auto it = applied_approvals_.find(id);
  if (it == applied_approvals_.end()) return Status::Ok();
  HF_RETURN_IF_ERROR(ledger_->WithdrawSharing(TenantId(it->second.tenant_a),
                                              TenantId(it->second.tenant_b)));
  applied_approvals_.erase(it);
  next_approval_expiry_ = std::numeric_limits<Millis>::max();
  for (const auto& [other, row] : applied_approvals_) {
    next_approval_expiry_ = std::min(next_approval_expiry_, row.expires_at);
  }
  return Status::Ok();
}

void ControlPlane::ExpireApprovalsLocked() {
  const Millis now = clock_->NowMillis();
  if (now < next_approval_expiry_) return;
  std::vector<RowId> expired;
  for (const auto& [id, row] : applied_approvals_) {
    if (!row.ActiveAt(now)) expired.push_back(id);
  }
  for (RowId id : expired) {
    const Status s = WithdrawApprovalLocked(id);
    if (s.ok()) {
      spdlog::info("sharing approval {} expired", id);
    } else {
      spdlog::error("sharing approval {}: {}", id, s.ToString());
    }
  }
}

// ------------------------------------------- what the ledger learns (Tenancy)

Status ControlPlane::GroupCreated(const GroupRow& group) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(ledger_->DefineGroup(GroupId(group.id)));
  names_.SetGroup(group.id, group.name);
  return Status::Ok();
}

Status ControlPlane::TenantChanged(const TenantRow& tenant) {
  MutexLock lock(mu_);
  names_.SetTenant(tenant.id, tenant.name);
  return SyncTenantLocked(tenant);
}

Status ControlPlane::GroupDeleted(RowId group,
                                  const std::vector<RowId>& members) {
  MutexLock lock(mu_);
  for (RowId t : members) tenant_groups_[t] = std::nullopt;
  // Members share with nobody from now on (fail-closed).
  HF_RETURN_IF_ERROR(ledger_->RemoveGroup(GroupId(group)));
  queue_.CapacityFreed();
  return Status::Ok();
}

Status ControlPlane::ApprovalGranted(const ApprovalRow& approval) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(ApplyApprovalLocked(approval));
  queue_.CapacityFreed();
  return Status::Ok();
}

Status ControlPlane::ApprovalRevoked(RowId approval) {
  MutexLock lock(mu_);
  return WithdrawApprovalLocked(approval);
}

// ------------------------------------------------------------- the API

StatusOr<ApprovalRow> ControlPlane::CreateApproval(
    const Caller& caller, const ApprovalCreate& request) {
  return tenancy_.CreateApproval(caller, request);
}

StatusOr<std::vector<ApprovalRow>> ControlPlane::ListApprovals(
    const Caller& caller) {
  return tenancy_.ListApprovals(caller);
}

StatusOr<ApprovalRow> ControlPlane::RevokeApproval(const Caller& caller,
                                                   RowId id) {
  return tenancy_.RevokeApproval(caller, id);
}

}  // namespace hf::server
