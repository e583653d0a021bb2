// End-to-end tests of defragmentation plans (docs/CONTRACT.md section 10) with
// the REAL hf-server and the REAL hf-agent on the simulated GPU backend: a plan
// is proposed on a fragmented node, applied move by move (each task stopped
// on its source GPU and started again on its target with a fresh env),
// cancelled in the middle, and carried through a SIGKILL of the server in
// the middle. After each, every task runs exactly once, at its source or
// its target, bound to one live slice, and the slices the server holds are
// exactly the tasks' (no reservation leaks, nothing counted twice, no GPU
// over its memory).
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/agent_harness.h"

namespace hf::e2e {
namespace {

constexpr milliseconds kTimeout{60'000};
constexpr std::int64_t kGpuMb = 15360;  // a T4
constexpr std::int64_t kTaskMb = 3072;  // five per GPU

class DefragE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.flags = ServerFlags();
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    tenant_ = api_->NewTenant("defrag");
    user_ = api_->CreateToken("user", tenant_);
    AgentProcessOptions a;
    a.node_id = "n1";
    a.inventory = SimInventory("n1", Gpus());
    a.token = CreateNodeToken(*api_, "n1");
    agent_ = std::make_unique<AgentProcess>(server_->url(), a);
    ASSERT_TRUE(agent_->Start());
    ASSERT_TRUE(WaitFor(
        [&] {
          return api_->http().Get("/api/v1/nodes/n1", api_->admin()).status ==
                 200;
        },
        milliseconds(20'000)))
        << agent_->Log();
  }

  virtual std::vector<std::string> ServerFlags() const {
    return {"--gc-interval", "1"};
  }
  // The simulated GPUs of node n1 and the memory of each.
  virtual json Gpus() const { return json::array({T4(), T4()}); }
  virtual std::int64_t GpuMb() const { return kGpuMb; }

  void TearDown() override {
    if (agent_ && agent_->running()) {
      EXPECT_TRUE(agent_->Stop());
    }
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }

  std::int64_t Start(bool preemptible, std::int64_t memory_mb = kTaskMb) {
    json t = api_->CreateTask({{"name", "long"},
                               {"command", "sleep 600"},
                               {"gpu_memory_mb", memory_mb},
                               {"gpu_compute_ratio", 0.1},
                               {"preemptible", preemptible}},
                              user_);
    EXPECT_TRUE(t.is_object());
    const std::int64_t id = t.value("id", std::int64_t{0});
    json running = api_->WaitTask(
        id, user_, [](const json& x) { return x["status"] == "running"; },
        kTimeout);
    EXPECT_EQ(running["status"], "running") << running.dump();
    return id;
  }

  void Cancel(std::int64_t id) {
    HttpReply r =
        api_->http().Post("/api/v1/tasks/" + std::to_string(id) + "/cancel",
                          json::object(), user_);
    ASSERT_EQ(r.status, 200) << r.Describe();
    json done = api_->WaitTask(
        id, user_, [](const json& x) { return x["status"] == "cancelled"; },
        kTimeout);
    ASSERT_EQ(done["status"], "cancelled");
  }

  // GPU 0 keeps 2 tasks (9216 MB free), GPU 1 keeps 3 (6144 MB free): the
  // largest allocatable slice is 9216 MB although 15360 MB are free.
  // Returns the tasks still running.
  std::vector<std::int64_t> Fragment() {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 10; ++i) ids.push_back(Start(/*preemptible=*/true));
    std::map<int, std::vector<std::int64_t>> by_gpu;
    for (std::int64_t id : ids) {
      json t = api_->GetTask(id, user_);
      by_gpu[t["gpu_indices"][0].get<int>()].push_back(id);
    }
    EXPECT_EQ(by_gpu[0].size(), 5u);
    EXPECT_EQ(by_gpu[1].size(), 5u);
    std::vector<std::int64_t> kept;
    for (std::size_t i = 0; i < by_gpu[0].size(); ++i) {
      if (i < 3) {
        Cancel(by_gpu[0][i]);
      } else {
        kept.push_back(by_gpu[0][i]);
      }
    }
    for (std::size_t i = 0; i < by_gpu[1].size(); ++i) {
      if (i < 2) {
        Cancel(by_gpu[1][i]);
      } else {
        kept.push_back(by_gpu[1][i]);
      }
    }
    // Released slices leave the ledger when the node reports the stops.
    EXPECT_TRUE(
        WaitFor([&] { return LiveSlices().size() == kept.size(); }, kTimeout));
    return kept;
  }

  // Runs hfctl with the admin token; returns its exit code and stdout.
  std::pair<int, std::string> Hfctl(const std::string& args) const {
    const std::string cmd = std::string(HFCTL_PATH) + " --server " +
                            server_->url() + " --token " +
                            server_->admin_token() + " " + args + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) return {-1, ""};
    std::string out;
    char buf[4096];
    while (std::size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    const int status = pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }

  std::vector<json> LiveSlices() const {
    std::vector<json> out;
    for (const json& s : api_->ListAll("/api/v1/slices", api_->admin())) {
      if (s["state"] == "allocated" || s["state"] == "releasing") {
        out.push_back(s);
      }
    }
    return out;
  }

  json Plan(const json& body) {
    HttpReply r =
        api_->http().Post("/api/v1/defrag/plans", body, api_->admin());
    EXPECT_EQ(r.status, 201) << r.Describe();
    return r.body;
  }

  json GetPlan(std::int64_t id) const {
    HttpReply r = api_->http().Get("/api/v1/defrag/plans/" + std::to_string(id),
                                   api_->admin());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.body;
  }

  json WaitPlan(std::int64_t id, const std::function<bool(const json&)>& pred,
                milliseconds timeout = kTimeout) const {
    json last;
    WaitFor(
        [&] {
          last = GetPlan(id);
          return pred(last);
        },
        timeout, milliseconds(20));
    return last;
  }

  // Every task runs exactly once, bound to one live slice on GPU `source`
  // or `target` of its moves; the server's live slices are exactly the
  // tasks' slices; no GPU holds more than its memory.
  void ExpectConsistent(const std::vector<std::int64_t>& tasks,
                        const json& plan) {
    std::map<std::int64_t, std::set<int>> allowed;
    for (std::int64_t id : tasks) {
      allowed[id].insert(api_->GetTask(id, user_)["gpu_indices"][0].get<int>());
    }
    for (const json& m : plan["moves"]) {
      const std::int64_t id = m["task_id"].get<std::int64_t>();
      allowed[id].insert(m["from"]["gpu_index"].get<int>());
      allowed[id].insert(m["to"]["gpu_index"].get<int>());
    }
    std::set<std::int64_t> bound_slices;
    for (std::int64_t id : tasks) {
      json t = api_->WaitTask(
          id, user_, [](const json& x) { return x["status"] == "running"; },
          kTimeout);
      ASSERT_EQ(t["status"], "running") << t.dump();
      const int gpu = t["gpu_indices"][0].get<int>();
      EXPECT_TRUE(allowed[id].contains(gpu)) << t.dump();
      json s = api_->GetSlice(t["slice_id"].get<std::int64_t>(), api_->admin());
      EXPECT_EQ(s["state"], "allocated") << s.dump();
      EXPECT_EQ(s["task_id"], id) << s.dump();
      EXPECT_EQ(s["gpu_index"], gpu);
      bound_slices.insert(s["id"].get<std::int64_t>());
      // The task's process runs on this node (one per task id).
      EXPECT_TRUE(agent_->WaitTaskPid(id, milliseconds(20'000)).has_value())
          << "task " << id << " has no process";
    }
    // No reservation left behind, no slice counted twice.
    EXPECT_TRUE(WaitFor(
        [&] {
          std::set<std::int64_t> live;
          for (const json& s : LiveSlices()) {
            live.insert(s["id"].get<std::int64_t>());
          }
          return live == bound_slices;
        },
        kTimeout));
    std::map<int, std::int64_t> used;
    for (const json& s : LiveSlices()) {
      used[s["gpu_index"].get<int>()] += s["memory_mb"].get<std::int64_t>();
    }
    for (const auto& [gpu, mb] : used) EXPECT_LE(mb, GpuMb()) << "GPU " << gpu;
    // The history records every move.
    int moved = 0;
    for (const json& m : plan["moves"]) moved += m["state"] == "done";
    int recorded = 0;
    for (const json& h :
         api_->ListAll("/api/v1/slices/history", api_->admin())) {
      recorded += h["op"] == "defrag_move";
    }
    EXPECT_GE(recorded, moved);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<AgentProcess> agent_;
  std::string tenant_;
  std::string user_;
};

TEST_F(DefragE2eTest, ProposesOnASnapshotAndAppliesMoveByMove) {
  std::vector<std::int64_t> tasks = Fragment();
  // A tenant may not plan; bad input names its field.
  const std::string tenant_admin = api_->CreateToken("tenant-admin", tenant_);
  EXPECT_EQ(
      api_->http()
          .Post("/api/v1/defrag/plans", {{"max_moves", "x"}}, tenant_admin)
          .status,
      403);
  HttpReply bad = api_->http().Post("/api/v1/defrag/plans", {{"max_moves", 0}},
                                    api_->admin());
  EXPECT_EQ(bad.status, 400) << bad.Describe();
  EXPECT_EQ(bad.body.value("field", ""), "max_moves");
  bad = api_->http().Post("/api/v1/defrag/plans", {{"node_id", "nowhere"}},
                          api_->admin());
  EXPECT_EQ(bad.status, 400) << bad.Describe();
  EXPECT_EQ(bad.body.value("field", ""), "node_id");

  json plan = Plan({{"node_id", "n1"}, {"goal_memory_mb", kGpuMb}});
  ASSERT_EQ(plan["state"], "proposed") << plan.dump();
  ASSERT_EQ(plan["moves"].size(), 2u) << plan.dump();
  EXPECT_EQ(plan["before"]["largest_slice_mb"], 9216);
  EXPECT_EQ(plan["after"]["largest_slice_mb"], kGpuMb);
  EXPECT_GT(plan["before"]["fragmentation"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(plan["after"]["fragmentation"].get<double>(), 0.0);
  for (const json& m : plan["moves"]) {
    EXPECT_EQ(m["from"]["gpu_index"], 0);
    EXPECT_EQ(m["to"]["gpu_index"], 1);
  }
  // Proposing applies nothing.
  const std::int64_t moved_task = plan["moves"][0]["task_id"];
  const std::string env_before = api_->GetTask(moved_task, user_)["env"].dump();
  EXPECT_EQ(api_->GetTask(moved_task, user_)["gpu_indices"][0], 0);

  const std::int64_t id = plan["id"];
  HttpReply applied =
      api_->http().Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                        json::object(), api_->admin());
  ASSERT_EQ(applied.status, 202) << applied.Describe();
  json done =
      WaitPlan(id, [](const json& p) { return p["state"] != "applying"; });
  ASSERT_EQ(done["state"], "applied") << done.dump();
  for (const json& m : done["moves"]) EXPECT_EQ(m["state"], "done");
  ExpectConsistent(tasks, done);
  json t = api_->GetTask(moved_task, user_);
  EXPECT_EQ(t["gpu_indices"][0], 1);
  EXPECT_NE(t["env"].dump(), env_before);  // a fresh env for the new slice
  // GPU 0 is empty: the largest slice admission allows (90% of the card)
  // fits now, and only there.
  json big = api_->CreateTask({{"name", "big"},
                               {"command", "sleep 600"},
                               {"gpu_memory_mb", kGpuMb * 9 / 10}},
                              user_);
  json placed =
      api_->WaitNotPending(big["id"].get<std::int64_t>(), user_, kTimeout);
  EXPECT_EQ(placed["gpu_indices"][0], 0) << placed.dump();

  // An applied plan applies no more; the list shows it.
  EXPECT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                      json::object(), api_->admin())
                .status,
            409);
  json list = api_->ListAll("/api/v1/defrag/plans", api_->admin());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["state"], "applied");

  // hfctl: list, show, and a refused cancel of an applied plan.
  auto [rc, table] = Hfctl("defrag list");
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("applied"), std::string::npos) << table;
  EXPECT_NE(table.find("2/2"), std::string::npos) << table;
  auto [show_rc, shown] = Hfctl("-o json defrag show " + std::to_string(id));
  ASSERT_EQ(show_rc, 0) << shown;
  json parsed = json::parse(shown, nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << shown;
  EXPECT_EQ(parsed["state"], "applied");
  auto [cancel_rc, refused] = Hfctl("defrag cancel " + std::to_string(id));
  EXPECT_NE(cancel_rc, 0) << refused;
  // hfctl proposes: nothing left to gain on GPU 0 for a 1 GiB slice.
  auto [plan_rc, planned] = Hfctl("defrag plan --node n1 --goal-mb 1024");
  EXPECT_NE(plan_rc, 0) << planned;
}

TEST_F(DefragE2eTest, APlanOnAChangedClusterExpires) {
  std::vector<std::int64_t> tasks = Fragment();
  json plan = Plan({{"node_id", "n1"}});
  ASSERT_EQ(plan["state"], "proposed") << plan.dump();
  // The cluster changes: one more task lands.
  Start(/*preemptible=*/false);
  HttpReply r =
      api_->http().Post("/api/v1/defrag/plans/" + plan["id"].dump() + "/apply",
                        json::object(), api_->admin());
  EXPECT_EQ(r.status, 409) << r.Describe();
  EXPECT_EQ(GetPlan(plan["id"])["state"], "expired");
  // Nothing moved.
  for (std::int64_t id : tasks) {
    EXPECT_EQ(api_->GetTask(id, user_)["message"], "") << id;
  }
}

TEST_F(DefragE2eTest, NonPreemptibleTasksNeverMove) {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(Start(/*preemptible=*/false));
  // 4 x 3072 on GPU 0; GPU 1 empty; cancel two: 9216 free on GPU 0.
  Cancel(ids[0]);
  Cancel(ids[1]);
  Start(/*preemptible=*/false);  // lands on GPU 0 (best fit)
  HttpReply r = api_->http().Post("/api/v1/defrag/plans",
                                  {{"goal_memory_mb", kGpuMb}}, api_->admin());
  EXPECT_EQ(r.status, 409) << r.Describe();
}

TEST_F(DefragE2eTest, CancelMidPlanLeavesEveryTaskAtItsSourceOrTarget) {
  std::vector<std::int64_t> tasks = Fragment();
  json plan = Plan({{"node_id", "n1"}, {"goal_memory_mb", kGpuMb}});
  ASSERT_EQ(plan["moves"].size(), 2u) << plan.dump();
  const std::int64_t id = plan["id"];
  ASSERT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                      json::object(), api_->admin())
                .status,
            202);
  // The first move is under way: cancel.
  json started = WaitPlan(
      id, [](const json& p) { return p["moves"][0]["state"] != "pending"; });
  ASSERT_NE(started["moves"][0]["state"], "pending");
  HttpReply c = api_->http().Post(
      "/api/v1/defrag/plans/" + std::to_string(id) + "/cancel", json::object(),
      api_->admin());
  ASSERT_EQ(c.status, 200) << c.Describe();
  json done =
      WaitPlan(id, [](const json& p) { return p["state"] != "applying"; });
  ASSERT_EQ(done["state"], "cancelled") << done.dump();
  // The move in flight landed; the next never started.
  EXPECT_EQ(done["moves"][0]["state"], "done") << done.dump();
  EXPECT_EQ(done["moves"][1]["state"], "cancelled") << done.dump();
  ExpectConsistent(tasks, done);
  const std::int64_t unmoved = done["moves"][1]["task_id"];
  EXPECT_EQ(api_->GetTask(unmoved, user_)["gpu_indices"][0], 0);
  // A cancelled plan cannot be cancelled or applied again.
  EXPECT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/cancel",
                      json::object(), api_->admin())
                .status,
            409);
}

TEST_F(DefragE2eTest, ServerKilledMidPlanResumesWithoutLosingATask) {
  std::vector<std::int64_t> tasks = Fragment();
  json plan = Plan({{"node_id", "n1"}, {"goal_memory_mb", kGpuMb}});
  ASSERT_EQ(plan["moves"].size(), 2u) << plan.dump();
  const std::int64_t id = plan["id"];
  ASSERT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                      json::object(), api_->admin())
                .status,
            202);
  // Kill -9 while the first move is in flight (target reserved, task being
  // stopped at its source).
  json mid = WaitPlan(
      id, [](const json& p) { return p["moves"][0]["state"] != "pending"; });
  ASSERT_EQ(mid["state"], "applying") << mid.dump();
  ASSERT_TRUE(server_->Kill());
  ASSERT_TRUE(server_->Start()) << server_->Log();
  json done =
      WaitPlan(id, [](const json& p) { return p["state"] != "applying"; });
  ASSERT_EQ(done["state"], "applied") << done.dump() << server_->Log();
  for (const json& m : done["moves"]) EXPECT_EQ(m["state"], "done");
  ExpectConsistent(tasks, done);
  for (const json& m : done["moves"]) {
    EXPECT_EQ(api_->GetTask(m["task_id"], user_)["gpu_indices"][0], 1);
  }
}

// The source node is lost in the middle of a move (its agent killed before
// it could stop the task): when the node counts as lost, the task is taken
// as stopped and lands on its reserved target, as when the node reports the
// stop. The move is `moved`, the task bound to the reservation, the source
// slice released: no reservation left behind, nothing counted twice.
class DefragNodeLostE2eTest : public DefragE2eTest {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--gc-interval", "1", "--node-lost-after", "3"};
  }
};

TEST_F(DefragNodeLostE2eTest, AMoveWhoseSourceNodeIsLostLandsOnItsTarget) {
  std::vector<std::int64_t> tasks = Fragment();
  json plan = Plan({{"node_id", "n1"}, {"goal_memory_mb", kGpuMb}});
  ASSERT_FALSE(plan["moves"].empty()) << plan.dump();
  const std::int64_t id = plan["id"];
  ASSERT_TRUE(agent_->Kill());
  ASSERT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                      json::object(), api_->admin())
                .status,
            202);
  json landed = WaitPlan(
      id, [](const json& p) { return p["moves"][0]["state"] == "moved"; },
      milliseconds(30'000));
  const json& move = landed["moves"][0];
  ASSERT_EQ(move["state"], "moved") << landed.dump() << server_->Log();
  EXPECT_EQ(landed["state"], "applying");
  const std::int64_t task_id = move["task_id"];
  json task = api_->GetTask(task_id, user_);
  EXPECT_EQ(task["status"], "scheduled") << task.dump();
  EXPECT_EQ(task["gpu_indices"][0], move["to"]["gpu_index"]) << task.dump();
  json bound =
      api_->GetSlice(task["slice_id"].get<std::int64_t>(), api_->admin());
  EXPECT_EQ(bound["state"], "allocated") << bound.dump();
  EXPECT_EQ(bound["task_id"], task_id);
  EXPECT_EQ(api_->GetSlice(move["slice_id"].get<std::int64_t>(),
                           api_->admin())["state"],
            "released");
  // Every live slice is exactly one task's: the reservation is the task's.
  std::set<std::int64_t> bound_slices;
  for (std::int64_t t : tasks) {
    bound_slices.insert(
        api_->GetTask(t, user_)["slice_id"].get<std::int64_t>());
  }
  std::set<std::int64_t> live;
  for (const json& s : LiveSlices()) {
    live.insert(s["id"].get<std::int64_t>());
    EXPECT_TRUE(s["task_id"].is_number())
        << "an orphan reservation: " << s.dump();
  }
  EXPECT_EQ(live, bound_slices);
}

// Automatic mode: a pending task that fits no GPU although the node has the
// free memory makes the leader propose and apply a plan on its own.
class DefragAutoE2eTest : public DefragE2eTest {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--gc-interval",
            "1",
            "--defrag-auto",
            "--defrag-auto-threshold",
            "0.3",
            "--defrag-auto-interval",
            "1"};
  }
};

TEST_F(DefragAutoE2eTest, APendingTaskThatWouldFitGetsAPlanApplied) {
  std::vector<std::int64_t> tasks = Fragment();
  // Nothing is pending: no plan.
  EXPECT_TRUE(api_->ListAll("/api/v1/defrag/plans", api_->admin()).empty());
  // 12288 MB fits no GPU (9216 and 6144 MB free), but GPU 0 has it after
  // one move.
  json big = api_->CreateTask(
      {{"name", "big"}, {"command", "sleep 600"}, {"gpu_memory_mb", 12288}},
      user_);
  const std::int64_t big_id = big["id"];
  json placed = api_->WaitTask(
      big_id, user_, [](const json& t) { return t["status"] == "running"; },
      kTimeout);
  ASSERT_EQ(placed["status"], "running") << placed.dump();
  EXPECT_EQ(placed["gpu_indices"][0], 0);
  json plans = api_->ListAll("/api/v1/defrag/plans", api_->admin());
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0]["created_by"], "defrag-auto");
  EXPECT_EQ(plans[0]["goal_memory_mb"], 12288);
  json done = WaitPlan(plans[0]["id"],
                       [](const json& p) { return p["state"] != "applying"; });
  EXPECT_EQ(done["state"], "applied") << done.dump();
  ASSERT_EQ(done["moves"].size(), 1u);
  tasks.push_back(big_id);
  ExpectConsistent(tasks, done);
}

// Gold: on GPUs in MIG mode a slice is a partition, and a move destroys the
// task's partition on its source and creates one on its target through the
// MIG channel (the real hf-agent, the simulated MIG driver).
class DefragGoldE2eTest : public DefragE2eTest {
 protected:
  json Gpus() const override { return json::array({H100Mig(), H100Mig()}); }
  std::int64_t GpuMb() const override { return 81559; }

  json MigState() const {
    std::ifstream in(agent_->state_dir() / "sim-mig-state.json");
    json state = json::parse(in, nullptr, false);
    return state.is_object() ? state : json();
  }
  std::size_t Partitions(int gpu) const {
    json state = MigState();
    if (!state.is_object()) return 0;
    return state["gpus"][gpu]["devices"].size();
  }
};

TEST_F(DefragGoldE2eTest,
       AGoldMoveDestroysThePartitionAndCreatesOneOnTheTarget) {
  // 4096 MB on an H100 in MIG mode is a 1g.10gb partition: seven per GPU.
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(Start(/*preemptible=*/true, /*memory_mb=*/4096));
  }
  std::map<int, std::vector<std::int64_t>> by_gpu;
  for (std::int64_t id : ids) {
    json t = api_->GetTask(id, user_);
    EXPECT_EQ(t["qos_level"], "gold") << t.dump();
    by_gpu[t["gpu_indices"][0].get<int>()].push_back(id);
  }
  ASSERT_EQ(by_gpu.size(), 2u) << "eight partitions fit no one GPU";
  // The GPU with fewer partitions keeps one, the other at most five: the
  // other has room for it, and moving it frees a whole card.
  const int lone = by_gpu[0].size() <= by_gpu[1].size() ? 0 : 1;
  const int full = 1 - lone;
  std::vector<std::int64_t> kept;
  for (std::size_t i = 0; i < by_gpu[lone].size(); ++i) {
    if (i + 1 < by_gpu[lone].size()) {
      Cancel(by_gpu[lone][i]);
    } else {
      kept.push_back(by_gpu[lone][i]);
    }
  }
  for (std::size_t i = 0; i < by_gpu[full].size(); ++i) {
    if (i + 5 < by_gpu[full].size()) {
      Cancel(by_gpu[full][i]);
    } else {
      kept.push_back(by_gpu[full][i]);
    }
  }
  const std::int64_t mover = kept.front();
  ASSERT_TRUE(
      WaitFor([&] { return LiveSlices().size() == kept.size(); }, kTimeout));
  ASSERT_TRUE(WaitFor([&] {
    return Partitions(lone) == 1 && Partitions(full) == kept.size() - 1;
  })) << MigState().dump();
  const json before = api_->GetTask(mover, user_);
  const std::string old_device =
      before["labels"].value("heteroflow.mig_device_id", "");
  ASSERT_TRUE(old_device.starts_with("MIG-")) << before.dump();

  json plan = Plan({{"node_id", "n1"}});
  ASSERT_EQ(plan["state"], "proposed") << plan.dump();
  ASSERT_EQ(plan["moves"].size(), 1u) << plan.dump();
  EXPECT_EQ(plan["moves"][0]["task_id"], mover);
  EXPECT_EQ(plan["moves"][0]["from"]["gpu_index"], lone);
  EXPECT_EQ(plan["moves"][0]["to"]["gpu_index"], full);
  const std::int64_t id = plan["id"];
  ASSERT_EQ(api_->http()
                .Post("/api/v1/defrag/plans/" + std::to_string(id) + "/apply",
                      json::object(), api_->admin())
                .status,
            202);
  json done = WaitPlan(
      id, [](const json& p) { return p["state"] != "applying"; },
      milliseconds(90'000));
  ASSERT_EQ(done["state"], "applied") << done.dump() << server_->Log();
  ExpectConsistent(kept, done);

  // The task runs in a new partition on the target GPU.
  json after = api_->GetTask(mover, user_);
  EXPECT_EQ(after["gpu_indices"][0], full) << after.dump();
  EXPECT_EQ(after["qos_level"], "gold");
  const std::string new_device =
      after["labels"].value("heteroflow.mig_device_id", "");
  EXPECT_TRUE(new_device.starts_with("MIG-")) << after.dump();
  EXPECT_NE(new_device, old_device);
  json slice =
      api_->GetSlice(after["slice_id"].get<std::int64_t>(), api_->admin());
  EXPECT_EQ(slice["mig_device_id"], new_device) << slice.dump();
  EXPECT_EQ(slice["enforcement"], json({"mig"})) << slice.dump();
  // Through the MIG channel: the source partition destroyed, the target's
  // created, both done.
  bool destroyed = false;
  bool created = false;
  for (const json& r :
       api_->ListAll("/api/v1/slice-requests?node_id=n1", api_->admin())) {
    if (r["action"] == "destroy" && r["device_id"] == old_device) {
      EXPECT_EQ(r["state"], "done") << r.dump();
      destroyed = true;
    }
    if (r["action"] == "create" && r["device_id"] == new_device) {
      EXPECT_EQ(r["state"], "done") << r.dump();
      EXPECT_EQ(r["slice_id"], after["slice_id"]) << r.dump();
      created = true;
    }
  }
  EXPECT_TRUE(destroyed) << "no destroy of " << old_device;
  EXPECT_TRUE(created) << "no create of " << new_device;
  // The (simulated) hardware agrees: the source GPU holds no partition, the
  // target one per kept task.
  EXPECT_TRUE(WaitFor([&] {
    return Partitions(lone) == 0 && Partitions(full) == kept.size();
  })) << MigState().dump();
  // The freed card takes a whole-GPU partition (7g.80gb) at once.
  json big = api_->CreateTask(
      {{"name", "big"}, {"command", "sleep 600"}, {"gpu_memory_mb", 65536}},
      user_);
  json placed =
      api_->WaitNotPending(big["id"].get<std::int64_t>(), user_, kTimeout);
  EXPECT_EQ(placed["gpu_indices"][0], lone) << placed.dump();
}

}  // namespace
}  // namespace hf::e2e
