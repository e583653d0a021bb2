// The ledger's side of tenancy (docs/CONTRACT.md section 7): what it learns
// after a change Tenancy (server/tenancy.h) committed, and the sharing
// approvals in force. An admin lets two tenants outside one shared group
// share GPUs, with a reason and an expiry. The record is the truth; the
// ledger counts the approvals that are in force (LedgerTenancy,
// ledger_tenancy.h, under mu_), and an approval stops counting the moment
// it expires or is revoked.
#include "server/control_plane.h"
#include "server/internal.h"

namespace hf::server {

using store::ApprovalRow;
using store::GroupRow;
using store::TenantRow;

// ------------------------------------------- what the ledger learns (Tenancy)

Status ControlPlane::GroupCreated(const GroupRow& group) {
  MutexLock lock(core_.mu());
  HF_RETURN_IF_ERROR(core_.tenancy().DefineGroup(group.id));
  names_.SetGroup(group.id, group.name);
  return Status::Ok();
}

Status ControlPlane::TenantChanged(const TenantRow& tenant) {
  MutexLock lock(core_.mu());
  names_.SetTenant(tenant.id, tenant.name);
  return core_.tenancy().SyncTenant(tenant);
}

Status ControlPlane::GroupDeleted(RowId group,
                                  const std::vector<RowId>& members) {
  MutexLock lock(core_.mu());
  return core_.tenancy().RemoveGroup(group, members);
}

Status ControlPlane::ApprovalGranted(const ApprovalRow& approval) {
  MutexLock lock(core_.mu());
  return core_.tenancy().Apply(approval);
}

Status ControlPlane::ApprovalRevoked(RowId approval) {
  MutexLock lock(core_.mu());
  return core_.tenancy().Withdraw(approval);
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
