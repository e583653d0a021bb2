// GET /api/v1/slices/{id}/usage over real HTTP (ApiServer on loopback, a real
// ControlPlane and SQLite store): the history grows with the hook reports
// the leader stores (those that changed materially, and one every 30 s),
// oldest first; `since` and `limit` narrow it and are refused naming the
// parameter when malformed; a slice of another tenant is 404, as unknown
// slices are. Reports come in as agents send them: heartbeats whose
// tasks[].hook carries the hook's counters. The clock is fake, so each
// report's time is known.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/codec.h"
#include "api/http_api.h"
#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::api {
namespace {

using nlohmann::json;
using store::Role;

constexpr const char* kAdminSecret = "admin-secret-for-the-usage-test";
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

json Report() {
  const json gpu = {{"index", 0},           {"uuid", "GPU-usage-0"},
                    {"vendor", "nvidia"},   {"model", "NVIDIA A100-SXM4-80GB"},
                    {"memory_mb", 81920},   {"compute_capability", "8.0"},
                    {"mig_capable", false}, {"mps_capable", false},
                    {"health", "ok"}};
  return {{"containerized", false},  {"hook_available", true},
          {"cpu_milli", 64000},      {"host_memory_mb", 262144},
          {"agent_version", "test"}, {"gpus", {gpu}}};
}

class UsageHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto cp = server::ControlPlane::Create(store_.get(), &clock_, {});
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->BootstrapAdmin(std::string(kAdminSecret)).ok());
    auto admin = cp_->Authenticate(kAdminSecret);
    ASSERT_TRUE(admin.ok());
    admin_ = *admin;
    ASSERT_TRUE(cp_->CreateTenant(admin_, "t1", std::nullopt).ok());
    ASSERT_TRUE(cp_->CreateTenant(admin_, "t2", std::nullopt).ok());
    t1_user_ = NewToken(Role::kUser, "t1");
    t2_user_ = NewToken(Role::kUser, "t2");
    t2_admin_ = NewToken(Role::kTenantAdmin, "t2");
    node_ = NewToken(Role::kNode, std::nullopt);

    ApiOptions options;
    options.threads = 2;
    server_ = std::make_unique<ApiServer>(cp_.get(), &clock_, options);
    ASSERT_TRUE(server_->Bind("127.0.0.1", 0).ok());
    serving_ = std::thread([this] { (void)server_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_connection_timeout(5, 0);
    client_->set_read_timeout(10, 0);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
    if (serving_.joinable()) serving_.join();
    server_.reset();
    cp_.reset();
    store_.reset();
  }

  std::string NewToken(Role role, const std::optional<std::string>& tenant) {
    auto created = cp_->CreateToken(admin_, role, tenant, "test");
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->second : "";
  }

  std::pair<int, json> Send(const std::string& method, const std::string& path,
                            const std::string& bearer,
                            const json& body = nullptr) {
    httplib::Headers headers;
    if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
    httplib::Result res =
        method == "GET"
            ? client_->Get(path, headers)
            : client_->Post(path, headers, body.dump(), "application/json");
    if (!res) {
      ADD_FAILURE() << method << " " << path << ": no reply";
      return {0, nullptr};
    }
    return {res->status,
            json::parse(res->body, nullptr, /*allow_exceptions=*/false)};
  }

  json Ok(const std::string& method, const std::string& path,
          const json& body = nullptr,
          const std::string& bearer = kAdminSecret) {
    auto [status, reply] = Send(method, path, bearer, body);
    EXPECT_EQ(status, method == "POST" && path == "/api/v1/tasks" ? 201 : 200)
        << method << " " << path << ": " << reply.dump();
    return reply;
  }

  // A running task of t1 with a 4096 MB slice on n1; sets task_ and slice_.
  void RunTask() {
    json registration = Report();
    registration["node_id"] = "n1";
    Ok("POST", "/api/v1/nodes/register", registration, node_);
    const json task = Ok("POST", "/api/v1/tasks",
                         {{"name", "train"},
                          {"command", "train"},
                          {"gpu_memory_mb", 4096},
                          {"gpu_compute_ratio", 0.5}},
                         t1_user_);
    ASSERT_TRUE(cp_->BindPendingOnce().ok());
    const json bound =
        Ok("GET", "/api/v1/tasks/" + std::to_string(task["id"].get<int>()));
    ASSERT_TRUE(bound["slice_id"].is_number_integer()) << bound.dump();
    task_ = bound["id"];
    slice_ = bound["slice_id"];
    Ok("POST", "/api/v1/nodes/n1/task-states",
       {{"states",
         {{{"task_id", task_}, {"slice_id", slice_}, {"state", "running"}}}}},
       node_);
  }

  // The agent's heartbeat with the task's hook region as `hook`.
  void Heartbeat(const json& hook) {
    json body = Report();
    body["tasks"] = {{{"task_id", task_},
                      {"state", "running"},
                      {"gpu_indices", {0}},
                      {"hook", hook}}};
    Ok("POST", "/api/v1/nodes/n1/heartbeat", body, node_);
  }

  static json Hook(std::int64_t used, std::optional<double> share = {},
                   std::optional<double> interference = {}, int ooms = 0) {
    json h = {{"attached", true},   {"attaches", 1},
              {"processes", 1},     {"used_bytes", used},
              {"peak_bytes", used}, {"quota_bytes", 4 * kGiB},
              {"quota_ooms", ooms}, {"physical_ooms", 0}};
    if (share) h["share_achieved_percent"] = *share;
    if (interference) {
      h["interference"] = *interference;
      h["interference_samples"] = 100;
    }
    return h;
  }

  std::string UsagePath(const std::string& query = "") const {
    return "/api/v1/slices/" + std::to_string(slice_) + "/usage" + query;
  }

  static std::vector<std::int64_t> Used(const json& reply) {
    std::vector<std::int64_t> out;
    for (const json& item : reply["items"]) out.push_back(item["used_bytes"]);
    return out;
  }

  FakeClock clock_{1'800'000'000'000};
  store::sqlite_testing::TempDir dir_{"hf-usage-history-test"};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<server::ControlPlane> cp_;
  server::Caller admin_;
  std::string t1_user_, t2_user_, t2_admin_, node_;
  std::unique_ptr<ApiServer> server_;
  std::thread serving_;
  std::unique_ptr<httplib::Client> client_;
  std::int64_t task_ = 0;
  std::int64_t slice_ = 0;
};

TEST_F(UsageHistoryTest, GrowsWithTheReportsThatChangedMateriallyOldestFirst) {
  RunTask();
  // Nothing reported yet: an empty history, not a 404.
  json reply = Ok("GET", UsagePath(), nullptr, t1_user_);
  EXPECT_EQ(reply["slice_id"], slice_);
  EXPECT_EQ(reply["items"], json::array());

  const std::int64_t t0 = clock_.NowMillis();
  Heartbeat(Hook(kGiB));
  clock_.Advance(1000);
  Heartbeat(Hook(kGiB + (1 << 20)));  // 1 MiB more: not material
  clock_.Advance(1000);
  Heartbeat(Hook(2 * kGiB, 24.5));  // memory and the share: stored
  const std::int64_t t2 = clock_.NowMillis();
  clock_.Advance(1000);
  Heartbeat(Hook(2 * kGiB, 24.5, 1.42, 3));  // OOMs and interference
  const std::int64_t t3 = clock_.NowMillis();
  clock_.Advance(1000);
  Heartbeat(Hook(2 * kGiB, 26.0, 1.43, 3));  // within 5 points and 0.05
  clock_.Advance(30'000);
  Heartbeat(Hook(2 * kGiB, 26.0, 1.43, 3));  // 30 s after the last stored
  const std::int64_t t5 = clock_.NowMillis();

  reply = Ok("GET", UsagePath(), nullptr, t1_user_);
  EXPECT_EQ(Used(reply),
            (std::vector<std::int64_t>{kGiB, 2 * kGiB, 2 * kGiB, 2 * kGiB}))
      << reply.dump();
  ASSERT_EQ(reply["items"].size(), 4u);
  const json& first = reply["items"][0];
  EXPECT_EQ(first["reported_at"], FormatTime(t0));
  EXPECT_EQ(first["peak_bytes"], kGiB);
  EXPECT_EQ(first["quota_bytes"], 4 * kGiB);
  EXPECT_EQ(first["quota_ooms"], 0);
  EXPECT_EQ(first["physical_ooms"], 0);
  EXPECT_EQ(first["share_achieved_percent"], nullptr);
  EXPECT_EQ(first["interference"], nullptr);
  EXPECT_EQ(reply["items"][1]["reported_at"], FormatTime(t2));
  EXPECT_EQ(reply["items"][1]["share_achieved_percent"], 24.5);
  EXPECT_EQ(reply["items"][2]["reported_at"], FormatTime(t3));
  EXPECT_EQ(reply["items"][2]["quota_ooms"], 3);
  EXPECT_EQ(reply["items"][2]["interference"], 1.42);
  EXPECT_EQ(reply["items"][3]["reported_at"], FormatTime(t5));
  EXPECT_EQ(reply["items"][3]["share_achieved_percent"], 26.0);
  // Exactly these fields.
  EXPECT_EQ(first.size(), 8u) << first.dump();

  // since: inclusive, with or without fractions and offsets.
  reply = Ok("GET", UsagePath("?since=" + FormatTime(t2)));
  EXPECT_EQ(reply["items"].size(), 3u) << reply.dump();
  EXPECT_EQ(reply["items"][0]["reported_at"], FormatTime(t2));
  const std::string t3_text = FormatTime(t3);  // ...T..:..:..SSS.mmmZ
  const std::string offset = t3_text.substr(0, 19) + "%2B00:00";
  reply = Ok("GET", UsagePath("?since=" + offset));
  // t3 falls on a whole second (the clock moves in seconds here).
  EXPECT_EQ(reply["items"].size(), 2u) << offset << ": " << reply.dump();
  // limit: the newest, still oldest first.
  reply = Ok("GET", UsagePath("?limit=2"));
  ASSERT_EQ(reply["items"].size(), 2u);
  EXPECT_EQ(reply["items"][0]["reported_at"], FormatTime(t3));
  EXPECT_EQ(reply["items"][1]["reported_at"], FormatTime(t5));

  // Kept after the slice is released.
  Ok("POST", "/api/v1/nodes/n1/task-states",
     {{"states",
       {{{"task_id", task_}, {"slice_id", slice_}, {"state", "succeeded"}}}}},
     node_);
  EXPECT_EQ(Ok("GET", "/api/v1/slices/" + std::to_string(slice_))["state"],
            "released");
  EXPECT_EQ(Ok("GET", UsagePath(), nullptr, t1_user_)["items"].size(), 4u);
}

TEST_F(UsageHistoryTest, AnotherTenantsSliceIs404AsAnUnknownOne) {
  RunTask();
  Heartbeat(Hook(kGiB));
  EXPECT_EQ(Ok("GET", UsagePath(), nullptr, t1_user_)["items"].size(), 1u);
  for (const std::string& token : {t2_user_, t2_admin_, node_}) {
    auto [status, reply] = Send("GET", UsagePath(), token);
    EXPECT_EQ(status, 404) << reply.dump();
    EXPECT_EQ(reply["error"], "not_found");
    // The same as the slice itself answers them.
    EXPECT_EQ(
        Send("GET", "/api/v1/slices/" + std::to_string(slice_), token).first,
        404);
  }
  for (const std::string id : {"999", "0", "abc"}) {
    auto [status, reply] =
        Send("GET", "/api/v1/slices/" + id + "/usage", kAdminSecret);
    EXPECT_EQ(status, 404) << id << ": " << reply.dump();
  }
  EXPECT_EQ(Send("GET", UsagePath(), "").first, 401);
  // Rows in the database: any instance answers, a follower forwards
  // nothing.
  bool found = false;
  for (const RouteInfo& r : ServedRoutes()) {
    if (r.method == "GET" && r.path == "/api/v1/slices/{id}/usage") {
      found = true;
      EXPECT_EQ(r.instance, Instance::kAny);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(UsageHistoryTest, BadParametersAre400NamingThem) {
  RunTask();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"?since=yesterday", "since"},
      {"?since=1800000000000", "since"},
      {"?since=2026-13-01T00:00:00Z", "since"},
      {"?limit=0", "limit"},
      {"?limit=241", "limit"},
      {"?limit=ten", "limit"},
      {"?limit=-1", "limit"},
      {"?cursor=5", "cursor"},
  };
  for (const auto& [query, field] : bad) {
    auto [status, reply] = Send("GET", UsagePath(query), t1_user_);
    EXPECT_EQ(status, 400) << query << ": " << reply.dump();
    EXPECT_EQ(reply["error"], "invalid_argument") << query;
    EXPECT_EQ(reply["field"], field) << query << ": " << reply.dump();
  }
  // The bounds themselves are fine.
  EXPECT_EQ(Send("GET", UsagePath("?limit=240"), t1_user_).first, 200);
  EXPECT_EQ(
      Send("GET", UsagePath("?limit=1&since=2026-12-01T00:00:00.5Z"), t1_user_)
          .first,
      200);
}

}  // namespace
}  // namespace hf::api
