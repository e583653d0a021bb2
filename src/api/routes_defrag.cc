#include "api/routes.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// POST /api/v1/defrag/plans
StatusOr<Reply> ProposeDefrag(Ctx& c) {
  ControlPlane& cp = c.cp;
  json body = json::object();
  if (!c.req.body.empty()) {
    auto parsed = Body(c);
    if (!parsed.ok()) return parsed.status();
    body = std::move(*parsed);
  }
  auto request = ParseDefragPlanCreate(body);
  if (!request.ok()) return request.status();
  auto plan = cp.ProposeDefrag(c.caller, *request);
  if (!plan.ok()) return plan.status();
  return Ok(std::move(*plan), 201);
}

// GET /api/v1/defrag/plans
StatusOr<Reply> ListDefrag(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto rows = cp.ListDefrag(c.caller);
  if (!rows.ok()) return rows.status();
  auto page = PagedList(
      c.req, *rows, [](const json& p) { return p["id"].get<RowId>(); },
      [](const json& p) { return p; });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// GET /api/v1/defrag/plans/{id}
StatusOr<Reply> GetDefrag(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
  auto plan = cp.GetDefrag(c.caller, *id);
  if (!plan.ok()) return plan.status();
  return Ok(std::move(*plan));
}

// POST /api/v1/defrag/plans/{id}/apply
StatusOr<Reply> ApplyDefrag(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
  auto plan = cp.ApplyDefrag(c.caller, *id);
  if (!plan.ok()) return plan.status();
  return Ok(std::move(*plan), 202);
}

// POST /api/v1/defrag/plans/{id}/cancel
StatusOr<Reply> CancelDefrag(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
  auto plan = cp.CancelDefrag(c.caller, *id);
  if (!plan.ok()) return plan.status();
  return Ok(std::move(*plan));
}

}  // namespace

std::span<const Route> DefragRoutes() {
  // Defragmentation plans (docs/CONTRACT.md section 10): plans are rows any
  // instance reads; proposing one reads the ledger and applying or
  // cancelling one changes it, so those are the leader's.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/defrag/plans", kAdminOnly, kLeader, {}, ProposeDefrag},
      {"GET", "/api/v1/defrag/plans", kAdminOnly, kAnyInstance,
       {"limit", "cursor"}, ListDefrag},
      {"GET", "/api/v1/defrag/plans/{id}", kAdminOnly, kAnyInstance,
       {}, GetDefrag},
      {"POST", "/api/v1/defrag/plans/{id}/apply", kAdminOnly, kLeader,
       {}, ApplyDefrag},
      {"POST", "/api/v1/defrag/plans/{id}/cancel", kAdminOnly, kLeader,
       {}, CancelDefrag},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
