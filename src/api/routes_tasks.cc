#include <cstdint>

#include "api/routes.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// Who may call before what they sent: another tenant's task (or none) is
// not found, before the request's query or body is read.
Status TaskVisible(Ctx& c, RowId id) {
  return c.cp.GetTask(c.caller, id).status();
}

// POST /api/v1/tasks
StatusOr<Reply> CreateTask(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  // Who may call (the tenant it acts for) before what they sent.
  HF_RETURN_IF_ERROR(
      server::CheckActsFor(c.caller, StringField(*body, "tenant")));
  auto task = ParseTaskCreate(*body);
  if (!task.ok()) return task.status();
  if (c.idempotency != nullptr) {
    // The key is recorded with the task, in one transaction: a crash
    // cannot leave a task its repeat would not find.
    store::IdempotencyRow record = *c.idempotency;
    record.status = 201;
    IdempotencyKeys* keys = c.keys;
    bool* taken = &c.idempotency_taken;
    task->in_txn = [record, keys, taken](store::Txn& txn,
                                         const store::TaskRow& row) -> Status {
      store::IdempotencyRow r = record;
      r.task_id = row.id;
      Status s = IdempotencyKeys::RecordInTxn(txn, r, keys->NowMillis());
      *taken = s.code() == StatusCode::kAlreadyExists;
      return s;
    };
  }
  auto row = cp.CreateTask(c.caller, std::move(*task));
  if (!row.ok()) return row.status();
  return Ok(TaskJson(cp, *row), 201);
}

// A repeat of POST /api/v1/tasks whose record names the task.
StatusOr<Reply> ReplayCreateTask(Ctx& c, RowId task_id) {
  ControlPlane& cp = c.cp;
  auto row = cp.GetTask(c.caller, task_id);
  if (!row.ok()) return row.status();
  return Ok(TaskJson(cp, *row), 201);
}

// GET /api/v1/tasks
StatusOr<Reply> ListTasks(Ctx& c) {
  ControlPlane& cp = c.cp;
  server::TaskQuery q;
  const std::optional<std::string> tenant = Query(c.req, "tenant");
  // Who may call (a tenant role filters by its own tenant only; a node
  // token sees no tasks) before what they sent.
  if (tenant && !tenant->empty() && c.caller.role != store::Role::kNode) {
    HF_RETURN_IF_ERROR(server::CheckActsFor(c.caller, *tenant));
  }
  if (auto s = Query(c.req, "status"); s && !s->empty()) {
    q.state = store::ParseTaskState(*s);
    if (!q.state) {
      return Status::InvalidArgument(
          "must be pending, scheduled, running, succeeded, failed or "
          "cancelled",
          "status");
    }
  }
  if (tenant && !tenant->empty()) q.tenant = *tenant;
  HF_RETURN_IF_ERROR(ParsePositionPage(c.req, q));
  auto page = cp.ListTasks(c.caller, q);
  if (!page.ok()) return page.status();
  return Ok(PageJson(*page, PositionCursor(q.after),
                     [&](const store::TaskRow& t) { return TaskJson(cp, t); }));
}

// GET /api/v1/tasks/{id}
StatusOr<Reply> GetTask(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return id.status();
  auto row = cp.GetTask(c.caller, *id);
  if (!row.ok()) return row.status();
  return Ok(TaskJson(cp, *row));
}

// GET /api/v1/tasks/{id}/logs
StatusOr<Reply> ReadTaskLog(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return id.status();
  HF_RETURN_IF_ERROR(TaskVisible(c, *id));
  std::int64_t offset = 0;
  std::int64_t limit = 65536;
  if (auto v = Query(c.req, "offset"); v && !v->empty()) {
    auto n = ParseId(*v, "offset");
    if (!n.ok() && *v != "0") {
      return Status::InvalidArgument("must be a byte offset >= 0", "offset");
    }
    offset = n.ok() ? *n : 0;
  }
  if (auto v = Query(c.req, "limit"); v && !v->empty()) {
    auto n = ParseId(*v, "limit");
    if (!n.ok()) {
      return Status::InvalidArgument("must be 1..1048576 bytes", "limit");
    }
    limit = *n;
  }
  auto log = cp.ReadTaskLog(c.caller, *id, offset, limit);
  if (!log.ok()) return log.status();
  return Ok(TaskLogJson(*id, *log));
}

// POST /api/v1/tasks/{id}/cancel
StatusOr<Reply> CancelTask(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[0], "id");
  if (!id.ok()) return id.status();
  HF_RETURN_IF_ERROR(TaskVisible(c, *id));
  if (!c.req.body.empty()) {
    auto body = Body(c);
    if (!body.ok()) return body.status();
    HF_RETURN_IF_ERROR(CheckFields(*body, {}));
  }
  auto row = cp.CancelTask(c.caller, *id);
  if (!row.ok()) return row.status();
  return Ok(TaskJson(cp, *row));
}

}  // namespace

std::span<const Route> TaskRoutes() {
  // Tasks: a new task is a pending row the leader binds, and reads are rows,
  // so any instance answers; a cancel releases the slice in the ledger.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/tasks", kTenantRoles, kAnyInstance,
       {}, CreateTask, ReplayCreateTask},
      {"GET", "/api/v1/tasks", kAnyRole, kAnyInstance,
       {"status", "tenant", "limit", "cursor"}, ListTasks},
      {"GET", "/api/v1/tasks/{id}", kAnyRole, kAnyInstance, {}, GetTask},
      {"GET", "/api/v1/tasks/{id}/logs", kAnyRole, kAnyInstance,
       {"offset", "limit"}, ReadTaskLog},
      {"POST", "/api/v1/tasks/{id}/cancel", kTenantRoles, kLeader,
       {}, CancelTask},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
