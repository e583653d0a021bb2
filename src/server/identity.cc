#include "server/identity.h"

#include <openssl/rand.h>

#include <array>

#include "server/internal.h"

namespace hf::server {

using store::Role;
using store::RowId;
using store::TokenRow;
using store::Txn;

namespace {

StatusOr<std::string> NewTokenSecret() {
  std::array<unsigned char, 24> bytes{};
  if (RAND_bytes(bytes.data(), bytes.size()) != 1) {
    return Status::Internal("the system random source failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "hf_";
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

}  // namespace

StatusOr<Caller> Identity::Authenticate(std::string_view secret) {
  if (secret.empty()) {
    return Status::Unauthenticated(
        "missing bearer token (send 'Authorization: Bearer <token>')");
  }
  const std::string hash = Sha256Hex(secret);
  {
    MutexLock lock(mu_);
    auto it = cache_.find(hash);
    if (it != cache_.end() &&
        clock_->NowMillis() - it->second.second < kTokenCacheMillis) {
      return it->second.first;
    }
  }
  std::optional<TokenRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto t = txn.FindTokenByHash(hash);
    if (t.ok()) {
      row = *t;
      return Status::Ok();
    }
    if (t.status().code() == StatusCode::kNotFound) return Status::Ok();
    return t.status();
  }));
  if (!row || row->revoked_at) {
    return Status::Unauthenticated(row ? "this token was revoked"
                                       : "unknown token");
  }
  Caller caller;
  caller.token_id = row->id;
  caller.role = row->role;
  caller.tenant_id = row->tenant_id;
  caller.node = row->node;
  if (row->tenant_id) caller.tenant = names_->Tenant(*row->tenant_id);
  MutexLock lock(mu_);
  cache_[hash] = {caller, clock_->NowMillis()};
  return caller;
}

StatusOr<std::optional<std::string>> Identity::BootstrapAdmin(
    const std::optional<std::string>& secret) {
  std::optional<std::string> created;
  if (secret && secret->size() < 16) {
    return Status::InvalidArgument(
        "the admin token must be at least 16 characters", "admin_token_file");
  }
  std::string fresh;
  if (!secret) {
    auto s = NewTokenSecret();
    if (!s.ok()) return s.status();
    fresh = *s;
  }
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    created.reset();
    if (secret) {
      auto existing = txn.FindTokenByHash(Sha256Hex(*secret));
      if (existing.ok()) {
        if (existing->revoked_at) {
          return Status::FailedPrecondition(
              "the token in the admin token file was revoked; put a new one "
              "there");
        }
        if (existing->role != Role::kAdmin) {
          return Status::FailedPrecondition(
              "the token in the admin token file belongs to a non-admin "
              "token");
        }
        return Status::Ok();
      }
      if (existing.status().code() != StatusCode::kNotFound) {
        return existing.status();
      }
      TokenRow row;
      row.hash = Sha256Hex(*secret);
      row.role = Role::kAdmin;
      row.description = "admin token from the admin token file";
      row.created_at = clock_->NowMillis();
      HF_RETURN_IF_ERROR(txn.InsertToken(row).status());
      return txn.SetMeta("admin_bootstrapped", "file");
    }
    auto done = txn.GetMeta("admin_bootstrapped");
    if (!done.ok()) return done.status();
    if (done->has_value()) return Status::Ok();
    TokenRow row;
    row.hash = Sha256Hex(fresh);
    row.role = Role::kAdmin;
    row.description = "bootstrap admin token";
    row.created_at = clock_->NowMillis();
    HF_RETURN_IF_ERROR(txn.InsertToken(row).status());
    HF_RETURN_IF_ERROR(txn.SetMeta("admin_bootstrapped", "generated"));
    created = fresh;
    return Status::Ok();
  }));
  return created;
}

// ------------------------------------------------------------------ tokens

Status CheckActsFor(const Caller& caller,
                    const std::optional<std::string>& tenant) {
  if (caller.role == Role::kNode) {
    return Status::PermissionDenied("node tokens cannot act for tenants");
  }
  if (!caller.admin() && tenant && *tenant != caller.tenant) {
    return Status::PermissionDenied(
        "only platform admins act on behalf of another tenant");
  }
  return Status::Ok();
}

Status CheckTokenGrant(const Caller& caller,
                       const std::optional<std::string>& role,
                       const std::optional<std::string>& tenant) {
  if (caller.admin()) return Status::Ok();
  if (caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "only admins and tenant-admins create tokens");
  }
  if (role && *role != store::RoleName(Role::kUser) &&
      *role != store::RoleName(Role::kTenantAdmin)) {
    return Status::PermissionDenied(
        "a tenant-admin creates only user and tenant-admin tokens");
  }
  if (tenant && *tenant != caller.tenant) {
    return Status::PermissionDenied(
        "a tenant-admin creates tokens for its own tenant only");
  }
  return Status::Ok();
}

StatusOr<std::pair<TokenRow, std::string>> Identity::CreateToken(
    const Caller& caller, Role role, const std::optional<std::string>& tenant,
    const std::string& description, const std::optional<std::string>& node) {
  HF_RETURN_IF_ERROR(
      CheckTokenGrant(caller, std::string(store::RoleName(role)), tenant));
  const bool needs_tenant = role == Role::kUser || role == Role::kTenantAdmin;
  std::optional<std::string> tenant_name = tenant;
  if (!tenant_name && needs_tenant && !caller.admin()) {
    tenant_name = caller.tenant;
  }
  if (needs_tenant && !tenant_name) {
    return Status::InvalidArgument(
        "is required for role " + std::string(store::RoleName(role)), "tenant");
  }
  if (!needs_tenant && tenant_name) {
    return Status::InvalidArgument(
        "must be empty for role " + std::string(store::RoleName(role)),
        "tenant");
  }
  if (description.size() > 256) {
    return Status::InvalidArgument("must be at most 256 characters",
                                   "description");
  }
  if (node) {
    if (role != Role::kNode) {
      return Status::InvalidArgument("is only for role node", "node");
    }
    HF_RETURN_IF_ERROR(ValidateName(*node, "node"));
  }
  auto secret = NewTokenSecret();
  if (!secret.ok()) return secret.status();
  TokenRow out;
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    TokenRow row;
    row.hash = Sha256Hex(*secret);
    row.role = role;
    row.node = node;
    row.description = description;
    row.created_at = clock_->NowMillis();
    if (tenant_name) {
      auto t = txn.FindTenant(*tenant_name);
      if (!t.ok()) {
        return t.status().code() == StatusCode::kNotFound
                   ? Status::InvalidArgument(
                         "no tenant '" + *tenant_name +
                             "' (create it with POST /api/v1/tenants)",
                         "tenant")
                   : t.status();
      }
      row.tenant_id = t->id;
    }
    auto inserted = txn.InsertToken(row);
    if (!inserted.ok()) return inserted.status();
    out = *inserted;
    return Status::Ok();
  }));
  return std::make_pair(out, *secret);
}

StatusOr<std::vector<TokenRow>> Identity::ListTokens(const Caller& caller) {
  if (!caller.admin() && caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "only admins and tenant-admins list tokens");
  }
  std::vector<TokenRow> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows =
        txn.ListTokens(caller.admin() ? std::nullopt : caller.tenant_id);
    if (!rows.ok()) return rows.status();
    out = std::move(*rows);
    return Status::Ok();
  }));
  return out;
}

StatusOr<TokenRow> Identity::RevokeToken(const Caller& caller, RowId id) {
  if (!caller.admin() && caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "only admins and tenant-admins revoke tokens");
  }
  TokenRow out;
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    auto t = txn.GetToken(id);
    if (!t.ok() || (!caller.admin() && t->tenant_id != caller.tenant_id)) {
      return Status::NotFound("no token " + std::to_string(id));
    }
    HF_RETURN_IF_ERROR(txn.RevokeToken(id, clock_->NowMillis()));
    auto after = txn.GetToken(id);
    if (!after.ok()) return after.status();
    out = *after;
    return Status::Ok();
  }));
  MutexLock lock(mu_);
  cache_.erase(out.hash);
  return out;
}

}  // namespace hf::server
