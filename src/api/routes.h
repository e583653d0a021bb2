// The route tables of hf-server's HTTP API, internal to src/api: one table
// per resource (routes_*.cc), each entry a plain Route saying its method and
// path, who may call it, which instance answers it when several share one
// database, the query parameters it takes, and its handler. ServeRoute
// (http_api.cc) serves an entry; the forwarding of leader routes, the route
// listing (ServedRoutes) and the tests holding the routes to openapi.json
// and docs/OPERATIONS.md all read these same tables, so there is no second
// list to forget.
//
// Thread-safety: the tables are immutable; handlers may run concurrently.
#pragma once

#include <httplib.h>

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/codec.h"
#include "api/http_api.h"
#include "api/idempotency.h"
#include "common/clock.h"
#include "common/status.h"
#include "server/control_plane.h"
#include "server/leadership.h"

namespace hf::api::routes {

// json's default constructor does not throw; clang-tidy cannot see that.
struct Reply {  // NOLINT(bugprone-exception-escape)
  int status = 200;
  json body;
  std::string text;          // non-JSON replies (metrics, openapi)
  std::string content_type;  // with `text`
};

// What a handler is given: the request, the instance's state and the
// authenticated caller.
struct Ctx {
  const httplib::Request& req;
  server::ControlPlane& cp;
  const Clock& clock;
  // Null: the only instance (and LocalApi), which is its own leader.
  const server::Leadership* leadership;
  server::Caller caller;
  std::vector<std::string> params;  // path parameters, in order
  // A POST with an Idempotency-Key on a route that records it in its
  // effect's transaction (Route::replay_task): the record to insert there
  // (IdempotencyKeys::RecordInTxn), and whether another request with the
  // key got there first.
  const store::IdempotencyRow* idempotency = nullptr;
  IdempotencyKeys* keys = nullptr;
  bool idempotency_taken = false;
};

using Handler = StatusOr<Reply> (*)(Ctx&);
using ReplayTask = StatusOr<Reply> (*)(Ctx&, store::RowId task_id);

// The roles that may call a route, one bit per store::Role.
class RoleSet {
 public:
  constexpr RoleSet() = default;
  constexpr RoleSet(std::initializer_list<store::Role> roles) {
    for (store::Role r : roles) bits_ |= Bit(r);
  }
  constexpr bool Has(store::Role r) const { return (bits_ & Bit(r)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  // "admin or tenant-admin": admin, tenant-admin, user, node, metrics order.
  std::string Describe() const;
  std::vector<std::string> Names() const;

 private:
  static constexpr unsigned Bit(store::Role r) {
    return 1U << static_cast<unsigned>(r);
  }
  unsigned bits_ = 0;
};

// Who may call a route. Checked by ServeRoute right after authentication,
// before anything of the request (query, body) is parsed, so a caller who
// may not call a route learns 403 and nothing about what it sent. The
// ControlPlane checks again (and narrows what each role sees). No default
// constructor: a route that does not say who may call it does not compile.
struct Access {
  constexpr Access(bool auth_in, RoleSet roles_in)
      : auth(auth_in), roles(roles_in) {}
  bool auth;  // false: public (no token; `roles` unused)
  RoleSet roles;
};

// Every role: what each sees is narrowed by the ControlPlane (a node token
// sees no tenant's tasks, slices, stats or history).
inline constexpr Access kAnyRole{
    true,
    {store::Role::kAdmin, store::Role::kTenantAdmin, store::Role::kUser,
     store::Role::kNode}};
inline constexpr Access kTenantRoles{
    true, {store::Role::kAdmin, store::Role::kTenantAdmin, store::Role::kUser}};
inline constexpr Access kTenantAdmins{
    true, {store::Role::kAdmin, store::Role::kTenantAdmin}};
inline constexpr Access kAdminOnly{true, {store::Role::kAdmin}};
inline constexpr Access kAgents{true,
                                {store::Role::kAdmin, store::Role::kNode}};
inline constexpr Access kPublic{false, {}};
// GET /metrics: cluster-wide numbers, never a tenant's to read.
inline constexpr Access kMetricsReaders{
    true, {store::Role::kAdmin, store::Role::kMetrics}};

// Which instance answers a route (api::Instance). No default constructor:
// a route that does not decide does not compile, so a new route cannot
// quietly be served by a follower from state only the leader holds.
struct AnsweredBy {
  constexpr explicit AnsweredBy(Instance i) : instance(i) {}
  Instance instance;
};
inline constexpr AnsweredBy kAnyInstance{Instance::kAny};
inline constexpr AnsweredBy kLeader{Instance::kLeader};
inline constexpr AnsweredBy kEachInstance{Instance::kEach};
static_assert(!std::is_default_constructible_v<Access> &&
                  !std::is_default_constructible_v<AnsweredBy>,
              "a route must say who may call it and which instance answers");

// One route. Tables list these in matching order: a request goes to the
// first entry whose method and path match, so a fixed path comes before a
// parameter in the same place (/slices/stats before /slices/{id}).
struct Route {
  std::string method;  // "GET", "POST", ...
  std::string path;    // OpenAPI style: /api/v1/tasks/{id}
  Access access;
  AnsweredBy answered_by;
  std::vector<std::string> query;  // the query parameters it takes
  Handler handler;
  // Set for POST /api/v1/tasks, which records its Idempotency-Key in the
  // transaction that inserts the task (idempotency.h): how to answer a
  // repeat whose record names the task but holds no reply yet.
  ReplayTask replay_task = nullptr;
};

// The tables, one per resource.
std::span<const Route> ClusterRoutes();  // health, openapi, metrics, cluster
std::span<const Route> TaskRoutes();
std::span<const Route> SliceRoutes();  // slices, their history and usage
std::span<const Route> AdviceRoutes();
std::span<const Route> SliceRequestRoutes();  // the MIG command channel
std::span<const Route> TenantRoutes();        // tenants and groups
std::span<const Route> TokenRoutes();
std::span<const Route> ApprovalRoutes();
std::span<const Route> DefragRoutes();
std::span<const Route> NodeRoutes();  // nodes and the agents' API

// Every table, in matching order.
const std::vector<const Route*>& AllRoutes();

// ---- helpers the handlers share

Reply Ok(json body, int status = 200);

StatusOr<store::RowId> ParseId(const std::string& text,
                               const std::string& field);

std::optional<std::string> Query(const httplib::Request& req, const char* name);

// ?limit=: 1..1000, 100 when absent.
StatusOr<int> ParseLimit(const httplib::Request& req);

// A cursor: `next_cursor` or `resume_cursor` of an earlier page; "0" (or
// none) is the beginning.
StatusOr<store::RowId> ParseCursor(const httplib::Request& req);

// ?limit= and ?cursor= into any query or filter with `limit` and
// `after_id`.
template <typename QueryT>
Status ParsePage(const httplib::Request& req, QueryT& query) {
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
std::string PositionCursor(const store::ListPosition& position);
StatusOr<store::ListPosition> ParsePositionCursor(const httplib::Request& req);

// ?limit= and ?cursor= into a query or filter with `limit` and `after` (a
// position in the history or the tasks).
template <typename QueryT>
Status ParsePositionPage(const httplib::Request& req, QueryT& query) {
  auto limit = ParseLimit(req);
  if (!limit.ok()) return limit.status();
  auto cursor = ParsePositionCursor(req);
  if (!cursor.ok()) return cursor.status();
  query.limit = *limit;
  query.after = *cursor;
  return Status::Ok();
}

// The cursor that resumes a list after `row`.
inline std::string CursorAfter(const store::HistoryRow& row) {
  return PositionCursor(row.position());
}
inline std::string CursorAfter(const store::TaskRow& row) {
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
json PageBody(json items, std::optional<std::string> next, std::string resume);

// `start`: the request's cursor, as this server writes it.
template <typename T, typename F>
json PageJson(const server::Page<T>& page, std::string start, F&& render) {
  json items = json::array();
  for (const T& row : page.items) items.push_back(render(row));
  if (page.items.empty())
    return PageBody(std::move(items), {}, std::move(start));
  // TrimToPage sets next_after only when another page follows, always to
  // the last item's place.
  std::string resume = CursorAfter(page.items.back());
  std::optional<std::string> next;
  if (page.next_after) next = resume;
  return PageBody(std::move(items), std::move(next), std::move(resume));
}

StatusOr<json> Body(const Ctx& ctx);

// The string `body` (an object) holds at `field`, or nullopt where it holds
// none (absent, null, or another type, which validation then names): what
// a check of who may call reads before the body is validated.
std::optional<std::string> StringField(const json& body, const char* field);

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
  std::optional<store::RowId> next;
  store::RowId last = *cursor;
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

}  // namespace hf::api::routes
