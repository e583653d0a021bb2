#include "api/http_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <utility>

#include "api/codec.h"
#include "api/forward.h"
#include "api/idempotency.h"
#include "api/routes.h"

namespace hf::api {

using server::ControlPlane;

namespace {

using routes::Ctx;
using routes::Reply;
using routes::Route;

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

std::string PathRegex(const std::string& path) {
  static const std::regex kParam(R"(\{[a-z_]+\})");
  std::string escaped = std::regex_replace(path, std::regex(R"([.])"), R"(\.)");
  return std::regex_replace(escaped, kParam, "([^/]+)");
}

// Each route's path as a regex, in routes::AllRoutes() order.
const std::vector<std::regex>& RoutePatterns() {
  static const std::vector<std::regex> kPatterns = [] {
    std::vector<std::regex> patterns;
    for (const Route* r : routes::AllRoutes()) {
      patterns.emplace_back(PathRegex(r->path));
    }
    return patterns;
  }();
  return kPatterns;
}

// The route for `req`'s method and path (its path parameters in
// req.matches), or nullptr.
const Route* FindRoute(httplib::Request& req) {
  const std::vector<const Route*>& all = routes::AllRoutes();
  const std::vector<std::regex>& patterns = RoutePatterns();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i]->method != req.method) continue;
    if (std::regex_match(req.path, req.matches, patterns[i])) return all[i];
  }
  return nullptr;
}

// The answer to a request no route takes: 405 (method_not_allowed, with the
// Allow header) when routes serve the path with other methods, else 404.
void WriteNoRoute(const httplib::Request& req, httplib::Response& res) {
  std::vector<std::string> methods;  // in route order, each once
  std::string allowed;
  const std::vector<const Route*>& all = routes::AllRoutes();
  const std::vector<std::regex>& patterns = RoutePatterns();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& m = all[i]->method;
    if (!std::regex_match(req.path, patterns[i]) ||
        std::find(methods.begin(), methods.end(), m) != methods.end()) {
      continue;
    }
    methods.push_back(m);
    allowed += allowed.empty() ? m : ", " + m;
  }
  if (allowed.empty()) {
    WriteJson(
        res, 404,
        ErrorBody(Status::NotFound("no route " + req.method + " " + req.path)));
    return;
  }
  res.set_header("Allow", allowed);
  WriteJson(res, 405,
            {{"error", "method_not_allowed"},
             {"message", req.method + " is not served on " + req.path +
                             "; allowed: " + allowed}});
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
// the HTTP path without the socket. `leadership`: as Ctx::leadership.
void ServeRoute(const Route& route, ControlPlane& cp, const Clock& clock,
                const server::Leadership* leadership, IdempotencyKeys* keys,
                const httplib::Request& req, httplib::Response& res) {
  Ctx ctx{req, cp, clock, leadership, {}, {}};
  for (std::size_t i = 1; i < req.matches.size(); ++i) {
    ctx.params.push_back(req.matches[i].str());
  }
  const std::vector<std::string> names = PathParamNames(route.path);
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
    // A node token bound to one node may name only that node in {node}.
    for (std::size_t i = 0; i < names.size() && i < ctx.params.size(); ++i) {
      if (names[i] == "node" && ctx.caller.node &&
          ctx.params[i] != *ctx.caller.node) {
        WriteJson(res, 403,
                  ErrorBody(Status::PermissionDenied(
                      "this node token is bound to node '" + *ctx.caller.node +
                      "', not '" + ctx.params[i] + "'")));
        return;
      }
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
  for (std::size_t i = 0; i < ctx.params.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : "path";
    if (const Status s = CheckIdentifier(ctx.params[i], name); !s.ok()) {
      refuse(s);
      return;
    }
  }
  // Idempotency-Key (idempotency.h): a repeat is answered from the record.
  std::optional<store::IdempotencyRow> record;
  const bool in_txn = route.replay_task != nullptr;
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
  StatusOr<Reply> reply = route.handler(ctx);
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
  std::vector<RouteInfo> out;
  for (const Route* r : routes::AllRoutes()) {
    out.push_back({r->method, r->path, r->answered_by.instance, r->access.auth,
                   r->access.roles.Names()});
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
  // A request with neither Content-Length nor Transfer-Encoding has an
  // empty body (RFC 9112, section 6.3), which is how `curl -X POST` sends a
  // cancel or an apply. httplib answers such a POST, PUT or PATCH with a bare
  // 400 before any route (and its token check) sees it, unless told the
  // length; this runs before it reads a body.
  http_.set_pre_routing_handler([](const httplib::Request& req,
                                   httplib::Response&) {
    if ((req.method == "POST" || req.method == "PUT" ||
         req.method == "PATCH") &&
        !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      // httplib hands the handler the request it owns and reads next.
      const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty())
          return httplib::Server::HandlerResponse::Unhandled;
        Status s;
        switch (res.status) {
          case 404:
            WriteNoRoute(req, res);
            return httplib::Server::HandlerResponse::Handled;
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
  for (const Route* entry : routes::AllRoutes()) {
    const Route& route = *entry;
    auto handler = [this, &route](const httplib::Request& req,
                                  httplib::Response& res) {
      const auto started = std::chrono::steady_clock::now();
      // The table's decision: a follower forwards what only the leader may
      // answer (docs/OPERATIONS.md, "Which instance answers what").
      if (route.answered_by.instance == Instance::kLeader &&
          leadership_ != nullptr && !leadership_->Serving()) {
        RouteToLeader(req, res);
      } else {
        ServeRoute(route, *cp_, *clock_, leadership_, idempotency_.get(), req,
                   res);
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

void ApiServer::Stop() {
  cp_->ReleaseWorkWaits();  // agents waiting for work do not hold the stop
  http_.stop();
}

// ------------------------------------------------------------- LocalApi

LocalApi::LocalApi(ControlPlane* control_plane, const Clock* clock,
                   IdempotencyOptions idempotency)
    : cp_(control_plane),
      clock_(clock),
      idempotency_(std::make_unique<IdempotencyKeys>(control_plane->store(),
                                                     clock, idempotency)) {}

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
  const Route* found = FindRoute(req);
  if (found == nullptr) {
    WriteNoRoute(req, res);
  } else {
    try {
      ServeRoute(*found, *cp_, *clock_, nullptr, idempotency_.get(), req, res);
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
