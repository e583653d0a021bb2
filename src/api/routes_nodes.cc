#include <chrono>
#include <cstdint>

#include "api/routes.h"
#include "wire/node_wire.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// The longest wait for work: below the agent's and a forwarding
// follower's read timeouts (30 s).
constexpr std::int64_t kMaxWorkWaitS = 20;

// POST /api/v1/nodes/register
StatusOr<Reply> RegisterNode(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  if (body->contains("tasks")) {
    return Status::InvalidArgument(
        "unknown field 'tasks' (running tasks go in heartbeats)", "tasks");
  }
  auto report = ParseNodeReport(*body, true);
  if (!report.ok()) return report.status();
  auto applied = cp.RegisterNode(c.caller, *report);
  if (!applied.ok()) return applied.status();
  json reply = {{"node_id", applied->node.name},
                {"heartbeat_interval_s", cp.options().heartbeat_interval_s}};
  if (applied->newer_applied) {
    reply["applied"] = false;
    reply["newer_report"] = wire::ToJson(*applied->newer_applied);
  }
  return Ok(std::move(reply));
}

// POST /api/v1/nodes/{node}/heartbeat
StatusOr<Reply> Heartbeat(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  auto report = ParseNodeReport(*body, false);
  if (!report.ok()) return report.status();
  if (!report->name.empty() && report->name != c.params[0]) {
    return Status::InvalidArgument("does not match the path", "node_id");
  }
  report->name = c.params[0];
  auto tasks = ParseRunningTasks(*body);
  if (!tasks.ok()) return tasks.status();
  auto reply = cp.Heartbeat(c.caller, *report, *tasks);
  if (!reply.ok()) return reply.status();
  return Ok(wire::ToJson(*reply));
}

// GET /api/v1/nodes/{node}/assignments
StatusOr<Reply> GetAssignments(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto a = cp.GetAssignments(c.caller, c.params[0]);
  if (!a.ok()) return a.status();
  json run = json::array();
  for (const auto& t : a->run) run.push_back(TaskJson(cp, t));
  json slices = json::object();
  for (const auto& [task, slice] : a->slices) {
    slices[std::to_string(task)] = slice;
  }
  return Ok({{"run", std::move(run)},
             {"cancel", a->cancel},
             {"bound", a->bound},
             {"slices", std::move(slices)}});
}

// GET /api/v1/nodes/{node}/work?after=G&wait_s=S
StatusOr<Reply> WaitForWork(Ctx& c) {
  std::uint64_t after = 0;
  if (auto v = Query(c.req, "after"); v && *v != "0") {
    auto parsed = ParseId(*v, "after");
    if (!parsed.ok()) {
      return Status::InvalidArgument(
          "must be a generation this server handed out (an integer of 0 or "
          "more)",
          "after");
    }
    after = static_cast<std::uint64_t>(*parsed);
  }
  std::int64_t wait_s = 0;
  if (auto v = Query(c.req, "wait_s"); v && *v != "0") {
    auto parsed = ParseId(*v, "wait_s");
    if (!parsed.ok() || *parsed > kMaxWorkWaitS) {
      return Status::InvalidArgument(
          "must be 0 to " + std::to_string(kMaxWorkWaitS) + " seconds",
          "wait_s");
    }
    wait_s = *parsed;
  }
  auto waited = c.cp.WaitForNodeWork(c.caller, c.params[0], after,
                                     std::chrono::seconds(wait_s));
  if (!waited.ok()) return waited.status();
  return Ok({{"generation", waited->generation}, {"waited", waited->waited}});
}

// POST /api/v1/nodes/{node}/task-states
StatusOr<Reply> ReportTaskStates(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto body = Body(c);
  if (!body.ok()) return body.status();
  auto states = ParseTaskStates(*body);
  if (!states.ok()) return states.status();
  auto n = cp.ReportTaskStates(c.caller, c.params[0], *states);
  if (!n.ok()) return n.status();
  return Ok({{"accepted", *n}});
}

// POST /api/v1/nodes/{node}/slice-requests/claim
StatusOr<Reply> ClaimSliceRequests(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto rows = cp.ClaimSliceRequests(c.caller, c.params[0]);
  if (!rows.ok()) return rows.status();
  json items = json::array();
  for (const auto& row : *rows) items.push_back(SliceRequestJson(cp, row));
  return Ok({{"items", std::move(items)}});
}

// POST /api/v1/nodes/{node}/tasks/{id}/logs
StatusOr<Reply> AppendTaskLog(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto id = ParseId(c.params[1], "id");
  if (!id.ok()) return id.status();
  // Log data is one long string (the body limit still caps it).
  Limits limits;
  limits.max_string = 1 << 20;
  auto body = ParseBody(c.req.body, limits);
  if (!body.ok()) return body.status();
  HF_RETURN_IF_ERROR(CheckFields(*body, {"offset", "data"}));
  const json& b = *body;
  if (!b.contains("offset") || !b["offset"].is_number_integer() ||
      b["offset"].get<std::int64_t>() < 0) {
    return Status::InvalidArgument("is required: a byte offset >= 0", "offset");
  }
  if (!b.contains("data") || !b["data"].is_string()) {
    return Status::InvalidArgument("is required: base64 bytes", "data");
  }
  auto data = DecodeBase64(b["data"].get<std::string>(), "data");
  if (!data.ok()) return data.status();
  auto size = cp.AppendTaskLog(c.caller, c.params[0], *id,
                               b["offset"].get<std::int64_t>(), *data);
  if (!size.ok()) return size.status();
  return Ok(json{{"size", *size}});
}

// GET /api/v1/nodes
StatusOr<Reply> ListNodes(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto nodes = cp.ListNodes(c.caller);
  if (!nodes.ok()) return nodes.status();
  auto page = PagedList(
      c.req, *nodes, [](const server::NodeView& n) { return n.node.id; },
      [&](const server::NodeView& n) {
        return NodeJson(n, c.clock.NowMillis());
      });
  if (!page.ok()) return page.status();
  return Ok(std::move(*page));
}

// GET /api/v1/nodes/{node}
StatusOr<Reply> GetNode(Ctx& c) {
  ControlPlane& cp = c.cp;
  auto node = cp.GetNode(c.caller, c.params[0]);
  if (!node.ok()) return node.status();
  return Ok(NodeJson(*node, c.clock.NowMillis()));
}

}  // namespace

std::span<const Route> NodeRoutes() {
  // Nodes and their agents: inventory, health, task states and the MIG
  // channel change the ledger, assignments follow the leader's binds and
  // `hook_available` is the leader's memory, so the leader answers; log
  // bytes are rows, which any instance appends.
  // clang-format off
  static const Route kRoutes[] = {
      {"POST", "/api/v1/nodes/register", kAgents, kLeader, {}, RegisterNode},
      {"POST", "/api/v1/nodes/{node}/heartbeat", kAgents, kLeader,
       {}, Heartbeat},
      {"GET", "/api/v1/nodes/{node}/assignments", kAgents, kLeader,
       {}, GetAssignments},
      {"GET", "/api/v1/nodes/{node}/work", kAgents, kLeader,
       {"after", "wait_s"}, WaitForWork},
      {"POST", "/api/v1/nodes/{node}/task-states", kAgents, kLeader,
       {}, ReportTaskStates},
      {"POST", "/api/v1/nodes/{node}/slice-requests/claim", kAgents, kLeader,
       {}, ClaimSliceRequests},
      {"POST", "/api/v1/nodes/{node}/tasks/{id}/logs", kAgents, kAnyInstance,
       {}, AppendTaskLog},
      {"GET", "/api/v1/nodes", kAdminOnly, kLeader,
       {"limit", "cursor"}, ListNodes},
      {"GET", "/api/v1/nodes/{node}", kAdminOnly, kLeader, {}, GetNode},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
