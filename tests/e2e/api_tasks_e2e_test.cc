// End-to-end tests of the tasks API (docs/CONTRACT.md section 4, docs/API.md
// "Tasks") through the real hf-server binary: request validation, limits,
// listing and paging, get, cancel, and binding (env injection, whole GPUs,
// pending reasons, retry when capacity frees up).
//
// Validation tests share one server with no nodes (tasks stay pending);
// placement tests start a fresh server each, so no other test's GPUs or
// slices change where a task lands.
#include <set>
#include <string>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

// ------------------------------------------------------------ validation

class TasksValidationTest : public ::testing::Test {
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
    tenant_ = api_->NewTenant("tv");
    user_ = api_->CreateToken("user", tenant_);
    ASSERT_FALSE(user_.empty());
  }
  HttpReply Create(const json& body) const {
    return api_->http().Post("/api/v1/tasks", body, user_);
  }
  // A valid slice task plus `extra` fields.
  static json Slice(const json& extra = json::object()) {
    json body = {{"name", "t"}, {"gpu_memory_mb", 1024}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }

  std::unique_ptr<Api> api_;
  std::string tenant_;
  std::string user_;
};

TEST_F(TasksValidationTest, UnknownTopLevelFieldIsNamed) {
  HttpReply r = Create(Slice({{"gpu_memroy_mb", 1}}));
  EXPECT_TRUE(IsInvalid(r, "gpu_memroy_mb"));
  EXPECT_NE(r.body.value("message", "").find("gpu_memroy_mb"),
            std::string::npos)
      << r.Describe();
}

TEST_F(TasksValidationTest, QosCannotBeRequested) {
  EXPECT_TRUE(IsInvalid(Create(Slice({{"qos", "gold"}})), "qos"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"qos_level", "gold"}})), "qos_level"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"qos_level", nullptr}})), "qos_level"));
}

TEST_F(TasksValidationTest, ComputeRatioOutOfRangeOrNotANumber) {
  for (const json& bad : {json(0), json(-0.1), json(1.01), json("0.5"),
                          json(true), json(0.004), json(2), json::array()}) {
    EXPECT_TRUE(IsInvalid(Create(Slice({{"gpu_compute_ratio", bad}})),
                          "gpu_compute_ratio"))
        << "ratio " << bad.dump();
  }
  // Without memory too (the ratio alone makes a slice).
  EXPECT_TRUE(IsInvalid(Create({{"name", "t"}, {"gpu_compute_ratio", 0}}),
                        "gpu_compute_ratio"));
}

TEST_F(TasksValidationTest, ComputeRatioIsStoredAsPercentRoundedHalfUp) {
  const std::vector<std::pair<json, int>> cases = {
      {json(1.0), 100},   {json(1), 100},    {json(0.505), 51},
      {json(0.5), 50},    {json(0.005), 1},  {json(0.994), 99},
      {json(0.995), 100}, {json(0.123), 12}, {json(0.125), 13}};
  for (const auto& [ratio, percent] : cases) {
    HttpReply r = Create({{"name", "t"}, {"gpu_compute_ratio", ratio}});
    ASSERT_TRUE(HasStatus(r, 201)) << "ratio " << ratio.dump();
    EXPECT_EQ(r.body["gpu_compute_percent"], percent) << ratio.dump();
    EXPECT_DOUBLE_EQ(r.body["gpu_compute_ratio"].get<double>(), percent / 100.0)
        << ratio.dump();
    EXPECT_TRUE(r.body["gpu_memory_mb"].is_null());
  }
}

TEST_F(TasksValidationTest, MemoryBounds) {
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", 31}})), "gpu_memory_mb"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", 0}})), "gpu_memory_mb"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", -64}})), "gpu_memory_mb"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", 4096.5}})), "gpu_memory_mb"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", "4096"}})), "gpu_memory_mb"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"gpu_memory_mb", true}})), "gpu_memory_mb"));
  HttpReply ok = Create(Slice({{"gpu_memory_mb", 32}}));
  ASSERT_TRUE(HasStatus(ok, 201));
  EXPECT_EQ(ok.body["gpu_memory_mb"], 32);
  EXPECT_TRUE(ok.body["gpu_compute_percent"].is_null());
  // A whole number written as a float is the number.
  HttpReply whole = Create(Slice({{"gpu_memory_mb", 4096.0}}));
  ASSERT_TRUE(HasStatus(whole, 201));
  EXPECT_EQ(whole.body["gpu_memory_mb"], 4096);
}

TEST_F(TasksValidationTest, WholeGpusAndSliceFieldsDoNotMix) {
  EXPECT_TRUE(IsInvalid(
      Create({{"name", "t"}, {"gpu_required", 1}, {"gpu_memory_mb", 1024}}),
      "gpu_required"));
  EXPECT_TRUE(IsInvalid(
      Create({{"name", "t"}, {"gpu_required", 1}, {"gpu_compute_ratio", 0.5}}),
      "gpu_required"));
  // Neither: 400 (the message says what is needed).
  HttpReply neither = Create({{"name", "t"}});
  EXPECT_EQ(neither.status, 400) << neither.Describe();
  EXPECT_EQ(neither.body.value("error", ""), "invalid_argument");
  HttpReply zero = Create({{"name", "t"}, {"gpu_required", 0}});
  EXPECT_EQ(zero.status, 400) << zero.Describe();
  EXPECT_TRUE(
      IsInvalid(Create({{"name", "t"}, {"gpu_required", -1}}), "gpu_required"));
  EXPECT_TRUE(IsInvalid(Create({{"name", "t"}, {"gpu_required", 1.5}}),
                        "gpu_required"));
  // null counts as absent.
  HttpReply with_null =
      Create({{"name", "t"}, {"gpu_required", 1}, {"gpu_memory_mb", nullptr}});
  ASSERT_TRUE(HasStatus(with_null, 201));
  EXPECT_EQ(with_null.body["gpu_required"], 1);
  EXPECT_TRUE(with_null.body["gpu_memory_mb"].is_null());
}

TEST_F(TasksValidationTest, ReservedEnvNamesAreRefusedNamingTheVariable) {
  for (const std::string name :
       {"HETEROFLOW_X", "HETEROFLOW_SLICE_ID", "CUDA_MPS_X",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES"}) {
    EXPECT_TRUE(
        IsInvalid(Create(Slice({{"env", {{name, "1"}}}})), "env." + name));
  }
  EXPECT_TRUE(IsInvalid(Create(Slice({{"env", {{"A", 1}}}})), "env.A"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"env", {{"1A", "x"}}}})), "env.1A"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"env", "A=1"}})), "env"));
  EXPECT_TRUE(IsInvalid(
      Create(Slice({{"labels", {{"heteroflow.mig_device_id", "x"}}}})),
      "labels.heteroflow.mig_device_id"));
  HttpReply ok = Create(Slice({{"env", {{"MODEL", "llama"}, {"EMPTY", ""}}},
                               {"labels", {{"team", "ml"}}}}));
  ASSERT_TRUE(HasStatus(ok, 201));
  EXPECT_EQ(ok.body["env"], (json{{"MODEL", "llama"}, {"EMPTY", ""}}));
  EXPECT_EQ(ok.body["labels"], (json{{"team", "ml"}}));
}

TEST_F(TasksValidationTest, OtherFieldTypes) {
  EXPECT_TRUE(IsInvalid(Create({{"gpu_memory_mb", 1024}}), "name"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"name", ""}})), "name"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"name", 7}})), "name"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"preemptible", "yes"}})), "preemptible"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"command", 7}})), "command"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"command", {"a", 1}}})), "command"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"gpu_type", "NVIDIA!"}})), "gpu_type"));
  HttpReply argv = Create(Slice({{"command", {"python", "serve.py"}},
                                 {"preemptible", true},
                                 {"image", "img:1"}}));
  ASSERT_TRUE(HasStatus(argv, 201));
  EXPECT_EQ(argv.body["command"], (json{"python", "serve.py"}));
  EXPECT_EQ(argv.body["preemptible"], true);
  EXPECT_EQ(argv.body["image"], "img:1");
  EXPECT_EQ(argv.body["gpu_type"], "nvidia");
  EXPECT_EQ(argv.body["tenant"], tenant_);
  EXPECT_EQ(argv.body["status"], "pending");
  HttpReply shell = Create(Slice({{"command", "python serve.py"}}));
  ASSERT_TRUE(HasStatus(shell, 201));
  EXPECT_EQ(shell.body["command"], "python serve.py");
}

TEST_F(TasksValidationTest, TaskJsonHasEveryDocumentedField) {
  HttpReply r = Create(Slice({{"gpu_compute_ratio", 0.25}}));
  ASSERT_TRUE(HasStatus(r, 201));
  for (const char* field : {"id",
                            "name",
                            "tenant",
                            "image",
                            "command",
                            "gpu_type",
                            "gpu_required",
                            "gpu_memory_mb",
                            "gpu_compute_ratio",
                            "gpu_compute_percent",
                            "gpu_compute_mode",
                            "preemptible",
                            "env",
                            "labels",
                            "status",
                            "pending_reason",
                            "slice_id",
                            "node_id",
                            "gpu_indices",
                            "qos_level",
                            "exit_code",
                            "message",
                            "cancel_requested",
                            "created_at",
                            "updated_at"}) {
    EXPECT_TRUE(r.body.contains(field)) << field << " in " << r.raw;
  }
  // RFC 3339 UTC with milliseconds.
  const std::string created = r.body.value("created_at", "");
  EXPECT_EQ(created.size(), 24u) << created;
  EXPECT_EQ(created.back(), 'Z') << created;
  EXPECT_EQ(created[19], '.') << created;
  EXPECT_TRUE(r.body["slice_id"].is_null());
  EXPECT_TRUE(r.body["qos_level"].is_null());
  EXPECT_EQ(r.body["gpu_compute_mode"], "work-conserving") << "the default";
}

TEST_F(TasksValidationTest, GpuComputeMode) {
  for (const json& bad : {json("fair"), json("Strict"), json(""), json(1),
                          json(true), json::array({"strict"})}) {
    EXPECT_TRUE(IsInvalid(Create(Slice({{"gpu_compute_mode", bad}})),
                          "gpu_compute_mode"))
        << bad.dump();
  }
  for (const char* mode : {"strict", "work-conserving"}) {
    HttpReply r = Create(Slice({{"gpu_compute_mode", mode}}));
    ASSERT_TRUE(HasStatus(r, 201));
    EXPECT_EQ(r.body["gpu_compute_mode"], mode);
  }
}

std::string Nested(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  for (int i = 0; i < depth; ++i) s += "}";
  return s;
}

TEST_F(TasksValidationTest, BodyLimits) {
  const HttpClient& http = api_->http();
  // Nesting past 16 levels is refused while parsing.
  EXPECT_TRUE(
      IsInvalid(http.PostRaw("/api/v1/tasks", Nested(100), user_), "body"));
  EXPECT_TRUE(
      IsInvalid(http.PostRaw("/api/v1/tasks", Nested(17), user_), "body"));
  // 16 levels parse; the unknown field is what is wrong then.
  EXPECT_TRUE(IsInvalid(http.PostRaw("/api/v1/tasks", Nested(16), user_), "a"));
  // Not an object, not JSON, empty.
  EXPECT_TRUE(IsInvalid(http.PostRaw("/api/v1/tasks", "[]", user_), "body"));
  EXPECT_TRUE(IsInvalid(http.PostRaw("/api/v1/tasks", "42", user_), "body"));
  EXPECT_TRUE(IsInvalid(http.PostRaw("/api/v1/tasks", "\"x\"", user_), "body"));
  EXPECT_TRUE(
      IsInvalid(http.PostRaw("/api/v1/tasks", "{\"name\":", user_), "body"));
  EXPECT_TRUE(IsInvalid(http.PostRaw("/api/v1/tasks", "", user_), "body"));
  // Over 1 MiB: 413 with the API's JSON error.
  const std::string big =
      "{\"name\":\"t\",\"gpu_memory_mb\":1024,\"image\":\"" +
      std::string((1 << 20) + 16, 'x') + "\"}";
  EXPECT_TRUE(IsApiError(http.PostRaw("/api/v1/tasks", big, user_), 413,
                         "payload_too_large"));
  // Strings: 4096 bytes, command 65536.
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"image", std::string(4097, 'i')}})), "image"));
  EXPECT_TRUE(
      HasStatus(Create(Slice({{"image", std::string(4096, 'i')}})), 201));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"name", std::string(5000, 'n')}})), "name"));
  EXPECT_TRUE(
      IsInvalid(Create(Slice({{"env", {{"LONG", std::string(5000, 'v')}}}})),
                "env.LONG"));
  EXPECT_TRUE(IsInvalid(Create(Slice({{"command", std::string(65537, 'c')}})),
                        "command"));
  EXPECT_TRUE(
      HasStatus(Create(Slice({{"command", std::string(60000, 'c')}})), 201));
  // env and labels: at most 256 entries.
  json env = json::object();
  for (int i = 0; i < 257; ++i) env["V" + std::to_string(i)] = "x";
  EXPECT_TRUE(IsInvalid(Create(Slice({{"env", env}})), "env"));
  env.erase("V0");
  EXPECT_TRUE(HasStatus(Create(Slice({{"env", env}})), 201));
}

TEST_F(TasksValidationTest, TenantFieldIsForAdmins) {
  const std::string other = api_->NewTenant("tv-other");
  HttpReply r = Create(Slice({{"tenant", other}}));
  EXPECT_TRUE(IsApiError(r, 403, "permission_denied"));
  // Naming one's own tenant is fine.
  EXPECT_TRUE(HasStatus(Create(Slice({{"tenant", tenant_}})), 201));
  // Admins act for a tenant; an unknown one is a bad argument.
  HttpReply as_admin = api_->http().Post(
      "/api/v1/tasks", Slice({{"tenant", other}}), api_->admin());
  ASSERT_TRUE(HasStatus(as_admin, 201));
  EXPECT_EQ(as_admin.body["tenant"], other);
  EXPECT_TRUE(IsInvalid(
      api_->http().Post("/api/v1/tasks", Slice({{"tenant", "no-such"}}),
                        api_->admin()),
      "tenant"));
  // An admin without `tenant` acts for `default`.
  HttpReply dflt = api_->http().Post("/api/v1/tasks", Slice(), api_->admin());
  ASSERT_TRUE(HasStatus(dflt, 201));
  EXPECT_EQ(dflt.body["tenant"], "default");
  // Node tokens do not create tasks.
  const std::string node = api_->CreateToken("node", std::nullopt);
  EXPECT_TRUE(IsApiError(api_->http().Post("/api/v1/tasks", Slice(), node), 403,
                         "permission_denied"));
}

TEST_F(TasksValidationTest, ListPaginatesInIdOrderWithEveryTaskOnce) {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 25; ++i) {
    json t =
        api_->CreateTask(Slice({{"name", "p" + std::to_string(i)}}), user_);
    ASSERT_TRUE(t.is_object());
    ids.push_back(t["id"].get<std::int64_t>());
  }
  std::vector<std::int64_t> seen;
  std::string cursor;
  int pages = 0;
  for (;;) {
    std::string path = "/api/v1/tasks?limit=7";
    if (!cursor.empty()) path += "&cursor=" + cursor;
    HttpReply r = api_->http().Get(path, user_);
    ASSERT_TRUE(HasStatus(r, 200));
    ++pages;
    ASSERT_LE(r.body["items"].size(), 7u);
    for (const json& t : r.body["items"]) {
      seen.push_back(t["id"].get<std::int64_t>());
      EXPECT_EQ(t["tenant"], tenant_);
    }
    if (r.body["next_cursor"].is_null()) break;
    ASSERT_TRUE(r.body["next_cursor"].is_string()) << r.raw;
    cursor = r.body["next_cursor"].get<std::string>();
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 4);

  // limit bounds
  EXPECT_TRUE(HasStatus(api_->http().Get("/api/v1/tasks?limit=1", user_), 200));
  EXPECT_TRUE(
      HasStatus(api_->http().Get("/api/v1/tasks?limit=1000", user_), 200));
  for (const char* bad : {"0", "1001", "-1", "abc", "7.5", ""}) {
    EXPECT_TRUE(IsInvalid(
        api_->http().Get(std::string("/api/v1/tasks?limit=") + bad, user_),
        "limit"))
        << "limit=" << bad;
  }
  EXPECT_TRUE(
      IsInvalid(api_->http().Get("/api/v1/tasks?cursor=abc", user_), "cursor"));
  EXPECT_TRUE(
      IsInvalid(api_->http().Get("/api/v1/tasks?cursor=-3", user_), "cursor"));
  // A cursor of two parts (a place in commit order, on PostgreSQL) must be
  // two positive integers.
  for (const char* bad : {"1.", ".5", "1.x", "1.2.3", "0.5", "-1.2"}) {
    EXPECT_TRUE(IsInvalid(
        api_->http().Get(std::string("/api/v1/tasks?cursor=") + bad, user_),
        "cursor"))
        << "cursor=" << bad;
  }
  HttpReply two_part = api_->http().Get("/api/v1/tasks?cursor=7.1", user_);
  ASSERT_TRUE(HasStatus(two_part, 200));
  EXPECT_TRUE(two_part.body["resume_cursor"].is_string()) << two_part.raw;
  EXPECT_TRUE(
      IsInvalid(api_->http().Get("/api/v1/tasks?colour=red", user_), "colour"));
  EXPECT_TRUE(IsInvalid(api_->http().Get("/api/v1/tasks?status=done", user_),
                        "status"));

  // Status filter: cancel three, list them.
  std::set<std::int64_t> cancelled;
  for (int i : {3, 11, 19}) {
    HttpReply c =
        api_->http().Post("/api/v1/tasks/" + std::to_string(ids[i]) + "/cancel",
                          json::object(), user_);
    ASSERT_TRUE(HasStatus(c, 200));
    cancelled.insert(ids[i]);
  }
  json only = api_->ListAll("/api/v1/tasks?status=cancelled", user_);
  std::set<std::int64_t> listed;
  for (const json& t : only) {
    EXPECT_EQ(t["status"], "cancelled");
    listed.insert(t["id"].get<std::int64_t>());
  }
  EXPECT_EQ(listed, cancelled);
  json pending = api_->ListAll("/api/v1/tasks?status=pending", user_);
  EXPECT_EQ(pending.size(), ids.size() - cancelled.size());
  // The tenant filter is for admins.
  EXPECT_TRUE(
      IsApiError(api_->http().Get("/api/v1/tasks?tenant=default", user_), 403,
                 "permission_denied"));
  json as_admin =
      api_->ListAll("/api/v1/tasks?tenant=" + tenant_, api_->admin());
  EXPECT_EQ(as_admin.size(), ids.size());
}

TEST_F(TasksValidationTest, GetAndCancel) {
  json t = api_->CreateTask(Slice(), user_);
  ASSERT_TRUE(t.is_object());
  const std::string path =
      "/api/v1/tasks/" + std::to_string(t["id"].get<int>());
  HttpReply got = api_->http().Get(path, user_);
  ASSERT_TRUE(HasStatus(got, 200));
  EXPECT_EQ(got.body["id"], t["id"]);
  EXPECT_EQ(got.body["name"], "t");
  EXPECT_TRUE(IsApiError(api_->http().Get("/api/v1/tasks/999999", user_), 404,
                         "not_found"));
  HttpReply bad_id = api_->http().Get("/api/v1/tasks/abc", user_);
  EXPECT_TRUE(bad_id.status == 400 || bad_id.status == 404)
      << bad_id.Describe();
  // Cancel takes an empty body or {}; unknown fields are refused.
  EXPECT_TRUE(IsInvalid(
      api_->http().Post(path + "/cancel", {{"force", true}}, user_), "force"));
  HttpReply c1 = api_->http().Send("POST", path + "/cancel", "", user_);
  ASSERT_TRUE(HasStatus(c1, 200));
  EXPECT_EQ(c1.body["status"], "cancelled");
  EXPECT_EQ(c1.body["cancel_requested"], true);
  EXPECT_TRUE(c1.body["pending_reason"].is_null()) << c1.raw;
  HttpReply c2 = api_->http().Post(path + "/cancel", json::object(), user_);
  ASSERT_TRUE(HasStatus(c2, 200));
  EXPECT_EQ(c2.body["status"], "cancelled");
  EXPECT_TRUE(IsApiError(
      api_->http().Post("/api/v1/tasks/999999/cancel", json::object(), user_),
      404, "not_found"));
}

// ------------------------------------------------------------- placement

class TaskPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>();
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    tenant_ = api_->NewTenant("tp");
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

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::string tenant_;
  std::string user_;
};

TEST_F(TaskPlacementTest, SliceTaskIsBoundWithTheSliceEnv) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::int64_t id = CreateId({{"name", "infer"},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.5},
                                    {"env", {{"MODEL", "llama"}}}});
  ASSERT_GT(id, 0);
  json t = api_->WaitNotPending(id, user_);
  ASSERT_EQ(t.value("status", ""), "scheduled") << t.dump();
  ASSERT_TRUE(t["slice_id"].is_number_integer()) << t.dump();
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  EXPECT_EQ(t["node_id"], "n1");
  ASSERT_EQ(t["gpu_indices"].size(), 1u);
  const int gpu = t["gpu_indices"][0].get<int>();
  EXPECT_EQ(t["qos_level"], "silver");
  EXPECT_TRUE(t["pending_reason"].is_null()) << t.dump();
  const json& env = t["env"];
  EXPECT_EQ(env.value("MODEL", ""), "llama");
  EXPECT_EQ(env.value("HETEROFLOW_SLICE_ID", ""), std::to_string(slice_id));
  EXPECT_EQ(env.value("HETEROFLOW_GPU_INDEX", ""), std::to_string(gpu));
  EXPECT_EQ(env.value("HETEROFLOW_SLICE_QOS", ""), "silver");
  EXPECT_EQ(env.value("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", ""), "0=4096M");
  EXPECT_EQ(env.value("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""), "50");
  EXPECT_EQ(env.value("CUDA_VISIBLE_DEVICES", ""), node.GpuUuid(gpu));

  json s = api_->GetSlice(slice_id, user_);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["task_id"], id);
  EXPECT_EQ(s["tenant"], tenant_);
  EXPECT_EQ(s["node_id"], "n1");
  EXPECT_EQ(s["gpu_index"], gpu);
  EXPECT_EQ(s["gpu_uuid"], node.GpuUuid(gpu));
  EXPECT_EQ(s["memory_mb"], 4096);
  EXPECT_EQ(s["compute_percent"], 50);
  EXPECT_EQ(s["compute_defaulted"], false);
  EXPECT_EQ(s["kind"], "slice");
  EXPECT_EQ(s["qos_level"], "silver");
  EXPECT_EQ(s["enforcement"], json({"mps"}));
  EXPECT_EQ(s["state"], "allocated");
  EXPECT_EQ(s["origin"], "scheduler");
  EXPECT_TRUE(s["released_at"].is_null());

  // No ratio: accounted as the default 50%, not injected as a limit.
  const std::int64_t id2 =
      CreateId({{"name", "mem-only"}, {"gpu_memory_mb", 64}});
  json t2 = api_->WaitNotPending(id2, user_);
  ASSERT_EQ(t2.value("status", ""), "scheduled") << t2.dump();
  EXPECT_FALSE(t2["env"].contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
      << t2.dump();
  json s2 = api_->GetSlice(t2["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(s2["compute_percent"], 50);
  EXPECT_EQ(s2["compute_defaulted"], true);

  // No memory asked for: no memory cap injected (a 0 MB cap would make
  // every allocation fail).
  const std::int64_t id3 =
      CreateId({{"name", "compute-only"}, {"gpu_compute_ratio", 0.2}});
  json t3 = api_->WaitNotPending(id3, user_);
  ASSERT_EQ(t3.value("status", ""), "scheduled") << t3.dump();
  EXPECT_EQ(t3["env"].value("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""), "20");
  EXPECT_FALSE(t3["env"].contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
      << t3.dump();
  EXPECT_FALSE(t3["env"].contains("HETEROFLOW_SLICE_MEMORY_MB")) << t3.dump();
  EXPECT_EQ(t3["env"].value("HETEROFLOW_SLICE_COMPUTE_PERCENT", ""), "20");
}

// Binds a 1 GB slice task of `gpu_type` and returns {task, slice}.
std::pair<json, json> BindOne(const Api& api, const std::string& token,
                              const std::string& gpu_type = "nvidia") {
  json t = api.CreateTask({{"name", "q"},
                           {"gpu_type", gpu_type},
                           {"gpu_memory_mb", 1024},
                           {"gpu_compute_ratio", 0.1}},
                          token);
  if (!t.is_object()) return {};
  t = api.WaitNotPending(t["id"].get<std::int64_t>(), token);
  EXPECT_EQ(t.value("status", ""), "scheduled") << t.dump();
  if (!t["slice_id"].is_number_integer()) return {t, nullptr};
  return {t, api.GetSlice(t["slice_id"].get<std::int64_t>(), token)};
}

TEST_F(TaskPlacementTest, QosTiersFollowTheGpuAndTheNode) {
  // Pre-Volta: bronze even when the agent says MPS runs (MPS limits need
  // compute capability 7.0).
  SimNode old(*api_, "old",
              {SimGpu{.index = 0,
                      .model = "Tesla P100",
                      .memory_mb = 16384,
                      .mps_capable = true,
                      .compute_capability = "6.0"}});
  ASSERT_TRUE(old.Register());
  auto [t, s] = BindOne(*api_, user_);
  EXPECT_EQ(t["qos_level"], "bronze");
  EXPECT_EQ(t["env"].value("HETEROFLOW_SLICE_QOS", ""), "bronze");
  EXPECT_EQ(s["qos_level"], "bronze");
  EXPECT_EQ(s["enforcement"], json::array());
  old.gpus()[0].lost = true;
  ASSERT_TRUE(HasStatus(old.Heartbeat(), 200));

  // An A100 with no MPS daemon: bronze; with the hook: enforced by it.
  SimNode node(*api_, "n1", {SimGpu{.index = 0, .mps_capable = false}});
  ASSERT_TRUE(node.Register());
  auto [t1, s1] = BindOne(*api_, user_);
  EXPECT_EQ(t1["node_id"], "n1");
  EXPECT_EQ(s1["qos_level"], "bronze");
  EXPECT_EQ(s1["enforcement"], json::array());
  node.hook_available = true;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  EXPECT_EQ(api_->http()
                .Get("/api/v1/nodes/n1", api_->admin())
                .body["hook_available"],
            true);
  auto [t2, s2] = BindOne(*api_, user_);
  EXPECT_EQ(s2["qos_level"], "bronze");
  // The hook enforces nothing until it is loaded in the task: "hook" is
  // listed once the agent reports it attached.
  EXPECT_EQ(s2["enforcement"], json::array());
  const std::int64_t id2 = t2["id"].get<std::int64_t>();
  ASSERT_TRUE(HasStatus(node.ReportState(id2, "running"), 200));
  ASSERT_TRUE(HasStatus(
      node.Heartbeat({{{"task_id", id2},
                       {"state", "running"},
                       {"gpu_indices", {0}},
                       {"hook", {{"attached", true}, {"attaches", 1}}}}}),
      200));
  EXPECT_EQ(api_->GetSlice(s2["id"].get<std::int64_t>(), user_)["enforcement"],
            json({"hook"}));
  // MPS daemon up: silver, MPS at once (the hook once it attaches).
  node.gpus()[0].mps_capable = true;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  auto [t3, s3] = BindOne(*api_, user_);
  EXPECT_EQ(s3["qos_level"], "silver");
  EXPECT_EQ(s3["enforcement"], json({"mps"}));
  // A containerized node is always bronze, even with MIG and MPS.
  node.containerized = true;
  node.hook_available = false;
  node.gpus()[0].mig_capable = true;
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  EXPECT_EQ(
      api_->http().Get("/api/v1/nodes/n1", api_->admin()).body["containerized"],
      true);
  auto [t4, s4] = BindOne(*api_, user_);
  EXPECT_EQ(t4["qos_level"], "bronze") << t4.dump();
  EXPECT_EQ(s4["qos_level"], "bronze");
  HttpReply requests =
      api_->http().Get("/api/v1/slice-requests", api_->admin());
  EXPECT_EQ(requests.body["items"], json::array()) << requests.raw;
}

// docs/CONTRACT.md section 3: memory, UUID, model and compute capability are
// taken from every heartbeat, like the capability bits. A card swapped at the
// same index (40 GB replaced by 80 GB) must be seen as the new card: its
// memory admits the task and the task is pinned to the new UUID.
TEST_F(TaskPlacementTest, GpuReplacedAtTheSameIndexIsSeenAfresh) {
  SimNode node(*api_, "n1",
               {SimGpu{.index = 0,
                       .model = "NVIDIA A100-SXM4-40GB",
                       .memory_mb = 40960,
                       .uuid = "GPU-old-card"}});
  ASSERT_TRUE(node.Register());
  node.gpus()[0] = SimGpu{.index = 0, .uuid = "GPU-new-card"};
  ASSERT_TRUE(HasStatus(node.Heartbeat(), 200));
  HttpReply n = api_->http().Get("/api/v1/nodes/n1", api_->admin());
  EXPECT_EQ(n.body["gpus"][0]["uuid"], "GPU-new-card") << n.raw;
  EXPECT_EQ(n.body["gpus"][0]["memory_mb"], 81920) << n.raw;
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["gpu_uuid"], "GPU-new-card") << stats.raw;
  EXPECT_EQ(stats.body["gpus"][0]["total_memory_mb"], 81920) << stats.raw;
  json t = api_->CreateTask({{"name", "big"}, {"gpu_memory_mb", 50000}}, user_);
  ASSERT_TRUE(t.is_object());
  t = api_->WaitNotPending(t["id"].get<std::int64_t>(), user_,
                           milliseconds(3'000));
  EXPECT_EQ(t.value("status", ""), "scheduled") << t.dump();
  EXPECT_EQ(t["env"].value("CUDA_VISIBLE_DEVICES", ""), "GPU-new-card")
      << t.dump();
}

TEST_F(TaskPlacementTest, OtherVendorsAreBronzeAndOnlyTheirTasksGoThere) {
  SimNode node(*api_, "mixed",
               {SimGpu{.index = 0}, SimGpu{.index = 1,
                                           .model = "Ascend 910B",
                                           .memory_mb = 65536,
                                           .mig_capable = false,
                                           .mps_capable = false,
                                           .compute_capability = "",
                                           .vendor = "ascend"}});
  ASSERT_TRUE(node.Register());
  auto [t, s] = BindOne(*api_, user_, "ascend");
  EXPECT_EQ(t["gpu_indices"], json({1}));
  EXPECT_EQ(s["qos_level"], "bronze");
  EXPECT_EQ(s["enforcement"], json::array());
  EXPECT_EQ(t["env"].value("HETEROFLOW_SLICE_QOS", ""), "bronze");
  EXPECT_EQ(t["env"].value("HETEROFLOW_GPU_INDEX", ""), "1");
  for (const auto& [name, value] : t["env"].items()) {
    EXPECT_FALSE(name.starts_with("CUDA_")) << name;
    EXPECT_FALSE(name.starts_with("NVIDIA_")) << name;
  }
  for (int i = 0; i < 3; ++i) {
    auto [n, ns] = BindOne(*api_, user_);
    EXPECT_EQ(n["gpu_indices"], json({0})) << n.dump();
  }
  // A vendor with no GPU here waits, saying why.
  json amd = api_->CreateTask(
      {{"name", "amd"}, {"gpu_type", "amd"}, {"gpu_memory_mb", 1024}}, user_);
  json w = api_->WaitTried(amd["id"].get<std::int64_t>(), user_);
  EXPECT_EQ(w.value("status", ""), "pending") << w.dump();
  EXPECT_NE(w.value("pending_reason", "").find("model"), std::string::npos)
      << w.dump();
}

TEST_F(TaskPlacementTest, WholeGpuTaskNeverLandsOnAMigGpu) {
  SimNode node(*api_, "n1",
               {SimGpu{.index = 0, .mig_capable = true}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::int64_t id = CreateId({{"name", "whole"}, {"gpu_required", 1}});
  json t = api_->WaitNotPending(id, user_);
  ASSERT_EQ(t.value("status", ""), "scheduled") << t.dump();
  EXPECT_EQ(t["gpu_indices"], json({1}));
  json s = api_->GetSlice(t["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(s["kind"], "whole");
  EXPECT_EQ(s["gpu_indices"], json({1}));
  EXPECT_EQ(t["env"].value("HETEROFLOW_GPU_INDEX", ""), "1");
  // A whole GPU gets no slice limits.
  EXPECT_FALSE(t["env"].contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  // The only other GPU is in MIG mode: the next whole-GPU task waits and
  // says why.
  const std::int64_t id2 = CreateId({{"name", "whole2"}, {"gpu_required", 1}});
  json t2 = api_->WaitTried(id2, user_);
  EXPECT_EQ(t2.value("status", ""), "pending") << t2.dump();
  EXPECT_NE(t2.value("pending_reason", "").find("MIG mode"), std::string::npos)
      << t2.dump();
  // Two whole GPUs never fit on this node (one is MIG).
  const std::int64_t id3 = CreateId({{"name", "whole3"}, {"gpu_required", 2}});
  json t3 = api_->WaitTried(id3, user_);
  EXPECT_EQ(t3.value("status", ""), "pending") << t3.dump();
}

TEST_F(TaskPlacementTest, SeveralWholeGpusOnOneNode) {
  SimNode small(*api_, "small", {SimGpu{.index = 0}});
  SimNode big(*api_, "big",
              {SimGpu{.index = 0}, SimGpu{.index = 1}, SimGpu{.index = 2}});
  ASSERT_TRUE(small.Register());
  ASSERT_TRUE(big.Register());
  const std::int64_t id = CreateId({{"name", "train"}, {"gpu_required", 2}});
  json t = api_->WaitNotPending(id, user_);
  ASSERT_EQ(t.value("status", ""), "scheduled") << t.dump();
  EXPECT_EQ(t["node_id"], "big");
  ASSERT_EQ(t["gpu_indices"].size(), 2u) << t.dump();
  json s = api_->GetSlice(t["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(s["kind"], "whole");
  EXPECT_EQ(s["gpu_indices"], t["gpu_indices"]);
  const std::string uuids = big.GpuUuid(t["gpu_indices"][0].get<int>()) + "," +
                            big.GpuUuid(t["gpu_indices"][1].get<int>());
  EXPECT_EQ(s["gpu_uuid"], uuids);
  EXPECT_EQ(t["env"].value("HETEROFLOW_GPU_UUID", ""), uuids);
  // A slice may not join a GPU a whole-GPU task owns.
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  int owned = 0;
  for (const json& g : stats.body["gpus"]) {
    owned += g.value("whole_gpu_task", false) ? 1 : 0;
  }
  EXPECT_EQ(owned, 2) << stats.raw;
  // Three whole GPUs fit on no node now.
  const std::int64_t id2 = CreateId({{"name", "train3"}, {"gpu_required", 3}});
  json t2 = api_->WaitTried(id2, user_);
  EXPECT_EQ(t2.value("status", ""), "pending") << t2.dump();
}

TEST_F(TaskPlacementTest, TaskThatDoesNotFitWaitsWithAReasonThenBinds) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  const std::int64_t big =
      CreateId({{"name", "big"}, {"gpu_memory_mb", 60000}});
  json b = api_->WaitNotPending(big, user_);
  ASSERT_EQ(b.value("status", ""), "scheduled") << b.dump();
  const std::int64_t waiting =
      CreateId({{"name", "waiting"}, {"gpu_memory_mb", 40000}});
  json w = api_->WaitTried(waiting, user_);
  ASSERT_EQ(w.value("status", ""), "pending") << w.dump();
  const std::string reason = w.value("pending_reason", "");
  EXPECT_NE(reason.find("insufficient GPU memory"), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("0 of 1 GPUs"), std::string::npos) << reason;
  EXPECT_NE(reason.find("40000 MB"), std::string::npos) << reason;
  EXPECT_TRUE(w["slice_id"].is_null());

  // Over 90% of the largest GPU never fits and says so.
  const std::int64_t huge =
      CreateId({{"name", "huge"}, {"gpu_memory_mb", 80000}});
  json h = api_->WaitTried(huge, user_);
  EXPECT_EQ(h.value("status", ""), "pending") << h.dump();
  EXPECT_NE(h.value("pending_reason", "").find("90%"), std::string::npos)
      << h.dump();

  // Cancelling the scheduled blocker asks its node to stop it: the memory
  // stays charged until the node says the task is gone.
  HttpReply c =
      api_->http().Post("/api/v1/tasks/" + std::to_string(big) + "/cancel",
                        json::object(), user_);
  ASSERT_TRUE(HasStatus(c, 200));
  EXPECT_EQ(c.body["status"], "scheduled");
  EXPECT_EQ(c.body["cancel_requested"], true);
  const std::int64_t blocker = b["slice_id"].get<std::int64_t>();
  EXPECT_EQ(api_->GetSlice(blocker, user_)["state"], "allocated");
  HttpReply a = node.Assignments();
  ASSERT_TRUE(HasStatus(a, 200));
  EXPECT_EQ(a.body["cancel"], json::array({big})) << a.raw;
  // The node never started it: the waiting task binds without any other
  // event.
  ASSERT_TRUE(HasStatus(node.ReportState(big, "cancelled"), 200));
  json released = api_->GetSlice(blocker, user_);
  EXPECT_EQ(released["state"], "released");
  EXPECT_TRUE(released["released_at"].is_string());
  EXPECT_EQ(api_->GetTask(big, user_)["status"], "cancelled");
  json bound = api_->WaitNotPending(waiting, user_);
  EXPECT_EQ(bound.value("status", ""), "scheduled") << bound.dump();
  EXPECT_TRUE(bound["pending_reason"].is_null()) << bound.dump();
}

TEST_F(TaskPlacementTest, ComputeIsAccountedToo) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  const std::int64_t a = CreateId({{"name", "a"}, {"gpu_compute_ratio", 0.7}});
  ASSERT_EQ(api_->WaitNotPending(a, user_).value("status", ""), "scheduled");
  const std::int64_t b = CreateId({{"name", "b"}, {"gpu_compute_ratio", 0.31}});
  json w = api_->WaitTried(b, user_);
  EXPECT_EQ(w.value("status", ""), "pending") << w.dump();
  EXPECT_NE(w.value("pending_reason", "").find("compute"), std::string::npos)
      << w.dump();
  const std::int64_t c = CreateId({{"name", "c"}, {"gpu_compute_ratio", 0.3}});
  EXPECT_EQ(api_->WaitNotPending(c, user_).value("status", ""), "scheduled");
}

TEST_F(TaskPlacementTest, CancellingFinishedTasksConflicts) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(CreateId(
        {{"name", "f"}, {"gpu_memory_mb", 1024}, {"gpu_compute_ratio", 0.1}}));
    ASSERT_EQ(api_->WaitNotPending(ids.back(), user_).value("status", ""),
              "scheduled");
  }
  ASSERT_TRUE(HasStatus(node.ReportState(ids[0], "running"), 200));
  ASSERT_TRUE(HasStatus(node.ReportState(ids[0], "succeeded", 0), 200));
  ASSERT_TRUE(HasStatus(node.ReportState(ids[1], "failed", 3, "boom"), 200));
  for (int i : {0, 1}) {
    EXPECT_TRUE(IsApiError(
        api_->http().Post("/api/v1/tasks/" + std::to_string(ids[i]) + "/cancel",
                          json::object(), user_),
        409, "conflict"));
  }
  json failed = api_->GetTask(ids[1], user_);
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_EQ(failed["exit_code"], 3);
  EXPECT_EQ(failed["message"], "boom");
  // A running task: cancel is a request the agent carries out.
  ASSERT_TRUE(HasStatus(node.ReportState(ids[2], "running"), 200));
  HttpReply c =
      api_->http().Post("/api/v1/tasks/" + std::to_string(ids[2]) + "/cancel",
                        json::object(), user_);
  ASSERT_TRUE(HasStatus(c, 200));
  EXPECT_EQ(c.body["status"], "running");
  EXPECT_EQ(c.body["cancel_requested"], true);
  HttpReply a = node.Assignments();
  ASSERT_TRUE(HasStatus(a, 200));
  EXPECT_EQ(a.body["cancel"], json({ids[2]})) << a.raw;
  ASSERT_TRUE(HasStatus(node.ReportState(ids[2], "cancelled"), 200));
  json done = api_->GetTask(ids[2], user_);
  EXPECT_EQ(done["status"], "cancelled");
  json slice = api_->GetSlice(done["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(slice["state"], "released");
  // Cancelling a cancelled task again is fine.
  EXPECT_TRUE(HasStatus(
      api_->http().Post("/api/v1/tasks/" + std::to_string(ids[2]) + "/cancel",
                        json::object(), user_),
      200));
}

}  // namespace
}  // namespace hf::e2e
