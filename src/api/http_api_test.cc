// The HTTP layer served in-process (LocalApi) on a real ControlPlane and a
// real SQLite store in a temporary directory: who may call which route,
// checked before anything the caller sent is parsed.
#include "api/http_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"

namespace hf::api {
namespace {

using nlohmann::json;
using server::Caller;
using server::ControlPlane;
using store::Role;

constexpr const char* kAdminSecret = "admin-secret-for-the-api-test";

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hf-http-api-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto store = store::OpenStore("sqlite:" + (dir_ / "hf.db").string());
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
    std::filesystem::remove_all(dir_);
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

  static json Body(const LocalResponse& r) {
    return json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  }

  FakeClock clock_{1'700'000'000'000};
  std::filesystem::path dir_;
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
        {{"GET", "/metrics"}, public_route},
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
        {{"PATCH", "/api/v1/slices/{id}"}, tenant_admins},
        {{"DELETE", "/api/v1/slices/{id}"}, tenant_admins},
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
        {{"POST", "/api/v1/nodes/register"}, agents},
        {{"POST", "/api/v1/nodes/{node}/heartbeat"}, agents},
        {{"GET", "/api/v1/nodes/{node}/assignments"}, agents},
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
  server::NodeReport node;
  node.name = "n1";
  server::GpuReport gpu;
  gpu.uuid = "GPU-0";
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  gpu.cc_major = 8;
  node.gpus.push_back(gpu);
  ASSERT_TRUE(cp_->RegisterNode(admin_, node).ok());
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

}  // namespace
}  // namespace hf::api
