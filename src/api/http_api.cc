#include "api/http_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <regex>
#include <set>
#include <utility>

#include "api/advice.h"
#include "api/codec.h"
#include "api/forward.h"
#include "api/idempotency.h"

namespace hf::api {

using server::Caller;
using server::ControlPlane;
using store::Role;
using store::RowId;

namespace {

// json's default constructor does not throw; clang-tidy cannot see that.
struct Reply {  // NOLINT(bugprone-exception-escape)
  int status = 200;
  json body;
  std::string text;          // non-JSON replies (metrics, openapi)
  std::string content_type;  // with `text`
};

struct Ctx {
  const httplib::Request& req;
  Caller caller;
  std::vector<std::string> params;  // path parameters, in order
  // A POST with an Idempotency-Key on a route that records it in its
  // effect's transaction (Route::replay_task): the record to insert there
  // (IdempotencyKeys::RecordInTxn), and whether another request with the
  // key got there first.
  const store::IdempotencyRow* idempotency = nullptr;
  IdempotencyKeys* keys = nullptr;
  bool idempotency_taken = false;
};

using HandlerFn = std::function<StatusOr<Reply>(Ctx&)>;

// The roles that may call a route, one bit per store::Role.
class RoleSet {
 public:
  constexpr RoleSet() = default;
  constexpr RoleSet(std::initializer_list<Role> roles) {
    for (Role r : roles) bits_ |= Bit(r);
  }
  constexpr bool Has(Role r) const { return (bits_ & Bit(r)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  // "admin or tenant-admin", in the order of kAllRoles.
  std::string Describe() const;
  std::vector<std::string> Names() const;

 private:
  static constexpr unsigned Bit(Role r) {
    return 1U << static_cast<unsigned>(r);
  }
  unsigned bits_ = 0;
};

constexpr Role kAllRoles[] = {Role::kAdmin, Role::kTenantAdmin, Role::kUser,
                              Role::kNode, Role::kMetrics};

std::vector<std::string> RoleSet::Names() const {
  std::vector<std::string> out;
  for (Role r : kAllRoles) {
    if (Has(r)) out.emplace_back(store::RoleName(r));
  }
  return out;
}

std::string RoleSet::Describe() const {
  const std::vector<std::string> names = Names();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

// Who may call a route. Checked by ServeRoute right after authentication,
// before anything of the request (query, body) is parsed, so a caller who
// may not call a route learns 403 and nothing about what it sent. The
// ControlPlane checks again (and narrows what each role sees).
struct Access {
  bool auth = true;  // false: public (no token; `roles` unused)
  RoleSet roles;
};

// Every role: what each sees is narrowed by the ControlPlane (a node token
// sees no tenant's tasks, slices, stats or history).
constexpr Access kAnyRole{
    true, {Role::kAdmin, Role::kTenantAdmin, Role::kUser, Role::kNode}};
constexpr Access kTenantRoles{true,
                              {Role::kAdmin, Role::kTenantAdmin, Role::kUser}};
constexpr Access kTenantAdmins{true, {Role::kAdmin, Role::kTenantAdmin}};
constexpr Access kAdminOnly{true, {Role::kAdmin}};
constexpr Access kAgents{true, {Role::kAdmin, Role::kNode}};
constexpr Access kPublic{false, {}};
// GET /metrics: cluster-wide numbers, never a tenant's to read.
constexpr Access kMetricsReaders{true, {Role::kAdmin, Role::kMetrics}};

struct Route {
  std::string method;
  std::string path;
  Access access;
  std::vector<std::string> query;  // allowed query parameters
  HandlerFn fn;
  bool leader_only = false;  // see LeaderOnly
  // Index in Ctx::params of the {node} path parameter, or -1: a node token
  // bound to one node may name only that node there.
  int node_param = -1;
  // Set for POST /api/v1/tasks, which records its Idempotency-Key in the
  // transaction that inserts the task (idempotency.h): how to answer a
  // repeat whose record names the task but holds no reply yet.
  std::function<StatusOr<Reply>(Ctx&, RowId task_id)> replay_task;
};

// The routes that need the ledger (or the leader's memory, or that change
// what the ledger mirrors): with several instances, a follower forwards them
// to the leader. Everything else is answered from the database alone by any
// instance. The table and its reasons are in docs/OPERATIONS.md ("Several
// instances").
bool LeaderOnly(std::string_view method, std::string_view path) {
  static const std::set<std::pair<std::string_view, std::string_view>> kTable =
      {
          {"GET", "/api/v1/slices/stats"},
          {"GET", "/api/v1/advice"},
          {"POST", "/api/v1/tasks/{id}/cancel"},
          {"POST", "/api/v1/slices"},
          {"PATCH", "/api/v1/slices/{id}"},
          {"DELETE", "/api/v1/slices/{id}"},
          {"POST", "/api/v1/slice-requests/{id}/result"},
          {"POST", "/api/v1/tenants"},
          {"PATCH", "/api/v1/tenants/{name}"},
          {"POST", "/api/v1/groups"},
          {"DELETE", "/api/v1/groups/{name}"},
          {"POST", "/api/v1/sharing-approvals"},
          {"DELETE", "/api/v1/sharing-approvals/{id}"},
          {"POST", "/api/v1/defrag/plans"},
          {"POST", "/api/v1/defrag/plans/{id}/apply"},
          {"POST", "/api/v1/defrag/plans/{id}/cancel"},
          {"POST", "/api/v1/nodes/register"},
          {"POST", "/api/v1/nodes/{node}/heartbeat"},
          {"GET", "/api/v1/nodes/{node}/assignments"},
          {"POST", "/api/v1/nodes/{node}/task-states"},
          {"POST", "/api/v1/nodes/{node}/slice-requests/claim"},
          {"GET", "/api/v1/nodes"},
          {"GET", "/api/v1/nodes/{node}"},
      };
  return kTable.contains({method, path});
}

Reply Ok(json body, int status = 200) {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

json ErrorBody(const Status& s) {
  json j = {{"error", ErrorCodeFor(s.code())}, {"message", s.message()}};
  if (!s.field().empty()) j["field"] = s.field();
  return j;
}

std::string DumpJson(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

void WriteJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

StatusOr<RowId> ParseId(const std::string& text, const std::string& field) {
  RowId value = 0;
  auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value <= 0) {
    return Status::InvalidArgument(
        "must be a positive integer, got '" + text.substr(0, 64) + "'", field);
  }
  return value;
}

std::optional<std::string> Query(const httplib::Request& req,
                                 const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  return req.get_param_value(name);
}

StatusOr<int> ParseLimit(const httplib::Request& req) {
  auto v = Query(req, "limit");
  if (!v) return 100;
  auto id = ParseId(*v, "limit");
  if (!id.ok() || *id > 1000) {
    return Status::InvalidArgument("must be 1..1000", "limit");
  }
  return static_cast<int>(*id);
}

// A cursor: `next_cursor` or `resume_cursor` of an earlier page; "0" (or
// none) is the beginning.
StatusOr<RowId> ParseCursor(const httplib::Request& req) {
  auto v = Query(req, "cursor");
  if (!v || v->empty() || *v == "0") return RowId{0};
  auto id = ParseId(*v, "cursor");
  if (!id.ok()) {
    return Status::InvalidArgument("is not a cursor this server handed out",
                                   "cursor");
  }
  return *id;
}

// ?limit= and ?cursor= into any query or filter with `limit` and
// `after_id`.
template <typename Query>
Status ParsePage(const httplib::Request& req, Query& query) {
  auto limit = ParseLimit(req);
  if (!limit.ok()) return limit.status();
  auto cursor = ParseCursor(req);
  if (!cursor.ok()) return cursor.status();
  query.limit = *limit;
  query.after_id = *cursor;
  return Status::Ok();
}

// The cursors of the lists clients follow (the history, the tasks): a
// store::ListPosition as "<txn>.<id>", or "<id>" when txn is 0 (always on
// SQLite, and for the rows stored before PostgreSQL schema 11), which is
// also the form every cursor had before: one handed out then still means
// the same place.
std::string PositionCursor(const store::ListPosition& position) {
  if (position.txn == 0) return std::to_string(position.id);
  return std::to_string(position.txn) + "." + std::to_string(position.id);
}

StatusOr<store::ListPosition> ParsePositionCursor(const httplib::Request& req) {
  auto v = Query(req, "cursor");
  if (!v || v->empty() || *v == "0") return store::ListPosition{};
  const std::size_t dot = v->find('.');
  if (dot == std::string::npos) {
    auto id = ParseCursor(req);
    if (!id.ok()) return id.status();
    return store::ListPosition{.txn = 0, .id = *id};
  }
  auto txn = ParseId(v->substr(0, dot), "cursor");
  auto id = ParseId(v->substr(dot + 1), "cursor");
  if (!txn.ok() || !id.ok()) {
    return Status::InvalidArgument("is not a cursor this server handed out",
                                   "cursor");
  }
  return store::ListPosition{.txn = *txn, .id = *id};
}

// ?limit= and ?cursor= into a query or filter with `limit` and `after` (a
// position in the history or the tasks).
template <typename Query>
Status ParsePositionPage(const httplib::Request& req, Query& query) {
  auto limit = ParseLimit(req);
  if (!limit.ok()) return limit.status();
  auto cursor = ParsePositionCursor(req);
  if (!cursor.ok()) return cursor.status();
  query.limit = *limit;
  query.after = *cursor;
  return Status::Ok();
}

// The cursor that resumes a list after `row`.
std::string CursorAfter(const store::HistoryRow& row) {
  return PositionCursor(row.position());
}
std::string CursorAfter(const store::TaskRow& row) {
  return PositionCursor(row.position());
}
template <typename T>
std::string CursorAfter(const T& row) {
  return std::to_string(row.id);
}

// The body of a page: its items, `next_cursor` (the next page; null on the
// last one, so a client looping over pages stops) and `resume_cursor`,
// always set: after the last item sent, or where the request started when
// the page is empty. A client that follows a growing list (the history)
// passes resume_cursor later and gets only what came after.
json PageBody(json items, std::optional<std::string> next, std::string resume) {
  return {{"items", std::move(items)},
          {"next_cursor", next ? json(std::move(*next)) : json(nullptr)},
          {"resume_cursor", std::move(resume)}};
}

// `start`: the request's cursor, as this server writes it.
template <typename T, typename F>
json PageJson(const server::Page<T>& page, std::string start, F&& render) {
  json items = json::array();
  for (const T& row : page.items) items.push_back(render(row));
  if (page.items.empty()) return PageBody(std::move(items), {}, start);
  // TrimToPage sets next_after only when another page follows, always to
  // the last item's place.
  std::string resume = CursorAfter(page.items.back());
  std::optional<std::string> next;
  if (page.next_after) next = resume;
  return PageBody(std::move(items), std::move(next), std::move(resume));
}

StatusOr<json> Body(const Ctx& ctx) { return ParseBody(ctx.req.body); }

// Pages an in-memory list (the admin lists are small) the same way the
// store pages the big ones: ascending id, ?limit= and ?cursor=.
template <typename T, typename IdFn, typename RenderFn>
StatusOr<json> PagedList(const httplib::Request& req,
                         const std::vector<T>& rows, IdFn id_of,
                         RenderFn render) {
  auto limit = ParseLimit(req);
  if (!limit.ok()) return limit.status();
  auto cursor = ParseCursor(req);
  if (!cursor.ok()) return cursor.status();
  json items = json::array();
  std::optional<RowId> next;
  RowId last = *cursor;
  for (const T& row : rows) {
    if (id_of(row) <= *cursor) continue;
    if (static_cast<int>(items.size()) == *limit) {
      next = last;  // more rows follow: resume after the last one sent
      break;
    }
    items.push_back(render(row));
    last = id_of(row);
  }
  std::optional<std::string> next_cursor;
  if (next) next_cursor = std::to_string(*next);
  return PageBody(std::move(items), std::move(next_cursor),
                  std::to_string(last));
}

std::string PathRegex(const std::string& path) {
  static const std::regex kParam(R"(\{[a-z_]+\})");
  std::string escaped = std::regex_replace(path, std::regex(R"([.])"), R"(\.)");
  return std::regex_replace(escaped, kParam, "([^/]+)");
}

}  // namespace

metrics::Exposition ServerExposition(ControlPlane* cp,
                                     const server::Leadership* leadership) {
  metrics::Exposition e;
  e.AddRegistry(cp->telemetry().registry());
  e.AddSource([cp] { return cp->CollectMetrics(); });
  e.AddSource([leadership] {
    metrics::FamilyBuilder leader(
        "heteroflow_leader",
        "1 when this instance is the leader (a lone instance always is).");
    metrics::FamilyBuilder term("heteroflow_leader_term",
                                "The leader lease term this instance holds "
                                "or last saw (0 for a lone instance).");
    leader.Add({}, leadership == nullptr || leadership->IsLeader() ? 1 : 0);
    term.Add({}, leadership == nullptr
                     ? 0.0
                     : static_cast<double>(leadership->Term()));
    metrics::Families out;
    out.push_back(leader.Take());
    out.push_back(term.Take());
    return out;
  });
  return e;
}

namespace {

std::vector<Route> BuildRoutes(ControlPlane* cpp, const Clock& clock,
                               const server::Leadership* leadership) {
  std::vector<Route> r;
  // Every route says who may call it (`access`): there is no default.
  auto add = [&](std::string method, std::string path, Access access,
                 std::vector<std::string> query, HandlerFn fn) {
    const bool leader_only = LeaderOnly(method, path);
    int node_param = -1;
    static const std::regex kParam(R"(\{[a-z_]+\})");
    int index = 0;
    for (auto it = std::sregex_iterator(path.begin(), path.end(), kParam);
         it != std::sregex_iterator(); ++it, ++index) {
      if (it->str() == "{node}") node_param = index;
    }
    r.push_back(Route{std::move(method), std::move(path), access,
                      std::move(query), std::move(fn), leader_only,
                      node_param});
  };

  // ---- public
  add("GET", "/healthz", kPublic, {}, [](Ctx&) -> StatusOr<Reply> {
    return Ok({{"ok", true}});
  });
  add("GET", "/api/v1/openapi.json", kPublic, {}, [](Ctx&) -> StatusOr<Reply> {
    Reply reply;
    reply.text = OpenApiDocument();
    reply.content_type = "application/json";
    return reply;
  });
  // Every instance serves its own: its HTTP and commit series always, the
  // ledger's series only while it holds the ledger (docs/METRICS.md).
  add("GET", "/metrics", kMetricsReaders, {},
      [cpp, leadership](Ctx&) -> StatusOr<Reply> {
        Reply reply;
        reply.text = ServerExposition(cpp, leadership).Render();
        reply.content_type = metrics::kContentType;
        return reply;
      });

  // ---- several instances (issue 8): who is there, who leads
  add("GET", "/api/v1/cluster", kAdminOnly, {},
      [cpp, leadership](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        if (!c.caller.admin()) {
          return Status::PermissionDenied("this needs a platform admin token");
        }
        auto cluster = server::ReadCluster(*cp.store());
        if (!cluster.ok()) return cluster.status();
        const std::string leader_id =
            cluster->leader ? cluster->leader->id : std::string();
        json instances = json::array();
        for (const server::InstanceInfo& i : cluster->instances) {
          instances.push_back({{"id", i.id},
                               {"url", i.url},
                               {"leader", i.id == leader_id},
                               {"last_seen", FormatTime(i.last_seen)}});
        }
        json leader = nullptr;
        if (cluster->leader) {
          leader = {{"id", cluster->leader->id},
                    {"url", cluster->leader->url},
                    {"term", cluster->leader->term},
                    {"since", FormatTime(cluster->leader->since)}};
        }
        return Ok({{"instances", std::move(instances)},
                   {"leader", std::move(leader)},
                   {"this", leadership != nullptr ? json(leadership->id())
                                                  : json(nullptr)}});
      });

  // ---- identity
  add("GET", "/api/v1/whoami", kAnyRole, {}, [](Ctx& c) -> StatusOr<Reply> {
    return Ok({{"role", store::RoleName(c.caller.role)},
               {"tenant", c.caller.tenant.empty() ? json(nullptr)
                                                  : json(c.caller.tenant)},
               {"token_id", c.caller.token_id}});
  });

  // ---- tasks
  add("POST", "/api/v1/tasks", kTenantRoles, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto task = ParseTaskCreate(*body);
        if (!task.ok()) return task.status();
        if (c.idempotency != nullptr) {
          // The key is recorded with the task, in one transaction: a crash
          // cannot leave a task its repeat would not find.
          store::IdempotencyRow record = *c.idempotency;
          record.status = 201;
          IdempotencyKeys* keys = c.keys;
          bool* taken = &c.idempotency_taken;
          task->in_txn = [record, keys, taken](
                             store::Txn& txn,
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
      });
  r.back().replay_task = [cpp](Ctx& c, RowId task_id) -> StatusOr<Reply> {
    ControlPlane& cp = *cpp;
    auto row = cp.GetTask(c.caller, task_id);
    if (!row.ok()) return row.status();
    return Ok(TaskJson(cp, *row), 201);
  };
  add("GET", "/api/v1/tasks", kAnyRole, {"status", "tenant", "limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        server::TaskQuery q;
        if (auto s = Query(c.req, "status"); s && !s->empty()) {
          q.state = store::ParseTaskState(*s);
          if (!q.state) {
            return Status::InvalidArgument(
                "must be pending, scheduled, running, succeeded, failed or "
                "cancelled",
                "status");
          }
        }
        if (auto t = Query(c.req, "tenant"); t && !t->empty()) q.tenant = *t;
        HF_RETURN_IF_ERROR(ParsePositionPage(c.req, q));
        auto page = cp.ListTasks(c.caller, q);
        if (!page.ok()) return page.status();
        return Ok(
            PageJson(*page, PositionCursor(q.after),
                     [&](const store::TaskRow& t) { return TaskJson(cp, t); }));
      });
  add("GET", "/api/v1/tasks/{id}", kAnyRole, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return id.status();
        auto row = cp.GetTask(c.caller, *id);
        if (!row.ok()) return row.status();
        return Ok(TaskJson(cp, *row));
      });
  add("GET", "/api/v1/tasks/{id}/logs", kAnyRole, {"offset", "limit"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return id.status();
        std::int64_t offset = 0;
        std::int64_t limit = 65536;
        if (auto v = Query(c.req, "offset"); v && !v->empty()) {
          auto n = ParseId(*v, "offset");
          if (!n.ok() && *v != "0") {
            return Status::InvalidArgument("must be a byte offset >= 0",
                                           "offset");
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
      });
  add("POST", "/api/v1/tasks/{id}/cancel", kTenantRoles, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return id.status();
        if (!c.req.body.empty()) {
          auto body = Body(c);
          if (!body.ok()) return body.status();
          HF_RETURN_IF_ERROR(CheckFields(*body, {}));
        }
        auto row = cp.CancelTask(c.caller, *id);
        if (!row.ok()) return row.status();
        return Ok(TaskJson(cp, *row));
      });

  // ---- slices (fixed paths before /{id})
  add("GET", "/api/v1/slices/stats", kAnyRole, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto stats = cp.Stats(c.caller);
        if (!stats.ok()) return stats.status();
        return Ok(StatsJson(*stats));
      });
  add("GET", "/api/v1/slices/history", kAnyRole,
      {"limit", "cursor", "slice_id", "task_id"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
        return Ok(PageJson(
            *page, PositionCursor(*f.after),
            [&](const store::HistoryRow& h) { return HistoryJson(cp, h); }));
      });
  add("GET", "/api/v1/slices", kAnyRole,
      {"node_id", "gpu_index", "state", "limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        server::SliceQuery q;
        if (auto v = Query(c.req, "node_id"); v && !v->empty()) q.node = *v;
        if (auto v = Query(c.req, "gpu_index"); v && !v->empty()) {
          int index = -1;
          auto [ptr, ec] =
              std::from_chars(v->data(), v->data() + v->size(), index);
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
        return Ok(PageJson(
            *page, std::to_string(q.after_id),
            [&](const store::SliceRow& s) { return SliceJson(cp, s); }));
      });
  add("POST", "/api/v1/slices", kTenantAdmins, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto request = ParseSliceCreate(*body);
        if (!request.ok()) return request.status();
        auto slice = cp.CreateSlice(c.caller, *request);
        if (!slice.ok()) return slice.status();
        return Ok(SliceJson(cp, *slice), 201);
      });
  add("GET", "/api/v1/slices/{id}", kAnyRole, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
        auto slice = cp.GetSlice(c.caller, *id);
        if (!slice.ok()) return slice.status();
        return Ok(SliceJson(cp, *slice));
      });
  // The slice's stored usage over time: rows in the database, so any
  // instance answers (not in LeaderOnly).
  add("GET", "/api/v1/slices/{id}/usage", kAnyRole, {"since", "limit"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
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
      });
  add("PATCH", "/api/v1/slices/{id}", kTenantAdmins, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto request = ParseSliceResize(*body);
        if (!request.ok()) return request.status();
        auto resized = cp.ResizeSlice(c.caller, *id, *request);
        if (!resized.ok()) return resized.status();
        json j = SliceJson(cp, resized->slice);
        j["warnings"] = resized->warnings;
        return Ok(std::move(j));
      });
  add("DELETE", "/api/v1/slices/{id}", kTenantAdmins, {"reason"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no slice '" + c.params[0] + "'");
        const std::string reason = Query(c.req, "reason").value_or("");
        if (reason.size() > 1024) {
          return Status::InvalidArgument("must be at most 1024 bytes",
                                         "reason");
        }
        auto slice = cp.DeleteSlice(c.caller, *id, reason);
        if (!slice.ok()) return slice.status();
        return Ok(SliceJson(cp, *slice));
      });

  // ---- interference advice (docs/API.md, "Interference advice"): where
  // slices should go, which needs the ledger
  add("GET", "/api/v1/advice", kTenantAdmins, {"threshold", "node_id"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        AdviceQuery q;
        auto threshold = ParseAdviceThreshold(Query(c.req, "threshold"));
        if (!threshold.ok()) return threshold.status();
        q.threshold = *threshold;
        if (auto v = Query(c.req, "node_id"); v && !v->empty()) q.node = *v;
        auto body = AdviceJson(*cpp, c.caller, q);
        if (!body.ok()) return body.status();
        return Ok(std::move(*body));
      });

  // ---- MIG command channel
  add("GET", "/api/v1/slice-requests", kAdminOnly,
      {"node_id", "state", "limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("POST", "/api/v1/slice-requests/{id}/result", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return id.status();
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto result = ParseMigResult(*body);
        if (!result.ok()) return result.status();
        auto row = cp.ReportSliceRequest(c.caller, *id, *result);
        if (!row.ok()) return row.status();
        return Ok(SliceRequestJson(cp, *row));
      });

  // ---- tenants and groups
  add("POST", "/api/v1/tenants", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("GET", "/api/v1/tenants", kAnyRole, {"limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto rows = cp.ListTenants(c.caller);
        if (!rows.ok()) return rows.status();
        auto page = PagedList(
            c.req, *rows, [](const store::TenantRow& t) { return t.id; },
            [&](const store::TenantRow& t) { return TenantJson(cp, t); });
        if (!page.ok()) return page.status();
        return Ok(std::move(*page));
      });
  add("GET", "/api/v1/tenants/{name}", kAnyRole, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto t = cp.GetTenant(c.caller, c.params[0]);
        if (!t.ok()) return t.status();
        return Ok(TenantJson(cp, *t));
      });
  add("PATCH", "/api/v1/tenants/{name}", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("POST", "/api/v1/groups", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("GET", "/api/v1/groups", kAdminOnly, {"limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("DELETE", "/api/v1/groups/{name}", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto g = cp.DeleteGroup(c.caller, c.params[0]);
        if (!g.ok()) return g.status();
        return Ok({{"name", g->name},
                   {"tenants", json::array()},
                   {"created_at", FormatTime(g->created_at)}});
      });

  // ---- tokens
  add("POST", "/api/v1/tokens", kTenantAdmins, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        HF_RETURN_IF_ERROR(
            CheckFields(*body, {"role", "tenant", "description", "node"}));
        const json& b = *body;
        if (!b.contains("role") || !b["role"].is_string()) {
          return Status::InvalidArgument(
              "is required: admin, tenant-admin, user, node or metrics",
              "role");
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
        auto created =
            cp.CreateToken(c.caller, *role, tenant, description, node);
        if (!created.ok()) return created.status();
        json j = TokenJson(cp, created->first);
        j["token"] = created->second;
        return Ok(std::move(j), 201);
      });
  add("GET", "/api/v1/tokens", kTenantAdmins, {"limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto rows = cp.ListTokens(c.caller);
        if (!rows.ok()) return rows.status();
        auto page = PagedList(
            c.req, *rows, [](const store::TokenRow& t) { return t.id; },
            [&](const store::TokenRow& t) { return TokenJson(cp, t); });
        if (!page.ok()) return page.status();
        return Ok(std::move(*page));
      });
  add("DELETE", "/api/v1/tokens/{id}", kTenantAdmins, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no token '" + c.params[0] + "'");
        auto row = cp.RevokeToken(c.caller, *id);
        if (!row.ok()) return row.status();
        return Ok(TokenJson(cp, *row));
      });

  add("POST", "/api/v1/nodes/{node}/tasks/{id}/logs", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
          return Status::InvalidArgument("is required: a byte offset >= 0",
                                         "offset");
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
      });

  // ---- cross-tenant sharing approvals (docs/CONTRACT.md section 7)
  add("POST", "/api/v1/sharing-approvals", kAdminOnly, {},
      [cpp, &clock](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto request = ParseApprovalCreate(*body);
        if (!request.ok()) return request.status();
        auto row = cp.CreateApproval(c.caller, *request);
        if (!row.ok()) return row.status();
        return Ok(ApprovalJson(cp, *row, clock.NowMillis()), 201);
      });
  add("GET", "/api/v1/sharing-approvals", kAdminOnly, {"limit", "cursor"},
      [cpp, &clock](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto rows = cp.ListApprovals(c.caller);
        if (!rows.ok()) return rows.status();
        const store::Millis now = clock.NowMillis();
        auto page = PagedList(
            c.req, *rows, [](const store::ApprovalRow& a) { return a.id; },
            [&](const store::ApprovalRow& a) {
              return ApprovalJson(cp, a, now);
            });
        if (!page.ok()) return page.status();
        return Ok(std::move(*page));
      });
  add("DELETE", "/api/v1/sharing-approvals/{id}", kAdminOnly, {},
      [cpp, &clock](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) {
          return Status::NotFound("no sharing approval '" + c.params[0] + "'");
        }
        auto row = cp.RevokeApproval(c.caller, *id);
        if (!row.ok()) return row.status();
        return Ok(ApprovalJson(cp, *row, clock.NowMillis()));
      });

  // ---- defragmentation plans (docs/CONTRACT.md section 10)
  add("POST", "/api/v1/defrag/plans", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("GET", "/api/v1/defrag/plans", kAdminOnly, {"limit", "cursor"},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto rows = cp.ListDefrag(c.caller);
        if (!rows.ok()) return rows.status();
        auto page = PagedList(
            c.req, *rows, [](const json& p) { return p["id"].get<RowId>(); },
            [](const json& p) { return p; });
        if (!page.ok()) return page.status();
        return Ok(std::move(*page));
      });
  add("GET", "/api/v1/defrag/plans/{id}", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
        auto plan = cp.GetDefrag(c.caller, *id);
        if (!plan.ok()) return plan.status();
        return Ok(std::move(*plan));
      });
  add("POST", "/api/v1/defrag/plans/{id}/apply", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
        auto plan = cp.ApplyDefrag(c.caller, *id);
        if (!plan.ok()) return plan.status();
        return Ok(std::move(*plan), 202);
      });
  add("POST", "/api/v1/defrag/plans/{id}/cancel", kAdminOnly, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto id = ParseId(c.params[0], "id");
        if (!id.ok()) return Status::NotFound("no plan '" + c.params[0] + "'");
        auto plan = cp.CancelDefrag(c.caller, *id);
        if (!plan.ok()) return plan.status();
        return Ok(std::move(*plan));
      });

  // ---- nodes and agents
  add("POST", "/api/v1/nodes/register", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        if (body->contains("tasks")) {
          return Status::InvalidArgument(
              "unknown field 'tasks' (running tasks go in heartbeats)",
              "tasks");
        }
        auto report = ParseNodeReport(*body, true);
        if (!report.ok()) return report.status();
        auto applied = cp.RegisterNode(c.caller, *report);
        if (!applied.ok()) return applied.status();
        json reply = {
            {"node_id", applied->node.name},
            {"heartbeat_interval_s", cp.options().heartbeat_interval_s}};
        if (applied->newer_applied) {
          reply["applied"] = false;
          reply["newer_report"] = wire::ToJson(*applied->newer_applied);
        }
        return Ok(std::move(reply));
      });
  add("POST", "/api/v1/nodes/{node}/heartbeat", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("GET", "/api/v1/nodes/{node}/assignments", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
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
      });
  add("POST", "/api/v1/nodes/{node}/task-states", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto body = Body(c);
        if (!body.ok()) return body.status();
        auto states = ParseTaskStates(*body);
        if (!states.ok()) return states.status();
        auto n = cp.ReportTaskStates(c.caller, c.params[0], *states);
        if (!n.ok()) return n.status();
        return Ok({{"accepted", *n}});
      });
  add("POST", "/api/v1/nodes/{node}/slice-requests/claim", kAgents, {},
      [cpp](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto rows = cp.ClaimSliceRequests(c.caller, c.params[0]);
        if (!rows.ok()) return rows.status();
        json items = json::array();
        for (const auto& row : *rows)
          items.push_back(SliceRequestJson(cp, row));
        return Ok({{"items", std::move(items)}});
      });
  add("GET", "/api/v1/nodes", kAdminOnly, {"limit", "cursor"},
      [cpp, &clock](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto nodes = cp.ListNodes(c.caller);
        if (!nodes.ok()) return nodes.status();
        auto page = PagedList(
            c.req, *nodes, [](const server::NodeView& n) { return n.node.id; },
            [&](const server::NodeView& n) {
              return NodeJson(n, clock.NowMillis());
            });
        if (!page.ok()) return page.status();
        return Ok(std::move(*page));
      });
  add("GET", "/api/v1/nodes/{node}", kAdminOnly, {},
      [cpp, &clock](Ctx& c) -> StatusOr<Reply> {
        ControlPlane& cp = *cpp;
        auto node = cp.GetNode(c.caller, c.params[0]);
        if (!node.ok()) return node.status();
        return Ok(NodeJson(*node, clock.NowMillis()));
      });
  return r;
}

// The parameters in the query part of `target` (name and value), decoded
// ('+' and %XX).
std::vector<std::pair<std::string, std::string>> QueryPairs(
    const std::string& target) {
  std::vector<std::pair<std::string, std::string>> pairs;
  const auto q = target.find('?');
  if (q == std::string::npos) return pairs;
  std::size_t start = q + 1;
  while (start <= target.size()) {
    std::size_t end = target.find('&', start);
    if (end == std::string::npos) end = target.size();
    const std::string pair = target.substr(start, end - start);
    const auto eq = pair.find('=');
    const std::string raw = pair.substr(0, eq);
    if (!raw.empty()) {
      pairs.emplace_back(
          httplib::detail::decode_url(raw, true),
          eq == std::string::npos
              ? std::string()
              : httplib::detail::decode_url(pair.substr(eq + 1), true));
    }
    start = end + 1;
  }
  return pairs;
}

// The names of a route's path parameters, in order: "/tasks/{id}" -> id.
std::vector<std::string> PathParamNames(const std::string& path) {
  std::vector<std::string> names;
  std::size_t open = path.find('{');
  while (open != std::string::npos) {
    const std::size_t close = path.find('}', open);
    if (close == std::string::npos) break;
    names.push_back(path.substr(open + 1, close - open - 1));
    open = path.find('{', close);
  }
  return names;
}

std::string BearerToken(const httplib::Request& req) {
  const std::string header = req.get_header_value("Authorization");
  static constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() > kPrefix.size() &&
      std::equal(
          kPrefix.begin(), kPrefix.end(), header.begin(),
          [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
    std::string token = header.substr(kPrefix.size());
    while (!token.empty() && token.back() == ' ') token.pop_back();
    return token;
  }
  return "";
}

// A reply as it goes on the wire.
struct Wire {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

Wire WireFor(const StatusOr<Reply>& reply, const httplib::Request& req) {
  Wire w;
  if (!reply.ok()) {
    const Status& s = reply.status();
    if (s.code() == StatusCode::kInternal ||
        s.code() == StatusCode::kUnavailable) {
      spdlog::error("{} {}: {}", req.method, req.path, s.ToString());
    }
    w.status = HttpStatusFor(s.code());
    w.body = DumpJson(ErrorBody(s));
  } else if (!reply->content_type.empty()) {
    w.status = reply->status;
    w.content_type = reply->content_type;
    w.body = reply->text;
  } else {
    w.status = reply->status;
    w.body = DumpJson(reply->body);
  }
  return w;
}

void WriteWire(httplib::Response& res, const Wire& w) {
  res.status = w.status;
  res.set_content(w.body, w.content_type.c_str());
}

json KeyConflict(const std::string& message) {
  return {{"error", "conflict"},
          {"message", message},
          {"field", kIdempotencyKeyHeader}};
}

// Answers a POST whose Idempotency-Key is already recorded (docs/API.md,
// "Idempotent POSTs").
void AnswerFromRecord(const Route& route, Ctx& ctx,
                      const IdempotencyKeys::Claim& claim,
                      httplib::Response& res) {
  const std::string& key = claim.row.key;
  switch (claim.outcome) {
    case IdempotencyKeys::Outcome::kReplay: {
      res.set_header(kIdempotentReplayedHeader, "true");
      if (claim.row.body.empty() && claim.row.task_id && route.replay_task) {
        // Recorded with its effect; the reply itself was not written (the
        // server stopped in between): the task as it is now.
        StatusOr<Reply> reply = route.replay_task(ctx, *claim.row.task_id);
        Wire w = WireFor(reply, ctx.req);
        if (reply.ok()) w.status = claim.row.status;
        WriteWire(res, w);
        return;
      }
      WriteWire(res,
                Wire{claim.row.status, "application/json", claim.row.body});
      return;
    }
    case IdempotencyKeys::Outcome::kReused:
      WriteJson(res, 422,
                {{"error", "idempotency_key_reused"},
                 {"message", "Idempotency-Key '" + key +
                                 "' was first sent with a different method, "
                                 "path or body; a new request needs a new "
                                 "key"},
                 {"field", kIdempotencyKeyHeader}});
      return;
    case IdempotencyKeys::Outcome::kInProgress:
      res.set_header("Retry-After", "1");
      WriteJson(
          res, 409,
          KeyConflict("the request first sent with Idempotency-Key '" + key +
                      "' is still being carried out; retry shortly for "
                      "its reply"));
      return;
    case IdempotencyKeys::Outcome::kUnknown:
      WriteJson(res, 409,
                KeyConflict("the request first sent with Idempotency-Key '" +
                            key + "' at " + FormatTime(claim.row.created_at) +
                            " never finished (the server stopped while "
                            "carrying it out): whether it took effect is "
                            "unknown; check, then send it again with a new "
                            "key"));
      return;
    case IdempotencyKeys::Outcome::kProceed:
      break;
  }
  WriteJson(res, 500, ErrorBody(Status::Internal("idempotency: no record")));
}

// Answers `req` with `route` on this instance: the caller (Bearer token),
// whether the caller's role may call the route, the query check, the
// Idempotency-Key of a POST (`keys`; null: not honoured), the handler, and
// the one mapping of its Status onto an HTTP status and JSON error body.
// The socket server and LocalApi both call it, so the in-process path is
// the HTTP path without the socket.
void ServeRoute(const Route& route, ControlPlane& cp, IdempotencyKeys* keys,
                const httplib::Request& req, httplib::Response& res) {
  Ctx ctx{req, {}, {}};
  for (std::size_t i = 1; i < req.matches.size(); ++i) {
    ctx.params.push_back(req.matches[i].str());
  }
  if (route.access.auth) {
    auto caller = cp.Authenticate(BearerToken(req));
    if (!caller.ok()) {
      res.set_header("WWW-Authenticate", "Bearer");
      WriteJson(res, 401, ErrorBody(caller.status()));
      return;
    }
    ctx.caller = *caller;
    // Who may call this, before anything the caller sent is looked at.
    if (!route.access.roles.Has(ctx.caller.role)) {
      WriteJson(
          res, 403,
          ErrorBody(Status::PermissionDenied(
              route.method + " " + route.path + " needs a token of role " +
              route.access.roles.Describe() + " (this token's role is " +
              std::string(store::RoleName(ctx.caller.role)) + ")")));
      return;
    }
    if (route.node_param >= 0 && ctx.caller.node &&
        static_cast<std::size_t>(route.node_param) < ctx.params.size() &&
        ctx.params[route.node_param] != *ctx.caller.node) {
      WriteJson(res, 403,
                ErrorBody(Status::PermissionDenied(
                    "this node token is bound to node '" + *ctx.caller.node +
                    "', not '" + ctx.params[route.node_param] + "'")));
      return;
    }
  }
  // Only the URL's query counts (httplib also puts form bodies in params,
  // and curl -d sends JSON as a form by default).
  const auto refuse = [&res](const Status& s) {
    WriteJson(res, 400, ErrorBody(s));
  };
  for (const auto& [name, value] : QueryPairs(req.target)) {
    if (std::find(route.query.begin(), route.query.end(), name) ==
        route.query.end()) {
      refuse(Status::InvalidArgument(
          "unknown query parameter '" + ValidUtf8(name) + "'", name));
      return;
    }
    if (value.find('\0') != std::string::npos) {
      refuse(Status::InvalidArgument("contains a NUL character", name));
      return;
    }
  }
  // Path parameters are ids and names: no control characters.
  const std::vector<std::string> names = PathParamNames(route.path);
  for (std::size_t i = 0; i < ctx.params.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "path";
    if (const Status s = CheckIdentifier(ctx.params[i], name); !s.ok()) {
      refuse(s);
      return;
    }
  }
  // Idempotency-Key (idempotency.h): a repeat is answered from the record.
  std::optional<store::IdempotencyRow> record;
  const bool in_txn = static_cast<bool>(route.replay_task);
  if (keys != nullptr && req.method == "POST" && route.access.auth &&
      req.has_header(kIdempotencyKeyHeader)) {
    const std::string key = req.get_header_value(kIdempotencyKeyHeader);
    if (Status s = ValidateIdempotencyKey(key); !s.ok()) {
      WriteJson(res, 400, ErrorBody(s));
      return;
    }
    const std::string fingerprint =
        RequestFingerprint(req.method, req.target, req.body);
    auto claim = keys->Begin(ctx.caller.token_id, key, fingerprint,
                             /*record_pending=*/!in_txn);
    if (!claim.ok()) {
      WriteWire(res, WireFor(claim.status(), req));
      return;
    }
    if (claim->outcome != IdempotencyKeys::Outcome::kProceed) {
      AnswerFromRecord(route, ctx, *claim, res);
      return;
    }
    record = claim->row;
    if (in_txn) {
      ctx.idempotency = &*record;
      ctx.keys = keys;
    }
  }
  StatusOr<Reply> reply = route.fn(ctx);
  if (record && ctx.idempotency_taken) {
    // A concurrent request with the same key recorded it first: its
    // record answers (this one's effect was rolled back with it).
    auto claim = keys->Begin(ctx.caller.token_id, record->key,
                             record->fingerprint, /*record_pending=*/false);
    if (claim.ok() && claim->outcome != IdempotencyKeys::Outcome::kProceed) {
      AnswerFromRecord(route, ctx, *claim, res);
      return;
    }
    record.reset();  // not ours to record
  }
  const Wire wire = WireFor(reply, req);
  if (record) {
    Status recorded;
    if (wire.status >= 500) {
      // Not done (or not known to be): the key is free again. A task's
      // record rolled back with its insert.
      if (!in_txn) recorded = keys->Abandon(*record);
    } else if (in_txn && !reply.ok()) {
      recorded = keys->RecordFinished(*record, wire.status, wire.body);
    } else {
      recorded = keys->Finish(*record, wire.status, wire.body);
    }
    if (!recorded.ok()) {
      spdlog::warn("{} {}: recording Idempotency-Key '{}': {}", req.method,
                   req.path, record->key, recorded.ToString());
    }
  }
  WriteWire(res, wire);
}

}  // namespace

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:
      return 409;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

std::string ErrorCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kPermissionDenied:
      return "permission_denied";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:  // 409: docs/API.md's "conflict"
      return "conflict";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kInternal:
      return "internal";
  }
  return "internal";
}

std::vector<RouteInfo> ServedRoutes() {
  // The handlers are not run; a ControlPlane reference is only captured.
  std::vector<RouteInfo> out;
  SystemClock clock;
  for (const Route& r : BuildRoutes(nullptr, clock, nullptr)) {
    out.push_back({r.method, r.path, r.leader_only, r.access.auth,
                   r.access.roles.Names()});
  }
  return out;
}

ApiServer::ApiServer(ControlPlane* control_plane, const Clock* clock,
                     ApiOptions options, const server::Leadership* leadership)
    : cp_(control_plane),
      clock_(clock),
      leadership_(leadership),
      options_(std::move(options)),
      idempotency_(std::make_unique<IdempotencyKeys>(
          control_plane->store(), clock, options_.idempotency)) {
  http_.set_payload_max_length(options_.max_body_bytes);
  http_.set_keep_alive_max_count(100000);
  // httplib writes a response's headers and its body in separate send()
  // calls; with Nagle's algorithm on (httplib's default) the body then waits
  // for the client's delayed ACK, ~40 ms on Linux, on every keep-alive
  // request. bench/server_bench.cc, 4 clients creating tasks: p50 48 ms and
  // 83 creates/s without this, 2.7 ms and ~1,000 creates/s with it.
  http_.set_tcp_nodelay(true);
  http_.set_read_timeout(30, 0);
  http_.set_write_timeout(30, 0);
  const int threads = std::max(1, options_.threads);
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty())
          return httplib::Server::HandlerResponse::Unhandled;
        Status s;
        switch (res.status) {
          case 404:
            s = Status::NotFound("no route " + req.method + " " + req.path);
            break;
          case 413:
            WriteJson(
                res, 413,
                {{"error", "payload_too_large"},
                 {"message", "the request body is larger than the limit"}});
            return httplib::Server::HandlerResponse::Handled;
          case 400:
            s = Status::InvalidArgument("malformed HTTP request");
            break;
          default:
            s = Status::Internal("HTTP " + std::to_string(res.status));
        }
        WriteJson(res, res.status, ErrorBody(s));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_.set_exception_handler([](const httplib::Request& req,
                                 httplib::Response& res,
                                 const std::exception_ptr& ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", req.method, req.path, what);
    WriteJson(res, 500, ErrorBody(Status::Internal("internal error")));
  });
  RegisterRoutes();
  ServeConsole();
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::ServeConsole() {
  std::error_code ec;
  const bool built =
      !options_.console_dir.empty() &&
      std::filesystem::is_regular_file(
          std::filesystem::path(options_.console_dir) / "index.html", ec);
  if (built) {
    // httplib looks at mount points before the handlers, so / is the
    // console's index.html and /assets/... its bundle, while every API
    // path (no such file there) falls through to the routes.
    http_.set_mount_point("/", options_.console_dir);
    return;
  }
  const std::string why =
      options_.console_dir.empty()
          ? "this hf-server was started without a console (--console-dir)"
          : "no built console in --console-dir " + options_.console_dir;
  http_.Get("/", [why](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        "<!doctype html><title>HeteroFlow</title><h1>HeteroFlow</h1><p>" + why +
            ". Build it with <code>make</code> (it needs node and npm), or "
            "use the REST API at <code>/api/v1/</code>.</p>",
        "text/html; charset=utf-8");
  });
}

void ApiServer::RegisterRoutes() {
  for (Route& route : BuildRoutes(cp_, *clock_, leadership_)) {
    auto handler = [this, route](const httplib::Request& req,
                                 httplib::Response& res) {
      const auto started = std::chrono::steady_clock::now();
      if (route.leader_only && leadership_ != nullptr &&
          !leadership_->Serving()) {
        RouteToLeader(req, res);
      } else {
        ServeRoute(route, *cp_, idempotency_.get(), req, res);
      }
      // The route's template, never the URL: the labels stay bounded.
      cp_->telemetry().HttpRequest(
          route.path, route.method, res.status,
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        started)
              .count());
    };
    const std::string pattern = PathRegex(route.path);
    if (route.method == "GET") {
      http_.Get(pattern, handler);
    } else if (route.method == "POST") {
      http_.Post(pattern, handler);
    } else if (route.method == "DELETE") {
      http_.Delete(pattern, handler);
    } else if (route.method == "PATCH") {
      http_.Patch(pattern, handler);
    } else if (route.method == "PUT") {
      http_.Put(pattern, handler);
    }
  }
}

// A request for the ledger on an instance that does not serve it.
void ApiServer::RouteToLeader(const httplib::Request& req,
                              httplib::Response& res) const {
  const std::string self = leadership_->id();
  if (leadership_->IsLeader()) {
    WriteNoLeader(res, "instance " + self +
                           " is becoming the leader (rebuilding its ledger); "
                           "retry shortly");
    return;
  }
  if (req.has_header(kForwardedHeader)) {
    // Forwarded by an instance that thought this one leads: stop here.
    WriteNoLeader(
        res, "instance " + self + " is not the leader (forwarded by " +
                 req.get_header_value(kForwardedHeader) + "); retry shortly");
    return;
  }
  const std::optional<server::Lease> leader = leadership_->KnownLeader();
  if (!leader || leader->id == self || leader->url.empty()) {
    WriteNoLeader(res, "no leader yet: instance " + self +
                           " is a follower and no instance holds the "
                           "leader lease; retry shortly");
    return;
  }
  ForwardToLeader(req, ForwardTarget{leader->id, leader->url, self}, res);
}

Status ApiServer::Bind(const std::string& host, int port) {
  if (port == 0) {
    port_ = http_.bind_to_any_port(host);
    if (port_ <= 0) return Status::Unavailable("cannot bind " + host);
    return Status::Ok();
  }
  if (!http_.bind_to_port(host, port)) {
    return Status::Unavailable("cannot listen on " + host + ":" +
                               std::to_string(port) +
                               " (address in use or not allowed)");
  }
  port_ = port;
  return Status::Ok();
}

Status ApiServer::Serve() {
  if (!http_.listen_after_bind()) {
    return Status::Unavailable("the HTTP server stopped with an error");
  }
  return Status::Ok();
}

void ApiServer::Stop() { http_.stop(); }

// ------------------------------------------------------------- LocalApi

struct LocalApi::Routes {
  std::vector<Route> routes;
  std::vector<std::regex> patterns;  // routes[i]'s path
};

LocalApi::LocalApi(ControlPlane* control_plane, const Clock* clock,
                   IdempotencyOptions idempotency)
    : cp_(control_plane),
      clock_(clock),
      routes_(std::make_unique<Routes>()),
      idempotency_(std::make_unique<IdempotencyKeys>(control_plane->store(),
                                                     clock, idempotency)) {
  routes_->routes = BuildRoutes(cp_, *clock_, nullptr);
  for (const Route& r : routes_->routes) {
    routes_->patterns.emplace_back(PathRegex(r.path));
  }
}

LocalApi::~LocalApi() = default;

LocalResponse LocalApi::Handle(const LocalRequest& request) {
  httplib::Request req;
  req.method = request.method;
  req.target = request.target;
  const std::size_t q = request.target.find('?');
  req.path = httplib::detail::decode_url(request.target.substr(0, q), false);
  if (q != std::string::npos) {
    httplib::detail::parse_query_text(request.target.substr(q + 1), req.params);
  }
  req.body = request.body;
  for (const auto& [k, v] : request.headers) req.headers.emplace(k, v);
  if (!request.bearer.empty()) {
    req.headers.emplace("Authorization", "Bearer " + request.bearer);
  }
  httplib::Response res;
  const Route* found = nullptr;
  for (std::size_t i = 0; i < routes_->routes.size(); ++i) {
    const Route& r = routes_->routes[i];
    if (r.method != req.method) continue;
    if (std::regex_match(req.path, req.matches, routes_->patterns[i])) {
      found = &r;
      break;
    }
  }
  if (found == nullptr) {
    WriteJson(
        res, 404,
        ErrorBody(Status::NotFound("no route " + req.method + " " + req.path)));
  } else {
    try {
      ServeRoute(*found, *cp_, idempotency_.get(), req, res);
    } catch (const std::exception& e) {
      // As the socket server's exception handler answers.
      spdlog::error("{} {}: {}", req.method, req.path, e.what());
      WriteJson(res, 500, ErrorBody(Status::Internal("internal error")));
    }
  }
  LocalResponse out;
  out.status = res.status;
  out.body = std::move(res.body);
  out.content_type = res.get_header_value("Content-Type");
  for (const auto& [name, value] : res.headers) out.headers[name] = value;
  return out;
}

}  // namespace hf::api
