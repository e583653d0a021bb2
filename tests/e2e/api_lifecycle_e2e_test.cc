// End-to-end tests of the slices API, tenant isolation, orphan GC and
// restart recovery (docs/CONTRACT.md sections 5, 6 and 7) through the real
// hf-server binary. Each test starts its own server: placement and the ledger's
// totals are what these tests look at, so no other test may add GPUs or
// slices.
#include <map>
#include <set>
#include <string>
#include <thread>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

class LifecycleTest : public ::testing::Test {
 protected:
  // Slices without a ratio count 5% compute here (not 50%), so memory is
  // what decides where they fit.
  virtual std::vector<std::string> Flags() const {
    return {"--default-compute-percent", "5"};
  }
  void SetUp() override {
    ServerOptions options;
    options.flags = Flags();
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
  }
  void TearDown() override {
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  const HttpClient& http() const { return api_->http(); }
  const std::string& admin() const { return api_->admin(); }
  json Bound(const json& body, const std::string& token) const {
    json t = api_->CreateTask(body, token);
    if (!t.is_object()) return nullptr;
    t = api_->WaitNotPending(t["id"].get<std::int64_t>(), token);
    EXPECT_EQ(t.value("status", ""), "scheduled") << t.dump();
    return t;
  }
  json Pending(const json& body, const std::string& token) const {
    json t = api_->CreateTask(body, token);
    if (!t.is_object()) return nullptr;
    t = api_->WaitTried(t["id"].get<std::int64_t>(), token);
    EXPECT_EQ(t.value("status", ""), "pending") << t.dump();
    return t;
  }
  static int Gpu(const json& task) {
    return task.is_object() && task["gpu_indices"].size() == 1
               ? task["gpu_indices"][0].get<int>()
               : -1;
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
};

// ------------------------------------------------------ tenant isolation

TEST_F(LifecycleTest, TenantsShareGpusOnlyInsideTheirGroup) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::string group = UniqueName("grp");
  const std::string a = api_->NewTenant("alpha", group);
  const std::string b = api_->NewTenant("bravo");
  const std::string c = api_->NewTenant("charlie", group);
  const std::string d = api_->NewTenant("delta");
  const std::string ua = api_->CreateToken("user", a);
  const std::string ub = api_->CreateToken("user", b);
  const std::string uc = api_->CreateToken("user", c);
  const std::string ud = api_->CreateToken("user", d);

  json ta = Bound({{"name", "a1"}, {"gpu_memory_mb", 10000}}, ua);
  const int x = Gpu(ta);
  ASSERT_GE(x, 0);
  // Best fit would put B next to A (least free memory); the tenancy rule
  // sends it to the other GPU.
  json tb = Bound({{"name", "b1"}, {"gpu_memory_mb", 10000}}, ub);
  EXPECT_NE(Gpu(tb), x);
  // C shares A's group: it may join A.
  json tc = Bound({{"name", "c1"}, {"gpu_memory_mb", 30000}}, uc);
  EXPECT_EQ(Gpu(tc), x);
  // A's next slice fills A's GPU (best fit), not B's.
  json ta2 = Bound({{"name", "a2"}, {"gpu_memory_mb", 10000}}, ua);
  EXPECT_EQ(Gpu(ta2), x);
  // D shares with nobody and every GPU holds another tenant.
  json td = Pending({{"name", "d1"}, {"gpu_memory_mb", 1000}}, ud);
  EXPECT_NE(td.value("pending_reason", "")
                .find("2 GPUs excluded by the tenant-sharing constraint"),
            std::string::npos)
      << td.dump();

  // ---- reads are narrowed to the caller's tenant
  const auto id = [](const json& t) { return t["id"].get<std::int64_t>(); };
  const auto sid = [](const json& t) {
    return t["slice_id"].get<std::int64_t>();
  };
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/tasks/" + std::to_string(id(tb)), ua), 404,
                 "not_found"));
  EXPECT_TRUE(IsApiError(
      http().Post("/api/v1/tasks/" + std::to_string(id(tb)) + "/cancel",
                  json::object(), ua),
      404, "not_found"));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/slices/" + std::to_string(sid(tb)), ua),
                 404, "not_found"));
  // Same group is not same tenant.
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/slices/" + std::to_string(sid(tc)), ua),
                 404, "not_found"));
  json tasks = api_->ListAll("/api/v1/tasks", ua);
  std::set<std::int64_t> task_ids;
  for (const json& t : tasks) task_ids.insert(id(t));
  EXPECT_EQ(task_ids, (std::set<std::int64_t>{id(ta), id(ta2)}));
  json slices = api_->ListAll("/api/v1/slices", ua);
  std::set<std::int64_t> slice_ids;
  for (const json& s : slices) slice_ids.insert(s["id"].get<std::int64_t>());
  EXPECT_EQ(slice_ids, (std::set<std::int64_t>{sid(ta), sid(ta2)}));
  // Filters on the GPU they share still show only A's own.
  json on_x = api_->ListAll(
      "/api/v1/slices?node_id=n1&gpu_index=" + std::to_string(x), ua);
  EXPECT_EQ(on_x.size(), 2u) << on_x.dump();

  HttpReply stats = http().Get("/api/v1/slices/stats", ua);
  ASSERT_TRUE(HasStatus(stats, 200));
  EXPECT_EQ(stats.body["scope"], "tenant");
  EXPECT_EQ(stats.body["tenant"], a);
  ASSERT_EQ(stats.body["gpus"].size(), 1u) << stats.raw;
  EXPECT_EQ(stats.body["gpus"][0]["gpu_index"], x);
  EXPECT_EQ(stats.body["gpus"][0]["tenants"], json({a}));
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 20000) << stats.raw;
  EXPECT_EQ(stats.body["totals"]["accounted_memory_mb"], 20000) << stats.raw;
  EXPECT_EQ(stats.body["totals"]["live_slices"], 2) << stats.raw;
  for (const std::string& other : {b, c, d}) {
    EXPECT_FALSE(JsonMentions(stats.body, other))
        << other << " in " << stats.raw;
  }
  // C's 30000 MB on the same GPU must not leak through totals either.
  EXPECT_FALSE(JsonMentions(stats.body["totals"], "50000")) << stats.raw;

  json history = api_->ListAll("/api/v1/slices/history", ua);
  ASSERT_FALSE(history.empty());
  for (const json& h : history) {
    EXPECT_EQ(h["tenant"], a) << h.dump();
    EXPECT_TRUE(h["slice_id"] == sid(ta) || h["slice_id"] == sid(ta2))
        << h.dump();
  }
  for (const std::string& other : {b, c, d}) {
    EXPECT_FALSE(JsonMentions(history, other)) << other;
  }
  HttpReply foreign = http().Get(
      "/api/v1/slices/history?task_id=" + std::to_string(id(tb)), ua);
  ASSERT_TRUE(HasStatus(foreign, 200));
  EXPECT_EQ(foreign.body["items"], json::array()) << foreign.raw;

  // A node token sees nothing of tenants.
  const std::string node_token = node.token();
  HttpReply ns = http().Get("/api/v1/slices/stats", node_token);
  ASSERT_TRUE(HasStatus(ns, 200));
  EXPECT_EQ(ns.body["scope"], "tenant");
  EXPECT_TRUE(ns.body["tenant"].is_null()) << ns.raw;
  EXPECT_EQ(ns.body["gpus"], json::array()) << ns.raw;
  EXPECT_EQ(ns.body["nodes"], json::array()) << ns.raw;
  EXPECT_EQ(ns.body["totals"]["live_slices"], 0) << ns.raw;
  EXPECT_EQ(ns.body["totals"]["accounted_memory_mb"], 0) << ns.raw;
  for (const std::string& t : {a, b, c, d}) {
    EXPECT_FALSE(JsonMentions(ns.body, t)) << ns.raw;
  }
  EXPECT_EQ(api_->ListAll("/api/v1/tasks", node_token), json::array());
  EXPECT_EQ(api_->ListAll("/api/v1/slices", node_token), json::array());
  EXPECT_EQ(api_->ListAll("/api/v1/slices/history", node_token), json::array());
  EXPECT_TRUE(IsApiError(
      http().Get("/api/v1/tasks/" + std::to_string(id(ta)), node_token), 404,
      "not_found"));

  // Leaving the group: C's next slice may no longer join A.
  ASSERT_TRUE(HasStatus(http().Patch("/api/v1/tenants/" + c,
                                     {{"shared_group", nullptr}}, admin()),
                        200));
  json tc2 = Pending({{"name", "c2"}, {"gpu_memory_mb", 1000}}, uc);
  EXPECT_NE(tc2.value("pending_reason", "").find("tenant-sharing"),
            std::string::npos)
      << tc2.dump();
  // Back in the group: it joins A.
  ASSERT_TRUE(HasStatus(
      http().Patch("/api/v1/tenants/" + c, {{"shared_group", group}}, admin()),
      200));
  json tc2_bound = api_->WaitNotPending(id(tc2), uc);
  EXPECT_EQ(tc2_bound.value("status", ""), "scheduled") << tc2_bound.dump();
  EXPECT_EQ(Gpu(tc2_bound), x);
  // Deleting the group stops the sharing (fail-closed).
  ASSERT_TRUE(
      HasStatus(http().Delete("/api/v1/groups/" + group, admin()), 200));
  json tc3 = Pending({{"name", "c3"}, {"gpu_memory_mb", 1000}}, uc);
  EXPECT_NE(tc3.value("pending_reason", "").find("tenant-sharing"),
            std::string::npos)
      << tc3.dump();
  // Once B's task ends its GPU holds no tenant; D (waiting longest) gets it.
  ASSERT_TRUE(HasStatus(node.ReportState(id(tb), "succeeded", 0), 200));
  json d_bound = api_->WaitNotPending(id(td), ud);
  EXPECT_EQ(d_bound.value("status", ""), "scheduled") << d_bound.dump();
  EXPECT_EQ(Gpu(d_bound), Gpu(tb));
  EXPECT_EQ(api_->GetTask(id(tc3), uc)["status"], "pending");
}

// ----------------------------------------------------------- slices API

TEST_F(LifecycleTest, OperatorSlicesStatsAndHistory) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::string t = api_->NewTenant("ops");
  const std::string other = api_->NewTenant("ops-other");
  const std::string user = api_->CreateToken("user", t);
  const std::string tadmin = api_->CreateToken("tenant-admin", t);
  const std::string other_admin = api_->CreateToken("tenant-admin", other);

  // Validation, each naming its field.
  const auto post = [&](const json& body, const std::string& token) {
    return http().Post("/api/v1/slices", body, token);
  };
  EXPECT_TRUE(IsInvalid(
      post({{"tenant", t}, {"gpu_index", 0}, {"gpu_memory_mb", 1024}}, admin()),
      "gpu_index"));
  EXPECT_TRUE(IsInvalid(
      post({{"tenant", t}, {"node_id", "ghost"}, {"gpu_memory_mb", 1024}},
           admin()),
      "node_id"));
  EXPECT_TRUE(IsInvalid(post({{"tenant", t},
                              {"node_id", "n1"},
                              {"gpu_index", 5},
                              {"gpu_memory_mb", 1024}},
                             admin()),
                        "gpu_index"));
  EXPECT_TRUE(IsInvalid(post({{"tenant", t}, {"gpu_memory_mb", 16}}, admin()),
                        "gpu_memory_mb"));
  EXPECT_TRUE(IsInvalid(post({{"tenant", t}}, admin()), "gpu_memory_mb"));
  EXPECT_TRUE(IsInvalid(
      post({{"tenant", t}, {"gpu_memory_mb", 1024}, {"gpu_compute_ratio", 1.5}},
           admin()),
      "gpu_compute_ratio"));
  EXPECT_TRUE(IsInvalid(
      post({{"tenant", t}, {"gpu_memory_mb", 1024}, {"task_id", 1}}, admin()),
      "task_id"));
  EXPECT_TRUE(IsInvalid(
      post({{"tenant", t}, {"gpu_memory_mb", 1024}, {"qos_level", "gold"}},
           admin()),
      "qos_level"));
  EXPECT_TRUE(
      IsInvalid(post({{"tenant", "no-such"}, {"gpu_memory_mb", 1024}}, admin()),
                "tenant"));
  EXPECT_TRUE(IsApiError(post({{"tenant", t}, {"gpu_memory_mb", 1024}}, user),
                         403, "permission_denied"));
  EXPECT_TRUE(
      IsApiError(post({{"tenant", other}, {"gpu_memory_mb", 1024}}, tadmin),
                 403, "permission_denied"));

  // Reservations pinned to each GPU leave 10 GB on each.
  HttpReply r1 = post({{"tenant", t},
                       {"node_id", "n1"},
                       {"gpu_index", 1},
                       {"gpu_memory_mb", 71920},
                       {"gpu_compute_ratio", 0.25},
                       {"reason", "load test"}},
                      admin());
  ASSERT_TRUE(HasStatus(r1, 201));
  EXPECT_EQ(r1.body["tenant"], t);
  EXPECT_EQ(r1.body["node_id"], "n1");
  EXPECT_EQ(r1.body["gpu_index"], 1);
  EXPECT_EQ(r1.body["memory_mb"], 71920);
  EXPECT_EQ(r1.body["compute_percent"], 25);
  EXPECT_EQ(r1.body["origin"], "admin");
  EXPECT_TRUE(r1.body["task_id"].is_null());
  EXPECT_EQ(r1.body["state"], "allocated");
  EXPECT_EQ(r1.body["kind"], "slice");
  EXPECT_EQ(r1.body["qos_level"], "silver");
  // The tenant-admin reserves for its own tenant (no tenant field needed).
  HttpReply r0 = post(
      {{"node_id", "n1"}, {"gpu_index", 0}, {"gpu_memory_mb", 71920}}, tadmin);
  ASSERT_TRUE(HasStatus(r0, 201));
  EXPECT_EQ(r0.body["tenant"], t);
  EXPECT_EQ(r0.body["gpu_index"], 0);
  EXPECT_EQ(r0.body["compute_defaulted"], true);
  // A pinned slice that does not fit: 409 conflict.
  EXPECT_TRUE(IsApiError(post({{"tenant", t},
                               {"node_id", "n1"},
                               {"gpu_index", 0},
                               {"gpu_memory_mb", 20000}},
                              admin()),
                         409, "conflict"));
  // Unpinned: placed by the policy when it fits somewhere.
  HttpReply r2 = post({{"tenant", t}, {"gpu_memory_mb", 2000}}, admin());
  ASSERT_TRUE(HasStatus(r2, 201));
  EXPECT_EQ(r2.body["node_id"], "n1");

  // Stats agree with the slices.
  json live = api_->ListAll("/api/v1/slices", admin());
  std::map<int, std::int64_t> per_gpu;
  std::int64_t sum = 0;
  for (const json& s : live) {
    per_gpu[s["gpu_index"].get<int>()] += s["memory_mb"].get<std::int64_t>();
    sum += s["memory_mb"].get<std::int64_t>();
  }
  EXPECT_EQ(sum, 71920 * 2 + 2000);
  HttpReply stats = http().Get("/api/v1/slices/stats", admin());
  ASSERT_TRUE(HasStatus(stats, 200));
  const json& totals = stats.body["totals"];
  EXPECT_EQ(stats.body["scope"], "cluster");
  EXPECT_EQ(totals["accounted_memory_mb"], sum) << stats.raw;
  EXPECT_EQ(totals["total_memory_mb"], 2 * 81920) << stats.raw;
  EXPECT_EQ(totals["free_memory_mb"], 2 * 81920 - sum) << stats.raw;
  EXPECT_EQ(totals["live_slices"], static_cast<int>(live.size()));
  EXPECT_EQ(totals["gpus"], 2);
  EXPECT_EQ(totals["nodes"], 1);
  std::int64_t largest = 0;
  for (const json& g : stats.body["gpus"]) {
    const int index = g["gpu_index"].get<int>();
    EXPECT_EQ(g["accounted_memory_mb"], per_gpu[index]) << g.dump();
    EXPECT_EQ(g["free_memory_mb"], 81920 - per_gpu[index]) << g.dump();
    largest = std::max(largest, 81920 - per_gpu[index]);
  }
  ASSERT_EQ(stats.body["nodes"].size(), 1u);
  EXPECT_EQ(stats.body["nodes"][0]["accounted_memory_mb"], sum);
  EXPECT_EQ(stats.body["fragmentation"]["largest_placeable_slice_mb"], largest)
      << stats.raw;
  EXPECT_EQ(stats.body["fragmentation"]["free_memory_mb"], 2 * 81920 - sum)
      << stats.raw;

  // Filters.
  EXPECT_EQ(
      api_->ListAll("/api/v1/slices?node_id=n1&gpu_index=1", admin()).size(),
      per_gpu[1] == 71920 ? 1u : 2u);
  EXPECT_EQ(api_->ListAll("/api/v1/slices?node_id=ghost", admin()),
            json::array());
  EXPECT_TRUE(IsInvalid(http().Get("/api/v1/slices?gpu_index=-1", admin()),
                        "gpu_index"));
  EXPECT_TRUE(IsInvalid(http().Get("/api/v1/slices?gpu_index=x", admin()),
                        "gpu_index"));
  EXPECT_TRUE(
      IsInvalid(http().Get("/api/v1/slices?state=gone", admin()), "state"));
  EXPECT_TRUE(
      IsInvalid(http().Get("/api/v1/slices?limit=0", admin()), "limit"));

  // Quota returns on DELETE: a task that does not fit binds afterwards.
  json waiting = Pending({{"name", "w"}, {"gpu_memory_mb", 20000}}, user);
  EXPECT_NE(waiting.value("pending_reason", "").find("insufficient GPU memory"),
            std::string::npos)
      << waiting.dump();
  const std::string r1_path = "/api/v1/slices/" + r1.body["id"].dump();
  EXPECT_TRUE(
      IsApiError(http().Delete(r1_path, user), 403, "permission_denied"));
  EXPECT_TRUE(
      IsApiError(http().Delete(r1_path, other_admin), 404, "not_found"));
  EXPECT_TRUE(IsApiError(http().Delete("/api/v1/slices/999999", admin()), 404,
                         "not_found"));
  EXPECT_TRUE(IsInvalid(http().Delete(r1_path + "?why=x", admin()), "why"));
  HttpReply deleted =
      http().Delete(r1_path + "?reason=done%20testing", admin());
  ASSERT_TRUE(HasStatus(deleted, 200));
  EXPECT_EQ(deleted.body["state"], "released");
  EXPECT_TRUE(deleted.body["released_at"].is_string());
  json bound = api_->WaitNotPending(waiting["id"].get<std::int64_t>(), user);
  EXPECT_EQ(bound.value("status", ""), "scheduled") << bound.dump();
  EXPECT_EQ(Gpu(bound), 1);
  // Deleting again changes nothing.
  HttpReply again = http().Delete(r1_path, admin());
  ASSERT_TRUE(HasStatus(again, 200));
  EXPECT_EQ(again.body["state"], "released");
  EXPECT_EQ(again.body["released_at"], deleted.body["released_at"]);

  // History: every operation, paged with a cursor, filterable.
  json all = api_->ListAll("/api/v1/slices/history", admin());
  json paged = api_->ListAll("/api/v1/slices/history?limit=2", admin());
  EXPECT_EQ(paged, all);
  ASSERT_GE(all.size(), 5u) << all.dump();
  std::int64_t last_id = 0;
  bool release_seen = false;
  for (const json& h : all) {
    for (const char* field :
         {"id", "at", "op", "slice_id", "task_id", "tenant", "node_id",
          "gpu_index", "memory_mb", "compute_percent", "actor", "reason"}) {
      EXPECT_TRUE(h.contains(field)) << field << " in " << h.dump();
    }
    EXPECT_GT(h["id"].get<std::int64_t>(), last_id);
    last_id = h["id"].get<std::int64_t>();
    if (h["op"] == "release" && h["slice_id"] == r1.body["id"]) {
      release_seen = true;
      EXPECT_EQ(h["reason"], "done testing");
      EXPECT_EQ(h["memory_mb"], 71920);
    }
    if (h["op"] == "allocate" && h["slice_id"] == r1.body["id"]) {
      EXPECT_EQ(h["reason"], "load test");
      EXPECT_TRUE(h["task_id"].is_null());
    }
  }
  EXPECT_TRUE(release_seen) << all.dump();
  json for_slice = api_->ListAll(
      "/api/v1/slices/history?slice_id=" + r1.body["id"].dump(), admin());
  EXPECT_EQ(for_slice.size(), 2u) << for_slice.dump();
  json for_task = api_->ListAll(
      "/api/v1/slices/history?task_id=" + waiting["id"].dump(), user);
  ASSERT_EQ(for_task.size(), 1u) << for_task.dump();
  EXPECT_EQ(for_task[0]["op"], "allocate");
  EXPECT_TRUE(IsInvalid(
      http().Get("/api/v1/slices/history?slice_id=x", admin()), "slice_id"));
  EXPECT_TRUE(IsInvalid(http().Get("/api/v1/slices/history?cursor=x", admin()),
                        "cursor"));
  // The other tenant's admin sees none of it.
  EXPECT_EQ(api_->ListAll("/api/v1/slices/history", other_admin),
            json::array());
  EXPECT_TRUE(IsApiError(http().Get(r1_path, other_admin), 404, "not_found"));
  EXPECT_TRUE(
      IsApiError(http().Get("/api/v1/slices/abc", admin()), 404, "not_found"));
}

// Deleting the slice of a task that is still bound must not leave the
// task running unaccounted: its node may have started it (the agent's
// report may still be on the way), so the memory stays charged until the
// node says it stopped the task; only then is the task bound again.
TEST_F(LifecycleTest,
       DeletingABoundTasksSliceDoesNotLeaveItRunningUnaccounted) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}});
  ASSERT_TRUE(node.Register());
  const std::string t = api_->NewTenant("del");
  const std::string user = api_->CreateToken("user", t);
  json task = Bound({{"name", "big"}, {"gpu_memory_mb", 60000}}, user);
  const std::int64_t id = task["id"].get<std::int64_t>();
  const std::int64_t slice_id = task["slice_id"].get<std::int64_t>();
  HttpReply deleted =
      http().Delete("/api/v1/slices/" + std::to_string(slice_id), admin());
  ASSERT_TRUE(HasStatus(deleted, 200));
  EXPECT_EQ(deleted.body["state"], "releasing");
  // The node is told to stop it, never to start it on that slice.
  HttpReply assignments = node.Assignments();
  ASSERT_TRUE(HasStatus(assignments, 200));
  EXPECT_EQ(assignments.body["cancel"], json::array({id})) << assignments.raw;
  for (const json& run : assignments.body["run"]) {
    EXPECT_NE(run["id"], id) << "the agent is told to start a task whose "
                                "slice was deleted: "
                             << run.dump();
  }
  // Not bound again while the old binding may still run.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(api_->GetTask(id, user)["slice_id"], slice_id);
  EXPECT_EQ(api_->GetSlice(slice_id, admin())["state"], "releasing");
  // The node reports it stopped: the slice is free, the task bound again.
  ASSERT_TRUE(HasStatus(node.ReportState(id, "cancelled"), 200));
  EXPECT_EQ(api_->GetSlice(slice_id, admin())["state"], "released");
  ASSERT_TRUE(WaitFor([&] {
    json now = api_->GetTask(id, user);
    return now["status"] == "scheduled" && now["slice_id"] != slice_id;
  })) << api_->GetTask(id, user).dump();
}

// Many clients at once: every bind is accounted exactly once and no GPU is
// oversold; freed capacity goes to the waiting tasks.
TEST_F(LifecycleTest, ConcurrentSubmissionsNeverOversell) {
  SimNode node(*api_, "n1",
               {SimGpu{.index = 0, .memory_mb = 40960},
                SimGpu{.index = 1, .memory_mb = 40960}});
  ASSERT_TRUE(node.Register());
  const std::string t = api_->NewTenant("conc");
  const std::string user = api_->CreateToken("user", t);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 30;
  std::vector<std::thread> threads;
  std::vector<std::vector<std::int64_t>> ids(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const HttpClient client = http();
      for (int k = 0; k < kPerThread; ++k) {
        HttpReply r = client.Post("/api/v1/tasks",
                                  {{"name", "c"},
                                   {"gpu_memory_mb", 1024},
                                   {"gpu_compute_ratio", 0.01}},
                                  user);
        if (r.status == 201) ids[i].push_back(r.body["id"].get<std::int64_t>());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::vector<std::int64_t> all;
  for (const auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
  // 40 slices of 1024 MB fit on each 40960 MB GPU: 80 bound, 40 waiting.
  const auto count = [&](const std::string& status) {
    return api_->ListAll("/api/v1/tasks?status=" + status, user).size();
  };
  ASSERT_TRUE(WaitFor([&] { return count("scheduled") == 80; }))
      << count("scheduled") << " scheduled";
  EXPECT_EQ(count("pending"), 40u);
  const auto check_ledger = [&] {
    json live = api_->ListAll("/api/v1/slices", admin());
    std::map<int, std::int64_t> per_gpu;
    std::set<std::int64_t> tasks;
    for (const json& s : live) {
      per_gpu[s["gpu_index"].get<int>()] += s["memory_mb"].get<std::int64_t>();
      EXPECT_TRUE(tasks.insert(s["task_id"].get<std::int64_t>()).second)
          << "two live slices for task " << s["task_id"];
    }
    HttpReply stats = http().Get("/api/v1/slices/stats", admin());
    for (const json& g : stats.body["gpus"]) {
      const int index = g["gpu_index"].get<int>();
      EXPECT_EQ(g["accounted_memory_mb"], per_gpu[index]) << g.dump();
      EXPECT_LE(g["accounted_memory_mb"].get<std::int64_t>(), 40960);
    }
    EXPECT_EQ(stats.body["totals"]["live_slices"],
              static_cast<int>(live.size()));
    return live.size();
  };
  EXPECT_EQ(check_ledger(), 80u);
  // Cancel 20 bound tasks from two threads; 20 waiting ones take their place.
  json bound = api_->ListAll("/api/v1/tasks?status=scheduled", user);
  threads.clear();
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      const HttpClient client = http();
      for (int k = i; k < 40; k += 4) {
        client.Post("/api/v1/tasks/" + bound[k]["id"].dump() + "/cancel",
                    json::object(), user);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  // The node confirms each stop (it never started them): only then are the
  // slices free for the waiting tasks.
  HttpReply stops = node.Assignments();
  ASSERT_TRUE(HasStatus(stops, 200));
  ASSERT_EQ(stops.body["cancel"].size(), 20u) << stops.raw;
  for (const json& stop : stops.body["cancel"]) {
    ASSERT_TRUE(HasStatus(
        node.ReportState(stop.get<std::int64_t>(), "cancelled"), 200));
  }
  ASSERT_TRUE(WaitFor([&] { return count("pending") == 20; }))
      << count("pending") << " pending";
  EXPECT_EQ(count("cancelled"), 20u);
  EXPECT_EQ(count("scheduled"), 80u);
  EXPECT_EQ(check_ledger(), 80u);
}

// ------------------------------------------------------------ orphan GC

// The default policy, hf-frag, in the real server: Best-Fit until it has
// seen --policy-cold-start-tasks tasks, then hf-frag against the workload
// it learned, which it learns again from the store's history on restart.
// Every task is bound, and no GPU is oversold, before and after.
class HfFragTest : public LifecycleTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--default-compute-percent", "5", "--policy-cold-start-tasks", "8"};
  }
  json Placement() const {
    HttpReply stats = http().Get("/api/v1/slices/stats", admin());
    EXPECT_TRUE(HasStatus(stats, 200));
    for (const json& g : stats.body["gpus"]) {
      EXPECT_LE(g["accounted_memory_mb"].get<std::int64_t>(),
                g["total_memory_mb"].get<std::int64_t>())
          << "oversold: " << g.dump();
    }
    return stats.body["placement"];
  }
};

TEST_F(HfFragTest, LeavesItsColdStartAndKeepsWhatItLearnedOverARestart) {
  SimNode a(*api_, "a", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  SimNode b(*api_, "b",
            {SimGpu{.index = 0, .model = "Tesla T4", .memory_mb = 15360}});
  ASSERT_TRUE(a.Register());
  ASSERT_TRUE(b.Register());
  const std::string user = api_->CreateToken("user", api_->NewTenant("hf"));
  json placement = Placement();
  EXPECT_EQ(placement["policy"], "hf-frag");
  EXPECT_EQ(placement["mode"], "best-fit") << placement.dump();
  // Slices of a few shapes: more than the cold start.
  const std::int64_t sizes[] = {4096, 8192, 2048, 4096, 12288, 1024};
  for (int i = 0; i < 12; ++i) {
    json t = Bound(
        {{"name", "t" + std::to_string(i)}, {"gpu_memory_mb", sizes[i % 6]}},
        user);
    ASSERT_TRUE(t.is_object());
  }
  placement = Placement();
  EXPECT_EQ(placement["mode"], "hf-frag") << placement.dump();
  EXPECT_GE(placement["tasks_learned"].get<int>(), 12) << placement.dump();
  ASSERT_TRUE(server_->Restart());
  placement = Placement();
  EXPECT_EQ(placement["mode"], "hf-frag") << placement.dump();
  EXPECT_GE(placement["tasks_learned"].get<int>(), 12) << placement.dump();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        Bound({{"name", "after" + std::to_string(i)}, {"gpu_memory_mb", 4096}},
              user)
            .is_object());
  }
  (void)Placement();
}

class GcTest : public LifecycleTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--default-compute-percent",
            "5",
            "--gc-interval",
            "0.2",
            "--gc-min-age",
            "0"};
  }
};

TEST_F(GcTest, GcReleasesOnlyWhatNoLiveTaskHolds) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::string t = api_->NewTenant("gc");
  const std::string user = api_->CreateToken("user", t);
  HttpReply reservation = http().Post(
      "/api/v1/slices", {{"tenant", t}, {"gpu_memory_mb", 1024}}, admin());
  ASSERT_TRUE(HasStatus(reservation, 201));
  json running = Bound({{"name", "running"}, {"gpu_memory_mb", 2048}}, user);
  ASSERT_TRUE(HasStatus(
      node.ReportState(running["id"].get<std::int64_t>(), "running"), 200));
  json scheduled =
      Bound({{"name", "scheduled"}, {"gpu_memory_mb", 2048}}, user);
  json finished = Bound({{"name", "finished"}, {"gpu_memory_mb", 2048}}, user);
  // A ledger-only compensation slice of a running task.
  json comp = api_->CreateTask(
      {{"name", "comp"}, {"gpu_type", "amd"}, {"gpu_memory_mb", 512}}, user);
  ASSERT_TRUE(comp.is_object());
  const std::int64_t comp_id = comp["id"].get<std::int64_t>();
  ASSERT_TRUE(HasStatus(
      node.Heartbeat(
          {{{"task_id", comp_id}, {"state", "running"}, {"gpu_indices", {0}}}}),
      200));
  comp = api_->GetTask(comp_id, user);
  ASSERT_TRUE(comp["slice_id"].is_number_integer()) << comp.dump();

  ASSERT_TRUE(HasStatus(
      node.ReportState(finished["id"].get<std::int64_t>(), "succeeded", 0),
      200));
  EXPECT_EQ(
      api_->GetSlice(finished["slice_id"].get<std::int64_t>(), user)["state"],
      "released");
  // Several GC passes.
  std::this_thread::sleep_for(milliseconds(1200));
  for (const json& s : {reservation.body["id"], running["slice_id"],
                        scheduled["slice_id"], comp["slice_id"]}) {
    EXPECT_EQ(api_->GetSlice(s.get<std::int64_t>(), admin())["state"],
              "allocated")
        << "slice " << s << " released by GC";
  }
  json history = api_->ListAll("/api/v1/slices/history", admin());
  for (const json& h : history) {
    EXPECT_NE(h["actor"], "gc") << h.dump();
  }
  EXPECT_TRUE(server_->Log(1 << 20).find("gc: released") == std::string::npos)
      << server_->Log();
}

// --------------------------------------------------------------- restart

// A client that lost the reply of POST /api/v1/tasks sends it again with
// the same Idempotency-Key, after the server was SIGKILLed and restarted:
// it gets the same task, and there is still only one (docs/API.md,
// "Idempotent POSTs").
TEST_F(LifecycleTest, IdempotencyKeyOutlivesAKilledServer) {
  const std::string tenant = api_->NewTenant("idem");
  const std::string user = api_->CreateToken("user", tenant);
  const std::string body = R"({"name": "once", "gpu_memory_mb": 64})";
  const std::vector<std::pair<std::string, std::string>> key = {
      {"Idempotency-Key", "lost-reply-1"}};
  HttpReply first = http().Send("POST", "/api/v1/tasks", body, user, key);
  ASSERT_TRUE(HasStatus(first, 201));
  HttpReply tenant_post =
      http().Send("POST", "/api/v1/tenants", R"({"name": "idem-extra"})",
                  admin(), {{"Idempotency-Key", "lost-reply-2"}});
  ASSERT_TRUE(HasStatus(tenant_post, 201));

  ASSERT_TRUE(server_->Restart(/*kill=*/true));

  HttpReply again = http().Send("POST", "/api/v1/tasks", body, user, key);
  ASSERT_TRUE(HasStatus(again, 201));
  EXPECT_EQ(again.body["id"], first.body["id"]) << again.raw;
  EXPECT_EQ(again.raw, first.raw);
  EXPECT_EQ(api_->ListAll("/api/v1/tasks", user).size(), 1u);
  // Not a 409 "already exists": the recorded 201.
  HttpReply tenant_again =
      http().Send("POST", "/api/v1/tenants", R"({"name": "idem-extra"})",
                  admin(), {{"Idempotency-Key", "lost-reply-2"}});
  EXPECT_TRUE(HasStatus(tenant_again, 201));
  EXPECT_EQ(tenant_again.raw, tenant_post.raw);
  // The same key for another task: refused, naming the header.
  HttpReply reused =
      http().Send("POST", "/api/v1/tasks",
                  R"({"name": "other", "gpu_memory_mb": 64})", user, key);
  EXPECT_TRUE(IsApiError(reused, 422, "idempotency_key_reused"))
      << reused.Describe();
  EXPECT_EQ(reused.body.value("field", ""), "Idempotency-Key");
}

TEST_F(LifecycleTest, RestartKeepsEverythingAndIdsDoNotCollide) {
  SimNode node(*api_, "n1", {SimGpu{.index = 0}, SimGpu{.index = 1}});
  ASSERT_TRUE(node.Register());
  const std::string group = UniqueName("grp");
  const std::string a = api_->NewTenant("ra", group);
  const std::string b = api_->NewTenant("rb");
  const std::string ua = api_->CreateToken("user", a);
  const std::string ub = api_->CreateToken("user", b);
  json revoked_row;
  const std::string revoked = api_->CreateToken("user", a, "", &revoked_row);
  ASSERT_TRUE(HasStatus(
      http().Delete("/api/v1/tokens/" + revoked_row["id"].dump(), admin()),
      200));
  json ta = Bound({{"name", "a"}, {"gpu_memory_mb", 40000}}, ua);
  json tb = Bound({{"name", "b"}, {"gpu_memory_mb", 40000}}, ub);
  ASSERT_NE(Gpu(ta), Gpu(tb));
  json cancelled = api_->CreateTask({{"name", "c"}, {"gpu_memory_mb", 64}}, ua);
  ASSERT_TRUE(HasStatus(
      http().Post("/api/v1/tasks/" + cancelled["id"].dump() + "/cancel",
                  json::object(), ua),
      200));
  // Fits nowhere now (A's GPU has 41920 MB free, B's GPU is B's).
  json waiting = Pending({{"name", "w"}, {"gpu_memory_mb", 45000}}, ua);
  HttpReply reservation = http().Post(
      "/api/v1/slices", {{"tenant", a}, {"gpu_memory_mb", 1000}}, admin());
  ASSERT_TRUE(HasStatus(reservation, 201));
  json tasks_before = api_->ListAll("/api/v1/tasks", admin());
  json slices_before = api_->ListAll("/api/v1/slices?state=all", admin());
  json stats_before = http().Get("/api/v1/slices/stats", admin()).body;
  json history_before = api_->ListAll("/api/v1/slices/history", admin());
  std::int64_t max_slice = 0;
  for (const json& s : slices_before) {
    max_slice = std::max(max_slice, s["id"].get<std::int64_t>());
  }

  ASSERT_TRUE(server_->Restart());

  // Tokens: still valid, revoked still revoked.
  EXPECT_TRUE(HasStatus(http().Get("/api/v1/whoami", admin()), 200));
  EXPECT_EQ(http().Get("/api/v1/whoami", ua).body.value("tenant", ""), a);
  EXPECT_TRUE(IsApiError(http().Get("/api/v1/whoami", revoked), 401,
                         "unauthenticated"));
  EXPECT_TRUE(HasStatus(http().Get("/api/v1/whoami", node.token()), 200));
  // Tasks and slices as they were.
  EXPECT_EQ(api_->ListAll("/api/v1/tasks", admin()), tasks_before);
  EXPECT_EQ(api_->ListAll("/api/v1/slices?state=all", admin()), slices_before);
  json stats_after = http().Get("/api/v1/slices/stats", admin()).body;
  EXPECT_EQ(stats_after["totals"]["accounted_memory_mb"],
            stats_before["totals"]["accounted_memory_mb"]);
  EXPECT_EQ(stats_after["gpus"], stats_before["gpus"]);
  json history_after = api_->ListAll("/api/v1/slices/history", admin());
  ASSERT_GE(history_after.size(), history_before.size());
  EXPECT_EQ(json(std::vector<json>(
                history_after.begin(),
                history_after.begin() +
                    static_cast<std::ptrdiff_t>(history_before.size()))),
            history_before);
  EXPECT_EQ(http().Get("/api/v1/tenants/" + a, admin()).body["shared_group"],
            group);
  // The ledger was rebuilt: the waiting task still does not fit.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(api_->GetTask(waiting["id"].get<std::int64_t>(), ua)["status"],
            "pending");
  // New slices get new ids, and the tenancy rule still holds (B's next
  // slice does not join A even where it would fit best).
  json tb2 = Bound({{"name", "b2"}, {"gpu_memory_mb", 1000}}, ub);
  EXPECT_GT(tb2["slice_id"].get<std::int64_t>(), max_slice);
  EXPECT_EQ(Gpu(tb2), Gpu(tb));
  HttpReply r2 = http().Post("/api/v1/slices",
                             {{"tenant", a}, {"gpu_memory_mb", 1000}}, admin());
  ASSERT_TRUE(HasStatus(r2, 201));
  EXPECT_GT(r2.body["id"].get<std::int64_t>(),
            tb2["slice_id"].get<std::int64_t>());
  // Capacity freed after the restart reaches the waiting task.
  ASSERT_TRUE(HasStatus(
      node.ReportState(ta["id"].get<std::int64_t>(), "succeeded", 0), 200));
  json bound = api_->WaitNotPending(waiting["id"].get<std::int64_t>(), ua);
  EXPECT_EQ(bound.value("status", ""), "scheduled") << bound.dump();
  EXPECT_GT(bound["slice_id"].get<std::int64_t>(), max_slice);
  // And a second clean stop.
  EXPECT_TRUE(server_->Stop());
}

}  // namespace
}  // namespace hf::e2e
