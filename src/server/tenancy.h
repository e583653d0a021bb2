// Tenancy: tenants, shared groups and cross-tenant sharing approvals
// (docs/CONTRACT.md section 7), as stored, and the order in which the
// ledger learns them. Each change is written first (a leader write), then
// told to the ledger through TenancyLedger: one change at a time, so the
// ledger learns them in the order they committed (a revoke never overtakes
// the grant it revokes). Until the ledger learns a change, the ledger
// counts what held a moment before it: a grant or a new group widens what
// may share a GPU only after its commit; a revoke, a group's deletion or a
// tenant leaving its group narrows it just after (slices already sharing
// stay; a GPU takes no new slice that would need what was withdrawn).
//
// Thread-safety: one internal mutex, held across a change's write and the
// ledger's update (so it is taken before the control plane's; nothing takes
// it while holding those). Reads take no lock. Safe from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/names.h"
#include "store/store.h"

namespace hf::server {

// A validated POST /api/v1/sharing-approvals.
struct ApprovalCreate {
  std::string tenant_a;
  std::string tenant_b;
  std::string reason;
  // Exactly one: an absolute expiry (epoch ms) or a lifetime in seconds.
  std::optional<store::Millis> expires_at;
  std::optional<std::int64_t> ttl_s;
};

// What the ledger learns after a tenancy change committed (the control
// plane applies each under its own mutex).
class TenancyLedger {
 public:
  virtual ~TenancyLedger() = default;
  virtual Status GroupCreated(const store::GroupRow& group) = 0;
  // A tenant was created or its group changed.
  virtual Status TenantChanged(const store::TenantRow& tenant) = 0;
  // `members` share with nobody from now on (fail-closed).
  virtual Status GroupDeleted(store::RowId group,
                              const std::vector<store::RowId>& members) = 0;
  virtual Status ApprovalGranted(const store::ApprovalRow& approval) = 0;
  virtual Status ApprovalRevoked(store::RowId approval) = 0;
};

class Tenancy {
 public:
  // `store`, `clock`, `writer` (its leader writes) and `ledger` must
  // outlive the Tenancy.
  Tenancy(store::Store* store, const Clock* clock, LeaderWriter* writer,
          TenancyLedger* ledger)
      : store_(store), clock_(clock), writer_(writer), ledger_(ledger) {}

  Tenancy(const Tenancy&) = delete;
  Tenancy& operator=(const Tenancy&) = delete;

  // --- tenants and groups (admin; reading a tenant: its own roles too) ---
  StatusOr<store::TenantRow> CreateTenant(
      const Caller& caller, const std::string& name,
      const std::optional<std::string>& group) HF_EXCLUDES(mu_);
  StatusOr<std::vector<store::TenantRow>> ListTenants(const Caller& caller);
  StatusOr<store::TenantRow> GetTenant(const Caller& caller,
                                       const std::string& name);
  StatusOr<store::TenantRow> SetTenantGroup(
      const Caller& caller, const std::string& name,
      const std::optional<std::string>& group) HF_EXCLUDES(mu_);
  StatusOr<store::GroupRow> CreateGroup(const Caller& caller,
                                        const std::string& name)
      HF_EXCLUDES(mu_);
  StatusOr<std::vector<store::GroupRow>> ListGroups(const Caller& caller);
  // Returns the deleted group; its former members share with nobody.
  StatusOr<store::GroupRow> DeleteGroup(const Caller& caller,
                                        const std::string& name)
      HF_EXCLUDES(mu_);

  // The tenant `caller` writes for: an admin's `tenant` (default: the
  // default tenant), a tenant role's own (naming another is refused).
  // InvalidArgument naming "tenant" when it does not exist.
  StatusOr<store::TenantRow> ResolveTenantForWrite(
      const Caller& caller, const std::optional<std::string>& tenant);

  // --- cross-tenant sharing approvals (admin) ---
  StatusOr<store::ApprovalRow> CreateApproval(const Caller& caller,
                                              const ApprovalCreate& request)
      HF_EXCLUDES(mu_);
  StatusOr<std::vector<store::ApprovalRow>> ListApprovals(const Caller& caller);
  // Idempotent: revoking a revoked approval returns it unchanged.
  StatusOr<store::ApprovalRow> RevokeApproval(const Caller& caller,
                                              store::RowId id) HF_EXCLUDES(mu_);

 private:
  // The id of group `name`, inserting it (and setting `created`) when new.
  StatusOr<store::RowId> FindOrCreateGroupInTxn(
      store::Txn& txn, const std::string& name,
      std::optional<store::GroupRow>& created);

  store::Store* const store_;
  const Clock* const clock_;
  LeaderWriter* const writer_;
  TenancyLedger* const ledger_;
  Mutex mu_;  // one change at a time (see above)
};

}  // namespace hf::server
