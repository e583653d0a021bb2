// The HTTP front of hf-server: the route tables (routes.h: data, one table
// per resource, the same entries the OpenAPI test compares against
// openapi.json and the forwarding of leader routes reads), Bearer-token
// authentication, request limits, and the one translation of Status codes
// into HTTP statuses and JSON error bodies.
//
// Thread-safety: an ApiServer serves requests on its thread pool; Stop may
// be called from any thread.
#pragma once

#include <httplib.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/idempotency.h"
#include "common/clock.h"
#include "common/status.h"
#include "metrics/metrics.h"
#include "server/control_plane.h"
#include "server/leadership.h"

namespace hf::api {

// Which instance answers a route when several share one database
// (docs/OPERATIONS.md, "Which instance answers what").
enum class Instance {
  kAny,     // rows in the database: any instance answers
  kLeader,  // needs the ledger (or the leader's memory): followers forward
  kEach,    // each instance answers for itself (GET /metrics)
};

struct RouteInfo {
  std::string method;  // "GET", "POST", ...
  std::string path;    // OpenAPI style: /api/v1/tasks/{id}
  Instance instance;
  // False: public (no token). Otherwise the roles ("admin", "tenant-admin",
  // "user", "node") that may call it; every other role gets 403 before the
  // request's query or body is looked at.
  bool auth = true;
  std::vector<std::string> roles;
};

// Every route hf-server serves, in matching order: a listing of the route
// tables (routes.h) that serving and forwarding read.
std::vector<RouteInfo> ServedRoutes();

// What GET /metrics serves (and hf-server's --metrics-listen): the control
// plane's series and this instance's leader state. Both pointers must
// outlive it; `leadership` may be null (the only instance).
metrics::Exposition ServerExposition(server::ControlPlane* cp,
                                     const server::Leadership* leadership);

// The OpenAPI document served at /api/v1/openapi.json.
const std::string& OpenApiDocument();

struct ApiOptions {
  std::size_t max_body_bytes = 1 << 20;
  // httplib holds one worker per open keep-alive connection; the workers
  // mostly wait on the store, so a generous pool keeps clients from
  // starving behind idle connections.
  int threads = 128;
  // The built web console (index.html and its assets), served at /. Empty
  // or missing: / says how to build it.
  std::string console_dir;
  // Idempotency-Key records: how long they are honoured, and the sweep.
  IdempotencyOptions idempotency;
};

int HttpStatusFor(StatusCode code);
std::string ErrorCodeFor(StatusCode code);

class ApiServer {
 public:
  // `leadership` (may be null: the only instance, which serves every
  // route) decides whether the ledger's routes are served here or
  // forwarded to the leader. Both must outlive the ApiServer.
  ApiServer(server::ControlPlane* control_plane, const Clock* clock,
            ApiOptions options, const server::Leadership* leadership = nullptr);
  ~ApiServer();

  // Binds the listening socket; port 0 picks a free one (see port()).
  Status Bind(const std::string& host, int port);
  int port() const { return port_; }
  // Serves until Stop(). REQUIRES: Bind succeeded.
  Status Serve();
  void Stop();

 private:
  void RegisterRoutes();
  // Forwards `req` to the leader, or answers 503 (leadership_ is set and
  // this instance does not serve the ledger).
  void RouteToLeader(const httplib::Request& req, httplib::Response& res) const;
  void ServeConsole();  // the web console at /, or a note where none is built

  server::ControlPlane* const cp_;
  const Clock* const clock_;
  const server::Leadership* const leadership_;
  const ApiOptions options_;
  const std::unique_ptr<IdempotencyKeys> idempotency_;
  httplib::Server http_;
  int port_ = 0;
};

// One request to LocalApi: what an HTTP client would send.
struct LocalRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query: "/api/v1/tasks?limit=5"
  std::string bearer;  // the token, without "Bearer "; empty: none
  std::string body;
  std::map<std::string, std::string> headers;  // besides Authorization
};

struct LocalResponse {
  int status = 0;
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;  // e.g. Idempotent-Replayed
};

// The routes of ApiServer without a socket: the same table, the same
// authentication and the same JSON, called in-process. The whole-system
// simulation (src/simulation) drives agents and users through it. Serves
// every route itself (no leader forwarding).
//
// Thread-safety: Handle may be called from several threads.
class LocalApi {
 public:
  // Both must outlive the LocalApi.
  LocalApi(server::ControlPlane* control_plane, const Clock* clock,
           IdempotencyOptions idempotency = {});
  ~LocalApi();
  LocalApi(const LocalApi&) = delete;
  LocalApi& operator=(const LocalApi&) = delete;

  LocalResponse Handle(const LocalRequest& request);

 private:
  server::ControlPlane* const cp_;
  const Clock* const clock_;
  const std::unique_ptr<IdempotencyKeys> idempotency_;
};

}  // namespace hf::api
