#include <charconv>

#include "api/routes.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// Who may call before what they sent: another tenant's slice (or none) is
// not found, before the request's query or body is read.
Status SliceVisible(Ctx& c, RowId id) {
  return c.cp.GetSlice(c.caller, id).status();
}

// GET /api/v1/slices/stats
StatusOr<Reply> SliceStats(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto stats = cp.Stats(c.caller);
  if (!stats.ok()) return stats.status();
  return Ok(StatsJson(*stats));
}

// GET /api/v1/slices/history
StatusOr<Reply> SliceHistory(Ctx& c) {
  ControlPlane& cp = c.cp;
  store::HistoryFilter f;
  HF_RETURN_IF_ERROR(ParsePositionPage(c.req, f));
  if (auto v = Query(c.req, "slice_id"); v && !v->empty()) {
    auto id = ParseId(*v, "slice_id");
    if (!id.ok()) return id.status();
    f.slice_id = *id;
  }
  if (auto v = Query(c.req, "task_id"); v && !v->empty()) {
    auto id = ParseId(*v, "task_id");
    if (!id.ok()) return id.status();
    f.task_id = *id;
  }
  auto page = cp.History(c.caller, f);
  if (!page.ok()) return page.status();
  return Ok(
      PageJson(*page, PositionCursor(*f.after),
               [&](const store::HistoryRow& h) { return HistoryJson(cp, h); }));
}

// GET /api/v1/slices
StatusOr<Reply> ListSlices(Ctx& c) {
  ControlPlane& cp = c.cp;
  server::SliceQuery q;
  if (auto v = Query(c.req, "node_id"); v && !v->empty()) q.node = *v;
  if (auto v = Query(c.req, "gpu_index"); v && !v->empty()) {
    int index = -1;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), index);
    if (ec != std::errc() || ptr != v->data() + v->size() || index < 0) {
      return Status::InvalidArgument("must be a GPU index (0, 1, ...)",
                                     "gpu_index");
    }
    q.gpu_index = index;
  }
  if (auto v = Query(c.req, "state"); v && !v->empty()) {
    if (*v == "all") {
      q.all_states = true;
    } else {
      q.state = store::ParseSliceState(*v);
      if (!q.state) {
        return Status::InvalidArgument(
            "must be allocated, releasing, released or all", "state");
      }
    }
  }
  HF_RETURN_IF_ERROR(ParsePage(c.req, q));
  auto page = cp.ListSlices(c.caller, q);
  if (!page.ok()) return page.status();
  return Ok(
      PageJson(*page, std::to_string(q.after_id),
               [&](const store::SliceRow& s) { return SliceJson(cp, s); }));
}

// POST /api/v1/slices
StatusOr<Reply> CreateSlice(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  // Who may call (the tenant it acts for) before what they sent.
  HF_RETURN_IF_ERROR(
      server::CheckActsFor(c.caller, StringField(*body, "tenant")));
  auto request = ParseSliceCreate(*body);
  if (!request.ok()) return request.status();
  auto slice = cp.CreateSlice(c.caller, *request);
  if (!slice.ok()) return slice.status();
  return Ok(SliceJson(cp, *slice), 201);
}

// GET /api/v1/slices/{id}
StatusOr<Reply> GetSlice(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
  auto slice = cp.GetSlice(c.caller, *id);
  if (!slice.ok()) return slice.status();
  return Ok(SliceJson(cp, *slice));
}

// GET /api/v1/slices/{id}/usage
// The slice's stored usage over time: rows in the database, so any
// instance answers.
StatusOr<Reply> SliceUsageHistory(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
  HF_RETURN_IF_ERROR(SliceVisible(c, *id));
  store::Millis since = 0;
  if (auto v = Query(c.req, "since"); v && !v->empty()) {
    auto at = ParseTime(*v, "since");
    if (!at.ok()) return at.status();
    since = *at;
  }
  int limit = store::kSliceUsageHistoryRows;
  if (auto v = Query(c.req, "limit"); v && !v->empty()) {
    auto n = ParseId(*v, "limit");
    if (!n.ok() || *n > store::kSliceUsageHistoryRows) {
      return Status::InvalidArgument(
          "must be 1.." + std::to_string(store::kSliceUsageHistoryRows) +
              ", got '" + v->substr(0, 64) + "'",
          "limit");
    }
    limit = static_cast<int>(*n);
  }
  auto usage = cp.SliceUsageHistory(c.caller, *id, since, limit);
  if (!usage.ok()) return usage.status();
  return Ok(SliceUsageHistoryJson(*id, *usage));
}

// PATCH /api/v1/slices/{id}
StatusOr<Reply> ResizeSlice(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
  HF_RETURN_IF_ERROR(SliceVisible(c, *id));
  auto body = Body(c);
  if (!body.ok()) return body.status();
  auto request = ParseSliceResize(*body);
  if (!request.ok()) return request.status();
  auto resized = cp.ResizeSlice(c.caller, *id, *request);
  if (!resized.ok()) return resized.status();
  json j = SliceJson(cp, resized->slice);
  j["warnings"] = resized->warnings;
  return Ok(std::move(j));
}

// DELETE /api/v1/slices/{id}
StatusOr<Reply> DeleteSlice(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
  HF_RETURN_IF_ERROR(SliceVisible(c, *id));
  const std::string reason = Query(c.req, "reason").value_or("");
  if (reason.size() > 1024) {
    return Status::InvalidArgument("must be at most 1024 bytes", "reason");
  }
  auto slice = cp.DeleteSlice(c.caller, *id, reason);
  if (!slice.ok()) return slice.status();
  return Ok(SliceJson(cp, *slice));
}

// GET /api/v1/slice-requests
StatusOr<Reply> ListSliceRequests(Ctx& c) {
  ControlPlane& cp = c.cp;
  store::SliceRequestFilter f;
  if (auto v = Query(c.req, "node_id"); v && !v->empty()) {
    // Resolve the name; an unknown node has no rows.
    std::optional<RowId> node;
    HF_RETURN_IF_ERROR(cp.store()->Read([&](store::Txn& txn) -> Status {
      auto n = txn.FindNode(*v);
      if (n.ok()) node = n->id;
      return Status::Ok();
    }));
    f.node_id = node.value_or(-1);
  }
  if (auto v = Query(c.req, "state"); v && !v->empty()) {
    f.state = store::ParseSliceRequestState(*v);
    if (!f.state) {
      return Status::InvalidArgument(
          "must be pending, claimed, done, failed or stuck", "state");
    }
  }
  HF_RETURN_IF_ERROR(ParsePage(c.req, f));
  auto page = cp.ListSliceRequests(c.caller, f);
  if (!page.ok()) return page.status();
  return Ok(PageJson(*page, std::to_string(f.after_id),
                     [&](const store::SliceRequestRow& row) {
                       return SliceRequestJson(cp, row);
                     }));
}

// POST /api/v1/slice-requests/{id}/result
StatusOr<Reply> ReportSliceRequest(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return id.status();
  // Who may call (a node token bound to another node) before what they sent.
  HF_RETURN_IF_ERROR(cp.CheckSliceRequestReporter(c.caller, *id));
  auto body = Body(c);
  if (!body.ok()) return body.status();
  auto result = ParseMigResult(*body);
  if (!result.ok()) return result.status();
  auto row = cp.ReportSliceRequest(c.caller, *id, *result);
  if (!row.ok()) return row.status();
  return Ok(SliceRequestJson(cp, *row));
}

}  // namespace

std::span<const Route> SliceRoutes() {
  // Slices (fixed paths before /{id}): the rows and their history and usage
  // are in the database; changes and the stats are the ledger's.
  // clang-format off
  static const Route kRoutes[] = {
      {"GET", "/api/v1/slices/stats", kAnyRole, kLeader, {}, SliceStats},
      {"GET", "/api/v1/slices/history", kAnyRole, kAnyInstance,
       {"limit", "cursor", "slice_id", "task_id"}, SliceHistory},
      {"GET", "/api/v1/slices", kAnyRole, kAnyInstance,
       {"node_id", "gpu_index", "state", "limit", "cursor"}, ListSlices},
      {"POST", "/api/v1/slices", kTenantAdmins, kLeader, {}, CreateSlice},
      {"GET", "/api/v1/slices/{id}", kAnyRole, kAnyInstance, {}, GetSlice},
      {"GET", "/api/v1/slices/{id}/usage", kAnyRole, kAnyInstance,
       {"since", "limit"}, SliceUsageHistory},
      {"PATCH", "/api/v1/slices/{id}", kTenantAdmins, kLeader, {}, ResizeSlice},
      {"DELETE", "/api/v1/slices/{id}", kTenantAdmins, kLeader,
       {"reason"}, DeleteSlice},
  };
  // clang-format on
  return kRoutes;
}

std::span<const Route> SliceRequestRoutes() {
  // The MIG command channel: the requests are rows; an agent's result
  // changes the ledger.
  // clang-format off
  static const Route kRoutes[] = {
      {"GET", "/api/v1/slice-requests", kAdminOnly, kAnyInstance,
       {"node_id", "state", "limit", "cursor"}, ListSliceRequests},
      {"POST", "/api/v1/slice-requests/{id}/result", kAgents, kLeader,
       {}, ReportSliceRequest},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
