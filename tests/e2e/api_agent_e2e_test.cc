// End-to-end tests of the agent side (docs/CONTRACT.md sections 3, 5 and 8;
// docs/API.md "Nodes and agents", "MIG command channel") through the real
// hf-server binary, with simulated agents speaking HTTP: registration and
// its validation, capabilities and health taken afresh from heartbeats, the
// compensation path, assignments, task-state reports, and the MIG command
// channel (create, claim, result, destroy, failures, stuck commands).
//
// Validation tests share one server; every flow starts its own server, so
// its GPUs are the only ones.
#include <string>
#include <thread>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

// ------------------------------------------------- registration checks

class AgentValidationTest : public ::testing::Test {
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
    node_token_ = api_->CreateToken("node", std::nullopt);
  }
  HttpReply Register(const json& body) const {
    return api_->http().Post("/api/v1/nodes/register", body, node_token_);
  }
  static json Body(const std::string& node, json gpus) {
    return {{"node_id", node}, {"gpus", std::move(gpus)}};
  }

  std::unique_ptr<Api> api_;
  std::string node_token_;
};

TEST_F(AgentValidationTest, RegisterValidatesTheReport) {
  const json gpu0 = SimGpu{.index = 0}.ToJson("v");
  json dup_index = SimGpu{.index = 0, .uuid = "GPU-other"}.ToJson("v");
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {gpu0, dup_index})), "gpus[1].index"));
  json dup_uuid = SimGpu{.index = 1, .uuid = gpu0["uuid"]}.ToJson("v");
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {gpu0, dup_uuid})), "gpus[1].uuid"));
  json extra = gpu0;
  extra["temperature"] = 40;
  EXPECT_TRUE(IsInvalid(Register(Body("v1", {extra})), "gpus[0].temperature"));
  json no_memory = gpu0;
  no_memory.erase("memory_mb");
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {no_memory})), "gpus[0].memory_mb"));
  json zero_memory = gpu0;
  zero_memory["memory_mb"] = 0;
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {zero_memory})), "gpus[0].memory_mb"));
  json no_index = gpu0;
  no_index.erase("index");
  EXPECT_TRUE(IsInvalid(Register(Body("v1", {no_index})), "gpus[0].index"));
  json bad_cc = gpu0;
  bad_cc["compute_capability"] = "eight";
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {bad_cc})), "gpus[0].compute_capability"));
  json bad_health = gpu0;
  bad_health["health"] = "hot";
  EXPECT_TRUE(IsInvalid(Register(Body("v1", {bad_health})), "gpus[0].health"));
  json bad_mig = gpu0;
  bad_mig["mig_capable"] = "yes";
  EXPECT_TRUE(
      IsInvalid(Register(Body("v1", {bad_mig})), "gpus[0].mig_capable"));
  EXPECT_TRUE(IsInvalid(Register(Body("Bad Node", {gpu0})), "node_id"));
  EXPECT_TRUE(IsInvalid(Register({{"gpus", {gpu0}}}), "node_id"));
  EXPECT_TRUE(IsInvalid(Register(Body("v1", "gpu0")), "gpus"));
  json with_tasks = Body("v1", {gpu0});
  with_tasks["tasks"] = json::array();
  EXPECT_TRUE(IsInvalid(Register(with_tasks), "tasks"));
  json unknown = Body("v1", {gpu0});
  unknown["hostname"] = "x";
  EXPECT_TRUE(IsInvalid(Register(unknown), "hostname"));
  // Nothing above registered the node.
  EXPECT_TRUE(IsApiError(api_->http().Get("/api/v1/nodes/v1", api_->admin()),
                         404, "not_found"));
}

TEST_F(AgentValidationTest, RegisterHeartbeatAndNodeViews) {
  SimNode node(*api_, UniqueName("reg"),
               {SimGpu{.index = 0}, SimGpu{.index = 1, .mps_capable = false}},
               node_token_);
  HttpReply r = node.RegisterReply();
  ASSERT_TRUE(HasStatus(r, 200));
  EXPECT_EQ(r.body["node_id"], node.name());
  EXPECT_EQ(r.body["heartbeat_interval_s"], 5);
  // Registering again is fine (an agent restart).
  ASSERT_TRUE(node.Register());

  HttpReply got =
      api_->http().Get("/api/v1/nodes/" + node.name(), api_->admin());
  ASSERT_TRUE(HasStatus(got, 200));
  EXPECT_EQ(got.body["node_id"], node.name());
  EXPECT_EQ(got.body["containerized"], false);
  EXPECT_TRUE(got.body["last_heartbeat_at"].is_string());
  EXPECT_TRUE(got.body["heartbeat_age_s"].is_number());
  EXPECT_LT(got.body["heartbeat_age_s"].get<double>(), 60.0);
  ASSERT_EQ(got.body["gpus"].size(), 2u) << got.raw;
  const json& g0 = got.body["gpus"][0];
  EXPECT_EQ(g0["index"], 0);
  EXPECT_EQ(g0["uuid"], node.GpuUuid(0));
  EXPECT_EQ(g0["model"], "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(g0["memory_mb"], 81920);
  EXPECT_EQ(g0["compute_capability"], "8.0");
  EXPECT_EQ(g0["mig_capable"], false);
  EXPECT_EQ(g0["mps_capable"], true);
  EXPECT_EQ(g0["health"], "ok");
  EXPECT_EQ(got.body["gpus"][1]["mps_capable"], false);

  json nodes = api_->ListAll("/api/v1/nodes", api_->admin());
  bool listed = false;
  for (const json& n : nodes) listed = listed || n["node_id"] == node.name();
  EXPECT_TRUE(listed) << nodes.dump();

  // Heartbeats: 200 {"ok": true, "quotas": [...]}; the path names the node.
  HttpReply hb = node.Heartbeat();
  ASSERT_TRUE(HasStatus(hb, 200));
  EXPECT_EQ(hb.body, json({{"ok", true}, {"quotas", json::array()}}));
  json mismatch = node.ReportBody();
  mismatch["node_id"] = "someone-else";
  EXPECT_TRUE(
      IsInvalid(api_->http().Post("/api/v1/nodes/" + node.name() + "/heartbeat",
                                  mismatch, node_token_),
                "node_id"));
  json no_name = node.ReportBody();
  no_name.erase("node_id");
  EXPECT_TRUE(
      HasStatus(api_->http().Post("/api/v1/nodes/" + node.name() + "/heartbeat",
                                  no_name, node_token_),
                200));
  EXPECT_TRUE(IsApiError(
      api_->http().Post("/api/v1/nodes/ghost/heartbeat",
                        SimNode(*api_, "ghost", {}, node_token_).ReportBody(),
                        node_token_),
      404, "not_found"));
  EXPECT_TRUE(IsApiError(
      api_->http().Get("/api/v1/nodes/ghost/assignments", node_token_), 404,
      "not_found"));
  json bad_tasks = node.ReportBody();
  bad_tasks["tasks"] = {{{"task_id", "x"}, {"state", "running"}}};
  EXPECT_TRUE(
      IsInvalid(api_->http().Post("/api/v1/nodes/" + node.name() + "/heartbeat",
                                  bad_tasks, node_token_),
                "tasks[0].task_id"));
  bad_tasks["tasks"] = {
      {{"task_id", 1}, {"state", "running"}, {"hook", {{"attached", 1}}}}};
  EXPECT_TRUE(
      IsInvalid(api_->http().Post("/api/v1/nodes/" + node.name() + "/heartbeat",
                                  bad_tasks, node_token_),
                "tasks[0].hook.attached"));
  bad_tasks["tasks"] = {{{"task_id", 1},
                         {"state", "running"},
                         {"hook", {{"attached", true}, {"used_bytes", -1}}}}};
  EXPECT_TRUE(
      IsInvalid(api_->http().Post("/api/v1/nodes/" + node.name() + "/heartbeat",
                                  bad_tasks, node_token_),
                "tasks[0].hook.used_bytes"));
  // A running task the server does not know is ignored.
  EXPECT_TRUE(HasStatus(
      node.Heartbeat(
          {{{"task_id", 987654}, {"state", "running"}, {"gpu_indices", {0}}}}),
      200));

  // Agents' bodies on other endpoints.
  EXPECT_TRUE(IsInvalid(
      api_->http().Post("/api/v1/nodes/" + node.name() + "/task-states",
                        json::object(), node_token_),
      "states"));
  EXPECT_TRUE(IsInvalid(
      api_->http().Post("/api/v1/nodes/" + node.name() + "/task-states",
                        {{"states", {{{"task_id", 1}, {"state", "exploded"}}}}},
                        node_token_),
      "states[0].state"));
  EXPECT_TRUE(
      IsInvalid(api_->http().Post(
                    "/api/v1/nodes/" + node.name() + "/task-states",
                    {{"states", {{{"task_id", 987654}, {"state", "running"}}}}},
                    node_token_),
                "states[0].task_id"));
  // A command that does not exist is not found before its body is read
  // (result bodies are checked on a real command in
  // MigCreateClaimResultDestroy).
  EXPECT_TRUE(
      IsApiError(node.Result(987654, {{"ok", true}}), 404, "not_found"));
  EXPECT_TRUE(
      IsApiError(node.Result(987654, json::object()), 404, "not_found"));
  HttpReply claim = node.Claim();
  ASSERT_TRUE(HasStatus(claim, 200));
  EXPECT_EQ(claim.body, json({{"items", json::array()}}));
  EXPECT_TRUE(IsInvalid(
      api_->http().Get("/api/v1/slice-requests?state=lost", api_->admin()),
      "state"));
  HttpReply none =
      api_->http().Get("/api/v1/slice-requests?node_id=ghost", api_->admin());
  ASSERT_TRUE(HasStatus(none, 200));
  EXPECT_EQ(none.body["items"], json::array());
}

// ------------------------------------------------------------- flows

class AgentFlowTest : public ::testing::Test {
 protected:
  // Flags for this test's server; change before Start().
  virtual std::vector<std::string> Flags() const { return {}; }
  void SetUp() override {
    ServerOptions options;
    options.flags = Flags();
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    tenant_ = api_->NewTenant("ag");
    user_ = api_->CreateToken("user", tenant_);
    ASSERT_FALSE(user_.empty());
  }
  void TearDown() override {
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  std::int64_t CreateId(const json& body) const {
    json t = api_->CreateTask(body, user_);
    return t.is_object() ? t["id"].get<std::int64_t>() : 0;
  }
  // Creates a task and waits until it is scheduled; returns it.
  json Bound(const json& body) const {
    const std::int64_t id = CreateId(body);
    if (id == 0) return nullptr;
    json t = api_->WaitNotPending(id, user_);
    EXPECT_EQ(t.value("status", ""), "scheduled") << t.dump();
    return t;
  }
  // The admin's view of the MIG command rows.
  json Requests(const std::string& query = "") const {
    return api_->ListAll("/api/v1/slice-requests" + query, api_->admin());
  }
  json History(const std::string& query) const {
    return api_->ListAll("/api/v1/slices/history" + query, api_->admin());
  }
  static bool HasOp(const json& history, const std::string& op) {
    for (const json& h : history) {
      if (h["op"] == op) return true;
    }
    return false;
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::string tenant_;
  std::string user_;
};

SimGpu MigGpu(int index) { return SimGpu{.index = index, .mig_capable = true}; }

TEST_F(AgentFlowTest, MigCapabilityFromEachHeartbeat) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  json silver = Bound(
      {{"name", "s"}, {"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.2}});
  EXPECT_EQ(silver["qos_level"], "silver");
  // The operator enabled MIG mode; the next heartbeat says so.
  node.gpus()[0].mig_capable = true;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  EXPECT_EQ(api_->http()
                .Get("/api/v1/nodes/n1", api_->admin())
                .body["gpus"][0]["mig_capable"],
            true);
  json gold = Bound(
      {{"name", "g"}, {"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.2}});
  EXPECT_EQ(gold["qos_level"], "gold");
  json slice = api_->GetSlice(gold["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(slice["qos_level"], "gold");
  EXPECT_EQ(slice["enforcement"], json({"mig"}));
  // Gold: no MPS limits, and no device until the partition exists.
  EXPECT_FALSE(gold["env"].contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
      << gold.dump();
  EXPECT_FALSE(gold["env"].contains("NVIDIA_VISIBLE_DEVICES")) << gold.dump();
  EXPECT_EQ(gold["env"].value("HETEROFLOW_SLICE_QOS", ""), "gold");
  // The earlier slice keeps its tier.
  EXPECT_EQ(api_->GetSlice(silver["slice_id"].get<std::int64_t>(),
                           user_)["qos_level"],
            "silver");
  // MIG mode off again: silver again.
  node.gpus()[0].mig_capable = false;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  EXPECT_EQ(Bound({{"name", "s2"},
                   {"gpu_memory_mb", 4096},
                   {"gpu_compute_ratio", 0.2}})["qos_level"],
            "silver");
  // Stats say which tier a new slice on the GPU would get.
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  ASSERT_TRUE(HasStatus(stats, 200));
  EXPECT_EQ(stats.body["gpus"][0]["qos_level"], "silver") << stats.raw;
}

TEST_F(AgentFlowTest, LostGpuKeepsItsSlicesAndTakesNoNewOnes) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  json first = Bound({{"name", "a"}, {"gpu_memory_mb", 4096}});
  const std::int64_t slice_id = first["slice_id"].get<std::int64_t>();
  node.gpus()[0].lost = true;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  HttpReply n = api_->http().Get("/api/v1/nodes/n1", api_->admin());
  EXPECT_EQ(n.body["gpus"][0]["health"], "lost") << n.raw;
  const std::int64_t waiting =
      CreateId({{"name", "b"}, {"gpu_memory_mb", 4096}});
  json w = api_->WaitTried(waiting, user_);
  EXPECT_EQ(w.value("status", ""), "pending") << w.dump();
  EXPECT_NE(w.value("pending_reason", "").find("lost"), std::string::npos)
      << w.dump();
  // The old slice is neither released nor moved.
  json s = api_->GetSlice(slice_id, user_);
  EXPECT_EQ(s["state"], "allocated");
  EXPECT_EQ(s["gpu_index"], 0);
  EXPECT_EQ(api_->GetTask(first["id"].get<std::int64_t>(), user_)["status"],
            "scheduled");
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["health"], "lost") << stats.raw;
  // Healthy again: allocatable, the waiting task binds.
  node.gpus()[0].lost = false;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  json bound = api_->WaitNotPending(waiting, user_);
  EXPECT_EQ(bound.value("status", ""), "scheduled") << bound.dump();

  // A GPU missing from a heartbeat counts as lost, its slices stay.
  node.gpus().clear();
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  n = api_->http().Get("/api/v1/nodes/n1", api_->admin());
  ASSERT_EQ(n.body["gpus"].size(), 1u) << n.raw;
  EXPECT_EQ(n.body["gpus"][0]["health"], "lost") << n.raw;
  EXPECT_EQ(api_->GetSlice(slice_id, user_)["state"], "allocated");
}

TEST_F(AgentFlowTest, RunningTaskWithoutSliceGetsACompensationSlice) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  // No AMD GPU exists: the task never binds by itself.
  const std::int64_t id = CreateId({{"name", "orphan"},
                                    {"gpu_type", "amd"},
                                    {"gpu_memory_mb", 2048},
                                    {"gpu_compute_ratio", 0.25}});
  json t = api_->WaitTried(id, user_);
  ASSERT_EQ(t.value("status", ""), "pending") << t.dump();
  EXPECT_TRUE(t["slice_id"].is_null());
  // The agent reports it running on GPU 1 (e.g. started before a server
  // restart lost its record).
  json running = {
      {{"task_id", id}, {"state", "running"}, {"gpu_indices", {1}}}};
  ASSERT_TRUE(HasStatus(node.Heartbeat(running), 200));
  t = api_->GetTask(id, user_);
  EXPECT_EQ(t["status"], "running") << t.dump();
  ASSERT_TRUE(t["slice_id"].is_number_integer()) << t.dump();
  EXPECT_EQ(t["node_id"], "n1");
  EXPECT_EQ(t["gpu_indices"], json({1}));
  EXPECT_TRUE(t["pending_reason"].is_null()) << t.dump();
  json s = api_->GetSlice(t["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(s["origin"], "compensation");
  EXPECT_EQ(s["gpu_index"], 1);
  EXPECT_EQ(s["memory_mb"], 2048);
  EXPECT_EQ(s["compute_percent"], 25);
  EXPECT_EQ(s["enforcement"], json::array());
  EXPECT_EQ(s["state"], "allocated");
  EXPECT_EQ(s["task_id"], id);
  EXPECT_TRUE(HasOp(History("?task_id=" + std::to_string(id)), "compensate"));
  // Repeated heartbeats record nothing new.
  ASSERT_TRUE(HasStatus(node.Heartbeat(running), 200));
  json slices = api_->ListAll("/api/v1/slices", user_);
  int for_task = 0;
  for (const json& x : slices) for_task += x["task_id"] == id ? 1 : 0;
  EXPECT_EQ(for_task, 1) << slices.dump();
  // The ledger counts it.
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][1]["accounted_memory_mb"], 2048) << stats.raw;
  // It finishes like any task.
  ASSERT_TRUE(HasStatus(node.ReportState(id, "succeeded", 0), 200));
  EXPECT_EQ(api_->GetSlice(s["id"].get<std::int64_t>(), user_)["state"],
            "released");
}

// The hook is listed in a slice's enforcement only once the agent reports
// it attached; the reported usage is shown on the slice; PATCH changes the
// quota (docs/CONTRACT.md section 13) and the next heartbeat reply names it.
TEST_F(AgentFlowTest, HookReportsAndDynamicQuota) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, MigGpu(1)});
  node.hook_available = true;
  ASSERT_TRUE(node.Register());
  json t = Bound({{"name", "hooked"}, {"gpu_memory_mb", 4096}});
  const std::int64_t id = t["id"].get<std::int64_t>();
  const std::int64_t slice = t["slice_id"].get<std::int64_t>();
  const std::string path = "/api/v1/slices/" + std::to_string(slice);
  ASSERT_TRUE(HasStatus(node.ReportState(id, "running"), 200));
  json s = api_->GetSlice(slice, user_);
  EXPECT_EQ(s["qos_level"], "silver");
  EXPECT_EQ(s["enforcement"], json({"mps"})) << s.dump();
  EXPECT_TRUE(s["hook"].is_null()) << s.dump();

  constexpr std::int64_t kMib = std::int64_t{1} << 20;
  json hook = {{"attached", false}, {"attaches", 0},
               {"processes", 0},    {"used_bytes", 0},
               {"peak_bytes", 0},   {"quota_bytes", 4096 * kMib},
               {"quota_ooms", 0},   {"physical_ooms", 0}};
  const auto running = [&] {
    return json::array({{{"task_id", id},
                         {"state", "running"},
                         {"gpu_indices", {0}},
                         {"hook", hook}}});
  };
  HttpReply hb = node.Heartbeat(running());
  ASSERT_TRUE(HasStatus(hb, 200));
  EXPECT_EQ(hb.body["quotas"],
            json::parse(R"([{"task_id": )" + std::to_string(id) +
                        R"(, "slice_id": )" + std::to_string(slice) +
                        R"(, "memory_mb": 4096}])"))
      << hb.raw;
  s = api_->GetSlice(slice, user_);
  EXPECT_EQ(s["enforcement"], json({"mps"})) << s.dump();
  ASSERT_TRUE(s["hook"].is_object()) << s.dump();
  EXPECT_EQ(s["hook"]["attached"], false);

  hook["attached"] = true;
  hook["attaches"] = 1;
  hook["processes"] = 1;
  hook["used_bytes"] = 3072 * kMib;
  hook["peak_bytes"] = 3072 * kMib;
  hook["quota_ooms"] = 2;
  ASSERT_TRUE(HasStatus(node.Heartbeat(running()), 200));
  s = api_->GetSlice(slice, user_);
  EXPECT_EQ(s["enforcement"], json({"mps", "hook"})) << s.dump();
  EXPECT_EQ(s["hook"]["used_bytes"], 3072 * kMib) << s.dump();
  EXPECT_EQ(s["hook"]["quota_bytes"], 4096 * kMib);
  EXPECT_EQ(s["hook"]["quota_ooms"], 2);
  EXPECT_EQ(s["hook"]["physical_ooms"], 0);
  EXPECT_TRUE(s["hook"]["reported_at"].is_string());
  EXPECT_TRUE(
      HasOp(History("?slice_id=" + std::to_string(slice)), "hook_attached"));

  // PATCH: validation, roles.
  EXPECT_TRUE(
      IsInvalid(api_->http().Patch(path, {{"memory_mb", 16}}, api_->admin()),
                "memory_mb"));
  EXPECT_TRUE(
      IsInvalid(api_->http().Patch(path, {{"memory_mb", 4100}}, api_->admin()),
                "memory_mb"));
  EXPECT_TRUE(IsInvalid(
      api_->http().Patch(path, {{"memory_mb", "8 GB"}}, api_->admin()),
      "memory_mb"));
  EXPECT_TRUE(IsInvalid(api_->http().Patch(path, json::object(), api_->admin()),
                        "memory_mb"));
  EXPECT_TRUE(
      IsInvalid(api_->http().Patch(path, {{"memory_mb", 8192}, {"qos", "gold"}},
                                   api_->admin()),
                "qos"));
  EXPECT_TRUE(IsApiError(api_->http().Patch(path, {{"memory_mb", 8192}}, user_),
                         403, "permission_denied"));
  const std::string other_admin =
      api_->CreateToken("tenant-admin", api_->NewTenant("other"));
  EXPECT_TRUE(
      IsApiError(api_->http().Patch(path, {{"memory_mb", 8192}}, other_admin),
                 404, "not_found"));
  EXPECT_TRUE(
      IsApiError(api_->http().Patch("/api/v1/slices/987654",
                                    {{"memory_mb", 8192}}, api_->admin()),
                 404, "not_found"));

  // Raise (the tenant's own tenant-admin may): no warning.
  const std::string tenant_admin = api_->CreateToken("tenant-admin", tenant_);
  HttpReply raised = api_->http().Patch(
      path, {{"memory_mb", 8192}, {"reason", "bigger batch"}}, tenant_admin);
  ASSERT_TRUE(HasStatus(raised, 200));
  EXPECT_EQ(raised.body["memory_mb"], 8192);
  EXPECT_EQ(raised.body["id"], slice);
  ASSERT_TRUE(raised.body["warnings"].is_array()) << raised.raw;
  // Silver: MPS's limit stays until the task restarts, and says so.
  ASSERT_EQ(raised.body["warnings"].size(), 1u) << raised.raw;
  EXPECT_TRUE(JsonMentions(raised.body["warnings"], "MPS")) << raised.raw;
  hb = node.Heartbeat(running());
  ASSERT_TRUE(HasStatus(hb, 200));
  EXPECT_EQ(hb.body["quotas"][0]["memory_mb"], 8192) << hb.raw;
  json history = History("?slice_id=" + std::to_string(slice));
  bool resized = false;
  for (const json& h : history) {
    if (h["op"] != "slice_resized") continue;
    resized = true;
    EXPECT_EQ(h["memory_mb"], 8192);
    EXPECT_EQ(h["reason"], "memory_mb 4096 -> 8192: bigger batch");
  }
  EXPECT_TRUE(resized) << history.dump();
  EXPECT_EQ(api_->GetTask(id, user_)["env"]["HETEROFLOW_SLICE_MEMORY_MB"],
            "8192");

  // A raise past the GPU's free memory: 409 naming it, nothing changes.
  HttpReply too_big =
      api_->http().Patch(path, {{"memory_mb", 90000 / 32 * 32}}, api_->admin());
  EXPECT_TRUE(IsApiError(too_big, 409, "conflict"));
  json other_task = Bound({{"name", "filler"}, {"gpu_memory_mb", 65536}});
  ASSERT_EQ(other_task["gpu_indices"], json({0})) << other_task.dump();
  // 8192 MB free: 16384 would fit exactly, 16416 does not.
  too_big = api_->http().Patch(path, {{"memory_mb", 16416}}, api_->admin());
  EXPECT_TRUE(IsApiError(too_big, 409, "conflict"));
  EXPECT_TRUE(JsonMentions(too_big.body, "8192 MB free")) << too_big.raw;
  EXPECT_EQ(api_->GetSlice(slice, user_)["memory_mb"], 8192);

  // Lowering warns that the task may hit OOM.
  HttpReply lowered =
      api_->http().Patch(path, {{"memory_mb", 1024}}, api_->admin());
  ASSERT_TRUE(HasStatus(lowered, 200));
  EXPECT_EQ(lowered.body["memory_mb"], 1024);
  EXPECT_TRUE(JsonMentions(lowered.body["warnings"], "may hit OOM"))
      << lowered.raw;

  // A gold slice cannot change size.
  json gold = Bound({{"name", "gold"}, {"gpu_memory_mb", 50000}});
  ASSERT_EQ(gold["qos_level"], "gold") << gold.dump();
  HttpReply partition = api_->http().Patch(
      "/api/v1/slices/" + std::to_string(gold["slice_id"].get<std::int64_t>()),
      {{"memory_mb", 8192}}, api_->admin());
  EXPECT_TRUE(IsApiError(partition, 409, "conflict"));
  EXPECT_TRUE(JsonMentions(partition.body, "a partition cannot change size"))
      << partition.raw;

  // A restart rebuilds the ledger from the store: the quota and "hook"
  // stay.
  ASSERT_TRUE(server_->Restart());
  s = api_->GetSlice(slice, user_);
  EXPECT_EQ(s["memory_mb"], 1024);
  EXPECT_EQ(s["enforcement"], json({"mps", "hook"})) << s.dump();
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 1024 + 65536)
      << stats.raw;
}

TEST_F(AgentFlowTest, AssignmentsAndTaskStates) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  SimNode other(*api_, "n2", {SimGpu{.index = 0, .memory_mb = 1024}});
  ASSERT_TRUE(node.Register());
  json a = Bound({{"name", "a"}, {"gpu_memory_mb", 4096}});
  json b = Bound({{"name", "b"}, {"gpu_memory_mb", 4096}});
  ASSERT_TRUE(other.Register());
  const std::int64_t ida = a["id"].get<std::int64_t>();
  const std::int64_t idb = b["id"].get<std::int64_t>();
  HttpReply as = node.Assignments();
  ASSERT_TRUE(HasStatus(as, 200));
  ASSERT_EQ(as.body["run"].size(), 2u) << as.raw;
  EXPECT_EQ(as.body["run"][0]["id"], ida);
  EXPECT_EQ(as.body["run"][1]["id"], idb);
  EXPECT_EQ(as.body["run"][0]["env"]["HETEROFLOW_SLICE_ID"],
            std::to_string(a["slice_id"].get<std::int64_t>()));
  EXPECT_EQ(as.body["cancel"], json::array());
  HttpReply none = other.Assignments();
  EXPECT_EQ(none.body, json({{"run", json::array()},
                             {"cancel", json::array()},
                             {"bound", json::array()},
                             {"slices", json::object()}}))
      << none.raw;

  HttpReply accepted = node.ReportState(ida, "running");
  ASSERT_TRUE(HasStatus(accepted, 200));
  EXPECT_EQ(accepted.body, json({{"accepted", 1}}));
  EXPECT_EQ(api_->GetTask(ida, user_)["status"], "running");
  as = node.Assignments();
  ASSERT_EQ(as.body["run"].size(), 1u) << as.raw;
  EXPECT_EQ(as.body["run"][0]["id"], idb);

  // Another node's task is not this node's to report.
  EXPECT_TRUE(
      IsInvalid(other.ReportState(idb, "running"), "states[0].task_id"));
  EXPECT_TRUE(IsInvalid(node.ReportState(ida, "pending"), "states[0].state"));
  // A batch is all or nothing.
  HttpReply batch =
      api_->http().Post("/api/v1/nodes/n1/task-states",
                        {{"states",
                          {{{"task_id", idb}, {"state", "running"}},
                           {{"task_id", 987654}, {"state", "running"}}}}},
                        node.token());
  EXPECT_TRUE(IsInvalid(batch, "states[1].task_id"));
  EXPECT_EQ(api_->GetTask(idb, user_)["status"], "scheduled");

  HttpReply done = node.ReportState(ida, "succeeded", 0, "ok");
  ASSERT_TRUE(HasStatus(done, 200));
  json t = api_->GetTask(ida, user_);
  EXPECT_EQ(t["status"], "succeeded");
  EXPECT_EQ(t["exit_code"], 0);
  json s = api_->GetSlice(a["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(s["state"], "released");
  EXPECT_TRUE(s["released_at"].is_string());
  // Repeated terminal reports change nothing.
  HttpReply again = node.ReportState(ida, "failed", 1);
  ASSERT_TRUE(HasStatus(again, 200));
  EXPECT_EQ(again.body, json({{"accepted", 0}}));
  EXPECT_EQ(api_->GetTask(ida, user_)["status"], "succeeded");
  json live = api_->ListAll("/api/v1/slices", user_);
  ASSERT_EQ(live.size(), 1u) << live.dump();
  EXPECT_EQ(live[0]["task_id"], idb);
  json released = api_->ListAll("/api/v1/slices?state=released", user_);
  ASSERT_EQ(released.size(), 1u) << released.dump();
  EXPECT_EQ(released[0]["task_id"], ida);
  EXPECT_EQ(api_->ListAll("/api/v1/slices?state=all", user_).size(), 2u);
}

// GET /api/v1/nodes/{node}/work: a wait returns when a task is bound to
// the node, one it runs is cancelled or a bound task's slice is deleted,
// not when another node gets work.
// (Each wait holds up to 20 s: a change that did not move the generation
// fails on the generation, not on time.)
TEST_F(AgentFlowTest, AWaitForWorkEndsWhenATaskIsBoundOrCancelledThere) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  SimNode other(*api_, "n2", {SimGpu{.index = 0, .memory_mb = 1024}});
  ASSERT_TRUE(node.Register());
  ASSERT_TRUE(other.Register());
  const auto work = [&](const SimNode& n, std::uint64_t after, int wait_s) {
    return server_->client().Get("/api/v1/nodes/" + n.name() +
                                     "/work?after=" + std::to_string(after) +
                                     "&wait_s=" + std::to_string(wait_s),
                                 n.token());
  };
  HttpReply first = work(node, 0, 0);
  ASSERT_TRUE(HasStatus(first, 200));
  EXPECT_EQ(first.body["waited"], false);
  const auto g0 = first.body["generation"].get<std::uint64_t>();
  EXPECT_GE(g0, 1u);
  // Nothing new: answered at once, the same generation.
  HttpReply same = work(node, g0, 0);
  EXPECT_EQ(same.body["generation"], g0) << same.raw;

  // A wait held open while a task is bound to the node.
  HttpReply bound_wait;
  std::thread waiter([&] { bound_wait = work(node, g0, 20); });
  const std::uint64_t other_before =
      work(other, 0, 0).body["generation"].get<std::uint64_t>();
  json t = Bound({{"name", "w"}, {"gpu_memory_mb", 4096}});
  ASSERT_EQ(t["node_id"], "n1") << t.dump();
  waiter.join();
  ASSERT_TRUE(HasStatus(bound_wait, 200));
  EXPECT_EQ(bound_wait.body["waited"], true);
  const auto g1 = bound_wait.body["generation"].get<std::uint64_t>();
  EXPECT_GT(g1, g0);
  // The other node's generation did not move.
  EXPECT_EQ(work(other, 0, 0).body["generation"], other_before);

  // A wait held open while the task is cancelled.
  HttpReply cancel_wait;
  waiter = std::thread([&] { cancel_wait = work(node, g1, 20); });
  const std::int64_t id = t["id"].get<std::int64_t>();
  HttpReply c = api_->http().Post(
      "/api/v1/tasks/" + std::to_string(id) + "/cancel", json::object(), user_);
  ASSERT_TRUE(HasStatus(c, 200));
  waiter.join();
  ASSERT_TRUE(HasStatus(cancel_wait, 200));
  const auto g2 = cancel_wait.body["generation"].get<std::uint64_t>();
  EXPECT_GT(g2, g1);

  // A wait held open while an operator deletes a bound task's slice (the
  // node must stop the task, which is then bound again).
  HttpReply node_report = node.ReportState(id, "cancelled");
  ASSERT_TRUE(HasStatus(node_report, 200));
  json u = Bound({{"name", "u"}, {"gpu_memory_mb", 4096}});
  const auto g3 = work(node, 0, 0).body["generation"].get<std::uint64_t>();
  HttpReply delete_wait;
  waiter = std::thread([&] { delete_wait = work(node, g3, 20); });
  HttpReply d = api_->http().Delete(
      "/api/v1/slices/" + std::to_string(u["slice_id"].get<std::int64_t>()),
      api_->admin());
  ASSERT_TRUE(HasStatus(d, 200)) << d.raw;
  EXPECT_EQ(d.body["state"], "releasing") << d.raw;
  waiter.join();
  ASSERT_TRUE(HasStatus(delete_wait, 200));
  EXPECT_GT(delete_wait.body["generation"].get<std::uint64_t>(), g3);

  // Who may wait, and what it may ask, is checked, as for the assignments:
  // not a user's token, not for a node that does not exist; then a bad
  // `after` or `wait_s`.
  EXPECT_TRUE(IsApiError(server_->client().Get("/api/v1/nodes/n1/work", user_),
                         403, "permission_denied"));
  EXPECT_TRUE(IsApiError(
      server_->client().Get("/api/v1/nodes/ghost/work", api_->admin()), 404,
      "not_found"));
  EXPECT_TRUE(IsInvalid(
      server_->client().Get("/api/v1/nodes/n1/work?after=x", node.token()),
      "after"));
  EXPECT_TRUE(IsInvalid(
      server_->client().Get("/api/v1/nodes/n1/work?wait_s=21", node.token()),
      "wait_s"));
  EXPECT_TRUE(IsInvalid(
      server_->client().Get("/api/v1/nodes/n1/work?wait_s=-1", node.token()),
      "wait_s"));
}

TEST_F(AgentFlowTest, TaskLogsShippedByTheAgentAreServedToTheTenant) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  SimNode other(*api_, "n2", {SimGpu{.index = 0, .memory_mb = 1024}});
  ASSERT_TRUE(node.Register());
  json a = Bound({{"name", "logs"}, {"gpu_memory_mb", 4096}});
  ASSERT_TRUE(other.Register());
  const std::int64_t id = a["id"].get<std::int64_t>();
  const std::string ship =
      "/api/v1/nodes/n1/tasks/" + std::to_string(id) + "/logs";
  const std::string read = "/api/v1/tasks/" + std::to_string(id) + "/logs";
  const auto post = [&](std::int64_t offset, const std::string& b64) {
    return api_->http().Post(ship, {{"offset", offset}, {"data", b64}},
                             node.token());
  };
  // "hello\n" then "wor\xffld\n" (one invalid UTF-8 byte).
  HttpReply first = post(0, "aGVsbG8K");
  ASSERT_TRUE(HasStatus(first, 200));
  EXPECT_EQ(first.body, json({{"size", 6}}));
  EXPECT_EQ(post(0, "aGVsbG8K").body, json({{"size", 6}}));  // a retry
  EXPECT_EQ(post(6, "d29y/2xkCg==").body, json({{"size", 13}}));
  EXPECT_EQ(post(0, "").body, json({{"size", 13}}));  // "where do I go on?"

  HttpReply all = api_->http().Get(read, user_);
  ASSERT_TRUE(HasStatus(all, 200));
  EXPECT_EQ(all.body["data"], "hello\nwor\xef\xbf\xbdld\n");
  EXPECT_EQ(all.body["size"], 13);
  EXPECT_EQ(all.body["next_offset"], 13);
  EXPECT_EQ(all.body["truncated"], false);
  HttpReply part = api_->http().Get(read + "?offset=6&limit=3", user_);
  ASSERT_TRUE(HasStatus(part, 200));
  EXPECT_EQ(part.body["data"], "wor");
  EXPECT_EQ(part.body["offset"], 6);
  EXPECT_EQ(part.body["next_offset"], 9);

  // Refusals: a gap, bad base64, unknown fields, another node's task, a
  // tenant that may not see the task, bad query values.
  EXPECT_TRUE(IsInvalid(post(99, "eA=="), "offset"));
  EXPECT_TRUE(IsInvalid(post(13, "not base64!"), "data"));
  EXPECT_TRUE(IsInvalid(post(13, "eA="), "data"));
  EXPECT_TRUE(IsInvalid(
      api_->http().Post(ship, {{"offset", 13}, {"data", ""}, {"x", 1}},
                        node.token()),
      "x"));
  EXPECT_TRUE(
      IsApiError(api_->http().Post(
                     "/api/v1/nodes/n2/tasks/" + std::to_string(id) + "/logs",
                     {{"offset", 0}, {"data", ""}}, other.token()),
                 404, "not_found"));
  const std::string stranger =
      api_->CreateToken("user", api_->NewTenant("ag-other"));
  EXPECT_TRUE(IsApiError(api_->http().Get(read, stranger), 404, "not_found"));
  EXPECT_TRUE(IsInvalid(api_->http().Get(read + "?limit=0", user_), "limit"));
  EXPECT_TRUE(
      IsInvalid(api_->http().Get(read + "?offset=-1", user_), "offset"));
  EXPECT_TRUE(IsInvalid(api_->http().Get(read + "?tail=1", user_), "tail"));
}

TEST_F(AgentFlowTest, UnknownMigDevicesAreReportedOrphanedOnce) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  const auto beat = [&](const json& devices) {
    json body = node.ReportBody();
    body.erase("node_id");
    body["gpus"][0]["mig_devices"] = devices;
    body["tasks"] = json::array();
    return api_->http().Post("/api/v1/nodes/n1/heartbeat", body, node.token());
  };
  ASSERT_TRUE(HasStatus(beat(json::array({"MIG-stray-1"})), 200));
  ASSERT_TRUE(HasStatus(beat(json::array({"MIG-stray-1"})), 200));
  int noted = 0;
  for (const json& h : History("")) {
    if (h["op"] == "mig_orphaned") {
      ++noted;
      EXPECT_NE(h["reason"].get<std::string>().find(
                    "MIG_PARTITION_ORPHANED: MIG-stray-1"),
                std::string::npos)
          << h.dump();
    }
  }
  EXPECT_EQ(noted, 1);
  EXPECT_TRUE(IsInvalid(beat("MIG-x"), "gpus[0].mig_devices"));
  EXPECT_TRUE(IsInvalid(beat(json::array({1})), "gpus[0].mig_devices"));
}

TEST_F(AgentFlowTest, MigCreateClaimResultDestroy) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  json t = Bound({{"name", "gold"}, {"gpu_memory_mb", 4096}});
  ASSERT_EQ(t["qos_level"], "gold");
  const std::int64_t id = t["id"].get<std::int64_t>();
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();

  json rows = Requests("?node_id=n1");
  ASSERT_EQ(rows.size(), 1u) << rows.dump();
  json create = rows[0];
  EXPECT_EQ(create["action"], "create");
  EXPECT_EQ(create["state"], "pending");
  EXPECT_EQ(create["node_id"], "n1");
  EXPECT_EQ(create["slice_id"], slice_id);
  EXPECT_EQ(create["task_id"], id);
  EXPECT_EQ(create["gpu_index"], 0);
  EXPECT_EQ(create["gpu_uuid"], node.GpuUuid(0));
  EXPECT_EQ(create["profile"], "1g.10gb") << create.dump();
  EXPECT_TRUE(create["device_id"].is_null());
  EXPECT_TRUE(create["claimed_at"].is_null());
  EXPECT_EQ(Requests("?state=pending").size(), 1u);
  EXPECT_EQ(Requests("?state=done").size(), 0u);

  // Not dispatched until the partition exists.
  HttpReply as = node.Assignments();
  EXPECT_EQ(as.body["run"], json::array()) << as.raw;

  HttpReply claim = node.Claim();
  ASSERT_TRUE(HasStatus(claim, 200));
  ASSERT_EQ(claim.body["items"].size(), 1u) << claim.raw;
  EXPECT_EQ(claim.body["items"][0]["id"], create["id"]);
  EXPECT_EQ(claim.body["items"][0]["state"], "claimed");
  EXPECT_TRUE(claim.body["items"][0]["claimed_at"].is_string());
  // Claimed and not reported: offered again (the agent may never have
  // seen the first reply); the agent knows it by its id.
  HttpReply reoffered = node.Claim();
  ASSERT_EQ(reoffered.body["items"].size(), 1u) << reoffered.raw;
  EXPECT_EQ(reoffered.body["items"][0]["id"], create["id"]);
  EXPECT_EQ(Requests("?state=claimed").size(), 1u);

  const std::string device = "MIG-" + node.GpuUuid(0) + "/7/0";
  const std::int64_t create_id = create["id"].get<std::int64_t>();
  // A malformed result changes nothing.
  EXPECT_TRUE(IsInvalid(node.Result(create_id, json::object()), "ok"));
  EXPECT_TRUE(
      IsInvalid(node.Result(create_id, {{"ok", true}, {"why", 1}}), "why"));
  EXPECT_EQ(Requests("?state=claimed").size(), 1u);
  HttpReply result =
      node.Result(create_id, {{"ok", true}, {"device_id", device}});
  ASSERT_TRUE(HasStatus(result, 200));
  EXPECT_EQ(result.body["state"], "done");
  EXPECT_EQ(result.body["device_id"], device);
  EXPECT_TRUE(result.body["finished_at"].is_string());
  // Reporting again is harmless.
  HttpReply repeated =
      node.Result(create_id, {{"ok", true}, {"device_id", device}});
  ASSERT_TRUE(HasStatus(repeated, 200));
  EXPECT_EQ(repeated.body["state"], "done");

  t = api_->GetTask(id, user_);
  EXPECT_EQ(t["labels"].value("heteroflow.mig_device_id", ""), device)
      << t.dump();
  EXPECT_EQ(t["env"].value("NVIDIA_VISIBLE_DEVICES", ""), device) << t.dump();
  EXPECT_EQ(t["env"].value("HETEROFLOW_SLICE_QOS", ""), "gold");
  EXPECT_EQ(api_->GetSlice(slice_id, user_)["mig_device_id"], device);
  as = node.Assignments();
  ASSERT_EQ(as.body["run"].size(), 1u) << as.raw;
  EXPECT_EQ(as.body["run"][0]["id"], id);

  ASSERT_TRUE(HasStatus(node.ReportState(id, "running"), 200));
  ASSERT_TRUE(HasStatus(node.ReportState(id, "succeeded", 0), 200));
  // The partition holds its memory until it is destroyed.
  json s = api_->GetSlice(slice_id, user_);
  EXPECT_EQ(s["state"], "releasing");
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  // Charged at what its 1g.10gb partition takes, 1/8 of the card.
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 81920 / 8)
      << stats.raw;
  json destroys = Requests("?state=pending");
  ASSERT_EQ(destroys.size(), 1u) << destroys.dump();
  EXPECT_EQ(destroys[0]["action"], "destroy");
  EXPECT_EQ(destroys[0]["slice_id"], slice_id);
  EXPECT_EQ(destroys[0]["device_id"], device);
  claim = node.Claim();
  ASSERT_EQ(claim.body["items"].size(), 1u) << claim.raw;
  const std::int64_t destroy_id = destroys[0]["id"].get<std::int64_t>();
  HttpReply destroyed = node.Result(destroy_id, {{"ok", true}});
  ASSERT_TRUE(HasStatus(destroyed, 200));
  EXPECT_EQ(destroyed.body["state"], "done");
  s = api_->GetSlice(slice_id, user_);
  EXPECT_EQ(s["state"], "released");
  // Repeated destroy: idempotent, no false alarm.
  HttpReply again = node.Result(destroy_id, {{"ok", true}});
  ASSERT_TRUE(HasStatus(again, 200));
  EXPECT_EQ(again.body["state"], "done");
  EXPECT_TRUE(again.body["error"].is_null()) << again.raw;
  stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 0) << stats.raw;
  json history = History("?slice_id=" + std::to_string(slice_id));
  EXPECT_TRUE(HasOp(history, "allocate")) << history.dump();
  EXPECT_TRUE(HasOp(history, "mig_create")) << history.dump();
  EXPECT_TRUE(HasOp(history, "release_requested")) << history.dump();
  EXPECT_TRUE(HasOp(history, "release")) << history.dump();
  // The admin list as hfctl shows it: every documented field.
  for (const char* field :
       {"id", "node_id", "slice_id", "task_id", "action", "gpu_index",
        "gpu_uuid", "profile", "state", "device_id", "error", "created_at",
        "claimed_at", "finished_at"}) {
    EXPECT_TRUE(destroyed.body.contains(field)) << field;
  }
}

TEST_F(AgentFlowTest, MigCreateFailureRequeuesTheTask) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  json t = Bound({{"name", "gold"}, {"gpu_memory_mb", 20000}});
  const std::int64_t id = t["id"].get<std::int64_t>();
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  HttpReply claim = node.Claim();
  ASSERT_EQ(claim.body["items"].size(), 1u) << claim.raw;
  EXPECT_EQ(claim.body["items"][0]["profile"], "1g.20gb");
  const std::int64_t req = claim.body["items"][0]["id"].get<std::int64_t>();
  HttpReply failed =
      node.Result(req, {{"ok", false}, {"error", "no free placement"}});
  ASSERT_TRUE(HasStatus(failed, 200));
  EXPECT_EQ(failed.body["state"], "failed");
  EXPECT_EQ(failed.body["error"], "no free placement");
  // The bind is rolled back: the slice released, the task pending again
  // (and bound afresh by the scheduler, to a new slice with a new command).
  EXPECT_EQ(api_->GetSlice(slice_id, user_)["state"], "released");
  json history = History("?slice_id=" + std::to_string(slice_id));
  EXPECT_TRUE(JsonMentions(history, "MIG create failed: no free placement"))
      << history.dump();
  json again = api_->WaitTask(id, user_, [&](const json& x) {
    return x["slice_id"].is_number_integer() && x["slice_id"] != slice_id;
  });
  ASSERT_TRUE(again["slice_id"].is_number_integer()) << again.dump();
  EXPECT_NE(again["slice_id"], slice_id);
  EXPECT_EQ(again["env"].value("HETEROFLOW_SLICE_ID", ""),
            std::to_string(again["slice_id"].get<std::int64_t>()));
  EXPECT_FALSE(again["labels"].contains("heteroflow.mig_device_id"));
  json pending = Requests("?state=pending");
  ASSERT_EQ(pending.size(), 1u) << pending.dump();
  EXPECT_EQ(pending[0]["slice_id"], again["slice_id"]);
  // A repeated failure report for the old command changes nothing.
  HttpReply repeated = node.Result(req, {{"ok", false}, {"error", "x"}});
  ASSERT_TRUE(HasStatus(repeated, 200));
  EXPECT_EQ(repeated.body["error"], "no free placement");
}

TEST_F(AgentFlowTest, MigDestroyLeavingAPartitionBehindIsReported) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  json t = Bound({{"name", "gold"}, {"gpu_memory_mb", 4096}});
  const std::int64_t id = t["id"].get<std::int64_t>();
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  HttpReply claim = node.Claim();
  ASSERT_EQ(claim.body["items"].size(), 1u);
  ASSERT_TRUE(
      HasStatus(node.Result(claim.body["items"][0]["id"].get<std::int64_t>(),
                            {{"ok", true}, {"device_id", "MIG-x"}}),
                200));
  ASSERT_TRUE(HasStatus(node.ReportState(id, "failed", 137), 200));
  claim = node.Claim();
  ASSERT_EQ(claim.body["items"].size(), 1u) << claim.raw;
  EXPECT_EQ(claim.body["items"][0]["action"], "destroy");
  HttpReply r = node.Result(
      claim.body["items"][0]["id"].get<std::int64_t>(),
      {{"ok", false}, {"orphaned", true}, {"error", "compute instance busy"}});
  ASSERT_TRUE(HasStatus(r, 200));
  EXPECT_EQ(r.body["state"], "failed");
  EXPECT_NE(r.body.value("error", "").find("MIG_PARTITION_ORPHANED"),
            std::string::npos)
      << r.raw;
  // Never forgotten: the slice stays accounted.
  EXPECT_EQ(api_->GetSlice(slice_id, user_)["state"], "releasing");
  EXPECT_TRUE(
      HasOp(History("?slice_id=" + std::to_string(slice_id)), "mig_orphaned"));
}

// A gold task cancelled before its partition exists: whatever the agent is
// handed must let it clean up. Every destroy command it claims names the
// device to destroy, and the slice is released once the hardware is clean.
TEST_F(AgentFlowTest, CancelBeforeMigCreateCompletesLeavesNoUnnamedDestroy) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  json t = Bound({{"name", "gold"}, {"gpu_memory_mb", 4096}});
  const std::int64_t id = t["id"].get<std::int64_t>();
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  HttpReply c = api_->http().Post(
      "/api/v1/tasks/" + std::to_string(id) + "/cancel", json::object(), user_);
  ASSERT_TRUE(HasStatus(c, 200));
  EXPECT_EQ(c.body["status"], "scheduled");
  EXPECT_EQ(c.body["cancel_requested"], true);
  // Play a well-behaved agent for a few rounds: create what it is told to
  // create, destroy what it is told to destroy, report what it is told to
  // stop.
  const std::string device = "MIG-" + node.GpuUuid(0) + "/7/0";
  for (int round = 0; round < 3; ++round) {
    HttpReply a = node.Assignments();
    ASSERT_TRUE(HasStatus(a, 200));
    for (const json& stop : a.body["cancel"]) {
      ASSERT_TRUE(HasStatus(
          node.ReportState(stop.get<std::int64_t>(), "cancelled"), 200));
    }
    HttpReply claim = node.Claim();
    ASSERT_TRUE(HasStatus(claim, 200));
    for (const json& cmd : claim.body["items"]) {
      const std::int64_t req = cmd["id"].get<std::int64_t>();
      if (cmd["action"] == "create") {
        ASSERT_TRUE(HasStatus(
            node.Result(req, {{"ok", true}, {"device_id", device}}), 200));
      } else {
        EXPECT_TRUE(cmd["device_id"].is_string() &&
                    !cmd["device_id"].get<std::string>().empty())
            << "the agent was told to destroy an unnamed partition: "
            << cmd.dump();
        ASSERT_TRUE(HasStatus(node.Result(req, {{"ok", true}}), 200));
      }
    }
  }
  EXPECT_EQ(api_->GetSlice(slice_id, user_)["state"], "released");
}

// docs/CONTRACT.md section 8: profiles come from the per-model table and only
// legal placements count. An A100 80GB holds at most seven 1g.10gb instances,
// so the ledger must not admit an eighth small gold slice: its create command
// could never succeed (and a failed create puts the task straight back on
// the same GPU).
TEST_F(AgentFlowTest, GoldSlicesAreAdmittedOnlyWhereAPartitionFits) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(CreateId({{"name", "g" + std::to_string(i)},
                            {"gpu_memory_mb", 4096},
                            {"gpu_compute_ratio", 0.1}}));
  }
  int scheduled = 0;
  for (std::int64_t id : ids) {
    json t = api_->WaitTried(id, user_);
    if (t.value("status", "") == "scheduled") ++scheduled;
  }
  EXPECT_LE(scheduled, 7);
  json creates = Requests("?state=pending");
  for (const json& c : creates) EXPECT_EQ(c["profile"], "1g.10gb");
  EXPECT_LE(creates.size(), 7u) << creates.dump();
}

// An operator reservation on a MIG GPU never gets a partition (no create
// command is written for it), so deleting it has nothing to destroy: it is
// released at once, and the agent is not sent a destroy for a device that
// does not exist.
TEST_F(AgentFlowTest, DeletingAReservationOnAMigGpuReleasesItAtOnce) {
  SimNode node(*api_, "n1", {MigGpu(0)});
  ASSERT_TRUE(node.Register());
  HttpReply created = api_->http().Post("/api/v1/slices",
                                        {{"tenant", tenant_},
                                         {"node_id", "n1"},
                                         {"gpu_index", 0},
                                         {"gpu_memory_mb", 4096}},
                                        api_->admin());
  ASSERT_TRUE(HasStatus(created, 201));
  EXPECT_EQ(Requests(""), json::array());
  HttpReply deleted = api_->http().Delete(
      "/api/v1/slices/" + created.body["id"].dump(), api_->admin());
  ASSERT_TRUE(HasStatus(deleted, 200));
  EXPECT_EQ(deleted.body["state"], "released") << deleted.raw;
  for (const json& row : Requests("")) {
    EXPECT_FALSE(row["device_id"].is_null())
        << "a destroy for a partition that was never created: " << row.dump();
  }
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 0) << stats.raw;
}

// --------------------------------------------------- stuck commands

class StuckCommandTest : public AgentFlowTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--mig-command-deadline", "1", "--gc-interval", "0.2"};
  }
};

TEST_F(StuckCommandTest, CommandsPastTheDeadlineAreHardwareStateUnknown) {
  SimNode node(*api_, "n1", {MigGpu(0), MigGpu(1)});
  ASSERT_TRUE(node.Register());
  json first = Bound({{"name", "claimed-a"}, {"gpu_memory_mb", 4096}});
  json second = Bound({{"name", "claimed-b"}, {"gpu_memory_mb", 4096}});
  ASSERT_EQ(Requests("?state=pending").size(), 2u);
  // Claim both, then answer neither (nor anything after).
  HttpReply claim = node.Claim();
  ASSERT_EQ(claim.body["items"].size(), 2u);
  const auto stuck_creates = [&] {
    json out = json::array();
    for (const json& row : Requests("?state=stuck")) {
      if (row["action"] == "create") out.push_back(row);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return stuck_creates().size() >= 2; },
                      milliseconds(10'000)))
      << Requests("").dump();
  const json stuck = stuck_creates();
  for (const json& row : stuck) {
    EXPECT_EQ(row["message"], "HARDWARE STATE UNKNOWN") << row.dump();
    EXPECT_NE(row.value("error", "").find("HARDWARE STATE UNKNOWN"),
              std::string::npos)
        << row.dump();
    EXPECT_TRUE(row["finished_at"].is_string());
  }
  for (const json& task : {first, second}) {
    const std::int64_t old_slice = task["slice_id"].get<std::int64_t>();
    // The slice stays charged (the partition may exist) behind a cleanup
    // destroy that names no device (whatever the create made)...
    EXPECT_EQ(api_->GetSlice(old_slice, user_)["state"], "releasing");
    bool cleanup = false;
    for (const json& row : Requests("")) {
      cleanup |= row["action"] == "destroy" && row["slice_id"] == old_slice &&
                 row["device_id"].is_null();
    }
    EXPECT_TRUE(cleanup) << Requests("").dump();
    // ...and the task does not wait for ever: it is bound again.
    json now = api_->GetTask(task["id"].get<std::int64_t>(), user_);
    EXPECT_NE(now["slice_id"], old_slice) << now.dump();
  }
  // A command that nobody claims gets stuck as well.
  json third = Bound({{"name", "never-claimed"}, {"gpu_memory_mb", 4096}});
  const std::int64_t third_slice = third["slice_id"].get<std::int64_t>();
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& row : stuck_creates()) {
          if (row["slice_id"] == third_slice) return true;
        }
        return false;
      },
      milliseconds(10'000)))
      << Requests("").dump();
}

}  // namespace
}  // namespace hf::e2e
