#include "server/tenancy.h"

#include <algorithm>

#include "server/internal.h"

namespace hf::server {

using store::ApprovalRow;
using store::GroupRow;
using store::Millis;
using store::RowId;
using store::TenantRow;
using store::Txn;

namespace {

constexpr std::size_t kMaxReasonLength = 1024;
// Approvals are exceptions, not a second group mechanism: at most a year.
constexpr std::int64_t kMaxTtlSeconds = 366LL * 24 * 3600;

// A lookup's failure: the store's "not found" told as `missing` (naming
// what the caller asked for), any other failure as it is.
Status OrMissing(const Status& failed, const Status& missing) {
  return failed.code() == StatusCode::kNotFound ? missing : failed;
}

}  // namespace

StatusOr<RowId> Tenancy::FindOrCreateGroupInTxn(
    Txn& txn, const std::string& name, std::optional<GroupRow>& created) {
  auto g = txn.FindGroup(name);
  if (g.ok()) return g->id;
  if (g.status().code() != StatusCode::kNotFound) return g.status();
  GroupRow row;
  row.name = name;
  row.created_at = clock_->NowMillis();
  auto inserted = txn.InsertGroup(row);
  if (!inserted.ok()) return inserted.status();
  created = *inserted;
  return inserted->id;
}

StatusOr<TenantRow> Tenancy::CreateTenant(
    const Caller& caller, const std::string& name,
    const std::optional<std::string>& group) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  HF_RETURN_IF_ERROR(ValidateName(name, "name"));
  if (group) HF_RETURN_IF_ERROR(ValidateName(*group, "shared_group"));
  TenantRow out;
  std::optional<GroupRow> new_group;
  // The ledger learns it after the commit.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    new_group.reset();
    TenantRow row;
    row.name = name;
    row.created_at = clock_->NowMillis();
    if (group) {
      auto id = FindOrCreateGroupInTxn(txn, *group, new_group);
      if (!id.ok()) return id.status();
      row.group_id = *id;
    }
    auto inserted = txn.InsertTenant(row);
    if (!inserted.ok()) {
      if (inserted.status().code() == StatusCode::kAlreadyExists) {
        return Status::AlreadyExists("tenant '" + name + "' already exists");
      }
      return inserted.status();
    }
    out = *inserted;
    return Status::Ok();
  }));
  if (new_group) HF_RETURN_IF_ERROR(ledger_->GroupCreated(*new_group));
  HF_RETURN_IF_ERROR(ledger_->TenantChanged(out));
  return out;
}

StatusOr<std::vector<TenantRow>> Tenancy::ListTenants(const Caller& caller) {
  std::vector<TenantRow> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListTenants();
    if (!rows.ok()) return rows.status();
    out = std::move(*rows);
    return Status::Ok();
  }));
  if (!caller.admin()) {
    // Tenant roles see their own tenant only.
    std::erase_if(out, [&](const TenantRow& t) {
      return !caller.tenant_id || t.id != *caller.tenant_id;
    });
  }
  return out;
}

StatusOr<TenantRow> Tenancy::GetTenant(const Caller& caller,
                                       const std::string& name) {
  std::optional<TenantRow> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto t = txn.FindTenant(name);
    if (t.ok()) out = *t;
    return Status::Ok();
  }));
  if (!out || (!caller.admin() && caller.tenant_id != out->id)) {
    return Status::NotFound("no tenant '" + name + "'");
  }
  return *out;
}

StatusOr<TenantRow> Tenancy::SetTenantGroup(
    const Caller& caller, const std::string& name,
    const std::optional<std::string>& group) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  if (group) HF_RETURN_IF_ERROR(ValidateName(*group, "shared_group"));
  TenantRow out;
  std::optional<GroupRow> new_group;
  // The ledger learns it after the commit.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    new_group.reset();
    auto t = txn.FindTenant(name);
    if (!t.ok()) {
      return OrMissing(t.status(),
                       Status::NotFound("no tenant '" + name + "'"));
    }
    std::optional<RowId> group_id;
    if (group) {
      auto id = FindOrCreateGroupInTxn(txn, *group, new_group);
      if (!id.ok()) return id.status();
      group_id = *id;
    }
    HF_RETURN_IF_ERROR(txn.SetTenantGroup(t->id, group_id));
    out = *t;
    out.group_id = group_id;
    return Status::Ok();
  }));
  if (new_group) HF_RETURN_IF_ERROR(ledger_->GroupCreated(*new_group));
  HF_RETURN_IF_ERROR(ledger_->TenantChanged(out));
  return out;
}

StatusOr<GroupRow> Tenancy::CreateGroup(const Caller& caller,
                                        const std::string& name) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  HF_RETURN_IF_ERROR(ValidateName(name, "name"));
  GroupRow out;
  // The ledger learns it after the commit.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    GroupRow row;
    row.name = name;
    row.created_at = clock_->NowMillis();
    auto inserted = txn.InsertGroup(row);
    if (!inserted.ok()) {
      if (inserted.status().code() == StatusCode::kAlreadyExists) {
        return Status::AlreadyExists("group '" + name + "' already exists");
      }
      return inserted.status();
    }
    out = *inserted;
    return Status::Ok();
  }));
  HF_RETURN_IF_ERROR(ledger_->GroupCreated(out));
  return out;
}

StatusOr<std::vector<GroupRow>> Tenancy::ListGroups(const Caller& caller) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  std::vector<GroupRow> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListGroups();
    if (!rows.ok()) return rows.status();
    out = std::move(*rows);
    return Status::Ok();
  }));
  return out;
}

StatusOr<GroupRow> Tenancy::DeleteGroup(const Caller& caller,
                                        const std::string& name) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  RowId id = 0;
  GroupRow deleted;
  std::vector<RowId> members;
  // The ledger learns it after the commit.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    members.clear();
    auto g = txn.FindGroup(name);
    if (!g.ok()) {
      return OrMissing(g.status(), Status::NotFound("no group '" + name + "'"));
    }
    id = g->id;
    deleted = *g;
    auto tenants = txn.ListTenants();
    if (!tenants.ok()) return tenants.status();
    for (const TenantRow& t : *tenants) {
      if (t.group_id == id) members.push_back(t.id);
    }
    return txn.DeleteGroup(id);
  }));
  HF_RETURN_IF_ERROR(ledger_->GroupDeleted(id, members));
  return deleted;
}

StatusOr<ApprovalRow> Tenancy::CreateApproval(const Caller& caller,
                                              const ApprovalCreate& request) {
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
  // A new approval only widens what may share a GPU: the ledger learns it
  // after the commit.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    const auto find = [&](const std::string& name,
                          const char* field) -> StatusOr<RowId> {
      auto t = txn.FindTenant(name);
      if (t.ok()) return t->id;
      return OrMissing(t.status(), Status::InvalidArgument(
                                       "no tenant '" + name + "'", field));
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
  HF_RETURN_IF_ERROR(ledger_->ApprovalGranted(out));
  return out;
}

StatusOr<std::vector<ApprovalRow>> Tenancy::ListApprovals(
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

StatusOr<ApprovalRow> Tenancy::RevokeApproval(const Caller& caller, RowId id) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  ApprovalRow out;
  // Until the ledger withdraws it, the approval counts as it did a moment
  // before the revoke.
  MutexLock one_change(mu_);
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
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
  HF_RETURN_IF_ERROR(ledger_->ApprovalRevoked(id));
  return out;
}

StatusOr<store::TenantRow> Tenancy::ResolveTenantForWrite(
    const Caller& caller, const std::optional<std::string>& tenant) {
  HF_RETURN_IF_ERROR(CheckActsFor(caller, tenant));
  const std::string name = caller.admin()
                               ? tenant.value_or(std::string(kDefaultTenant))
                               : caller.tenant;
  std::optional<store::TenantRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto t = txn.FindTenant(name);
    if (t.ok()) row = *t;
    return Status::Ok();
  }));
  if (!row)
    return Status::InvalidArgument("no tenant '" + name + "'", "tenant");
  return *row;
}

}  // namespace hf::server
