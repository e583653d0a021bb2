// Cross-tenant sharing approvals (docs/CONTRACT.md section 7): an admin lets
// two tenants outside one shared group share GPUs, with a reason and an expiry.
// The record is the truth; the ledger counts the approvals that are in force
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
using store::Millis;
using store::Txn;

namespace {

constexpr std::size_t kMaxReasonLength = 1024;
// Approvals are exceptions, not a second group mechanism: at most a year.
constexpr std::int64_t kMaxTtlSeconds = 366LL * 24 * 3600;

}  // namespace

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

StatusOr<ApprovalRow> ControlPlane::CreateApproval(
    const Caller& caller, const ApprovalCreate& request) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  HF_RETURN_IF_ERROR(ValidateName(request.tenant_a, "tenant_a"));
  HF_RETURN_IF_ERROR(ValidateName(request.tenant_b, "tenant_b"));
  if (request.tenant_a == request.tenant_b) {
    return Status::InvalidArgument("must differ from tenant_a", "tenant_b");
  }
  if (request.reason.empty()) {
    return Status::InvalidArgument(
        "is required: say why these tenants may share GPUs", "reason");
  }
  if (request.reason.size() > kMaxReasonLength) {
    return Status::InvalidArgument("must be at most 1024 characters", "reason");
  }
  if (request.expires_at.has_value() == request.ttl_s.has_value()) {
    return Status::InvalidArgument(
        "give exactly one of expires_at (epoch ms) and ttl_s (seconds)",
        request.expires_at ? "ttl_s" : "expires_at");
  }
  const Millis now = clock_->NowMillis();
  Millis expires_at = 0;
  if (request.ttl_s) {
    if (*request.ttl_s < 1 || *request.ttl_s > kMaxTtlSeconds) {
      return Status::InvalidArgument("must be 1..31622400 seconds", "ttl_s");
    }
    expires_at = now + *request.ttl_s * 1000;
  } else {
    expires_at = *request.expires_at;
    if (expires_at <= now) {
      return Status::InvalidArgument("is in the past", "expires_at");
    }
    if (expires_at - now > kMaxTtlSeconds * 1000) {
      return Status::InvalidArgument("is more than a year ahead", "expires_at");
    }
  }
  ApprovalRow out;
  // Written without mu_ (a new approval only widens what may share a GPU:
  // the ledger learns it after the commit), one approval change at a time
  // (a revoke never overtakes the grant it revokes).
  MutexLock one_change(tenancy_mu_);
  HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
    const auto find = [&](const std::string& name,
                          const char* field) -> StatusOr<RowId> {
      auto t = txn.FindTenant(name);
      if (t.ok()) return t->id;
      return t.status().code() == StatusCode::kNotFound
                 ? Status::InvalidArgument("no tenant '" + name + "'", field)
                 : t.status();
    };
    auto a = find(request.tenant_a, "tenant_a");
    if (!a.ok()) return a.status();
    auto b = find(request.tenant_b, "tenant_b");
    if (!b.ok()) return b.status();
    ApprovalRow row;
    row.tenant_a = std::min(*a, *b);
    row.tenant_b = std::max(*a, *b);
    row.reason = request.reason;
    row.created_by = caller.Actor();
    row.created_at = now;
    row.expires_at = expires_at;
    auto inserted = txn.InsertApproval(row);
    if (!inserted.ok()) return inserted.status();
    out = *inserted;
    store::HistoryRow h;
    h.op = "approve_sharing";
    h.at = now;
    h.actor = caller.Actor();  // no tenant: an admin record
    h.reason = "approval " + std::to_string(out.id) + ": tenants '" +
               request.tenant_a + "' and '" + request.tenant_b +
               "' may share GPUs until " + std::to_string(expires_at) +
               " (epoch ms): " + request.reason;
    return txn.AppendHistory(h).status();
  }));
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(ApplyApprovalLocked(out));
  queue_.CapacityFreed();
  return out;
}

StatusOr<std::vector<ApprovalRow>> ControlPlane::ListApprovals(
    const Caller& caller) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  std::vector<ApprovalRow> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListApprovals();
    if (!rows.ok()) return rows.status();
    out = std::move(*rows);
    return Status::Ok();
  }));
  return out;
}

StatusOr<ApprovalRow> ControlPlane::RevokeApproval(const Caller& caller,
                                                   RowId id) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  ApprovalRow out;
  // Written without mu_: until the ledger withdraws it, the approval counts
  // as it did a moment before the revoke.
  MutexLock one_change(tenancy_mu_);
  HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
    const Millis now = clock_->NowMillis();
    auto row = txn.GetApproval(id);
    if (!row.ok()) return row.status();
    if (row->revoked_at) {  // idempotent
      out = *row;
      return Status::Ok();
    }
    HF_RETURN_IF_ERROR(txn.RevokeApproval(id, now));
    out = *row;
    out.revoked_at = now;
    store::HistoryRow h;
    h.op = "revoke_sharing";
    h.at = now;
    h.actor = caller.Actor();
    h.reason = "approval " + std::to_string(id) + " revoked";
    return txn.AppendHistory(h).status();
  }));
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(WithdrawApprovalLocked(id));
  return out;
}

}  // namespace hf::server
