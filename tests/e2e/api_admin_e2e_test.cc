// End-to-end tests of identity and administration (docs/CONTRACT.md section 7,
// docs/API.md "Identity", "Tenants, groups, tokens", "Operations") through
// the real hf-server binary: authentication failures, role checks, whoami,
// tenants, groups, tokens (secret shown once, revocation), and the public
// endpoints (/healthz, /api/v1/openapi.json, the console at /; /metrics
// needs a token).
//
// One server is shared by the suite; each test makes its own tenants.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

class AdminApiTest : public ::testing::Test {
 protected:
  static SharedServer& shared() {
    static SharedServer s;
    return s;
  }
  static void SetUpTestSuite() { shared().Start(); }
  static void TearDownTestSuite() { shared().Reset(); }
  void SetUp() override {
    ASSERT_TRUE(shared().ok()) << shared().why();
    api_ = std::make_unique<Api>(shared().server());
  }
  const HttpClient& http() const { return api_->http(); }
  const std::string& admin() const { return api_->admin(); }

  std::unique_ptr<Api> api_;
};

// ------------------------------------------------------------------ auth

TEST_F(AdminApiTest, MissingOrBadTokensAre401WithJson) {
  for (const char* path :
       {"/api/v1/whoami", "/api/v1/tasks", "/api/v1/slices",
        "/api/v1/slices/stats", "/api/v1/tenants", "/api/v1/nodes"}) {
    HttpReply none = http().Get(path);
    EXPECT_TRUE(IsApiError(none, 401, "unauthenticated")) << path;
    EXPECT_EQ(none.www_authenticate, "Bearer") << path;
    EXPECT_TRUE(
        IsApiError(http().Get(path, "hf_not_a_token"), 401, "unauthenticated"))
        << path;
  }
  // Other schemes are no Bearer token.
  HttpReply basic = http().Send("GET", "/api/v1/whoami", "", "",
                                {{"Authorization", "Basic " + admin()}});
  EXPECT_TRUE(IsApiError(basic, 401, "unauthenticated"));
  // The scheme is case-insensitive.
  HttpReply lower = http().Send("GET", "/api/v1/whoami", "", "",
                                {{"Authorization", "bearer " + admin()}});
  EXPECT_TRUE(HasStatus(lower, 200));
  // A POST without a token is refused before its body is looked at.
  EXPECT_TRUE(IsApiError(http().PostRaw("/api/v1/tasks", "not json"), 401,
                         "unauthenticated"));
}

// `curl -X POST .../cancel` sends no body and no Content-Length: the route
// answers (its token check first), where the HTTP library alone said 400.
TEST_F(AdminApiTest, APostWithoutALengthHasAnEmptyBody) {
  const std::string tenant = api_->NewTenant();
  const std::string user = api_->CreateToken("user", tenant);
  ASSERT_FALSE(user.empty());
  EXPECT_TRUE(IsApiError(http().SendBare("POST", "/api/v1/tasks/1/cancel"), 401,
                         "unauthenticated"));
  EXPECT_TRUE(
      IsApiError(http().SendBare("POST", "/api/v1/tasks/999999/cancel", user),
                 404, "not_found"));
  // More whole GPUs than the suite's server has: it stays pending, so it
  // holds no slice the suite's other tests would meet.
  const json task = api_->CreateTask(
      {{"name", "bare"}, {"gpu_required", 64}, {"command", "sleep 60"}}, user);
  ASSERT_FALSE(task.is_null());
  const std::string cancel = "/api/v1/tasks/" +
                             std::to_string(task["id"].get<std::int64_t>()) +
                             "/cancel";
  const HttpReply cancelled = http().SendBare("POST", cancel, user);
  ASSERT_TRUE(HasStatus(cancelled, 200)) << cancelled.Describe();
  EXPECT_EQ(cancelled.body["id"], task["id"]);
  // A POST whose body is required still says which.
  EXPECT_TRUE(
      IsInvalid(http().SendBare("POST", "/api/v1/tenants", admin()), "body"));
}

// A path served with other methods: 405 with Allow; an unknown path: 404.
TEST_F(AdminApiTest, AWrongMethodIs405WithAllow) {
  const HttpReply patch =
      http().Send("PATCH", "/api/v1/tenants", "{}", admin());
  EXPECT_TRUE(IsApiError(patch, 405, "method_not_allowed"));
  EXPECT_EQ(patch.allow, "POST, GET");
  const HttpReply bare = http().SendBare("DELETE", "/api/v1/tasks/1/cancel");
  EXPECT_TRUE(IsApiError(bare, 405, "method_not_allowed"));
  EXPECT_EQ(bare.allow, "POST");
  EXPECT_TRUE(IsApiError(http().Send("GET", "/api/v1/no-such", "", admin()),
                         404, "not_found"));
}

TEST_F(AdminApiTest, WhoamiForEachRole) {
  const std::string tenant = api_->NewTenant("who");
  HttpReply a = http().Get("/api/v1/whoami", admin());
  ASSERT_TRUE(HasStatus(a, 200));
  EXPECT_EQ(a.body["role"], "admin");
  EXPECT_TRUE(a.body["tenant"].is_null());
  EXPECT_TRUE(a.body["token_id"].is_number_integer());
  for (const std::string role : {"tenant-admin", "user"}) {
    json created;
    const std::string token = api_->CreateToken(role, tenant, "", &created);
    HttpReply r = http().Get("/api/v1/whoami", token);
    ASSERT_TRUE(HasStatus(r, 200));
    EXPECT_EQ(r.body["role"], role);
    EXPECT_EQ(r.body["tenant"], tenant);
    EXPECT_EQ(r.body["token_id"], created["id"]);
  }
  const std::string node = api_->CreateToken("node", std::nullopt);
  HttpReply n = http().Get("/api/v1/whoami", node);
  ASSERT_TRUE(HasStatus(n, 200));
  EXPECT_EQ(n.body["role"], "node");
  EXPECT_TRUE(n.body["tenant"].is_null());
}

TEST_F(AdminApiTest, RoleChecksAre403) {
  const std::string tenant = api_->NewTenant("roles");
  const std::string user = api_->CreateToken("user", tenant);
  const std::string tadmin = api_->CreateToken("tenant-admin", tenant);
  const std::string node = api_->CreateToken("node", std::nullopt);
  struct Call {
    std::string method;
    std::string path;
    json body;
  };
  const std::vector<Call> admin_only = {
      {"POST", "/api/v1/tenants", {{"name", UniqueName("x")}}},
      {"GET", "/api/v1/tenants/" + tenant + "x", nullptr},
      {"PATCH", "/api/v1/tenants/" + tenant, {{"shared_group", "g"}}},
      {"POST", "/api/v1/groups", {{"name", UniqueName("g")}}},
      {"GET", "/api/v1/groups", nullptr},
      {"DELETE", "/api/v1/groups/nope", nullptr},
      {"GET", "/api/v1/nodes", nullptr},
      {"GET", "/api/v1/nodes/n1", nullptr},
      {"GET", "/api/v1/slice-requests", nullptr},
  };
  for (const std::string& token : {user, tadmin, node}) {
    for (const Call& c : admin_only) {
      HttpReply r = http().Send(c.method, c.path,
                                c.body.is_null() ? "" : c.body.dump(), token);
      // Reading another tenant may also answer 404 (it does not exist for
      // the caller); writing and admin lists are 403.
      if (c.method == "GET" && c.path.starts_with("/api/v1/tenants/")) {
        EXPECT_TRUE(r.status == 403 || r.status == 404) << r.Describe();
        continue;
      }
      EXPECT_TRUE(IsApiError(r, 403, "permission_denied"))
          << c.method << " " << c.path;
    }
  }
  // Users: no tokens, no slices writes.
  EXPECT_TRUE(
      IsApiError(http().Post("/api/v1/tokens",
                             {{"role", "user"}, {"tenant", tenant}}, user),
                 403, "permission_denied"));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/tokens", user), 403, "permission_denied"));
  EXPECT_TRUE(IsApiError(
      http().Post("/api/v1/slices",
                  {{"gpu_memory_mb", 1024}, {"tenant", tenant}}, user),
      403, "permission_denied"));
  EXPECT_TRUE(IsApiError(http().Delete("/api/v1/slices/1", user), 403,
                         "permission_denied"));
  // Users and tenant-admins are no agents.
  for (const std::string& token : {user, tadmin}) {
    EXPECT_TRUE(IsApiError(
        http().Post("/api/v1/nodes/register",
                    {{"node_id", "evil"}, {"gpus", json::array()}}, token),
        403, "permission_denied"));
    EXPECT_TRUE(IsApiError(
        http().Post("/api/v1/slice-requests/1/result", {{"ok", true}}, token),
        403, "permission_denied"));
  }
}

// --------------------------------------------------------------- tenants

TEST_F(AdminApiTest, Tenants) {
  const std::string name = UniqueName("acme");
  const std::string group = UniqueName("labs");
  HttpReply created = http().Post(
      "/api/v1/tenants", {{"name", name}, {"shared_group", group}}, admin());
  ASSERT_TRUE(HasStatus(created, 201));
  EXPECT_EQ(created.body["name"], name);
  EXPECT_EQ(created.body["shared_group"], group);
  EXPECT_TRUE(created.body["created_at"].is_string());
  // The group was created with it.
  json groups = api_->ListAll("/api/v1/groups", admin());
  bool found = false;
  for (const json& g : groups) {
    if (g["name"] == group) {
      found = true;
      EXPECT_EQ(g["tenants"], json({name}));
    }
  }
  EXPECT_TRUE(found) << groups.dump();

  EXPECT_TRUE(
      IsApiError(http().Post("/api/v1/tenants", {{"name", name}}, admin()), 409,
                 "conflict"));
  for (const json& bad : {json("Acme"), json("-x"), json(""), json("a b"),
                          json(std::string(64, 'a')), json(7)}) {
    EXPECT_TRUE(IsInvalid(
        http().Post("/api/v1/tenants", {{"name", bad}}, admin()), "name"))
        << bad.dump();
  }
  EXPECT_TRUE(HasStatus(
      http().Post("/api/v1/tenants", {{"name", UniqueName("a.b_c")}}, admin()),
      201));
  EXPECT_TRUE(
      IsInvalid(http().Post("/api/v1/tenants",
                            {{"name", UniqueName("y")}, {"x", 1}}, admin()),
                "x"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/tenants",
                  {{"name", UniqueName("y")}, {"shared_group", "Bad Group"}},
                  admin()),
      "shared_group"));

  HttpReply got = http().Get("/api/v1/tenants/" + name, admin());
  ASSERT_TRUE(HasStatus(got, 200));
  EXPECT_EQ(got.body, created.body);
  EXPECT_TRUE(IsApiError(http().Get("/api/v1/tenants/no-such", admin()), 404,
                         "not_found"));
  json all = api_->ListAll("/api/v1/tenants", admin());
  bool listed = false;
  bool has_default = false;
  for (const json& t : all) {
    listed = listed || t["name"] == name;
    has_default = has_default || t["name"] == "default";
  }
  EXPECT_TRUE(listed);
  EXPECT_TRUE(has_default);

  // PATCH: move to another (new) group, then out of any group.
  const std::string other = UniqueName("other");
  HttpReply moved = http().Patch("/api/v1/tenants/" + name,
                                 {{"shared_group", other}}, admin());
  ASSERT_TRUE(HasStatus(moved, 200));
  EXPECT_EQ(moved.body["shared_group"], other);
  EXPECT_EQ(http().Get("/api/v1/tenants/" + name, admin()).body["shared_group"],
            other);
  HttpReply none = http().Patch("/api/v1/tenants/" + name,
                                {{"shared_group", nullptr}}, admin());
  ASSERT_TRUE(HasStatus(none, 200));
  EXPECT_TRUE(none.body["shared_group"].is_null());
  EXPECT_TRUE(IsInvalid(
      http().Patch("/api/v1/tenants/" + name, json::object(), admin()),
      "shared_group"));
  EXPECT_TRUE(IsInvalid(
      http().Patch("/api/v1/tenants/" + name, {{"shared_group", 3}}, admin()),
      "shared_group"));
  EXPECT_TRUE(IsApiError(http().Patch("/api/v1/tenants/no-such",
                                      {{"shared_group", nullptr}}, admin()),
                         404, "not_found"));

  // A tenant's own members see their tenant and only it.
  const std::string user = api_->CreateToken("user", name);
  HttpReply mine = http().Get("/api/v1/tenants", user);
  ASSERT_TRUE(HasStatus(mine, 200));
  ASSERT_EQ(mine.body["items"].size(), 1u) << mine.raw;
  EXPECT_EQ(mine.body["items"][0]["name"], name);
  EXPECT_TRUE(HasStatus(http().Get("/api/v1/tenants/" + name, user), 200));
  EXPECT_TRUE(IsApiError(http().Get("/api/v1/tenants/default", user), 404,
                         "not_found"));
}

TEST_F(AdminApiTest, Groups) {
  const std::string group = UniqueName("grp");
  HttpReply created = http().Post("/api/v1/groups", {{"name", group}}, admin());
  ASSERT_TRUE(HasStatus(created, 201));
  EXPECT_EQ(created.body["name"], group);
  EXPECT_EQ(created.body["tenants"], json::array());
  EXPECT_TRUE(
      IsApiError(http().Post("/api/v1/groups", {{"name", group}}, admin()), 409,
                 "conflict"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/groups", {{"name", "UPPER"}}, admin()), "name"));
  EXPECT_TRUE(IsInvalid(http().Post("/api/v1/groups", json::object(), admin()),
                        "name"));
  const std::string a = api_->NewTenant("ga", group);
  const std::string b = api_->NewTenant("gb", group);
  json groups = api_->ListAll("/api/v1/groups", admin());
  json members;
  for (const json& g : groups) {
    if (g["name"] == group) members = g["tenants"];
  }
  EXPECT_EQ(members, json({a, b})) << groups.dump();

  HttpReply deleted = http().Delete("/api/v1/groups/" + group, admin());
  ASSERT_TRUE(HasStatus(deleted, 200));
  EXPECT_TRUE(IsApiError(http().Delete("/api/v1/groups/" + group, admin()), 404,
                         "not_found"));
  // Its tenants are in no group now.
  EXPECT_TRUE(http()
                  .Get("/api/v1/tenants/" + a, admin())
                  .body["shared_group"]
                  .is_null())
      << http().Get("/api/v1/tenants/" + a, admin()).raw;
  for (const json& g : api_->ListAll("/api/v1/groups", admin())) {
    EXPECT_NE(g["name"], group);
  }
  // The name can be used again.
  EXPECT_TRUE(HasStatus(
      http().Post("/api/v1/groups", {{"name", group}}, admin()), 201));
}

// ---------------------------------------------------------------- tokens

TEST_F(AdminApiTest, TokensSecretOnceListRevoke) {
  const std::string tenant = api_->NewTenant("tok");
  json created;
  const std::string secret = api_->CreateToken("user", tenant, "", &created);
  ASSERT_FALSE(secret.empty());
  EXPECT_EQ(created["role"], "user");
  EXPECT_EQ(created["tenant"], tenant);
  EXPECT_EQ(created["description"], "e2e user");
  EXPECT_TRUE(created["revoked_at"].is_null());
  const std::int64_t id = created["id"].get<std::int64_t>();

  json tokens = api_->ListAll("/api/v1/tokens", admin());
  bool listed = false;
  for (const json& t : tokens) {
    EXPECT_FALSE(t.contains("token")) << t.dump();
    EXPECT_FALSE(t.contains("hash")) << t.dump();
    if (t["id"] == id) listed = true;
  }
  EXPECT_TRUE(listed);
  EXPECT_FALSE(JsonMentions(tokens, secret));

  ASSERT_TRUE(HasStatus(http().Get("/api/v1/whoami", secret), 200));
  HttpReply revoked =
      http().Delete("/api/v1/tokens/" + std::to_string(id), admin());
  ASSERT_TRUE(HasStatus(revoked, 200));
  EXPECT_TRUE(revoked.body["revoked_at"].is_string()) << revoked.raw;
  EXPECT_FALSE(revoked.body.contains("token"));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/whoami", secret), 401, "unauthenticated"));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/tasks", secret), 401, "unauthenticated"));
  EXPECT_TRUE(IsApiError(http().Delete("/api/v1/tokens/999999", admin()), 404,
                         "not_found"));

  // Validation.
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/tokens", {{"role", "root"}}, admin()), "role"));
  EXPECT_TRUE(IsInvalid(http().Post("/api/v1/tokens", json::object(), admin()),
                        "role"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/tokens", {{"role", "user"}}, admin()), "tenant"));
  EXPECT_TRUE(
      IsInvalid(http().Post("/api/v1/tokens",
                            {{"role", "node"}, {"tenant", tenant}}, admin()),
                "tenant"));
  EXPECT_TRUE(
      IsInvalid(http().Post("/api/v1/tokens",
                            {{"role", "user"}, {"tenant", "no-such"}}, admin()),
                "tenant"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/tokens",
                  {{"role", "user"}, {"tenant", tenant}, {"scope", "all"}},
                  admin()),
      "scope"));
}

TEST_F(AdminApiTest, NodeTokenBoundToOneNode) {
  const std::string node = UniqueName("bound");
  HttpReply created = http().Post("/api/v1/tokens",
                                  {{"role", "node"}, {"node", node}}, admin());
  ASSERT_TRUE(HasStatus(created, 201));
  EXPECT_EQ(created.body["node"], node);
  const std::string token = created.body["token"].get<std::string>();
  const json report = {{"node_id", node}, {"gpus", json::array()}};
  EXPECT_TRUE(
      HasStatus(http().Post("/api/v1/nodes/register", report, token), 200));
  json other = report;
  other["node_id"] = node + "-other";
  EXPECT_TRUE(IsApiError(http().Post("/api/v1/nodes/register", other, token),
                         403, "permission_denied"));
  EXPECT_TRUE(IsApiError(
      http().Get("/api/v1/nodes/" + node + "-other/assignments", token), 403,
      "permission_denied"));
  EXPECT_TRUE(HasStatus(
      http().Get("/api/v1/nodes/" + node + "/assignments", token), 200));
  // Only node tokens are bound, and only to a valid node name.
  const std::string tenant = api_->NewTenant("bind");
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/tokens",
                  {{"role", "user"}, {"tenant", tenant}, {"node", node}},
                  admin()),
      "node"));
  EXPECT_TRUE(
      IsInvalid(http().Post("/api/v1/tokens",
                            {{"role", "node"}, {"node", "Bad Name"}}, admin()),
                "node"));
}

TEST_F(AdminApiTest, SharingApprovals) {
  const std::string a = api_->NewTenant("appr-a");
  const std::string b = api_->NewTenant("appr-b");
  const json body = {{"tenant_a", a},
                     {"tenant_b", b},
                     {"reason", "joint benchmark"},
                     {"ttl_s", 3600}};
  HttpReply created = http().Post("/api/v1/sharing-approvals", body, admin());
  ASSERT_TRUE(HasStatus(created, 201));
  EXPECT_EQ(created.body["reason"], "joint benchmark");
  EXPECT_EQ(created.body["active"], true);
  EXPECT_TRUE(created.body["expires_at"].is_string());
  EXPECT_TRUE(created.body["revoked_at"].is_null());
  const std::int64_t id = created.body["id"].get<std::int64_t>();
  // Names come back whatever order they were given in.
  EXPECT_TRUE(
      (created.body["tenant_a"] == a && created.body["tenant_b"] == b) ||
      (created.body["tenant_a"] == b && created.body["tenant_b"] == a));

  // Admin only.
  const std::string user = api_->CreateToken("user", a);
  EXPECT_TRUE(IsApiError(http().Post("/api/v1/sharing-approvals", body, user),
                         403, "permission_denied"));
  EXPECT_TRUE(IsApiError(http().Get("/api/v1/sharing-approvals", user), 403,
                         "permission_denied"));

  // Validation names the field.
  const auto without = [&](const char* field) {
    json j = body;
    j.erase(field);
    return j;
  };
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", without("reason"), admin()),
      "reason"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", without("tenant_b"), admin()),
      "tenant_b"));
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", without("ttl_s"), admin()),
      "expires_at"));
  json past = without("ttl_s");
  past["expires_at"] = "2001-01-01T00:00:00Z";
  EXPECT_TRUE(IsInvalid(http().Post("/api/v1/sharing-approvals", past, admin()),
                        "expires_at"));
  json garbled = without("ttl_s");
  garbled["expires_at"] = "tomorrow";
  EXPECT_TRUE(
      IsInvalid(http().Post("/api/v1/sharing-approvals", garbled, admin()),
                "expires_at"));
  json future = without("ttl_s");
  future["expires_at"] = "2099-01-01T00:00:00+02:00";  // over a year ahead
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", future, admin()), "expires_at"));
  json same = body;
  same["tenant_b"] = a;
  EXPECT_TRUE(IsInvalid(http().Post("/api/v1/sharing-approvals", same, admin()),
                        "tenant_b"));
  json unknown = body;
  unknown["tenant_b"] = "no-such-tenant";
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", unknown, admin()), "tenant_b"));
  json extra = body;
  extra["scope"] = "all";
  EXPECT_TRUE(IsInvalid(
      http().Post("/api/v1/sharing-approvals", extra, admin()), "scope"));

  // Listed; revoked (idempotently); then listed as inactive.
  bool listed = false;
  for (const json& r : api_->ListAll("/api/v1/sharing-approvals", admin())) {
    if (r["id"] == id) listed = r["active"] == true;
  }
  EXPECT_TRUE(listed);
  const std::string path = "/api/v1/sharing-approvals/" + std::to_string(id);
  HttpReply revoked = http().Delete(path, admin());
  ASSERT_TRUE(HasStatus(revoked, 200));
  EXPECT_EQ(revoked.body["active"], false);
  EXPECT_TRUE(revoked.body["revoked_at"].is_string());
  EXPECT_TRUE(HasStatus(http().Delete(path, admin()), 200));
  EXPECT_TRUE(
      IsApiError(http().Delete("/api/v1/sharing-approvals/999999", admin()),
                 404, "not_found"));
}

// The whole server: an operator's slice shares another tenant's GPU only
// while their approval is in force; once it has expired the same request
// is refused, whether or not anything else has noticed the expiry yet.
TEST_F(AdminApiTest, AnOperatorSliceSharesAGpuOnlyUnderAnApprovalInForce) {
  const std::string a = api_->NewTenant("opsh-a");
  const std::string b = api_->NewTenant("opsh-b");
  SimNode node(*api_, UniqueName("opsh"), {SimGpu{}});
  ASSERT_TRUE(node.Register());
  const auto reserve = [&](const std::string& tenant) {
    return http().Post("/api/v1/slices",
                       {{"tenant", tenant},
                        {"node_id", node.name()},
                        {"gpu_memory_mb", 1024},
                        {"gpu_compute_ratio", 0.05},
                        {"reason", "sharing check"}},
                       admin());
  };
  ASSERT_TRUE(HasStatus(reserve(a), 201));
  EXPECT_TRUE(IsApiError(reserve(b), 409, "conflict"));  // no approval yet
  ASSERT_TRUE(HasStatus(http().Post("/api/v1/sharing-approvals",
                                    {{"tenant_a", a},
                                     {"tenant_b", b},
                                     {"reason", "pairing"},
                                     {"ttl_s", 3}},
                                    admin()),
                        201));
  ASSERT_TRUE(HasStatus(reserve(b), 201));
  std::this_thread::sleep_for(std::chrono::milliseconds(3'100));
  EXPECT_TRUE(IsApiError(reserve(b), 409, "conflict"));
}

TEST_F(AdminApiTest, TenantAdminManagesItsOwnTenantsTokensOnly) {
  const std::string tenant = api_->NewTenant("ta");
  const std::string other = api_->NewTenant("ta-other");
  const std::string tadmin = api_->CreateToken("tenant-admin", tenant);
  // Its own tenant, with or without naming it.
  json created;
  const std::string user = api_->CreateToken("user", tenant, tadmin, &created);
  ASSERT_FALSE(user.empty());
  EXPECT_EQ(created["tenant"], tenant);
  HttpReply unnamed = http().Post("/api/v1/tokens", {{"role", "user"}}, tadmin);
  ASSERT_TRUE(HasStatus(unnamed, 201));
  EXPECT_EQ(unnamed.body["tenant"], tenant);
  EXPECT_TRUE(HasStatus(
      http().Post("/api/v1/tokens", {{"role", "tenant-admin"}}, tadmin), 201));
  // Never another tenant, never admin or node tokens.
  EXPECT_TRUE(
      IsApiError(http().Post("/api/v1/tokens",
                             {{"role", "user"}, {"tenant", other}}, tadmin),
                 403, "permission_denied"));
  for (const char* role : {"admin", "node"}) {
    EXPECT_TRUE(
        IsApiError(http().Post("/api/v1/tokens", {{"role", role}}, tadmin), 403,
                   "permission_denied"))
        << role;
  }
  // It lists only its tenant's tokens and revokes only those.
  const std::string other_user = api_->CreateToken("user", other);
  json other_created;
  api_->CreateToken("user", other, "", &other_created);
  HttpReply list = http().Get("/api/v1/tokens?limit=1000", tadmin);
  ASSERT_TRUE(HasStatus(list, 200));
  for (const json& t : list.body["items"]) {
    EXPECT_EQ(t["tenant"], tenant) << t.dump();
  }
  EXPECT_TRUE(IsApiError(
      http().Delete("/api/v1/tokens/" + other_created["id"].dump(), tadmin),
      404, "not_found"));
  EXPECT_TRUE(HasStatus(http().Get("/api/v1/whoami", other_user), 200));
  EXPECT_TRUE(HasStatus(
      http().Delete("/api/v1/tokens/" + created["id"].dump(), tadmin), 200));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/whoami", user), 401, "unauthenticated"));
}

// ---------------------------------------------------------------- public

TEST_F(AdminApiTest, PublicEndpointsNeedNoToken) {
  HttpReply health = http().Get("/healthz");
  ASSERT_TRUE(HasStatus(health, 200));
  EXPECT_EQ(health.body, json({{"ok", true}}));

  // /metrics is not public: cluster-wide numbers need an admin or metrics
  // token (docs/METRICS.md; tests/e2e/metrics_e2e_test.cc has the rest).
  EXPECT_EQ(http().Get("/metrics").status, 401);
  HttpReply metrics = http().Get("/metrics", admin());
  ASSERT_TRUE(HasStatus(metrics, 200));
  EXPECT_NE(metrics.content_type.find("text/plain"), std::string::npos)
      << metrics.content_type;
  EXPECT_NE(metrics.raw.find("# TYPE heteroflow_slices gauge"),
            std::string::npos)
      << metrics.raw;
  EXPECT_NE(metrics.raw.find("heteroflow_pending_tasks{reason=\"not_tried\"} "),
            std::string::npos)
      << metrics.raw;

  HttpReply openapi = http().Get("/api/v1/openapi.json");
  ASSERT_TRUE(HasStatus(openapi, 200));
  ASSERT_TRUE(openapi.body.is_object()) << openapi.raw.substr(0, 200);
  EXPECT_EQ(openapi.body.value("openapi", "").substr(0, 2), "3.")
      << openapi.raw.substr(0, 200);
  ASSERT_TRUE(openapi.body.contains("paths"));
  for (const char* path :
       {"/api/v1/tasks", "/api/v1/tasks/{id}", "/api/v1/slices",
        "/api/v1/slices/stats", "/api/v1/nodes/register", "/healthz"}) {
    EXPECT_TRUE(openapi.body["paths"].contains(path)) << path;
  }
}

// The web console's files are served at / (and only where they exist:
// every API path still reaches the API); without a built console, / says
// how to get one.
TEST_F(AdminApiTest, TheConsoleIsServedAtTheRootAndTheApiStaysJson) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("hf-console-" + std::to_string(::getpid()));
  fs::create_directories(dir / "assets");
  std::ofstream(dir / "index.html") << "<!doctype html><p>console-marker</p>";
  std::ofstream(dir / "assets" / "app.js") << "console.log('hi');";

  ServerProcess with({.flags = {"--console-dir", dir.string()}});
  ASSERT_TRUE(with.Start());
  HttpClient http = with.client();
  HttpReply index = http.Get("/");
  ASSERT_TRUE(HasStatus(index, 200));
  EXPECT_NE(index.raw.find("console-marker"), std::string::npos) << index.raw;
  EXPECT_NE(index.content_type.find("text/html"), std::string::npos);
  HttpReply script = http.Get("/assets/app.js");
  ASSERT_TRUE(HasStatus(script, 200));
  EXPECT_NE(script.content_type.find("javascript"), std::string::npos)
      << script.content_type;
  EXPECT_TRUE(IsApiError(http.Get("/api/v1/nope"), 404, "not_found"));
  EXPECT_TRUE(IsApiError(http.Get("/assets/nope.js"), 404, "not_found"));
  EXPECT_TRUE(IsApiError(http.Get("/api/v1/whoami"), 401, "unauthenticated"));
  EXPECT_TRUE(HasStatus(http.Get("/healthz"), 200));
  EXPECT_TRUE(with.Stop());

  ServerProcess without({.flags = {"--console-dir", ""}});
  ASSERT_TRUE(without.Start());
  HttpReply note = without.client().Get("/");
  ASSERT_TRUE(HasStatus(note, 200));
  EXPECT_NE(note.raw.find("without a console"), std::string::npos) << note.raw;
  EXPECT_TRUE(without.Stop());
  fs::remove_all(dir);
}

TEST_F(AdminApiTest, UnknownRoutesAndQueryParameters) {
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/nope", admin()), 404, "not_found"));
  EXPECT_TRUE(IsApiError(http().Get("/nope"), 404, "not_found"));
  EXPECT_TRUE(IsInvalid(http().Get("/api/v1/whoami?x=1", admin()), "x"));
  EXPECT_TRUE(IsInvalid(http().Get("/api/v1/slices/stats?tenant=a", admin()),
                        "tenant"));
}

TEST_F(AdminApiTest, AdminListsPage) {
  for (int i = 0; i < 5; ++i) api_->NewTenant("page");
  json all = api_->ListAll("/api/v1/tenants", admin());
  ASSERT_GE(all.size(), 6u);
  json walked = api_->ListAll("/api/v1/tenants?limit=2", admin());
  EXPECT_EQ(walked, all);
  EXPECT_TRUE(
      IsInvalid(http().Get("/api/v1/tenants?limit=0", admin()), "limit"));
  EXPECT_TRUE(
      IsInvalid(http().Get("/api/v1/tokens?limit=1001", admin()), "limit"));
  EXPECT_TRUE(
      IsInvalid(http().Get("/api/v1/groups?cursor=zz", admin()), "cursor"));
}

}  // namespace
}  // namespace hf::e2e
