// GET /api/v1/advice over real HTTP (ApiServer on loopback, a real
// ControlPlane and SQLite store): who may call it, the threshold and node
// checks, and the advice for a GPU where one slice runs slower shared than
// alone — a neighbour to lower, an empty GPU to move to, a MIG GPU for gold —
// with a tenant-admin never seeing another tenant's slices or numbers.
// Interference comes in as the agents send it: heartbeats whose
// tasks[].hook carries `interference`.
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "api/http_api.h"
#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::api {
namespace {

using nlohmann::json;
using store::Role;

constexpr const char* kAdminSecret = "admin-secret-for-the-advice-test";

json Gpu(int index, const std::string& uuid, bool mig = false) {
  return {{"index", index},     {"uuid", uuid},
          {"vendor", "nvidia"}, {"model", "NVIDIA A100-SXM4-80GB"},
          {"memory_mb", 81920}, {"compute_capability", "8.0"},
          {"mig_capable", mig}, {"mps_capable", false},
          {"health", "ok"}};
}

json Report(const json& gpus) {
  return {{"containerized", false},  {"hook_available", true},
          {"cpu_milli", 64000},      {"host_memory_mb", 262144},
          {"agent_version", "test"}, {"gpus", gpus}};
}

class AdviceTest : public ::testing::Test {
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
    // One shared group, so both tenants' slices may share a GPU.
    ASSERT_TRUE(cp_->CreateTenant(admin_, "t1", std::string("lab")).ok());
    ASSERT_TRUE(cp_->CreateTenant(admin_, "t2", std::string("lab")).ok());
    t1_admin_ = NewToken(Role::kTenantAdmin, "t1");
    t2_admin_ = NewToken(Role::kTenantAdmin, "t2");
    t1_user_ = NewToken(Role::kUser, "t1");
    node_ = NewToken(Role::kNode, std::nullopt);

    ApiOptions options;
    options.threads = 4;
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

  // (status, body) of a request; bearer "" sends no Authorization.
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
          const json& body = nullptr) {
    auto [status, reply] = Send(method, path, kAdminSecret, body);
    EXPECT_GE(status, 200) << method << " " << path << ": " << reply.dump();
    EXPECT_LT(status, 300) << method << " " << path << ": " << reply.dump();
    return reply;
  }

  void Register(const std::string& node, const json& gpus) {
    json body = Report(gpus);
    body["node_id"] = node;
    Ok("POST", "/api/v1/nodes/register", body);
  }

  // A running task of `tenant` with a slice on n1 GPU 0; returns the task.
  json RunningTask(const std::string& tenant, int memory_mb, double ratio,
                   bool preemptible) {
    const json task = Ok("POST", "/api/v1/tasks",
                         {{"name", "train-" + tenant},
                          {"command", "train"},
                          {"tenant", tenant},
                          {"gpu_memory_mb", memory_mb},
                          {"gpu_compute_ratio", ratio},
                          {"preemptible", preemptible}});
    EXPECT_TRUE(cp_->BindPendingOnce().ok());
    json bound =
        Ok("GET", "/api/v1/tasks/" + std::to_string(task["id"].get<int>()));
    EXPECT_EQ(bound["node_id"], "n1") << bound.dump();
    Ok("POST", "/api/v1/nodes/n1/task-states",
       {{"states",
         {{{"task_id", bound["id"]},
           {"slice_id", bound["slice_id"]},
           {"state", "running"}}}}});
    return bound;
  }

  // n1 GPU 0 holds a (t1, 4096 MB, 30%, preemptible) and b (t2, 8192 MB,
  // 50%); the agent reports a 1.6x slower, b 1.05x and 70% of the GPU's
  // time. n2 GPU 0 (empty) and n3 GPU 0 (MIG mode, empty) come after the
  // binds, so nothing was placed there.
  void SetUpSharedGpu() {
    Register("n1", json::array({Gpu(0, "GPU-n1-0")}));
    a_ = RunningTask("t1", 4096, 0.3, true);
    b_ = RunningTask("t2", 8192, 0.5, false);
    ASSERT_EQ(a_["gpu_indices"], b_["gpu_indices"]);
    json heartbeat = Report(json::array({Gpu(0, "GPU-n1-0")}));
    const auto task = [](const json& t, double interference, double share) {
      return json{{"task_id", t["id"]},
                  {"state", "running"},
                  {"gpu_indices", {0}},
                  {"hook",
                   {{"attached", true},
                    {"attaches", 1},
                    {"share_achieved_percent", share},
                    {"interference", interference},
                    {"interference_samples", 310}}}};
    };
    heartbeat["tasks"] = {task(a_, 1.6, 20.0), task(b_, 1.05, 70.0)};
    Ok("POST", "/api/v1/nodes/n1/heartbeat", heartbeat);
    Register("n2", json::array({Gpu(0, "GPU-n2-0")}));
  }

  static const json* FindAdvice(const json& item, const std::string& action) {
    for (const json& a : item["advice"]) {
      if (a["action"] == action) return &a;
    }
    return nullptr;
  }

  SystemClock clock_;
  store::sqlite_testing::TempDir dir_{"hf-advice-test"};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<server::ControlPlane> cp_;
  server::Caller admin_;
  std::string t1_admin_, t2_admin_, t1_user_, node_;
  std::unique_ptr<ApiServer> server_;
  std::thread serving_;
  std::unique_ptr<httplib::Client> client_;
  json a_, b_;
};

TEST_F(AdviceTest, WhoMayCallItIsCheckedBeforeTheQuery) {
  EXPECT_EQ(Send("GET", "/api/v1/advice", "").first, 401);
  EXPECT_EQ(Send("GET", "/api/v1/advice", "not-a-token").first, 401);
  for (const std::string& token : {t1_user_, node_}) {
    // A bad threshold too: the role is refused before the query is read.
    auto [status, body] = Send("GET", "/api/v1/advice?threshold=0", token);
    EXPECT_EQ(status, 403) << body.dump();
    EXPECT_EQ(body["error"], "permission_denied");
    EXPECT_FALSE(body.contains("field")) << body.dump();
  }
  EXPECT_EQ(Send("GET", "/api/v1/advice", t1_admin_).first, 200);
  EXPECT_EQ(Send("GET", "/api/v1/advice", kAdminSecret).first, 200);
  // It reads the ledger: a follower forwards it to the leader.
  bool found = false;
  for (const RouteInfo& r : ServedRoutes()) {
    if (r.method == "GET" && r.path == "/api/v1/advice") {
      found = true;
      EXPECT_EQ(r.instance, Instance::kLeader);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(AdviceTest, ABadThresholdOrAnUnknownNodeIs400NamingIt) {
  for (const char* bad :
       {"1", "0.5", "-2", "100.5", "abc", "1.3x", "nan", "inf", "1e400"}) {
    SCOPED_TRACE(bad);
    auto [status, body] = Send(
        "GET", std::string("/api/v1/advice?threshold=") + bad, kAdminSecret);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(body["error"], "invalid_argument");
    EXPECT_EQ(body["field"], "threshold");
  }
  auto [status, body] = Send("GET", "/api/v1/advice?threshold=100", t1_admin_);
  EXPECT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["threshold"], 100.0);
  EXPECT_EQ(Ok("GET", "/api/v1/advice")["threshold"], 1.3);

  auto [unknown, why] =
      Send("GET", "/api/v1/advice?node_id=no-such-node", kAdminSecret);
  EXPECT_EQ(unknown, 400) << why.dump();
  EXPECT_EQ(why["field"], "node_id");
  auto [other, stray] = Send("GET", "/api/v1/advice?limit=5", kAdminSecret);
  EXPECT_EQ(other, 400);
  EXPECT_EQ(stray["field"], "limit");
}

TEST_F(AdviceTest, ASufferingSliceGetsAMoveAndItsNeighbourALowerShare) {
  SetUpSharedGpu();
  const json reply = Ok("GET", "/api/v1/advice");
  ASSERT_EQ(reply["items"].size(), 1u) << reply.dump(2);
  const json& item = reply["items"][0];
  EXPECT_EQ(item["node_id"], "n1");
  EXPECT_EQ(item["gpu_index"], 0);
  EXPECT_EQ(item["gpu_model"], "NVIDIA A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(item["interference_max"].get<double>(), 1.6);
  ASSERT_EQ(item["slices"].size(), 2u);  // an admin sees every slice
  EXPECT_EQ(item["others"], json({{"slices", 0}, {"compute_percent", 0}}));
  const json& listed = item["slices"][0];
  EXPECT_EQ(listed["slice_id"], a_["slice_id"]);
  EXPECT_EQ(listed["tenant"], "t1");
  EXPECT_EQ(listed["compute_percent"], 30);
  EXPECT_EQ(listed["memory_mb"], 4096);
  EXPECT_EQ(listed["interference_samples"], 310);
  EXPECT_DOUBLE_EQ(listed["share_achieved_percent"].get<double>(), 20.0);
  EXPECT_TRUE(listed["reported_at"].is_string());

  const json* move = FindAdvice(item, "move");
  ASSERT_NE(move, nullptr) << item.dump(2);
  EXPECT_EQ((*move)["slice_id"], a_["slice_id"]);
  EXPECT_EQ((*move)["task_id"], a_["id"]);
  EXPECT_EQ((*move)["to"], json({{"node_id", "n2"}, {"gpu_index", 0}}));
  const std::string why = (*move)["reason"];
  EXPECT_NE(why.find("1.60x slower"), std::string::npos) << why;
  EXPECT_NE(why.find("310 samples"), std::string::npos) << why;
  EXPECT_NE(why.find("POST /api/v1/defrag/plans"), std::string::npos) << why;

  const json* lower = FindAdvice(item, "lower_share");
  ASSERT_NE(lower, nullptr) << item.dump(2);
  EXPECT_EQ((*lower)["slice_id"], b_["slice_id"]);
  EXPECT_EQ((*lower)["task_id"], b_["id"]);
  EXPECT_EQ((*lower)["to"], nullptr);
  const std::string lower_why = (*lower)["reason"];
  EXPECT_NE(lower_why.find("70.0%"), std::string::npos) << lower_why;
  EXPECT_NE(lower_why.find("50% share"), std::string::npos) << lower_why;
  EXPECT_EQ(FindAdvice(item, "gold"), nullptr) << "no GPU is in MIG mode";

  // Only n1 is in question; n2 has nothing to advise.
  EXPECT_EQ(Ok("GET", "/api/v1/advice?node_id=n1")["items"].size(), 1u);
  EXPECT_EQ(Ok("GET", "/api/v1/advice?node_id=n2")["items"], json::array());
}

TEST_F(AdviceTest, NothingAtOrAboveTheThresholdIsNoItems) {
  SetUpSharedGpu();
  EXPECT_EQ(Ok("GET", "/api/v1/advice?threshold=1.61")["items"], json::array());
  // At the threshold counts.
  EXPECT_EQ(Ok("GET", "/api/v1/advice?threshold=1.6")["items"].size(), 1u);
  // b (1.05x) suffers too at 1.05: it is no neighbour to lower then, and
  // nobody else is.
  const json both = Ok("GET", "/api/v1/advice?threshold=1.05");
  ASSERT_EQ(both["items"].size(), 1u);
  EXPECT_EQ(FindAdvice(both["items"][0], "lower_share"), nullptr)
      << both.dump(2);
  // Each gets its move; b's task is not preemptible, so no plan moves it.
  int moves = 0;
  for (const json& a : both["items"][0]["advice"]) {
    if (a["action"] != "move") continue;
    ++moves;
    const std::string why = a["reason"];
    if (a["slice_id"] == b_["slice_id"]) {
      EXPECT_NE(why.find("not preemptible"), std::string::npos) << why;
      EXPECT_NE(why.find("needs a restart of the task"), std::string::npos)
          << why;
    } else {
      EXPECT_NE(why.find("is preemptible"), std::string::npos) << why;
    }
  }
  EXPECT_EQ(moves, 2) << both.dump(2);
}

TEST_F(AdviceTest, ATenantAdminNeverSeesAnotherTenantsSlices) {
  SetUpSharedGpu();
  auto [status, mine] = Send("GET", "/api/v1/advice", t1_admin_);
  ASSERT_EQ(status, 200) << mine.dump();
  ASSERT_EQ(mine["items"].size(), 1u) << mine.dump(2);
  const json& item = mine["items"][0];
  ASSERT_EQ(item["slices"].size(), 1u);
  EXPECT_EQ(item["slices"][0]["slice_id"], a_["slice_id"]);
  EXPECT_EQ(item["others"], json({{"slices", 1}, {"compute_percent", 50}}));
  const json* lower = FindAdvice(item, "lower_share");
  ASSERT_NE(lower, nullptr) << item.dump(2);
  EXPECT_EQ((*lower)["slice_id"], nullptr);
  EXPECT_EQ((*lower)["task_id"], nullptr);
  const json* move = FindAdvice(item, "move");
  ASSERT_NE(move, nullptr);
  EXPECT_EQ((*move)["slice_id"], a_["slice_id"]);
  // Nothing of t2's: not its ids, tenant, share or interference.
  const std::string text = mine.dump();
  for (const std::string& secret :
       {std::string("\"t2\""), std::string("70.0"), std::string("1.05"),
        "\"slice_id\":" + b_["slice_id"].dump(),
        "\"task_id\":" + b_["id"].dump(), "slice " + b_["slice_id"].dump()}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in " << text;
  }
  // t2's slice does not suffer: its tenant-admin has nothing to see.
  auto [other, theirs] = Send("GET", "/api/v1/advice", t2_admin_);
  EXPECT_EQ(other, 200);
  EXPECT_EQ(theirs["items"], json::array()) << theirs.dump(2);
}

TEST_F(AdviceTest, AMigGpuWithRoomGivesGoldAndIsNoMoveTarget) {
  SetUpSharedGpu();
  Register("n3", json::array({Gpu(0, "GPU-n3-0", /*mig=*/true)}));
  const json reply = Ok("GET", "/api/v1/advice");
  ASSERT_EQ(reply["items"].size(), 1u);
  const json& item = reply["items"][0];
  const json* gold = FindAdvice(item, "gold");
  ASSERT_NE(gold, nullptr) << item.dump(2);
  EXPECT_EQ((*gold)["slice_id"], a_["slice_id"]);
  EXPECT_EQ((*gold)["to"], json({{"node_id", "n3"}, {"gpu_index", 0}}));
  const std::string why = (*gold)["reason"];
  EXPECT_NE(why.find("give it gold (a MIG partition)"), std::string::npos)
      << why;
  const json* move = FindAdvice(item, "move");
  ASSERT_NE(move, nullptr);
  EXPECT_EQ((*move)["to"]["node_id"], "n2");
}

TEST_F(AdviceTest, AGpuWhereASliceSuffersIsNoMoveTarget) {
  SetUpSharedGpu();
  // n2 GPU 0 gets a slice of t1 that suffers too: a is not sent there, and
  // with no other GPU it gets no move.
  auto [status, created] = Send("POST", "/api/v1/slices", kAdminSecret,
                                {{"tenant", "t1"},
                                 {"node_id", "n2"},
                                 {"gpu_index", 0},
                                 {"gpu_memory_mb", 1024},
                                 {"gpu_compute_ratio", 0.1}});
  ASSERT_EQ(status, 201) << created.dump();
  // Without a task, a reservation reports nothing: n2 is still free of
  // suffering, so the move stands, onto a GPU holding one slice.
  json reply = Ok("GET", "/api/v1/advice");
  const json* move = FindAdvice(reply["items"][0], "move");
  ASSERT_NE(move, nullptr) << reply.dump(2);
  EXPECT_EQ((*move)["to"]["node_id"], "n2");
  EXPECT_NE((*move)["reason"].get<std::string>().find(
                "holds 1 slice, not slowed down"),
            std::string::npos)
      << (*move)["reason"];

  // A task of t1 on n2 that runs 2x slower: n2 is crowded now.
  const json c = Ok("POST", "/api/v1/tasks",
                    {{"name", "c"},
                     {"command", "c"},
                     {"tenant", "t1"},
                     {"gpu_memory_mb", 2048},
                     {"gpu_compute_ratio", 0.25}});  // n1 has 20% left
  ASSERT_TRUE(cp_->BindPendingOnce().ok());
  const json bound =
      Ok("GET", "/api/v1/tasks/" + std::to_string(c["id"].get<int>()));
  ASSERT_EQ(bound["node_id"], "n2") << bound.dump();
  Ok("POST", "/api/v1/nodes/n2/task-states",
     {{"states",
       {{{"task_id", bound["id"]},
         {"slice_id", bound["slice_id"]},
         {"state", "running"}}}}});
  json heartbeat = Report(json::array({Gpu(0, "GPU-n2-0")}));
  heartbeat["tasks"] = {{{"task_id", bound["id"]},
                         {"state", "running"},
                         {"gpu_indices", {0}},
                         {"hook",
                          {{"attached", true},
                           {"attaches", 1},
                           {"interference", 2.0},
                           {"interference_samples", 50}}}}};
  Ok("POST", "/api/v1/nodes/n2/heartbeat", heartbeat);
  reply = Ok("GET", "/api/v1/advice");
  ASSERT_EQ(reply["items"].size(), 2u) << reply.dump(2);
  // Sorted by interference_max, largest first.
  EXPECT_EQ(reply["items"][0]["node_id"], "n2");
  EXPECT_DOUBLE_EQ(reply["items"][0]["interference_max"].get<double>(), 2.0);
  EXPECT_EQ(reply["items"][1]["node_id"], "n1");
  EXPECT_EQ(FindAdvice(reply["items"][1], "move"), nullptr)
      << reply["items"][1].dump(2);
}

}  // namespace
}  // namespace hf::api
