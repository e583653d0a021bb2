// Identity: who a Bearer token is, and the tokens themselves (roles:
// docs/CONTRACT.md section 7): Authenticate resolves a secret to a Caller,
// through a cache of kTokenCacheMillis; the bootstrap admin token; creating,
// listing and revoking tokens. Only a token's hash is stored.
//
// Token rows are written by any server instance, not only the leader (the
// token routes answer on every instance): plain store writes, not the
// leader's fenced ones. A revocation drops the revoking instance's cache
// entry at once; another instance's cache forgets it within
// kTokenCacheMillis.
//
// Thread-safety: one internal mutex (the cache), a leaf: never held across
// store I/O or while asking `names`. Safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/names.h"
#include "store/store.h"

namespace hf::server {

// How long an authenticated token is answered from the cache.
inline constexpr store::Millis kTokenCacheMillis = 5'000;

// Who is calling, resolved from a Bearer token.
struct Caller {
  store::RowId token_id = 0;
  store::Role role = store::Role::kUser;
  std::optional<store::RowId> tenant_id;  // tenant-admin and user
  std::string tenant;                     // its name, or empty
  std::optional<std::string> node;        // a node token bound to one node
  bool admin() const { return role == store::Role::kAdmin; }
  // The value written to the history log's `actor`.
  std::string Actor() const { return "token:" + std::to_string(token_id); }
};

// Whether `caller` may see what tenant `tenant_id` owns: admins see all,
// tenant roles their own tenant's, node tokens nothing of tenants.
inline bool CanSee(const Caller& caller, store::RowId tenant_id) {
  if (caller.admin()) return true;
  if (caller.role == store::Role::kNode) return false;
  return caller.tenant_id && *caller.tenant_id == tenant_id;
}

// The checks of who may call that depend on what a request names, made
// before the rest of it is read (who may call is checked before what they
// sent). The request's own validation comes after, and the operation checks
// again.
//
// Whether `caller` may act for the tenant named `tenant` (absent: its own):
// admins for any, tenant-admins and users for their own only, node tokens
// for none.
Status CheckActsFor(const Caller& caller,
                    const std::optional<std::string>& tenant);
// Whether `caller` may create a token of the role named `role` (as sent;
// absent: left to validation) for the tenant named `tenant` (absent: its
// own): admins any, tenant-admins only user and tenant-admin tokens of
// their own tenant, no one else.
Status CheckTokenGrant(const Caller& caller,
                       const std::optional<std::string>& role,
                       const std::optional<std::string>& tenant);

class Identity {
 public:
  // `store`, `clock` and `names` (a caller's tenant name) must outlive the
  // Identity.
  Identity(store::Store* store, const Clock* clock, Names* names)
      : store_(store), clock_(clock), names_(names) {}

  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;

  // Unauthenticated for a missing, unknown or revoked token.
  StatusOr<Caller> Authenticate(std::string_view secret) HF_EXCLUDES(mu_);
  // With `secret`: makes it a valid admin token (idempotent). Without: on a
  // database with no admin token yet, creates one and returns its secret
  // (nullopt when an admin token already exists).
  StatusOr<std::optional<std::string>> BootstrapAdmin(
      const std::optional<std::string>& secret);
  // Returns the row and the secret (shown once). `node` binds a node token
  // to one node name.
  StatusOr<std::pair<store::TokenRow, std::string>> CreateToken(
      const Caller& caller, store::Role role,
      const std::optional<std::string>& tenant, const std::string& description,
      const std::optional<std::string>& node);
  StatusOr<std::vector<store::TokenRow>> ListTokens(const Caller& caller);
  // The token no longer authenticates here from the moment this returns.
  StatusOr<store::TokenRow> RevokeToken(const Caller& caller, store::RowId id)
      HF_EXCLUDES(mu_);

 private:
  store::Store* const store_;
  const Clock* const clock_;
  Names* const names_;

  Mutex mu_;
  // Token hash -> (caller, when cached).
  std::unordered_map<std::string, std::pair<Caller, store::Millis>> cache_
      HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
