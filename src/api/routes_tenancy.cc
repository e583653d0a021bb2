#include "api/routes.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// POST /api/v1/tenants
StatusOr<Reply> CreateTenant(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  HF_RETURN_IF_ERROR(CheckFields(*body, {"name", "shared_group"}));
  const json& b = *body;
  if (!b.contains("name") || !b["name"].is_string()) {
    return Status::InvalidArgument("is required (a string)", "name");
  }
  std::optional<std::string> group;
  if (b.contains("shared_group") && !b["shared_group"].is_null()) {
    if (!b["shared_group"].is_string()) {
      return Status::InvalidArgument("must be a string", "shared_group");
    }
    group = b["shared_group"].get<std::string>();
    if (group->empty()) group.reset();
  }
  auto t = cp.CreateTenant(c.caller, b["name"].get<std::string>(), group);
  if (!t.ok()) return t.status();
  return Ok(TenantJson(cp, *t), 201);
}

// GET /api/v1/tenants
StatusOr<Reply> ListTenants(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto rows = cp.ListTenants(c.caller);
  if (!rows.ok()) return rows.status();
  auto page = PagedList(
      c.req, *rows, [](const store::TenantRow& t) { return t.id; },
      [&](const store::TenantRow& t) { return TenantJson(cp, t); });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// GET /api/v1/tenants/{name}
StatusOr<Reply> GetTenant(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto t = cp.GetTenant(c.caller, c.params[0]);
  if (!t.ok()) return t.status();
  return Ok(TenantJson(cp, *t));
}

// PATCH /api/v1/tenants/{name}
StatusOr<Reply> SetTenantGroup(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  HF_RETURN_IF_ERROR(CheckFields(*body, {"shared_group"}));
  if (!body->contains("shared_group")) {
    return Status::InvalidArgument("is required (a name or null)",
                                   "shared_group");
  }
  const json& g = (*body)["shared_group"];
  std::optional<std::string> group;
  if (!g.is_null()) {
    if (!g.is_string()) {
      return Status::InvalidArgument("must be a string or null",
                                     "shared_group");
    }
    group = g.get<std::string>();
    if (group->empty()) group.reset();
  }
  auto t = cp.SetTenantGroup(c.caller, c.params[0], group);
  if (!t.ok()) return t.status();
  return Ok(TenantJson(cp, *t));
}

// POST /api/v1/groups
StatusOr<Reply> CreateGroup(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  HF_RETURN_IF_ERROR(CheckFields(*body, {"name"}));
  if (!body->contains("name") || !(*body)["name"].is_string()) {
    return Status::InvalidArgument("is required (a string)", "name");
  }
  auto g = cp.CreateGroup(c.caller, (*body)["name"].get<std::string>());
  if (!g.ok()) return g.status();
  return Ok({{"name", g->name},
             {"tenants", json::array()},
             {"created_at", FormatTime(g->created_at)}},
            201);
}

// GET /api/v1/groups
StatusOr<Reply> ListGroups(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto groups = cp.ListGroups(c.caller);
  if (!groups.ok()) return groups.status();
  auto tenants = cp.ListTenants(c.caller);
  if (!tenants.ok()) return tenants.status();
  auto page = PagedList(
      c.req, *groups, [](const store::GroupRow& g) { return g.id; },
      [&](const store::GroupRow& g) {
        json members = json::array();
        for (const auto& t : *tenants) {
          if (t.group_id == g.id) members.push_back(t.name);
        }
        return json{{"name", g.name},
                    {"tenants", std::move(members)},
                    {"created_at", FormatTime(g.created_at)}};
      });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// DELETE /api/v1/groups/{name}
StatusOr<Reply> DeleteGroup(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto g = cp.DeleteGroup(c.caller, c.params[0]);
  if (!g.ok()) return g.status();
  return Ok({{"name", g->name},
             {"tenants", json::array()},
             {"created_at", FormatTime(g->created_at)}});
}

// POST /api/v1/tokens
StatusOr<Reply> CreateToken(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  // Who may call (the role and tenant it grants) before what they sent.
  HF_RETURN_IF_ERROR(server::CheckTokenGrant(
      c.caller, StringField(*body, "role"), StringField(*body, "tenant")));
  HF_RETURN_IF_ERROR(
      CheckFields(*body, {"role", "tenant", "description", "node"}));
  const json& b = *body;
  if (!b.contains("role") || !b["role"].is_string()) {
    return Status::InvalidArgument(
        "is required: admin, tenant-admin, user, node or metrics", "role");
  }
  auto role = store::ParseRole(b["role"].get<std::string>());
  if (!role) {
    return Status::InvalidArgument(
        "must be admin, tenant-admin, user, node or metrics", "role");
  }
  std::optional<std::string> tenant;
  if (b.contains("tenant") && !b["tenant"].is_null()) {
    if (!b["tenant"].is_string()) {
      return Status::InvalidArgument("must be a string", "tenant");
    }
    tenant = b["tenant"].get<std::string>();
  }
  std::string description;
  if (b.contains("description") && !b["description"].is_null()) {
    if (!b["description"].is_string()) {
      return Status::InvalidArgument("must be a string", "description");
    }
    description = b["description"].get<std::string>();
  }
  std::optional<std::string> node;
  if (b.contains("node") && !b["node"].is_null()) {
    if (!b["node"].is_string()) {
      return Status::InvalidArgument("must be a string", "node");
    }
    node = b["node"].get<std::string>();
  }
  auto created = cp.CreateToken(c.caller, *role, tenant, description, node);
  if (!created.ok()) return created.status();
  json j = TokenJson(cp, created->first);
  j["token"] = created->second;
  return Ok(std::move(j), 201);
}

// GET /api/v1/tokens
StatusOr<Reply> ListTokens(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto rows = cp.ListTokens(c.caller);
  if (!rows.ok()) return rows.status();
  auto page = PagedList(
      c.req, *rows, [](const store::TokenRow& t) { return t.id; },
      [&](const store::TokenRow& t) { return TokenJson(cp, t); });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// DELETE /api/v1/tokens/{id}
StatusOr<Reply> RevokeToken(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no token '" + c.params[0] + "'");
  auto row = cp.RevokeToken(c.caller, *id);
  if (!row.ok()) return row.status();
  return Ok(TokenJson(cp, *row));
}

// POST /api/v1/sharing-approvals
StatusOr<Reply> CreateApproval(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  auto request = ParseApprovalCreate(*body);
  if (!request.ok()) return request.status();
  auto row = cp.CreateApproval(c.caller, *request);
  if (!row.ok()) return row.status();
  return Ok(ApprovalJson(cp, *row, c.clock.NowMillis()), 201);
}

// GET /api/v1/sharing-approvals
StatusOr<Reply> ListApprovals(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto rows = cp.ListApprovals(c.caller);
  if (!rows.ok()) return rows.status();
  const store::Millis now = c.clock.NowMillis();
  auto page = PagedList(
      c.req, *rows, [](const store::ApprovalRow& a) { return a.id; },
      [&](const store::ApprovalRow& a) { return ApprovalJson(cp, a, now); });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// DELETE /api/v1/sharing-approvals/{id}
StatusOr<Reply> RevokeApproval(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) {
    return Status::NotFound("no sharing approval '" + c.params[0] + "'");
  }
  auto row = cp.RevokeApproval(c.caller, *id);
  if (!row.ok()) return row.status();
  return Ok(ApprovalJson(cp, *row, c.clock.NowMillis()));
}

}  // namespace

std::span<const Route> TenantRoutes() {
  // Tenants and groups: rows any instance reads; changes are the leader's,
  // as tenancy is part of the ledger's admission rules.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/tenants", kAdminOnly, kLeader, {}, CreateTenant},
      {"GET", "/api/v1/tenants", kAnyRole, kAnyInstance,
       {"limit", "cursor"}, ListTenants},
      {"GET", "/api/v1/tenants/{name}", kAnyRole, kAnyInstance, {}, GetTenant},
      {"PATCH", "/api/v1/tenants/{name}", kAdminOnly, kLeader,
       {}, SetTenantGroup},
      {"POST", "/api/v1/groups", kAdminOnly, kLeader, {}, CreateGroup},
      {"GET", "/api/v1/groups", kAdminOnly, kAnyInstance,
       {"limit", "cursor"}, ListGroups},
      {"DELETE", "/api/v1/groups/{name}", kAdminOnly, kLeader, {}, DeleteGroup},
  };
  // clang-format on
  return kRoutes;
}

std::span<const Route> TokenRoutes() {
  // Tokens: rows, and authentication reads the database (a revocation
  // reaches the other instances' 5 s cache within 5 s): any instance.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/tokens", kTenantAdmins, kAnyInstance, {}, CreateToken},
      {"GET", "/api/v1/tokens", kTenantAdmins, kAnyInstance,
       {"limit", "cursor"}, ListTokens},
      {"DELETE", "/api/v1/tokens/{id}", kTenantAdmins, kAnyInstance,
       {}, RevokeToken},
  };
  // clang-format on
  return kRoutes;
}

std::span<const Route> ApprovalRoutes() {
  // Cross-tenant sharing approvals (docs/CONTRACT.md section 7): changes
  // are the ledger's admission rules, so the leader's.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/sharing-approvals", kAdminOnly, kLeader,
       {}, CreateApproval},
      {"GET", "/api/v1/sharing-approvals", kAdminOnly, kAnyInstance,
       {"limit", "cursor"}, ListApprovals},
      {"DELETE", "/api/v1/sharing-approvals/{id}", kAdminOnly, kLeader,
       {}, RevokeApproval},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
