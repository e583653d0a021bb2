// The HTTP layer served in-process (LocalApi) on a real ControlPlane and a
// real SQLite store in a temporary directory: who may call which route,
// checked before anything the caller sent is parsed.
#include "api/http_api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::api {
namespace {

using nlohmann::json;
using server::Caller;
using server::ControlPlane;
using store::Role;
using store::RowId;

constexpr const char* kAdminSecret = "admin-secret-for-the-api-test";

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto cp = ControlPlane::Create(store_.get(), &clock_, {});
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->BootstrapAdmin(std::string(kAdminSecret)).ok());
    auto admin = cp_->Authenticate(kAdminSecret);
    ASSERT_TRUE(admin.ok());
    admin_ = *admin;
    ASSERT_TRUE(cp_->CreateTenant(admin_, "t1", std::nullopt).ok());
    tokens_[Role::kAdmin] = kAdminSecret;
    tokens_[Role::kTenantAdmin] = NewToken(Role::kTenantAdmin, "t1");
    tokens_[Role::kUser] = NewToken(Role::kUser, "t1");
    tokens_[Role::kNode] = NewToken(Role::kNode, std::nullopt, "n1");
    api_ = std::make_unique<LocalApi>(cp_.get(), &clock_);
  }

  void TearDown() override {
    api_.reset();
    cp_.reset();
    store_.reset();
  }

  std::string NewToken(Role role, const std::optional<std::string>& tenant,
                       const std::optional<std::string>& node = std::nullopt) {
    auto created = cp_->CreateToken(admin_, role, tenant, "test", node);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->second : "";
  }

  LocalResponse Call(const std::string& method, const std::string& target,
                     const std::string& bearer, const std::string& body = "",
                     std::map<std::string, std::string> headers = {}) {
    LocalRequest request;
    request.method = method;
    request.target = target;
    request.bearer = bearer;
    request.body = body;
    request.headers = std::move(headers);
    return api_->Handle(request);
  }

  // Node n1 with one A100 (80 GB), so slices can be reserved.
  void RegisterNodeN1() {
    server::NodeReport node;
    node.name = "n1";
    server::GpuReport gpu;
    gpu.uuid = "GPU-0";
    gpu.model = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.cc_major = 8;
    node.gpus.push_back(gpu);
    ASSERT_TRUE(cp_->RegisterNode(admin_, node).ok());
  }

  static json Body(const LocalResponse& r) {
    return json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  }

  FakeClock clock_{1'700'000'000'000};
  store::sqlite_testing::TempDir dir_{"hf-http-api-test"};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ControlPlane> cp_;
  Caller admin_;
  std::map<Role, std::string> tokens_;
  std::unique_ptr<LocalApi> api_;
};

// A concrete path for a route template: {id} 1, {name} t1, {node} n1.
std::string Fill(std::string path) {
  const std::vector<std::pair<std::string, std::string>> values = {
      {"{id}", "1"}, {"{name}", "t1"}, {"{node}", "n1"}};
  for (const auto& [param, value] : values) {
    for (auto at = path.find(param); at != std::string::npos;
         at = path.find(param)) {
      path.replace(at, param.size(), value);
    }
  }
  return path;
}

// Who may call each route: the product's contract (docs/API.md, "Roles").
// A route served but missing here fails the test below, so a new route
// cannot go in without someone deciding who may call it.
const std::map<std::pair<std::string, std::string>, std::set<std::string>>&
ExpectedRoles() {
  static const auto* const kTable = [] {
    const std::set<std::string> any = {"admin", "tenant-admin", "user", "node"};
    const std::set<std::string> tenant = {"admin", "tenant-admin", "user"};
    const std::set<std::string> tenant_admins = {"admin", "tenant-admin"};
    const std::set<std::string> admin = {"admin"};
    const std::set<std::string> agents = {"admin", "node"};
    const std::set<std::string> public_route;
    return new std::map<std::pair<std::string, std::string>,
                        std::set<std::string>>{
        {{"GET", "/healthz"}, public_route},
        {{"GET", "/api/v1/openapi.json"}, public_route},
        {{"GET", "/metrics"}, {"admin", "metrics"}},
        {{"GET", "/api/v1/cluster"}, admin},
        {{"GET", "/api/v1/whoami"}, any},
        {{"POST", "/api/v1/tasks"}, tenant},
        {{"GET", "/api/v1/tasks"}, any},
        {{"GET", "/api/v1/tasks/{id}"}, any},
        {{"GET", "/api/v1/tasks/{id}/logs"}, any},
        {{"POST", "/api/v1/tasks/{id}/cancel"}, tenant},
        {{"GET", "/api/v1/slices/stats"}, any},
        {{"GET", "/api/v1/slices/history"}, any},
        {{"GET", "/api/v1/slices"}, any},
        {{"POST", "/api/v1/slices"}, tenant_admins},
        {{"GET", "/api/v1/slices/{id}"}, any},
        {{"GET", "/api/v1/slices/{id}/usage"}, any},
        {{"PATCH", "/api/v1/slices/{id}"}, tenant_admins},
        {{"DELETE", "/api/v1/slices/{id}"}, tenant_admins},
        {{"GET", "/api/v1/advice"}, tenant_admins},
        {{"GET", "/api/v1/slice-requests"}, admin},
        {{"POST", "/api/v1/slice-requests/{id}/result"}, agents},
        {{"POST", "/api/v1/tenants"}, admin},
        {{"GET", "/api/v1/tenants"}, any},
        {{"GET", "/api/v1/tenants/{name}"}, any},
        {{"PATCH", "/api/v1/tenants/{name}"}, admin},
        {{"POST", "/api/v1/groups"}, admin},
        {{"GET", "/api/v1/groups"}, admin},
        {{"DELETE", "/api/v1/groups/{name}"}, admin},
        {{"POST", "/api/v1/tokens"}, tenant_admins},
        {{"GET", "/api/v1/tokens"}, tenant_admins},
        {{"DELETE", "/api/v1/tokens/{id}"}, tenant_admins},
        {{"POST", "/api/v1/sharing-approvals"}, admin},
        {{"GET", "/api/v1/sharing-approvals"}, admin},
        {{"DELETE", "/api/v1/sharing-approvals/{id}"}, admin},
        {{"POST", "/api/v1/defrag/plans"}, admin},
        {{"GET", "/api/v1/defrag/plans"}, admin},
        {{"GET", "/api/v1/defrag/plans/{id}"}, admin},
        {{"POST", "/api/v1/defrag/plans/{id}/apply"}, admin},
        {{"POST", "/api/v1/defrag/plans/{id}/cancel"}, admin},
        {{"POST", "/api/v1/nodes/register"}, agents},
        {{"POST", "/api/v1/nodes/{node}/heartbeat"}, agents},
        {{"GET", "/api/v1/nodes/{node}/assignments"}, agents},
        {{"GET", "/api/v1/nodes/{node}/work"}, agents},
        {{"POST", "/api/v1/nodes/{node}/task-states"}, agents},
        {{"POST", "/api/v1/nodes/{node}/slice-requests/claim"}, agents},
        {{"POST", "/api/v1/nodes/{node}/tasks/{id}/logs"}, agents},
        {{"GET", "/api/v1/nodes"}, admin},
        {{"GET", "/api/v1/nodes/{node}"}, admin},
    };
  }();
  return *kTable;
}

TEST_F(HttpApiTest, EveryRouteDeclaresTheRolesTheContractGivesIt) {
  std::set<std::pair<std::string, std::string>> served;
  for (const RouteInfo& r : ServedRoutes()) {
    SCOPED_TRACE(r.method + " " + r.path);
    served.insert({r.method, r.path});
    const auto expected = ExpectedRoles().find({r.method, r.path});
    ASSERT_NE(expected, ExpectedRoles().end())
        << "a new route: add who may call it to ExpectedRoles()";
    const std::set<std::string> roles(r.roles.begin(), r.roles.end());
    if (expected->second.empty()) {
      EXPECT_FALSE(r.auth) << "the contract says this route is public";
    } else {
      EXPECT_TRUE(r.auth);
      EXPECT_FALSE(r.roles.empty()) << "an authenticated route nobody may call";
    }
    EXPECT_EQ(roles, expected->second);
  }
  for (const auto& [route, roles] : ExpectedRoles()) {
    EXPECT_TRUE(served.contains(route))
        << "no longer served: " << route.first << " " << route.second;
  }
}

// Every route, every role it does not allow: a request with an unknown
// query parameter, a bad page limit and a body that is not JSON gets 403,
// not the 400 that parsing any of them would give. And every role it allows
// gets past the role check to the query check (400 naming the parameter).
TEST_F(HttpApiTest, EveryRouteChecksTheRoleBeforeParsingTheRequest) {
  int refused = 0;
  for (const RouteInfo& r : ServedRoutes()) {
    if (!r.auth) continue;
    const std::string target = Fill(r.path) + "?no_such_parameter=1&limit=0";
    const std::set<std::string> allowed(r.roles.begin(), r.roles.end());
    for (const auto& [role, token] : tokens_) {
      const std::string name(store::RoleName(role));
      SCOPED_TRACE(r.method + " " + r.path + " as " + name);
      const LocalResponse res = Call(r.method, target, token, "{not json");
      const json body = Body(res);
      if (allowed.contains(name)) {
        EXPECT_EQ(res.status, 400) << res.body;
        EXPECT_EQ(body.value("field", ""), "no_such_parameter") << res.body;
      } else {
        ++refused;
        EXPECT_EQ(res.status, 403) << res.body;
        EXPECT_EQ(body.value("error", ""), "permission_denied") << res.body;
        EXPECT_NE(body.value("message", "").find(name), std::string::npos)
            << res.body;
      }
    }
  }
  EXPECT_GT(refused, 40);
}

// Issue 14: a user posting a bad body to POST /api/v1/slices learned which
// field was wrong (400) instead of being refused (403).
TEST_F(HttpApiTest, UserPostingABadSliceBodyIsRefusedNotValidated) {
  const LocalResponse res =
      Call("POST", "/api/v1/slices", tokens_[Role::kUser],
           R"({"gpu_memory_mb": 1, "no_such_field": true})");
  EXPECT_EQ(res.status, 403) << res.body;
  EXPECT_EQ(Body(res).value("error", ""), "permission_denied");
  EXPECT_FALSE(Body(res).contains("field")) << res.body;
  // A tenant-admin with the same body hears about the body.
  const LocalResponse admin =
      Call("POST", "/api/v1/slices", tokens_[Role::kTenantAdmin],
           R"({"gpu_memory_mb": 1, "no_such_field": true})");
  EXPECT_EQ(admin.status, 400) << admin.body;
}

// Who may call is checked before what they sent where the "who" is named in
// the request: a tenant role acting for another tenant, a tenant-admin
// granting a token it may not, another tenant's slice. Each was answered
// with the body's first invalid field (400) instead.
TEST_F(HttpApiTest, WhatARequestActsForIsCheckedBeforeItsBody) {
  ASSERT_TRUE(cp_->CreateTenant(admin_, "t2", std::nullopt).ok());
  const std::string user = tokens_[Role::kUser];
  const std::string tenant_admin = tokens_[Role::kTenantAdmin];
  const auto expect = [&](int status, const std::string& method,
                          const std::string& target, const std::string& bearer,
                          const std::string& body) {
    SCOPED_TRACE(method + " " + target + " " + body);
    const LocalResponse res = Call(method, target, bearer, body);
    EXPECT_EQ(res.status, status) << res.body;
    if (status != 400) {
      EXPECT_FALSE(Body(res).contains("field")) << res.body;
    }
  };
  // Tasks: a user acts for its own tenant only.
  expect(403, "POST", "/api/v1/tasks", user,
         R"({"tenant": "t2", "name": "x", "gpu_memory_mb": 1, "bad": 1})");
  expect(400, "POST", "/api/v1/tasks", user,
         R"({"tenant": "t1", "name": "x", "gpu_memory_mb": 1, "bad": 1})");
  expect(400, "POST", "/api/v1/tasks", user,
         R"({"name": "x", "gpu_memory_mb": 1})");
  // Operator slices: a tenant-admin reserves for its own tenant only.
  expect(403, "POST", "/api/v1/slices", tenant_admin,
         R"({"tenant": "t2", "gpu_memory_mb": 1})");
  expect(400, "POST", "/api/v1/slices", tenant_admin,
         R"({"tenant": "t1", "gpu_memory_mb": 1})");
  // Tokens: a tenant-admin grants user and tenant-admin tokens of its
  // tenant only.
  expect(403, "POST", "/api/v1/tokens", tenant_admin,
         R"({"role": "admin", "description": 5})");
  expect(403, "POST", "/api/v1/tokens", tenant_admin,
         R"({"role": "no-such-role"})");
  expect(403, "POST", "/api/v1/tokens", tenant_admin,
         R"({"role": "user", "tenant": "t2", "description": 5})");
  expect(400, "POST", "/api/v1/tokens", tenant_admin,
         R"({"role": "user", "description": 5})");
  expect(400, "POST", "/api/v1/tokens", tokens_[Role::kAdmin],
         R"({"role": "no-such-role"})");

  // Another tenant's slice is not found, whatever the request says.
  RegisterNodeN1();
  const LocalResponse t2_slice =
      Call("POST", "/api/v1/slices", tokens_[Role::kAdmin],
           R"({"tenant": "t2", "gpu_memory_mb": 1024})");
  ASSERT_EQ(t2_slice.status, 201) << t2_slice.body;
  const std::string path =
      "/api/v1/slices/" + std::to_string(Body(t2_slice)["id"].get<int>());
  const std::string long_reason(1025, 'r');
  expect(404, "PATCH", path, tenant_admin, R"({"gpu_memory_mb": 1})");
  expect(404, "DELETE", path + "?reason=" + long_reason, tenant_admin, "");
  expect(404, "GET", path + "/usage?limit=0", user, "");
  expect(400, "PATCH", path, tokens_[Role::kAdmin], R"({"gpu_memory_mb": 1})");
  expect(400, "GET", path + "/usage?limit=0", tokens_[Role::kAdmin], "");
  expect(400, "DELETE", path + "?reason=" + long_reason, tokens_[Role::kAdmin],
         "");
  // Another tenant's task: the same.
  const LocalResponse t2_task =
      Call("POST", "/api/v1/tasks", tokens_[Role::kAdmin],
           R"({"tenant": "t2", "name": "x", "gpu_memory_mb": 1024,
               "command": "true"})");
  ASSERT_EQ(t2_task.status, 201) << t2_task.body;
  const std::string logs = "/api/v1/tasks/" +
                           std::to_string(Body(t2_task)["id"].get<int>()) +
                           "/logs?offset=x";
  expect(404, "GET", logs, user, "");
  const std::string cancel = "/api/v1/tasks/" +
                             std::to_string(Body(t2_task)["id"].get<int>()) +
                             "/cancel";
  expect(404, "POST", cancel, user, R"({"bad": 1})");
  expect(400, "POST", cancel, tokens_[Role::kAdmin], R"({"bad": 1})");
  expect(403, "GET", "/api/v1/tasks?tenant=t2&limit=0", user, "");
  expect(400, "GET", "/api/v1/tasks?tenant=t1&limit=0", user, "");
  expect(400, "GET", logs, tokens_[Role::kAdmin], "");
  // Nothing was created or changed by the refused requests.
  EXPECT_EQ(Body(Call("GET", path, tokens_[Role::kAdmin]))["memory_mb"], 1024);
}

TEST_F(HttpApiTest, ANodeTokenBoundToAnotherNodeIsRefusedBeforeParsing) {
  const LocalResponse res = Call("POST", "/api/v1/nodes/n2/heartbeat",
                                 tokens_[Role::kNode], "{not json");
  EXPECT_EQ(res.status, 403) << res.body;
  EXPECT_NE(Body(res).value("message", "").find("bound to node 'n1'"),
            std::string::npos)
      << res.body;
  // Its own node: the body is looked at.
  const LocalResponse own = Call("POST", "/api/v1/nodes/n1/heartbeat",
                                 tokens_[Role::kNode], "{not json");
  EXPECT_EQ(own.status, 400) << own.body;

  // A MIG command of another node: refused before its result is read.
  server::NodeReport n2;
  n2.name = "n2";
  ASSERT_TRUE(cp_->RegisterNode(admin_, n2).ok());
  RowId command = 0;
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& txn) -> Status {
                    auto node = txn.FindNode("n2");
                    if (!node.ok()) return node.status();
                    store::SliceRequestRow row;
                    row.node_id = node->id;
                    row.slice_id = 1;
                    row.action = "create";
                    row.profile = "1g.10gb";
                    row.created_at = clock_.NowMillis();
                    row.deadline_at = row.created_at + 60'000;
                    auto inserted = txn.InsertSliceRequest(row);
                    if (!inserted.ok()) return inserted.status();
                    command = inserted->id;
                    return Status::Ok();
                  })
                  .ok());
  const std::string result =
      "/api/v1/slice-requests/" + std::to_string(command) + "/result";
  const LocalResponse other =
      Call("POST", result, tokens_[Role::kNode], "{not json");
  EXPECT_EQ(other.status, 403) << other.body;
  EXPECT_NE(Body(other).value("message", "").find("bound to node 'n1'"),
            std::string::npos)
      << other.body;
  // An admin (no node binding) has its body read.
  EXPECT_EQ(Call("POST", result, tokens_[Role::kAdmin], "{not json").status,
            400);
}

// Every served path with each method it is not served with: 405 naming the
// methods it is served with in Allow (the same set the route table has for
// that path); a path no route serves: 404.
// Whether the route template `path` ("/api/v1/tasks/{id}") serves the
// concrete `target`: segment by segment, a {parameter} taking any one.
bool Serves(const std::string& path, const std::string& target) {
  std::stringstream a(path);
  std::stringstream b(target);
  std::string x;
  std::string y;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, x, '/'));
    const bool more_b = static_cast<bool>(std::getline(b, y, '/'));
    if (more_a != more_b) return false;
    if (!more_a) return true;
    if (x != y && !(x.starts_with("{") && !y.empty())) return false;
  }
}

TEST_F(HttpApiTest, AWrongMethodIs405ListingTheServedOnes) {
  // Each filled path and the methods any route serves it with (the
  // template /api/v1/slices/{id} serves /api/v1/slices/stats too).
  std::map<std::string, std::set<std::string>> served;
  for (const RouteInfo& r : ServedRoutes()) served[Fill(r.path)];
  for (auto& [target, methods] : served) {
    for (const RouteInfo& r : ServedRoutes()) {
      if (Serves(r.path, target)) methods.insert(r.method);
    }
  }
  int checked = 0;
  for (const auto& [path, methods] : served) {
    for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
      if (methods.contains(method)) continue;
      SCOPED_TRACE(std::string(method) + " " + path);
      const LocalResponse res = Call(method, path, tokens_[Role::kAdmin], "{}");
      ASSERT_EQ(res.status, 405) << res.body;
      EXPECT_EQ(Body(res).value("error", ""), "method_not_allowed");
      ASSERT_TRUE(res.headers.contains("Allow")) << res.body;
      std::set<std::string> allow;
      std::stringstream listed(res.headers.at("Allow"));
      for (std::string m; std::getline(listed, m, ',');) {
        allow.insert(m.substr(m.find_first_not_of(' ')));
      }
      EXPECT_EQ(allow, methods) << res.headers.at("Allow");
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  const LocalResponse none =
      Call("PATCH", "/api/v1/no-such-thing", tokens_[Role::kAdmin], "{}");
  EXPECT_EQ(none.status, 404) << none.body;
  EXPECT_EQ(Body(none).value("error", ""), "not_found");
  EXPECT_FALSE(none.headers.contains("Allow"));
}

TEST_F(HttpApiTest, AuthenticationComesBeforeEverythingElse) {
  const LocalResponse res =
      Call("POST", "/api/v1/slices?no_such_parameter=1", "", "{not json");
  EXPECT_EQ(res.status, 401) << res.body;
  const LocalResponse bad =
      Call("GET", "/api/v1/tasks?no_such_parameter=1", "not-a-token");
  EXPECT_EQ(bad.status, 401) << bad.body;
}

// Issue 14: next_cursor is null on the last page, so a client following the
// history could not resume after it. resume_cursor is always set.
TEST_F(HttpApiTest, HistoryResumeCursorFollowsTheLogAsItGrows) {
  RegisterNodeN1();
  const std::string admin = tokens_[Role::kAdmin];
  const auto reserve = [&] {
    const LocalResponse r = Call(
        "POST", "/api/v1/slices", admin,
        R"({"tenant": "t1", "gpu_memory_mb": 1024, "gpu_compute_ratio": 0.1,
                 "reason": "r"})");
    EXPECT_EQ(r.status, 201) << r.body;
  };
  reserve();
  reserve();

  // An empty log read from the start: resume from the start.
  LocalResponse first = Call("GET", "/api/v1/slices/history", admin);
  ASSERT_EQ(first.status, 200) << first.body;
  json page = Body(first);
  ASSERT_EQ(page["items"].size(), 2u) << first.body;
  EXPECT_TRUE(page["next_cursor"].is_null()) << "the last page";
  const std::string resume = page["resume_cursor"].get<std::string>();
  EXPECT_EQ(resume, std::to_string(page["items"][1]["id"].get<int>()));

  // Nothing new: an empty page that resumes where it was asked to.
  LocalResponse idle =
      Call("GET", "/api/v1/slices/history?cursor=" + resume, admin);
  ASSERT_EQ(idle.status, 200) << idle.body;
  EXPECT_TRUE(Body(idle)["items"].empty()) << idle.body;
  EXPECT_EQ(Body(idle)["resume_cursor"], resume);
  EXPECT_TRUE(Body(idle)["next_cursor"].is_null());

  // The log grows: only the new entry.
  reserve();
  LocalResponse grown =
      Call("GET", "/api/v1/slices/history?cursor=" + resume, admin);
  ASSERT_EQ(grown.status, 200) << grown.body;
  page = Body(grown);
  ASSERT_EQ(page["items"].size(), 1u) << grown.body;
  EXPECT_GT(page["items"][0]["id"].get<int>(), std::stoi(resume));
  EXPECT_EQ(page["resume_cursor"],
            std::to_string(page["items"][0]["id"].get<int>()));

  // Paging still ends with next_cursor null; resume_cursor is the last id.
  LocalResponse paged = Call("GET", "/api/v1/slices/history?limit=2", admin);
  page = Body(paged);
  ASSERT_EQ(page["items"].size(), 2u) << paged.body;
  EXPECT_EQ(page["next_cursor"], page["resume_cursor"]) << paged.body;

  // An empty list read from the beginning resumes from the beginning.
  LocalResponse none = Call("GET", "/api/v1/slices/history?task_id=99", admin);
  EXPECT_TRUE(Body(none)["items"].empty()) << none.body;
  EXPECT_EQ(Body(none)["resume_cursor"], "0") << none.body;
  EXPECT_EQ(Call("GET", "/api/v1/slices/history?cursor=0", admin).status, 200);
}

TEST_F(HttpApiTest, EveryPagedListHasAResumeCursor) {
  const std::string admin = tokens_[Role::kAdmin];
  for (const char* list :
       {"/api/v1/tasks", "/api/v1/slices", "/api/v1/slices/history",
        "/api/v1/slice-requests", "/api/v1/tenants", "/api/v1/groups",
        "/api/v1/tokens", "/api/v1/sharing-approvals", "/api/v1/nodes"}) {
    SCOPED_TRACE(list);
    const LocalResponse r = Call("GET", list, admin);
    ASSERT_EQ(r.status, 200) << r.body;
    const json body = Body(r);
    ASSERT_TRUE(body.contains("resume_cursor")) << r.body;
    EXPECT_TRUE(body["resume_cursor"].is_string()) << r.body;
    if (!body["items"].empty() && body["items"].back().contains("id")) {
      EXPECT_EQ(body["resume_cursor"].get<std::string>(),
                body["items"].back()["id"].dump())
          << r.body;
    }
  }
  // The tenants list (in memory): resuming after the last tenant shows the
  // next one created.
  const json tenants = Body(Call("GET", "/api/v1/tenants", admin));
  const std::string resume = tenants["resume_cursor"];
  ASSERT_TRUE(cp_->CreateTenant(admin_, "t2", std::nullopt).ok());
  const json later =
      Body(Call("GET", "/api/v1/tenants?cursor=" + resume, admin));
  ASSERT_EQ(later["items"].size(), 1u) << later.dump();
  EXPECT_EQ(later["items"][0]["name"], "t2");
}

// ------------------------------------------------------ gpu_compute_mode

TEST_F(HttpApiTest, TasksKeepTheirComputeModeAndShowTheDefault) {
  const std::string user = tokens_[Role::kUser];
  const LocalResponse strict = Call(
      "POST", "/api/v1/tasks", user,
      R"({"name": "s", "gpu_compute_ratio": 0.25, "gpu_compute_mode": "strict"})");
  ASSERT_EQ(strict.status, 201) << strict.body;
  EXPECT_EQ(Body(strict)["gpu_compute_mode"], "strict");
  const LocalResponse fallback =
      Call("POST", "/api/v1/tasks", user,
           R"({"name": "d", "gpu_compute_ratio": 0.25})");
  ASSERT_EQ(fallback.status, 201) << fallback.body;
  EXPECT_EQ(Body(fallback)["gpu_compute_mode"], "work-conserving");
  const LocalResponse whole =
      Call("POST", "/api/v1/tasks", user,
           R"({"name": "w", "gpu_required": 1, "gpu_compute_mode": "strict"})");
  ASSERT_EQ(whole.status, 201) << whole.body << " (whole GPUs take it too)";

  const auto get = [&](const LocalResponse& created) {
    return Body(
        Call("GET", "/api/v1/tasks/" + Body(created)["id"].dump(), user));
  };
  EXPECT_EQ(get(strict)["gpu_compute_mode"], "strict");
  EXPECT_EQ(get(fallback)["gpu_compute_mode"], "work-conserving");
  EXPECT_EQ(get(whole)["gpu_compute_mode"], "strict");
  std::map<std::string, std::string> listed;
  const json list = Body(Call("GET", "/api/v1/tasks", user));
  for (const json& t : list["items"]) {
    listed[t["name"]] = t["gpu_compute_mode"];
  }
  EXPECT_EQ(listed,
            (std::map<std::string, std::string>{
                {"d", "work-conserving"}, {"s", "strict"}, {"w", "strict"}}));
}

TEST_F(HttpApiTest, ABadComputeModeIs400NamingTheFieldAndCreatesNothing) {
  const std::string user = tokens_[Role::kUser];
  for (const char* value :
       {R"("fast")", R"("STRICT")", R"("")", "1", "false", R"(["strict"])"}) {
    SCOPED_TRACE(value);
    const LocalResponse r =
        Call("POST", "/api/v1/tasks", user,
             std::string(R"({"name": "bad", "gpu_memory_mb": 1024, )"
                         R"("gpu_compute_mode": )") +
                 value + "}");
    EXPECT_EQ(r.status, 400) << r.body;
    const json body = Body(r);
    EXPECT_EQ(body["error"], "invalid_argument");
    EXPECT_EQ(body["field"], "gpu_compute_mode");
    EXPECT_NE(body["message"].get<std::string>().find(
                  R"(must be "strict" or "work-conserving")"),
              std::string::npos)
        << r.body;
  }
  EXPECT_EQ(Body(Call("GET", "/api/v1/tasks", user))["items"], json::array());
}

// ------------------------------------------------------ Idempotency-Key

constexpr const char* kTask = R"({"name": "once", "gpu_memory_mb": 1024})";

std::map<std::string, std::string> Key(const std::string& key) {
  return {{"Idempotency-Key", key}};
}

TEST_F(HttpApiTest, TaskPostWithAKeyIsDoneOnceAndARepeatGetsTheSameReply) {
  const std::string user = tokens_[Role::kUser];
  const LocalResponse first =
      Call("POST", "/api/v1/tasks", user, kTask, Key("create-once-1"));
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_FALSE(first.headers.contains("Idempotent-Replayed"));
  for (int i = 0; i < 3; ++i) {
    const LocalResponse again =
        Call("POST", "/api/v1/tasks", user, kTask, Key("create-once-1"));
    EXPECT_EQ(again.status, 201) << again.body;
    EXPECT_EQ(again.body, first.body);
    EXPECT_EQ(again.headers.at("Idempotent-Replayed"), "true");
  }
  const json tasks = Body(Call("GET", "/api/v1/tasks", user));
  EXPECT_EQ(tasks["items"].size(), 1u) << tasks.dump();
  // Without a key every POST is a new task.
  EXPECT_EQ(Call("POST", "/api/v1/tasks", user, kTask).status, 201);
  EXPECT_EQ(Body(Call("GET", "/api/v1/tasks", user))["items"].size(), 2u);
}

TEST_F(HttpApiTest, AKeyReusedForAnotherRequestIsRefusedNamingTheHeader) {
  const std::string admin = tokens_[Role::kAdmin];
  ASSERT_EQ(Call("POST", "/api/v1/tasks", admin, kTask, Key("k")).status, 201);
  const LocalResponse other_body =
      Call("POST", "/api/v1/tasks", admin,
           R"({"name": "twice", "gpu_memory_mb": 1024})", Key("k"));
  EXPECT_EQ(other_body.status, 422) << other_body.body;
  EXPECT_EQ(Body(other_body)["error"], "idempotency_key_reused");
  EXPECT_EQ(Body(other_body)["field"], "Idempotency-Key");
  const LocalResponse other_path =
      Call("POST", "/api/v1/tenants", admin, R"({"name": "t9"})", Key("k"));
  EXPECT_EQ(other_path.status, 422) << other_path.body;
  EXPECT_EQ(Body(Call("GET", "/api/v1/tasks", admin))["items"].size(), 1u);
  EXPECT_EQ(Call("GET", "/api/v1/tenants/t9", admin).status, 404)
      << "the refused request did nothing";
}

TEST_F(HttpApiTest, KeysAreScopedToTheCallersToken) {
  const std::string other_user = NewToken(Role::kUser, "t1");
  const LocalResponse a =
      Call("POST", "/api/v1/tasks", tokens_[Role::kUser], kTask, Key("same"));
  const LocalResponse b =
      Call("POST", "/api/v1/tasks", other_user, kTask, Key("same"));
  ASSERT_EQ(a.status, 201) << a.body;
  ASSERT_EQ(b.status, 201) << b.body;
  EXPECT_NE(Body(a)["id"], Body(b)["id"]);
}

TEST_F(HttpApiTest, AMalformedKeyIsRefusedNamingTheHeader) {
  for (const std::string& bad :
       {std::string(), std::string(256, 'k'), std::string("has space"),
        std::string("tab\there"), std::string("caf\xc3\xa9")}) {
    SCOPED_TRACE(bad);
    const LocalResponse r =
        Call("POST", "/api/v1/tasks", tokens_[Role::kUser], kTask, Key(bad));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(Body(r)["field"], "Idempotency-Key") << r.body;
  }
  EXPECT_EQ(Call("POST", "/api/v1/tasks", tokens_[Role::kUser], kTask,
                 Key(std::string(255, 'k')))
                .status,
            201);
  EXPECT_EQ(
      Body(Call("GET", "/api/v1/tasks", tokens_[Role::kUser]))["items"].size(),
      1u);
}

// Every other POST records its reply around the handler: a repeated tenant
// create is not a 409 "already exists", a repeated reservation not a second
// slice.
TEST_F(HttpApiTest, OtherPostsAreDoneOnceToo) {
  const std::string admin = tokens_[Role::kAdmin];
  const LocalResponse tenant =
      Call("POST", "/api/v1/tenants", admin, R"({"name": "t2"})", Key("t-1"));
  ASSERT_EQ(tenant.status, 201) << tenant.body;
  const LocalResponse tenant_again =
      Call("POST", "/api/v1/tenants", admin, R"({"name": "t2"})", Key("t-1"));
  EXPECT_EQ(tenant_again.status, 201) << tenant_again.body;
  EXPECT_EQ(tenant_again.body, tenant.body);

  RegisterNodeN1();
  const std::string reserve =
      R"({"tenant": "t1", "gpu_memory_mb": 1024, "gpu_compute_ratio": 0.1})";
  const LocalResponse slice =
      Call("POST", "/api/v1/slices", admin, reserve, Key("s-1"));
  ASSERT_EQ(slice.status, 201) << slice.body;
  EXPECT_EQ(Call("POST", "/api/v1/slices", admin, reserve, Key("s-1")).body,
            slice.body);
  EXPECT_EQ(Body(Call("GET", "/api/v1/slices", admin))["items"].size(), 1u);

  // A refusal is recorded too: the repeat gets it, even once it would pass.
  const LocalResponse refused =
      Call("POST", "/api/v1/tenants", admin, R"({"name": "t3", "bogus": 1})",
           Key("t-2"));
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(Call("POST", "/api/v1/tenants", admin,
                 R"({"name": "t3", "bogus": 1})", Key("t-2"))
                .body,
            refused.body);
}

// The record of a POST still running (or one that never finished because
// the server stopped between its pending record and its reply).
TEST_F(HttpApiTest, ARepeatOfAnUnfinishedRequestIs409InProgressThenUnknown) {
  const std::string admin = tokens_[Role::kAdmin];
  const std::string body = R"({"name": "t5"})";
  // What Begin records before the handler runs, left behind.
  store::IdempotencyRow pending;
  pending.token_id = admin_.token_id;
  pending.key = "left-behind";
  pending.fingerprint = RequestFingerprint("POST", "/api/v1/tenants", body);
  pending.created_at = clock_.NowMillis();
  pending.expires_at = pending.created_at + 86'400'000;
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& t) {
                    return t.InsertIdempotencyKey(pending);
                  })
                  .ok());
  const LocalResponse running =
      Call("POST", "/api/v1/tenants", admin, body, Key("left-behind"));
  EXPECT_EQ(running.status, 409) << running.body;
  EXPECT_EQ(running.headers.at("Retry-After"), "1");
  EXPECT_NE(Body(running)["message"].get<std::string>().find("still being"),
            std::string::npos);
  clock_.Advance(121'000);
  const LocalResponse unknown =
      Call("POST", "/api/v1/tenants", admin, body, Key("left-behind"));
  EXPECT_EQ(unknown.status, 409) << unknown.body;
  EXPECT_EQ(Body(unknown)["field"], "Idempotency-Key");
  EXPECT_NE(Body(unknown)["message"].get<std::string>().find("unknown"),
            std::string::npos);
  EXPECT_FALSE(unknown.headers.contains("Retry-After"));
  EXPECT_EQ(Call("GET", "/api/v1/tenants/t5", admin).status, 404);
}

// The task and its record commit together; a server that stopped before
// it wrote the reply into the record still answers the repeat with the task,
// and never creates a second one.
TEST_F(HttpApiTest, ATaskWhoseReplyWasNeverRecordedIsFoundByItsRepeat) {
  const std::string user = tokens_[Role::kUser];
  const LocalResponse first =
      Call("POST", "/api/v1/tasks", user, kTask, Key("crash"));
  ASSERT_EQ(first.status, 201) << first.body;
  const auto user_caller = cp_->Authenticate(user);
  ASSERT_TRUE(user_caller.ok());
  // As the transaction left it: status and task, no reply.
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& t) {
                    auto row =
                        t.GetIdempotencyKey(user_caller->token_id, "crash");
                    if (!row.ok()) return row.status();
                    EXPECT_EQ(row->task_id, Body(first)["id"].get<RowId>());
                    row->body.clear();
                    return t.UpdateIdempotencyKey(*row);
                  })
                  .ok());
  const LocalResponse again =
      Call("POST", "/api/v1/tasks", user, kTask, Key("crash"));
  EXPECT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(Body(again)["id"], Body(first)["id"]);
  EXPECT_EQ(again.headers.at("Idempotent-Replayed"), "true");
  EXPECT_EQ(Body(Call("GET", "/api/v1/tasks", user))["items"].size(), 1u);
}

// Repeats racing each other (a client that retries before its first
// attempt answered): one task per key, and every one of them gets it.
TEST_F(HttpApiTest, ConcurrentRepeatsCreateOneTask) {
  const std::string user = tokens_[Role::kUser];
  constexpr int kClients = 16;
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string key = "racing-" + std::to_string(round);
    std::vector<LocalResponse> replies(kClients);
    std::vector<std::thread> threads;
    threads.reserve(kClients);
    std::atomic<int> ready{0};
    for (int i = 0; i < kClients; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kClients) std::this_thread::yield();
        replies[i] = Call("POST", "/api/v1/tasks", user, kTask, Key(key));
      });
    }
    for (std::thread& t : threads) t.join();
    std::set<RowId> ids;
    for (const LocalResponse& r : replies) {
      ASSERT_EQ(r.status, 201) << key << ": " << r.body;
      ids.insert(Body(r)["id"].get<RowId>());
    }
    EXPECT_EQ(ids.size(), 1u) << key;
  }
  EXPECT_EQ(Body(Call("GET", "/api/v1/tasks", user))["items"].size(),
            static_cast<std::size_t>(kRounds));
}

// The records live in the database: another LocalApi, and the server after a
// restart, answer the repeat; once expired the key is new again, and the
// sweep removes expired records.
TEST_F(HttpApiTest, RecordsHoldAcrossRestartsAndExpire) {
  const std::string user = tokens_[Role::kUser];
  const LocalResponse first =
      Call("POST", "/api/v1/tasks", user, kTask, Key("durable"));
  ASSERT_EQ(first.status, 201) << first.body;
  ASSERT_EQ(
      Call("POST", "/api/v1/tasks", user, kTask, Key("short-lived")).status,
      201);

  // A restart: a new store, control plane and API on the same file.
  api_.reset();
  cp_.reset();
  store_.reset();
  auto store = store::sqlite_testing::OpenSqliteStore(dir_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  store_ = std::move(*store);
  auto cp = ControlPlane::Create(store_.get(), &clock_, {});
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  cp_ = std::move(*cp);
  IdempotencyOptions options;
  options.ttl_ms = 3'600'000;
  api_ = std::make_unique<LocalApi>(cp_.get(), &clock_, options);
  const LocalResponse after =
      Call("POST", "/api/v1/tasks", user, kTask, Key("durable"));
  EXPECT_EQ(after.status, 201);
  EXPECT_EQ(after.body, first.body);

  // 24 h later (the default expiry of the first records): a new task.
  clock_.Advance(24LL * 3600 * 1000 + 1);
  const LocalResponse later =
      Call("POST", "/api/v1/tasks", user, kTask, Key("durable"));
  ASSERT_EQ(later.status, 201) << later.body;
  EXPECT_NE(Body(later)["id"], Body(first)["id"]);
  // ...and the sweep that ran first removed the other expired record.
  const auto caller = cp_->Authenticate(user);
  ASSERT_TRUE(caller.ok());
  const Status gone = store_->Read([&](store::Txn& t) {
    return t.GetIdempotencyKey(caller->token_id, "short-lived").status();
  });
  EXPECT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
}

TEST_F(HttpApiTest, KeysOnOtherMethodsAreIgnored) {
  const std::string admin = tokens_[Role::kAdmin];
  const LocalResponse a =
      Call("GET", "/api/v1/whoami", admin, "", Key("has space"));
  EXPECT_EQ(a.status, 200) << a.body;
}

// The agent's proof that the hook runs in every process of a task that
// uses the GPU reaches the API: a process without it takes "hook" out of
// the slice's enforcement, and the slice, the task and the history say why.
TEST_F(HttpApiTest, ATaskRunningWithoutTheHookSaysWhyOnItsSliceAndItself) {
  const std::string node = tokens_[Role::kNode];
  const json gpu = {{"index", 0},           {"uuid", "GPU-aaaa"},
                    {"vendor", "nvidia"},   {"model", "NVIDIA A100-SXM4-80GB"},
                    {"memory_mb", 81920},   {"compute_capability", "8.0"},
                    {"mig_capable", false}, {"mps_capable", false},
                    {"health", "ok"}};
  json report = {{"containerized", false},  {"hook_available", true},
                 {"cpu_milli", 64000},      {"host_memory_mb", 262144},
                 {"agent_version", "test"}, {"gpus", {gpu}}};
  json registration = report;
  registration["node_id"] = "n1";
  LocalResponse res =
      Call("POST", "/api/v1/nodes/register", node, registration.dump());
  ASSERT_EQ(res.status, 200) << res.body;
  res = Call("POST", "/api/v1/tasks", tokens_[Role::kUser],
             R"({"name": "train", "command": "train", "gpu_memory_mb": 4096,)"
             R"( "gpu_compute_ratio": 0.5})");
  ASSERT_EQ(res.status, 201) << res.body;
  const std::int64_t task = Body(res)["id"];
  ASSERT_TRUE(cp_->BindPendingOnce().ok());
  res = Call("GET", "/api/v1/tasks/" + std::to_string(task), kAdminSecret);
  const std::int64_t slice = Body(res)["slice_id"];
  res = Call(
      "POST", "/api/v1/nodes/n1/task-states", node,
      json{{"states",
            {{{"task_id", task}, {"slice_id", slice}, {"state", "running"}}}}}
          .dump());
  ASSERT_EQ(res.status, 200) << res.body;
  const auto heartbeat = [&](const json& hook) {
    json body = report;
    body["tasks"] = {{{"task_id", task},
                      {"state", "running"},
                      {"gpu_indices", {0}},
                      {"hook", hook}}};
    const LocalResponse r =
        Call("POST", "/api/v1/nodes/n1/heartbeat", node, body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
  };
  const auto get = [&](const std::string& what, std::int64_t id) {
    return Body(Call("GET", "/api/v1/" + what + "/" + std::to_string(id),
                     kAdminSecret));
  };
  heartbeat({{"attached", true}, {"attaches", 1}, {"driver_bytes", 1 << 20}});
  EXPECT_EQ(get("slices", slice)["enforcement"], json::array({"hook"}));
  EXPECT_EQ(get("slices", slice)["enforcement_note"], nullptr);
  EXPECT_EQ(get("slices", slice)["hook"]["driver_bytes"], 1 << 20);
  EXPECT_EQ(get("slices", slice)["hook"]["share_achieved_percent"], nullptr);
  heartbeat({{"attached", true},
             {"attaches", 1},
             {"driver_bytes", 1 << 20},
             {"share_achieved_percent", 24.5}});
  EXPECT_EQ(get("slices", slice)["hook"]["share_achieved_percent"], 24.5);
  EXPECT_EQ(get("tasks", task)["enforcement_note"], nullptr);

  const std::string why = "process 4242 runs without the hook: glibc too old?";
  heartbeat({{"attached", true},
             {"attaches", 1},
             {"unhooked_pids", {4242}},
             {"unhooked_reason", why}});
  const json lost = get("slices", slice);
  EXPECT_EQ(lost["enforcement"], json::array());
  EXPECT_EQ(lost["enforcement_note"], why);
  EXPECT_EQ(lost["hook"]["unhooked_pids"], json::array({4242}));
  EXPECT_EQ(get("tasks", task)["enforcement_note"], why);
  const json history =
      Body(Call("GET", "/api/v1/slices/history?task_id=" + std::to_string(task),
                kAdminSecret));
  bool said = false;
  for (const json& h : history["items"]) {
    said |= h["op"] == "hook_lost" &&
            h["reason"].get<std::string>().find(why) != std::string::npos;
  }
  EXPECT_TRUE(said) << history.dump();

  heartbeat({{"attached", true}, {"attaches", 2}});
  EXPECT_EQ(get("slices", slice)["enforcement"], json::array({"hook"}));
  EXPECT_EQ(get("slices", slice)["enforcement_note"], nullptr);
  EXPECT_EQ(get("tasks", task)["enforcement_note"], nullptr);
}

}  // namespace
}  // namespace hf::api
