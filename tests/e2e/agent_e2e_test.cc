// End-to-end tests of the REAL hf-agent against the REAL hf-server (issue 5;
// docs/CONTRACT.md sections 2, 3, 5, 8 and 9): every test starts its own server
// and one agent on the simulated GPU backend with an inventory written here,
// and watches what the agent does only through the server's API (and, where the
// API cannot tell, the processes the agent leaves on this machine):
//   - registration: GPUs and their capabilities (gold, silver, bronze) come
//     from the inventory, afresh on every heartbeat; no MPS daemon, or a
//     containerized node, means no silver; a token bound to another node,
//     or revoked, makes the agent give up;
//   - tasks run as processes with their slice's environment (read back
//     through the task's log), exit codes and all their output reach the
//     server, slices are released; whole-GPU tasks are pinned; the hook is
//     preloaded into every slice but a MIG partition, with the slice's hook
//     region, whose usage reaches the server, whose quota follows PATCH
//     without a restart of the task, which a restarted agent reopens (never
//     recreates) and which goes when the task has ended;
//   - gold: the MIG partition is created before the task runs and destroyed
//     after it, and a failing create puts the task back to be bound again;
//   - cancel stops the task's whole process group;
//   - an agent killed (or stopped) leaves its tasks running and a new agent
//     adopts them; a server crash loses nothing the agent has to say, and
//     after it the learned default policy still binds a slice without a
//     compute share on a GPU in MIG mode with less than half its compute
//     left (charged as its partition);
//   - a lost GPU keeps its slices, takes no new ones until it recovers;
//   - the Docker runtime (silver and gold, adoption by a new agent), against
//     the runtime's fake docker CLI (src/runtime/testing/fake-docker).
// Tasks that must outlive a step wait for a file the test creates, so no
// test sleeps for a fixed time. The suite takes about 20 s on an idle
// 2-core machine; the lost-GPU test alone waits for its fault's 6 s window.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hook/region.h"
#include "tests/e2e/agent_harness.h"

namespace hf::e2e {
namespace {

namespace fs = std::filesystem;

constexpr milliseconds kTaskTimeout{30'000};

bool Terminal(const json& t) {
  const std::string s = t.value("status", "");
  return s == "succeeded" || s == "failed" || s == "cancelled";
}

class AgentE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The process runtime finds its supervisor beside the agent.
    ASSERT_TRUE(fs::exists(HF_TASK_SHIM_PATH)) << HF_TASK_SHIM_PATH;
    ASSERT_EQ(fs::path(HF_TASK_SHIM_PATH).parent_path(),
              fs::path(HF_AGENT_PATH).parent_path());
    ServerOptions options;
    options.flags = ServerFlags();
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    tenant_ = api_->NewTenant("agent");
    user_ = api_->CreateToken("user", tenant_);
    ASSERT_FALSE(user_.empty());
  }

  virtual std::vector<std::string> ServerFlags() const {
    return {"--gc-interval", "1"};
  }

  void TearDown() override {
    for (auto& agent : agents_) {
      if (agent->running()) {
        EXPECT_TRUE(agent->Stop());
      }
    }
    agents_.clear();
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }

  // A new agent for `node` with `gpus`, not yet started (a test may change
  // its options first), with a node token bound to `node`.
  AgentProcess& NewAgent(const std::string& node, json gpus,
                         bool mps_daemon_can_start = true) {
    AgentProcessOptions options;
    options.node_id = node;
    options.inventory =
        SimInventory(node, std::move(gpus), mps_daemon_can_start);
    options.token = CreateNodeToken(*api_, node);
    agents_.push_back(
        std::make_unique<AgentProcess>(server_->url(), std::move(options)));
    return *agents_.back();
  }

  // Starts `agent` and waits until the server lists its node.
  ::testing::AssertionResult StartAndRegister(AgentProcess& agent) {
    ::testing::AssertionResult started = agent.Start();
    if (!started) return started;
    const std::string path = "/api/v1/nodes/" + agent.node_id();
    if (WaitFor(
            [&] { return api_->http().Get(path, api_->admin()).status == 200; },
            milliseconds(20'000))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "node " << agent.node_id() << " never registered; agent log:\n"
           << agent.Log() << "\nserver log:\n"
           << server_->Log();
  }

  AgentProcess& StartAgent(const std::string& node, json gpus) {
    AgentProcess& agent = NewAgent(node, std::move(gpus));
    EXPECT_TRUE(StartAndRegister(agent));
    return agent;
  }

  std::int64_t CreateId(const json& body) const {
    json t = api_->CreateTask(body, user_);
    return t.is_object() ? t["id"].get<std::int64_t>() : 0;
  }

  // `n` slices of 25,000 MB (three fill an 80 GB card) at 10% compute,
  // each running until its file appears: `go` gets the files, in the
  // order of the ids returned.
  std::vector<std::int64_t> SmallTasksWaitingForFiles(
      const AgentProcess& agent, int n, std::vector<fs::path>& go) const {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < n; ++i) {
      go.push_back(agent.dir() / ("go" + std::to_string(go.size())));
      ids.push_back(
          CreateId({{"name", "small"},
                    {"command", WaitForFileCommand(go.back(), "true")},
                    {"gpu_memory_mb", 25000},
                    {"gpu_compute_ratio", 0.1}}));
    }
    return ids;
  }

  // Waits until every task of `ids` runs; `on_gpu` gets, per GPU index,
  // the positions in `ids` of the tasks on it.
  void WaitRunningByGpu(const AgentProcess& agent,
                        const std::vector<std::int64_t>& ids,
                        std::map<int, std::vector<std::size_t>>& on_gpu) const {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const json t = WaitStatus(ids[i], "running");
      ASSERT_EQ(t["status"], "running") << Logs(agent);
      on_gpu[t["gpu_indices"][0].get<int>()].push_back(i);
    }
  }

  json WaitStatus(std::int64_t id, const std::string& status,
                  milliseconds timeout = kTaskTimeout) const {
    return api_->WaitTask(
        id, user_,
        [&](const json& t) { return t.value("status", "") == status; },
        timeout);
  }

  json WaitTerminal(std::int64_t id,
                    milliseconds timeout = kTaskTimeout) const {
    return api_->WaitTask(id, user_, Terminal, timeout);
  }

  // The task's whole log as the server holds it.
  std::string TaskLog(std::int64_t id) const {
    HttpReply r = api_->http().Get(
        "/api/v1/tasks/" + std::to_string(id) + "/logs?limit=1048576", user_);
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.body.is_object() ? r.body.value("data", "") : "";
  }

  json NodeView(const std::string& node) const {
    HttpReply r = api_->http().Get("/api/v1/nodes/" + node, api_->admin());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.body;
  }

  json Requests(const std::string& node) const {
    return api_->ListAll("/api/v1/slice-requests?node_id=" + node,
                         api_->admin());
  }

  // Waits until the slice is released; returns it.
  json WaitSliceReleased(std::int64_t slice_id,
                         milliseconds timeout = kTaskTimeout) const {
    json s;
    WaitFor(
        [&] {
          HttpReply r = api_->http().Get(
              "/api/v1/slices/" + std::to_string(slice_id), api_->admin());
          s = r.body;
          return r.status == 200 && s.value("state", "") == "released";
        },
        timeout, milliseconds(50));
    return s;
  }

  // Kills the server, then lets task `id` end (its command waits for `go`)
  // with nobody to tell: true once the runtime has its exit file.
  ::testing::AssertionResult EndTaskWithTheServerDown(AgentProcess& agent,
                                                      std::int64_t id,
                                                      const fs::path& go) {
    if (!server_->Kill()) return ::testing::AssertionFailure() << "kill";
    Touch(go);
    if (WaitFor([&] { return fs::exists(agent.TaskDir(id) / "exit"); },
                kTaskTimeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "task " << id << " never ended" << Logs(agent);
  }

  // Diagnostics for a failed expectation.
  std::string Logs(const AgentProcess& agent) const {
    return "\nagent log:\n" + agent.Log(8192) + "\nserver log:\n" +
           server_->Log(8192);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::string tenant_;
  std::string user_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
};

// ------------------------------------------------------- registration

TEST_F(AgentE2eTest, RegistersItsGpusWithCapabilitiesFromTheInventory) {
  AgentProcess& agent = StartAgent("caps", {H100Mig(), A100(), P100()});
  json node;
  // The first report may precede the MPS daemon's start: wait for the
  // heartbeat that carries it.
  ASSERT_TRUE(WaitFor([&] {
    node = NodeView("caps");
    return node["gpus"].size() == 3 && node["gpus"][1]["mps_capable"] == true;
  })) << node.dump()
      << Logs(agent);
  EXPECT_EQ(node["containerized"], false);
  const json& gpus = node["gpus"];
  const char* models[] = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
                          "Tesla P100-PCIE-16GB"};
  const std::int64_t memory[] = {81559, 81920, 16384};
  const char* cc[] = {"9.0", "8.0", "6.0"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    EXPECT_EQ(gpus[i]["index"], i);
    EXPECT_EQ(gpus[i]["uuid"], "GPU-sim-caps-" + std::to_string(i));
    EXPECT_EQ(gpus[i]["vendor"], "nvidia");
    EXPECT_EQ(gpus[i]["model"], models[i]);
    EXPECT_EQ(gpus[i]["memory_mb"], memory[i]);
    EXPECT_EQ(gpus[i]["compute_capability"], cc[i]);
    EXPECT_EQ(gpus[i]["health"], "ok");
  }
  // MIG mode enabled: gold. MPS daemon and cc >= 7.0: silver. Pre-Volta:
  // neither (bronze).
  EXPECT_EQ(gpus[0]["mig_capable"], true);
  EXPECT_EQ(gpus[0]["mps_capable"], false);
  EXPECT_EQ(gpus[1]["mig_capable"], false);
  EXPECT_EQ(gpus[1]["mps_capable"], true);
  EXPECT_EQ(gpus[2]["mig_capable"], false);
  EXPECT_EQ(gpus[2]["mps_capable"], false);
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  ASSERT_TRUE(HasStatus(stats, 200));
  std::map<int, std::string> tiers;
  for (const json& g : stats.body["gpus"]) {
    if (g["node_id"] == "caps") {
      tiers[g["gpu_index"].get<int>()] = g.value("qos_level", "");
    }
  }
  EXPECT_EQ(tiers, (std::map<int, std::string>{
                       {0, "gold"}, {1, "silver"}, {2, "bronze"}}))
      << stats.raw;

  // Heartbeats keep coming.
  const std::string first = node["last_heartbeat_at"];
  EXPECT_TRUE(WaitFor([&] {
    return NodeView("caps")["last_heartbeat_at"] != first;
  })) << Logs(agent);
}

// `--server` with several control plane instances: one that is down is
// skipped (nothing was sent to it), and the agent works through the next.
TEST_F(AgentE2eTest, SeveralServerUrlsFailOverToOneThatAnswers) {
  AgentProcess& agent = NewAgent("failover", {A100()});
  const std::string dead = "http://127.0.0.1:" + std::to_string(PickFreePort());
  agent.set_server_url(dead + "," + server_->url());
  ASSERT_TRUE(StartAndRegister(agent));
  const std::string first = NodeView("failover")["last_heartbeat_at"];
  EXPECT_TRUE(WaitFor([&] {
    return NodeView("failover")["last_heartbeat_at"] != first;
  })) << Logs(agent);
  const std::int64_t id = CreateId({{"name", "through-failover"},
                                    {"command", "echo ok"},
                                    {"gpu_memory_mb", 1024}});
  ASSERT_NE(id, 0);
  EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded") << Logs(agent);
  EXPECT_TRUE(agent.LogContains("unreachable, trying the next one"))
      << agent.Log();
}

TEST_F(AgentE2eTest, WithoutAnMpsDaemonNothingIsSilver) {
  AgentProcess& agent =
      NewAgent("nomps", {A100()}, /*mps_daemon_can_start=*/false);
  ASSERT_TRUE(StartAndRegister(agent));
  // Several heartbeats: never mps_capable.
  for (int i = 0; i < 3; ++i) {
    const std::string seen = NodeView("nomps")["last_heartbeat_at"];
    ASSERT_TRUE(WaitFor([&] {
      return NodeView("nomps")["last_heartbeat_at"] != seen;
    })) << Logs(agent);
    json gpu = NodeView("nomps")["gpus"][0];
    EXPECT_EQ(gpu["mps_capable"], false) << gpu.dump();
    EXPECT_EQ(gpu["mig_capable"], false) << gpu.dump();
  }
  const std::int64_t id = CreateId({{"name", "bronze"},
                                    {"command", "env"},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.25}});
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["qos_level"], "bronze") << t.dump();
  const auto env = ParseEnvLines(TaskLog(id));
  EXPECT_EQ(
      env.count("HETEROFLOW_SLICE_QOS") ? env.at("HETEROFLOW_SLICE_QOS") : "",
      "bronze");
  // No pipe is injected that leads nowhere.
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << TaskLog(id);
  EXPECT_EQ(
      env.count("CUDA_VISIBLE_DEVICES") ? env.at("CUDA_VISIBLE_DEVICES") : "",
      "0");
}

TEST_F(AgentE2eTest, ATokenBoundToAnotherNodeMakesTheAgentGiveUp) {
  AgentProcessOptions options;
  options.node_id = "mine";
  options.inventory = SimInventory("mine", {A100()});
  options.token = CreateNodeToken(*api_, "someone-else");
  agents_.push_back(
      std::make_unique<AgentProcess>(server_->url(), std::move(options)));
  AgentProcess& agent = *agents_.back();
  ASSERT_TRUE(agent.Start());
  const std::optional<int> code = agent.WaitExit(milliseconds(20'000));
  ASSERT_TRUE(code.has_value()) << "the agent kept running" << Logs(agent);
  EXPECT_EQ(*code, 1) << Logs(agent);
  EXPECT_TRUE(agent.LogContains("giving up")) << agent.Log();
  EXPECT_TRUE(agent.LogContains("bound to node 'someone-else'")) << agent.Log();
  EXPECT_TRUE(IsApiError(api_->http().Get("/api/v1/nodes/mine", api_->admin()),
                         404, "not_found"));
}

TEST_F(AgentE2eTest, ARevokedTokenMakesTheAgentGiveUp) {
  HttpReply created = api_->http().Post(
      "/api/v1/tokens",
      {{"role", "node"}, {"node", "revoked"}, {"description", "e2e"}},
      api_->admin());
  ASSERT_TRUE(HasStatus(created, 201));
  AgentProcessOptions options;
  options.node_id = "revoked";
  options.inventory = SimInventory("revoked", {A100()});
  options.token = created.body["token"];
  agents_.push_back(
      std::make_unique<AgentProcess>(server_->url(), std::move(options)));
  AgentProcess& agent = *agents_.back();
  ASSERT_TRUE(StartAndRegister(agent));
  ASSERT_TRUE(HasStatus(
      api_->http().Delete("/api/v1/tokens/" + created.body["id"].dump(),
                          api_->admin()),
      200));
  const std::optional<int> code = agent.WaitExit(milliseconds(20'000));
  ASSERT_TRUE(code.has_value()) << "the agent kept running" << Logs(agent);
  EXPECT_EQ(*code, 1) << Logs(agent);
  EXPECT_TRUE(agent.LogContains("giving up")) << agent.Log();
}

TEST_F(AgentE2eTest, AContainerizedNodeIsBronze) {
  AgentProcess& agent = NewAgent("boxed", {A100()});
  agent.options().inventory["containerized"] = true;
  ASSERT_TRUE(StartAndRegister(agent));
  EXPECT_EQ(NodeView("boxed")["containerized"], true);
  const std::int64_t id = CreateId(
      {{"name", "boxed"}, {"command", "env"}, {"gpu_memory_mb", 4096}});
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["qos_level"], "bronze") << t.dump();
  const auto env = ParseEnvLines(TaskLog(id));
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << TaskLog(id);
}

// ------------------------------------------------------------- tasks

TEST_F(AgentE2eTest, SilverSliceTaskRunsWithItsSliceEnvironment) {
  AgentProcess& agent = StartAgent("silver", {A100()});
  ASSERT_TRUE(WaitFor([&] {
    return NodeView("silver")["gpus"][0]["mps_capable"] == true;
  })) << Logs(agent);
  const std::int64_t id =
      CreateId({{"name", "env"},
                {"command", "echo hello from the task; env"},
                {"gpu_memory_mb", 4096},
                {"gpu_compute_ratio", 0.25}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 0);
  EXPECT_EQ(t["qos_level"], "silver");
  EXPECT_EQ(t["node_id"], "silver");
  const std::string log = TaskLog(id);
  EXPECT_NE(log.find("hello from the task\n"), std::string::npos) << log;
  const auto env = ParseEnvLines(log);
  const auto get = [&](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string("<unset>") : it->second;
  };
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  EXPECT_EQ(get("HETEROFLOW_SLICE_ID"), std::to_string(slice_id)) << log;
  EXPECT_EQ(get("HETEROFLOW_GPU_INDEX"), "0") << log;
  EXPECT_EQ(get("HETEROFLOW_SLICE_QOS"), "silver") << log;
  EXPECT_EQ(get("HETEROFLOW_GPU_UUID"), "GPU-sim-silver-0") << log;
  EXPECT_EQ(get("CUDA_VISIBLE_DEVICES"), "0") << log;
  EXPECT_EQ(get("NVIDIA_VISIBLE_DEVICES"), "0") << log;
  EXPECT_EQ(get("CUDA_MPS_PIPE_DIRECTORY"), (agent.mps_dir() / "pipe").string())
      << log;
  EXPECT_EQ(get("CUDA_MPS_LOG_DIRECTORY"), (agent.mps_dir() / "log").string())
      << log;
  EXPECT_EQ(get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M") << log;
  EXPECT_EQ(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25") << log;
  // Nothing of the agent's own environment leaks into the task.
  EXPECT_FALSE(env.contains("HF_AGENT_SERVER")) << log;
  json s = WaitSliceReleased(slice_id);
  EXPECT_EQ(s["state"], "released") << s.dump();
  EXPECT_EQ(s["qos_level"], "silver");
}

// Issue 14: `make run` passed --mps-dir ./var/mps; the agent took it and
// then failed every silver task ("MPS pipe directory must be an absolute
// path"). Every path flag is made absolute at start.
TEST_F(AgentE2eTest, RelativePathFlagsAreMadeAbsoluteAndSilverTasksRun) {
  AgentProcess& agent = NewAgent("relative", {A100()});
  agent.options().relative_paths = true;
  ASSERT_TRUE(StartAndRegister(agent)) << Logs(agent);
  ASSERT_TRUE(WaitFor([&] {
    return NodeView("relative")["gpus"][0]["mps_capable"] == true;
  })) << Logs(agent);
  const std::int64_t id = CreateId({{"name", "relative"},
                                    {"command", "env"},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.25}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["qos_level"], "silver");
  const auto env = ParseEnvLines(TaskLog(id));
  ASSERT_TRUE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << TaskLog(id);
  EXPECT_EQ(env.at("CUDA_MPS_PIPE_DIRECTORY"),
            (agent.mps_dir() / "pipe").string());
  EXPECT_EQ(env.at("CUDA_MPS_LOG_DIRECTORY"),
            (agent.mps_dir() / "log").string());
  // The task ran under the state directory the relative flag named.
  EXPECT_TRUE(fs::exists(agent.state_dir() / "runtime")) << Logs(agent);
}

TEST_F(AgentE2eTest, ExitCodesReachTheServerAndReleaseTheSlice) {
  AgentProcess& agent = StartAgent("exits", {A100()});
  const std::int64_t ok =
      CreateId({{"name", "ok"}, {"command", "true"}, {"gpu_memory_mb", 1024}});
  const std::int64_t bad =
      CreateId({{"name", "bad"},
                {"command", "echo about to fail >&2; exit 3"},
                {"gpu_memory_mb", 1024}});
  const std::int64_t missing =
      CreateId({{"name", "missing"},
                {"command", json::array({"/no/such/program"})},
                {"gpu_memory_mb", 1024}});
  json t = WaitTerminal(ok);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 0);
  json f = WaitTerminal(bad);
  EXPECT_EQ(f["status"], "failed") << f.dump() << Logs(agent);
  EXPECT_EQ(f["exit_code"], 3) << f.dump();
  EXPECT_EQ(TaskLog(bad), "about to fail\n");
  json m = WaitTerminal(missing);
  EXPECT_EQ(m["status"], "failed") << m.dump() << Logs(agent);
  EXPECT_EQ(m["exit_code"], 127) << m.dump();
  EXPECT_NE(TaskLog(missing).find("/no/such/program"), std::string::npos);
  for (const json* task : {&t, &f, &m}) {
    ASSERT_TRUE((*task)["slice_id"].is_number_integer()) << task->dump();
    json s = WaitSliceReleased((*task)["slice_id"].get<std::int64_t>());
    EXPECT_EQ(s["state"], "released") << s.dump();
  }
  // The ledger has nothing left on the GPU.
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 0) << stats.raw;
  // The agent forgets finished tasks: their directories are gone.
  EXPECT_TRUE(WaitFor([&] {
    return !fs::exists(agent.TaskDir(ok)) && !fs::exists(agent.TaskDir(bad));
  })) << Logs(agent);
}

// A task that ends between heartbeats gives its slice back when it ends, not
// at the next heartbeat: the agent looks for ended tasks every
// --exit-poll-interval (a task's files, with the process runtime). Here the
// heartbeat is 8 s: before, the slice stayed charged until the next one.
TEST_F(AgentE2eTest, ATaskEndingBetweenHeartbeatsReleasesItsSliceAtOnce) {
  AgentProcess& agent = NewAgent("prompt", {A100()});
  agent.options().heartbeat_interval_s = 8;
  agent.options().flags = {"--exit-poll-interval", "0.1"};
  ASSERT_TRUE(StartAndRegister(agent));
  const std::int64_t id = CreateId(
      {{"name", "short"}, {"command", "sleep 1"}, {"gpu_memory_mb", 1024}});
  // Started at the agent's next heartbeat (up to 8 s).
  json running = WaitStatus(id, "running", milliseconds(20'000));
  ASSERT_EQ(running["status"], "running") << running.dump() << Logs(agent);
  const auto seen_running = std::chrono::steady_clock::now();
  json done = WaitTerminal(id, milliseconds(20'000));
  const auto took = std::chrono::steady_clock::now() - seen_running;
  EXPECT_EQ(done["status"], "succeeded") << done.dump() << Logs(agent);
  // About 1 s of sleep and a poll; a heartbeat later would be 8 s.
  EXPECT_LT(took, milliseconds(5'000)) << Logs(agent);
  json slice = WaitSliceReleased(done["slice_id"].get<std::int64_t>(),
                                 milliseconds(1'000));
  EXPECT_EQ(slice["state"], "released") << slice.dump();
}

// A task starts when it is bound and stops when it is cancelled, not at the
// agent's next heartbeat: the agent keeps a wait for its node's work open
// on the server (GET /api/v1/nodes/{node}/work). Here the heartbeat is 60 s,
// so without it neither would happen within the test's 20 s.
TEST_F(AgentE2eTest, ATaskStartsAndStopsAtOnceNotAtTheNextHeartbeat) {
  AgentProcess& agent = NewAgent("woken", {A100()});
  agent.options().heartbeat_interval_s = 60;
  ASSERT_TRUE(StartAndRegister(agent));
  for (int i = 0; i < 2; ++i) {
    const std::int64_t id = CreateId({{"name", "woken-" + std::to_string(i)},
                                      {"command", "sleep 120"},
                                      {"gpu_memory_mb", 1024}});
    json running = WaitStatus(id, "running", milliseconds(20'000));
    ASSERT_EQ(running["status"], "running") << running.dump() << Logs(agent);
    HttpReply c =
        api_->http().Post("/api/v1/tasks/" + std::to_string(id) + "/cancel",
                          json::object(), user_);
    ASSERT_TRUE(HasStatus(c, 200));
    json done = WaitTerminal(id, milliseconds(20'000));
    EXPECT_EQ(done["status"], "cancelled") << done.dump() << Logs(agent);
  }
  // And the agent still stops at once when told to (its wait is cut short).
  const auto before = std::chrono::steady_clock::now();
  EXPECT_TRUE(agent.Stop()) << Logs(agent);
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(10'000));
}

// The same across crashes: the task ends while the server is down, so the
// early cycle cannot report it. The ended task is noted once, so the agent
// does not run a cycle every poll while the server is away, and an agent
// killed meanwhile (its note lost with it) reports the real exit status
// from the runtime's files once the server is back.
TEST_F(AgentE2eTest, ATaskEndingWhileTheServerIsDownIsReportedOnceItIsBack) {
  AgentProcess& agent = NewAgent("prompt-crash", {A100()});
  agent.options().heartbeat_interval_s = 2;
  agent.options().flags = {"--exit-poll-interval", "0.05"};
  ASSERT_TRUE(StartAndRegister(agent));
  const fs::path go = agent.dir() / "go";
  const std::int64_t id =
      CreateId({{"name", "ends-alone"},
                {"command", WaitForFileCommand(go, "exit 4")},
                {"gpu_memory_mb", 2048}});
  json t = WaitStatus(id, "running", milliseconds(20'000));
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();

  ASSERT_TRUE(EndTaskWithTheServerDown(agent, id, go));
  std::this_thread::sleep_for(milliseconds(3'000));
  // A failed cycle logs "cycle:"; in 3 s with a 2 s heartbeat, a few, not
  // one per 50 ms poll.
  const std::string log = agent.Log(1 << 20);
  std::size_t failed_cycles = 0;
  for (auto at = log.find("cycle:"); at != std::string::npos;
       at = log.find("cycle:", at + 1)) {
    ++failed_cycles;
  }
  EXPECT_GE(failed_cycles, 1u) << log;
  EXPECT_LE(failed_cycles, 5u) << log;

  ASSERT_TRUE(agent.Restart(/*kill=*/true));
  ASSERT_TRUE(server_->Start());
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "failed") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 4) << t.dump();
  json s = WaitSliceReleased(slice_id);
  EXPECT_EQ(s["state"], "released") << s.dump();
}

// Holds, with the real server and agent: a large task waiting behind a
// backlog of small ones. Without a hold it would run only once the backlog
// drained, since every slice that ends makes room a small task takes; with
// --hold-after 2 a GPU is held for it and drains, and it runs while most of
// the backlog still waits.
class HoldE2eTest : public AgentE2eTest {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--gc-interval", "1", "--hold-after", "2"};
  }
};

TEST_F(HoldE2eTest, ALargeTaskBehindABacklogOfSmallOnesRunsOnAHeldGpu) {
  AgentProcess& agent = StartAgent("hold", {A100(), A100()});
  // Three on each GPU (75,000 of 81,920 MB), each until its file appears,
  // so that they end one at a time when the test says: had two on one GPU
  // ended in one agent report, the large task would fit there without a
  // hold.
  std::vector<fs::path> go;
  std::vector<std::int64_t> first = SmallTasksWaitingForFiles(agent, 6, go);
  std::map<int, std::vector<std::size_t>> on_gpu;  // GPU index -> of first
  ASSERT_NO_FATAL_FAILURE(WaitRunningByGpu(agent, first, on_gpu));
  ASSERT_EQ(on_gpu.size(), 2u);
  const std::int64_t big = CreateId({{"name", "big"},
                                     {"command", "sleep 1"},
                                     {"gpu_memory_mb", 50000},
                                     {"gpu_compute_ratio", 0.1}});
  std::vector<std::int64_t> backlog;
  for (int i = 0; i < 24; ++i) {
    backlog.push_back(CreateId({{"name", "small"},
                                {"command", "sleep 2"},
                                {"gpu_memory_mb", 25000},
                                {"gpu_compute_ratio", 0.1}}));
  }
  // Past --hold-after, a GPU is held for the large task (nothing has ended
  // yet), and the metric says so.
  int held = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        HttpReply stats =
            api_->http().Get("/api/v1/slices/stats", api_->admin());
        const json& hold = stats.body["placement"]["hold"];
        if (!hold.is_object() || hold["task_id"] != big) return false;
        held = hold["gpu_indices"][0].get<int>();
        return true;
      },
      milliseconds(30'000), milliseconds(100)))
      << Logs(agent);
  EXPECT_NE(api_->http()
                .Get("/metrics", api_->admin())
                .raw.find("\nheteroflow_held_gpus 1\n"),
            std::string::npos);
  // The first tasks end one at a time, the other GPU's first: the backlog
  // takes the room there, not on the held GPU.
  std::vector<std::size_t> order = on_gpu[held == 0 ? 1 : 0];
  for (const std::size_t i : on_gpu[held]) order.push_back(i);
  for (const std::size_t i : order) {
    Touch(go[i]);
    ASSERT_EQ(WaitTerminal(first[i])["status"], "succeeded") << Logs(agent);
  }
  // Until the large task is bound no GPU is ever charged more than it has.
  int waiting_when_bound = -1;
  const bool bound = WaitFor(
      [&] {
        HttpReply stats =
            api_->http().Get("/api/v1/slices/stats", api_->admin());
        EXPECT_EQ(stats.status, 200) << stats.raw;
        for (const json& gpu : stats.body["gpus"]) {
          EXPECT_LE(gpu["accounted_memory_mb"].get<std::int64_t>(),
                    gpu["total_memory_mb"].get<std::int64_t>())
              << stats.raw;
        }
        HttpReply t =
            api_->http().Get("/api/v1/tasks/" + std::to_string(big), user_);
        if (t.body.value("status", "pending") == "pending") return false;
        waiting_when_bound = 0;
        for (std::int64_t id : backlog) {
          HttpReply s =
              api_->http().Get("/api/v1/tasks/" + std::to_string(id), user_);
          waiting_when_bound += s.body.value("status", "") == "pending";
        }
        return true;
      },
      milliseconds(60'000), milliseconds(100));
  ASSERT_TRUE(bound) << Logs(agent);
  EXPECT_EQ(api_->GetTask(big, user_)["gpu_indices"][0], held);
  // 24 small tasks of 2 s on the three slots of the other GPU take about
  // 16 s; the held GPU drained in well under that.
  EXPECT_GE(waiting_when_bound, 8) << Logs(agent);
  EXPECT_EQ(WaitTerminal(big)["status"], "succeeded") << Logs(agent);
  for (std::int64_t id : backlog) {
    EXPECT_EQ(WaitTerminal(id, milliseconds(60'000))["status"], "succeeded")
        << id << Logs(agent);
  }
  // Nothing waits: no hold (the backlog's own, past 2 s, ended too).
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_TRUE(stats.body["placement"]["hold"].is_null()) << stats.raw;
  const std::string metrics = api_->http().Get("/metrics", api_->admin()).raw;
  EXPECT_NE(metrics.find("\nheteroflow_held_gpus 0\n"), std::string::npos)
      << metrics;
}

// A hold is the leader's memory: killed (SIGKILL) and started again, the
// server holds the GPU again for the task that still waits, from its age,
// and a newer task does not take the room a slice leaves there.
TEST_F(HoldE2eTest, AfterTheServerIsKilledTheWaitingTaskIsHeldAgain) {
  AgentProcess& agent = StartAgent("hold-crash", {A100()});
  std::vector<fs::path> go;
  const std::vector<std::int64_t> small =
      SmallTasksWaitingForFiles(agent, 3, go);
  for (std::int64_t id : small) {
    ASSERT_EQ(WaitStatus(id, "running")["status"], "running") << Logs(agent);
  }
  const std::int64_t big = CreateId({{"name", "big"},
                                     {"command", "true"},
                                     {"gpu_memory_mb", 50000},
                                     {"gpu_compute_ratio", 0.1}});
  const auto held_for = [&](std::int64_t task) {
    return WaitFor([&] {
      HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
      const json& hold = stats.body["placement"]["hold"];
      return hold.is_object() && hold["task_id"] == task;
    });
  };
  ASSERT_TRUE(held_for(big)) << Logs(agent);
  ASSERT_TRUE(server_->Kill());
  ASSERT_TRUE(server_->Start());
  ASSERT_TRUE(held_for(big)) << Logs(agent);
  const std::int64_t newer = CreateId({{"name", "newer"},
                                       {"command", "true"},
                                       {"gpu_memory_mb", 25000},
                                       {"gpu_compute_ratio", 0.1}});
  // One slice ends: 31,920 MB free, room for the newer task but for the
  // hold.
  Touch(go[0]);
  ASSERT_EQ(WaitTerminal(small[0])["status"], "succeeded") << Logs(agent);
  std::this_thread::sleep_for(milliseconds(1'500));
  json waiting = api_->GetTask(newer, user_);
  EXPECT_EQ(waiting["status"], "pending") << waiting.dump();
  EXPECT_NE(waiting.value("pending_reason", "")
                .find("held for task " + std::to_string(big)),
            std::string::npos)
      << waiting.dump();
  Touch(go[1]);
  Touch(go[2]);
  EXPECT_EQ(WaitTerminal(big)["status"], "succeeded") << Logs(agent);
  EXPECT_EQ(WaitTerminal(newer)["status"], "succeeded") << Logs(agent);
}

// With --max-holds 2 two large tasks each get a GPU of their own held; the
// holds are the leader's memory, so after a SIGKILL and a start the server
// holds both again, and a newer task takes the room a slice leaves on
// neither.
class MaxHoldsE2eTest : public AgentE2eTest {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--gc-interval", "1", "--hold-after", "2", "--max-holds", "2"};
  }
};

TEST_F(MaxHoldsE2eTest, TwoWaitingTasksAreHeldAGpuEachAcrossAServerKill) {
  AgentProcess& agent = StartAgent("holds", {A100(), A100()});
  // Three small tasks on each GPU (75,000 of 81,920 MB).
  std::vector<fs::path> go;
  const std::vector<std::int64_t> small =
      SmallTasksWaitingForFiles(agent, 6, go);
  std::map<int, std::vector<std::size_t>> on_gpu;  // GPU index -> smalls
  ASSERT_NO_FATAL_FAILURE(WaitRunningByGpu(agent, small, on_gpu));
  ASSERT_EQ(on_gpu.size(), 2u);
  std::vector<std::int64_t> big;
  for (int i = 0; i < 2; ++i) {
    big.push_back(CreateId({{"name", "big"},
                            {"command", "true"},
                            {"gpu_memory_mb", 50000},
                            {"gpu_compute_ratio", 0.1}}));
  }
  // Both held, on two different GPUs, and the metric sums them.
  const auto both_held = [&] {
    return WaitFor([&] {
      HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
      const json& holds = stats.body["placement"]["holds"];
      if (!holds.is_array() || holds.size() != 2) return false;
      std::set<std::int64_t> tasks;
      std::set<int> gpus;
      for (const json& h : holds) {
        tasks.insert(h["task_id"].get<std::int64_t>());
        for (const json& g : h["gpu_indices"]) gpus.insert(g.get<int>());
      }
      return tasks == std::set<std::int64_t>(big.begin(), big.end()) &&
             gpus.size() == 2;
    });
  };
  ASSERT_TRUE(both_held()) << Logs(agent);
  EXPECT_NE(api_->http()
                .Get("/metrics", api_->admin())
                .raw.find("\nheteroflow_held_gpus 2\n"),
            std::string::npos);
  ASSERT_TRUE(server_->Kill());
  ASSERT_TRUE(server_->Start());
  ASSERT_TRUE(both_held()) << Logs(agent);
  const std::int64_t newer = CreateId({{"name", "newer"},
                                       {"command", "true"},
                                       {"gpu_memory_mb", 25000},
                                       {"gpu_compute_ratio", 0.1}});
  // One slice ends on each GPU: 31,920 MB free on both, room for the newer
  // task but for the holds.
  for (const auto& [gpu, smalls] : on_gpu) Touch(go[smalls[0]]);
  for (const auto& [gpu, smalls] : on_gpu) {
    ASSERT_EQ(WaitTerminal(small[smalls[0]])["status"], "succeeded")
        << Logs(agent);
  }
  std::this_thread::sleep_for(milliseconds(1'500));
  json waiting = api_->GetTask(newer, user_);
  EXPECT_EQ(waiting["status"], "pending") << waiting.dump();
  for (const std::int64_t id : big) {
    EXPECT_NE(waiting.value("pending_reason", "")
                  .find("held for task " + std::to_string(id)),
              std::string::npos)
        << waiting.dump();
  }
  for (std::size_t i = 0; i < go.size(); ++i) Touch(go[i]);
  for (const std::int64_t id : big) {
    EXPECT_EQ(WaitTerminal(id)["status"], "succeeded") << Logs(agent);
  }
  EXPECT_EQ(WaitTerminal(newer)["status"], "succeeded") << Logs(agent);
}

TEST_F(AgentE2eTest, LargeOutputReachesTheServerWhole) {
  AgentProcess& agent = StartAgent("chatty", {A100()});
  // 3 MB in lines of 100 bytes: more than the agent ships in one cycle.
  const std::int64_t id =
      CreateId({{"name", "chatty"},
                {"command",
                 "i=0; line=$(printf '%099d' 0); while [ $i -lt 30000 ]; do "
                 "echo \"$line\"; i=$((i+1)); done"},
                {"gpu_memory_mb", 1024}});
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  HttpReply r = api_->http().Get(
      "/api/v1/tasks/" + std::to_string(id) + "/logs?limit=1", user_);
  ASSERT_TRUE(HasStatus(r, 200));
  EXPECT_EQ(r.body["size"], 3'000'000) << r.raw;
  EXPECT_EQ(r.body["truncated"], false) << r.raw;
  HttpReply tail = api_->http().Get(
      "/api/v1/tasks/" + std::to_string(id) + "/logs?offset=2999900&limit=1000",
      user_);
  ASSERT_TRUE(HasStatus(tail, 200));
  EXPECT_EQ(tail.body["data"], std::string(99, '0') + "\n") << tail.raw;
}

TEST_F(AgentE2eTest, WholeGpuTaskIsPinnedToOneGpu) {
  AgentProcess& agent = StartAgent("whole", {A100(), A100()});
  ASSERT_TRUE(WaitFor([&] {
    return NodeView("whole")["gpus"][0]["mps_capable"] == true;
  })) << Logs(agent);
  const std::int64_t id =
      CreateId({{"name", "whole"}, {"command", "env"}, {"gpu_required", 1}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  ASSERT_EQ(t["gpu_indices"].size(), 1u) << t.dump();
  const std::string index = std::to_string(t["gpu_indices"][0].get<int>());
  const auto env = ParseEnvLines(TaskLog(id));
  ASSERT_TRUE(env.contains("CUDA_VISIBLE_DEVICES")) << TaskLog(id);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), index);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), index);
  EXPECT_EQ(env.at("HETEROFLOW_GPU_INDEX"), index);
  // A whole GPU has no slice limits, and is not run under MPS (issue 14:
  // on an MPS-capable card it was called silver and joined the daemon).
  EXPECT_EQ(t["qos_level"], "exclusive") << t.dump();
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_QOS"), "exclusive");
  EXPECT_FALSE(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")) << TaskLog(id);
  EXPECT_FALSE(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
      << TaskLog(id);
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << TaskLog(id);
  EXPECT_FALSE(env.contains("CUDA_MPS_LOG_DIRECTORY")) << TaskLog(id);
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["kind"], "whole") << s.dump();
  EXPECT_EQ(s["qos_level"], "exclusive") << s.dump();
  EXPECT_EQ(s["enforcement"], json::array()) << s.dump();
  EXPECT_EQ(s["state"], "released") << s.dump();
}

TEST_F(AgentE2eTest, HookIsPreloadedIntoEverySliceButMigPartitions) {
  AgentProcess& agent = NewAgent("hooked", {A100(40960), H100Mig()});
  // The dynamic loader skips a library it cannot load, with a warning: the
  // file need not be a real hook for the test to see where it goes.
  const std::string hook = (agent.dir() / "libhfhook.so").string();
  agent.options().flags = {"--hook-library", hook};
  ASSERT_TRUE(StartAndRegister(agent));
  EXPECT_EQ(NodeView("hooked")["hook_available"], true);
  ASSERT_TRUE(WaitFor([&] {
    return NodeView("hooked")["gpus"][0]["mps_capable"] == true;
  })) << Logs(agent);
  // Best-Fit puts the small slice on the 40 GB A100 (silver); the big one
  // fits only the H100 (gold).
  const std::int64_t silver = CreateId(
      {{"name", "silver"}, {"command", "env"}, {"gpu_memory_mb", 4096}});
  const std::int64_t gold = CreateId(
      {{"name", "gold"}, {"command", "env"}, {"gpu_memory_mb", 50000}});
  json s = WaitTerminal(silver);
  json g = WaitTerminal(gold);
  ASSERT_EQ(s["status"], "succeeded") << s.dump() << Logs(agent);
  ASSERT_EQ(g["status"], "succeeded") << g.dump() << Logs(agent);
  EXPECT_EQ(s["qos_level"], "silver");
  EXPECT_EQ(g["qos_level"], "gold");
  // The file is no hook: nothing ever attached, so "hook" is not listed.
  EXPECT_EQ(
      api_->GetSlice(s["slice_id"].get<std::int64_t>(), user_)["enforcement"],
      json({"mps"}));
  EXPECT_EQ(
      api_->GetSlice(g["slice_id"].get<std::int64_t>(), user_)["enforcement"],
      json({"mig"}));
  const auto silver_env = ParseEnvLines(TaskLog(silver));
  ASSERT_TRUE(silver_env.contains("LD_PRELOAD")) << TaskLog(silver);
  EXPECT_EQ(silver_env.at("LD_PRELOAD"), hook);
  const fs::path region =
      agent.state_dir() / "hook" /
      ("slice-" + std::to_string(s["slice_id"].get<std::int64_t>()) +
       ".region");
  ASSERT_TRUE(silver_env.contains("HETEROFLOW_HOOK_REGION")) << TaskLog(silver);
  EXPECT_EQ(fs::path(silver_env.at("HETEROFLOW_HOOK_REGION")),
            fs::absolute(region));
  const auto gold_env = ParseEnvLines(TaskLog(gold));
  EXPECT_FALSE(gold_env.contains("LD_PRELOAD")) << TaskLog(gold);
  EXPECT_FALSE(gold_env.contains("HETEROFLOW_HOOK_REGION")) << TaskLog(gold);
  // Both tasks ended: their slice regions are gone (a GPU's region,
  // gpu-<index>.region, belongs to the GPU and stays).
  EXPECT_TRUE(WaitFor([&] {
    for (const auto& e : fs::directory_iterator(agent.state_dir() / "hook")) {
      if (e.path().filename().string().starts_with("slice-")) return false;
    }
    return true;
  })) << Logs(agent);
}

// The agent's side of the hook (src/hook/region.h), with this test process
// standing in for a process of the task that loaded the hook: it attaches
// to the task's region and holds memory in it.
TEST_F(AgentE2eTest, HookRegionCarriesUsageAndLiveQuotaAcrossAgentRestarts) {
  AgentProcess& agent = NewAgent("region", {A100(40960)});
  agent.options().flags = {"--hook-library",
                           (agent.dir() / "libhfhook.so").string()};
  ASSERT_TRUE(StartAndRegister(agent));
  const fs::path go = agent.dir() / "go";
  const std::int64_t id = CreateId({{"name", "hooked"},
                                    {"command", WaitForFileCommand(go, "env")},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.3}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::int64_t slice = t["slice_id"].get<std::int64_t>();
  const std::string path = "/api/v1/slices/" + std::to_string(slice);
  const fs::path file = agent.state_dir() / "hook" /
                        ("slice-" + std::to_string(slice) + ".region");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(file); })) << Logs(agent);
  constexpr std::uint64_t kMib = std::uint64_t{1} << 20;

  hook::Region region;
  const char* error = "";
  ASSERT_TRUE(region.Open(file.c_str(), 0, 0, &error)) << error;
  // The agent created it with the slice's quota and compute share.
  EXPECT_EQ(region.quota(), 4096 * kMib);
  EXPECT_EQ(region.compute_percent(), 30u);
  // Not attached yet: bound without "hook", and none appears.
  EXPECT_EQ(api_->GetSlice(slice, user_)["enforcement"], json({"mps"}));

  region.Attach(getpid(), hook::Region::ProcessStartTicks(getpid()));
  ASSERT_EQ(region.Reserve(512 * kMib), hook::ReserveResult::kOk);
  EXPECT_EQ(region.Reserve(4096 * kMib), hook::ReserveResult::kOverQuota);
  json s;
  ASSERT_TRUE(WaitFor([&] {
    s = api_->GetSlice(slice, user_);
    return s["enforcement"] == json({"mps", "hook"}) && s["hook"].is_object() &&
           s["hook"]["used_bytes"] == 512 * kMib;
  })) << s.dump()
      << Logs(agent);
  EXPECT_EQ(s["hook"]["attached"], true);
  EXPECT_EQ(s["hook"]["quota_bytes"], 4096 * kMib);
  EXPECT_EQ(s["hook"]["quota_ooms"], 1);
  EXPECT_EQ(s["hook"]["processes"], 1);

  // Dynamic quota: the agent sets it in the region; the task runs on.
  HttpReply r = api_->http().Patch(path, {{"memory_mb", 8192}}, api_->admin());
  ASSERT_EQ(r.status, 200) << r.Describe();
  ASSERT_TRUE(WaitFor([&] { return region.quota() == 8192 * kMib; }))
      << region.quota() << Logs(agent);
  EXPECT_EQ(region.Reserve(4096 * kMib), hook::ReserveResult::kOk);

  // A killed agent's successor reopens the same region: usage kept.
  struct stat before {};
  ASSERT_EQ(stat(file.c_str(), &before), 0);
  // A region no task uses (its task ended while no agent ran) goes.
  const fs::path stale = agent.state_dir() / "hook" / "slice-999999.region";
  Touch(stale);
  ASSERT_TRUE(agent.Restart(/*kill=*/true));
  ASSERT_TRUE(agent.WaitForLog("reopened its hook region")) << Logs(agent);
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(stale); })) << Logs(agent);
  struct stat after {};
  ASSERT_EQ(stat(file.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the region was recreated";
  EXPECT_EQ(region.used(), 4608 * kMib);
  r = api_->http().Patch(path, {{"memory_mb", 2048}}, api_->admin());
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_TRUE(JsonMentions(r.body["warnings"], "may hit OOM")) << r.raw;
  ASSERT_TRUE(WaitFor([&] { return region.quota() == 2048 * kMib; }))
      << region.quota() << Logs(agent);
  // Lowered below the usage: held memory stays, new allocations fail.
  EXPECT_EQ(region.Reserve(kMib), hook::ReserveResult::kOverQuota);
  ASSERT_TRUE(WaitFor([&] {
    s = api_->GetSlice(slice, user_);
    return s["hook"].is_object() && s["hook"]["used_bytes"] == 4608 * kMib &&
           s["hook"]["quota_bytes"] == 2048 * kMib;
  })) << s.dump()
      << Logs(agent);
  region.Detach();

  // The task (started once, never restarted) ends; its region goes.
  Touch(go);
  t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  const auto env = ParseEnvLines(TaskLog(id));
  ASSERT_TRUE(env.contains("HETEROFLOW_HOOK_REGION")) << TaskLog(id);
  EXPECT_EQ(fs::path(env.at("HETEROFLOW_HOOK_REGION")), fs::absolute(file));
  // The env the task started with: the quota of that moment.
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_MEMORY_MB"), "4096");
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(file); })) << Logs(agent);
  const std::string log = agent.Log(1 << 20);
  const std::string started = "task " + std::to_string(id) + " started";
  EXPECT_EQ(log.find(started), log.rfind(started)) << log;
}

// --------------------------------------------------------------- gold

TEST_F(AgentE2eTest, GoldSliceRunsInAMigPartitionDestroyedAfterwards) {
  AgentProcess& agent = StartAgent("gold", {H100Mig()});
  const std::int64_t id = CreateId({{"name", "gold"},
                                    {"command", "env"},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.1}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["qos_level"], "gold");
  const std::string device = t["labels"].value("heteroflow.mig_device_id", "");
  ASSERT_TRUE(device.starts_with("MIG-")) << t.dump();
  const auto env = ParseEnvLines(TaskLog(id));
  ASSERT_TRUE(env.contains("NVIDIA_VISIBLE_DEVICES")) << TaskLog(id);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), device);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), device);
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_QOS"), "gold");
  // The partition is the boundary: no MPS pipe.
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY")) << TaskLog(id);

  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
  json s = WaitSliceReleased(slice_id);
  EXPECT_EQ(s["state"], "released") << s.dump() << Logs(agent);
  EXPECT_EQ(s["mig_device_id"], device);
  EXPECT_EQ(s["enforcement"], json({"mig"}));
  json rows = Requests("gold");
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["action"], "create");
  EXPECT_EQ(rows[0]["state"], "done") << rows.dump();
  EXPECT_EQ(rows[0]["profile"], "1g.10gb");
  EXPECT_EQ(rows[0]["device_id"], device);
  EXPECT_EQ(rows[0]["gpu_uuid"], "GPU-sim-gold-0");
  EXPECT_EQ(rows[1]["action"], "destroy");
  EXPECT_EQ(rows[1]["state"], "done") << rows.dump();
  EXPECT_EQ(rows[1]["device_id"], device);
  for (const json& row : rows) EXPECT_EQ(row["slice_id"], slice_id);
  // The (simulated) hardware is clean again.
  std::ifstream state_file(agent.state_dir() / "sim-mig-state.json");
  ASSERT_TRUE(state_file.good()) << "no MIG state file";
  json state = json::parse(state_file, nullptr, false);
  ASSERT_TRUE(state.is_object()) << "unreadable MIG state file";
  EXPECT_EQ(state["gpus"][0]["devices"], json::array()) << state.dump();
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  EXPECT_EQ(stats.body["gpus"][0]["accounted_memory_mb"], 0) << stats.raw;
}

TEST_F(AgentE2eTest, FailingMigCreatePutsTheTaskBackAndItIsRetried) {
  AgentProcess& agent = StartAgent(
      "flaky", {H100Mig({{{"kind", "mig_create_fails"}, {"count", 1}}})});
  const std::int64_t id = CreateId(
      {{"name", "gold"}, {"command", "echo ran"}, {"gpu_memory_mb", 4096}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(TaskLog(id), "ran\n");
  json rows = Requests("flaky");
  ASSERT_GE(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["action"], "create");
  EXPECT_EQ(rows[0]["state"], "failed") << rows.dump();
  EXPECT_FALSE(rows[0].value("error", "").empty()) << rows.dump();
  EXPECT_EQ(rows[1]["action"], "create");
  EXPECT_EQ(rows[1]["state"], "done") << rows.dump();
  // Bound afresh: a new slice, and the task ran in the second partition.
  EXPECT_NE(rows[0]["slice_id"], rows[1]["slice_id"]);
  EXPECT_EQ(t["slice_id"], rows[1]["slice_id"]) << t.dump();
  EXPECT_EQ(t["labels"].value("heteroflow.mig_device_id", ""),
            rows[1]["device_id"]);
  json first = api_->GetSlice(rows[0]["slice_id"].get<std::int64_t>(), user_);
  EXPECT_EQ(first["state"], "released") << first.dump();
  json second = WaitSliceReleased(rows[1]["slice_id"].get<std::int64_t>());
  EXPECT_EQ(second["state"], "released") << second.dump();
}

// ------------------------------------------------------------- cancel

TEST_F(AgentE2eTest, CancelStopsTheTasksWholeProcessGroup) {
  AgentProcess& agent = StartAgent("cancel", {A100()});
  const std::int64_t id = CreateId({{"name", "long"},
                                    {"command", "sleep 120 & sleep 120 & wait"},
                                    {"gpu_memory_mb", 2048}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::optional<pid_t> pgid = agent.WaitTaskPid(id);
  ASSERT_TRUE(pgid.has_value()) << Logs(agent);
  // The shell and its two sleeps.
  ASSERT_TRUE(WaitFor([&] { return LiveProcessesInGroup(*pgid) == 3; }))
      << LiveProcessesInGroup(*pgid);

  HttpReply c = api_->http().Post(
      "/api/v1/tasks/" + std::to_string(id) + "/cancel", json::object(), user_);
  ASSERT_TRUE(HasStatus(c, 200));
  EXPECT_EQ(c.body["cancel_requested"], true) << c.raw;
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "cancelled") << t.dump() << Logs(agent);
  EXPECT_EQ(LiveProcessesInGroup(*pgid), 0)
      << "the cancelled task's processes outlive it";
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["state"], "released") << s.dump();
}

// ------------------------------------------------------------ restart

TEST_F(AgentE2eTest, KilledAgentLeavesTasksRunningAndANewOneAdoptsThem) {
  AgentProcess& agent = StartAgent("adopt", {A100()});
  const fs::path go = agent.dir() / "go";
  const std::int64_t id = CreateId(
      {{"name", "survivor"},
       {"command",
        "echo started; " + WaitForFileCommand(go, "echo finished; exit 7")},
       {"gpu_memory_mb", 2048}});
  ASSERT_EQ(WaitStatus(id, "running")["status"], "running") << Logs(agent);
  const std::optional<pid_t> pgid = agent.WaitTaskPid(id);
  ASSERT_TRUE(pgid.has_value()) << Logs(agent);
  // Its first output is with the server before the agent dies.
  ASSERT_TRUE(WaitFor([&] { return TaskLog(id) == "started\n"; }))
      << TaskLog(id);

  ASSERT_TRUE(agent.Kill());
  EXPECT_GT(LiveProcessesInGroup(*pgid), 0) << "the task died with the agent";
  EXPECT_EQ(api_->GetTask(id, user_)["status"], "running");

  ASSERT_TRUE(agent.Start());
  ASSERT_TRUE(agent.WaitForLog("adopted task " + std::to_string(id)));
  EXPECT_GT(LiveProcessesInGroup(*pgid), 0);
  Touch(go);
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "failed") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 7) << t.dump();
  // The log goes on where the first agent left it: nothing twice.
  EXPECT_EQ(TaskLog(id), "started\nfinished\n");
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["state"], "released") << s.dump();
  // Started once only.
  EXPECT_TRUE(agent.LogContains("task " + std::to_string(id) + " started"));
  const std::string log = agent.Log(1 << 20);
  const std::string started = "task " + std::to_string(id) + " started";
  EXPECT_EQ(log.find(started), log.rfind(started)) << log;
}

TEST_F(AgentE2eTest, StoppedAgentExitsCleanlyAndTasksRunOn) {
  AgentProcess& agent = StartAgent("stop", {A100()});
  const fs::path go = agent.dir() / "go";
  const std::int64_t id =
      CreateId({{"name", "survivor"},
                {"command", WaitForFileCommand(go, "echo done")},
                {"gpu_memory_mb", 2048}});
  ASSERT_EQ(WaitStatus(id, "running")["status"], "running") << Logs(agent);
  const std::optional<pid_t> pgid = agent.WaitTaskPid(id);
  ASSERT_TRUE(pgid.has_value()) << Logs(agent);

  ASSERT_TRUE(agent.Stop());  // SIGTERM: exit code 0
  EXPECT_TRUE(agent.LogContains("tasks keep running")) << agent.Log();
  EXPECT_GT(LiveProcessesInGroup(*pgid), 0) << "the task died with the agent";
  EXPECT_EQ(api_->GetTask(id, user_)["status"], "running");

  // It ends while no agent runs; the next one finds it ended and says so.
  Touch(go);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(agent.TaskDir(id) / "exit"); },
                      kTaskTimeout));
  EXPECT_EQ(api_->GetTask(id, user_)["status"], "running");
  ASSERT_TRUE(agent.Start());
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 0);
  EXPECT_EQ(TaskLog(id), "done\n");
}

// docs/CONTRACT.md section 9: a slice bound as silver while the MPS daemon was
// up is never run without its MPS limits. The agent is stopped, a silver task
// is bound on the server's last word, and the agent comes back on a node whose
// daemon cannot start: the task fails with the reason, nothing runs as
// bronze, and the node no longer says silver.
TEST_F(AgentE2eTest, SilverPromisedButTheMpsDaemonIsDownFailsTheTask) {
  AgentProcess& agent = NewAgent("mpsdown", {A100()});
  agent.options().flags = {"--mps-wait", "0.5"};
  ASSERT_TRUE(StartAndRegister(agent));
  ASSERT_TRUE(WaitFor(
      [&] {
        const json n = NodeView("mpsdown");
        return n.contains("gpus") && !n["gpus"].empty() &&
               n["gpus"][0].value("mps_capable", false);
      },
      kTaskTimeout))
      << Logs(agent);
  ASSERT_TRUE(agent.Stop());

  const std::int64_t id = CreateId({{"name", "promised-silver"},
                                    {"command", "echo ran anyway"},
                                    {"gpu_memory_mb", 2048},
                                    {"gpu_compute_ratio", 0.25}});
  json bound = WaitStatus(id, "scheduled");
  ASSERT_EQ(bound.value("qos_level", ""), "silver") << bound.dump();

  agent.options().inventory["mps"]["daemon_can_start"] = false;
  ASSERT_TRUE(agent.Start());
  json t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "failed") << t.dump() << Logs(agent);
  EXPECT_NE(t.value("message", "").find("MPS control daemon"),
            std::string::npos)
      << t.dump();
  EXPECT_EQ(TaskLog(id), "");  // it never ran
  EXPECT_FALSE(fs::exists(agent.TaskDir(id)));
  EXPECT_EQ(WaitSliceReleased(bound["slice_id"].get<std::int64_t>())["state"],
            "released");
  EXPECT_FALSE(NodeView("mpsdown")["gpus"][0].value("mps_capable", true));
}

TEST_F(AgentE2eTest, KilledAgentFinishesAGoldTaskAndDestroysItsPartition) {
  AgentProcess& agent = StartAgent("goldrestart", {H100Mig()});
  const fs::path go = agent.dir() / "go";
  const std::int64_t id =
      CreateId({{"name", "gold"},
                {"command", WaitForFileCommand(go, "exit 0")},
                {"gpu_memory_mb", 4096}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::string device = t["labels"].value("heteroflow.mig_device_id", "");
  ASSERT_TRUE(device.starts_with("MIG-")) << t.dump();

  ASSERT_TRUE(agent.Kill());
  ASSERT_TRUE(agent.Start());
  ASSERT_TRUE(agent.WaitForLog("adopted task " + std::to_string(id)));
  Touch(go);
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["state"], "released") << s.dump() << Logs(agent);
  json rows = Requests("goldrestart");
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[1]["action"], "destroy");
  EXPECT_EQ(rows[1]["state"], "done") << rows.dump();
  EXPECT_EQ(rows[1]["device_id"], device);
  // The partition the first agent made is gone from the (simulated) GPU.
  std::ifstream state_file(agent.state_dir() / "sim-mig-state.json");
  json state = json::parse(state_file, nullptr, false);
  ASSERT_TRUE(state.is_object()) << "no readable MIG state file";
  EXPECT_EQ(state["gpus"][0]["devices"], json::array()) << state.dump();
}

// The server's default policy (hf-frag, learned from the task history)
// after a crash: the history and the GPU's MIG charges are rebuilt from the
// database, and a slice without a compute share still goes to a GPU in MIG
// mode with less than half its compute left, charged as its partition (a 1g
// is 14%), where a plain GPU would account it at 50%. Before the node scan
// knew that, the task stayed pending ("retrying later") for good.
TEST_F(AgentE2eTest,
       AfterAServerCrashTheLearnedPolicyBindsAShareOnAFullMigGpu) {
  server_->flags().insert(server_->flags().end(),
                          {"--policy-cold-start-tasks", "1"});
  ASSERT_TRUE(server_->Restart());
  AgentProcess& agent = StartAgent("migfull", {H100Mig()});
  const fs::path go = agent.dir() / "go";
  const std::string hold = WaitForFileCommand(go, "exit 0");
  // 1g.10gb (14%) and 3g.40gb (42%): 44% of the compute is left.
  const std::int64_t small = CreateId({{"name", "small"},
                                       {"command", hold},
                                       {"gpu_memory_mb", 4096},
                                       {"gpu_compute_ratio", 0.1}});
  ASSERT_EQ(WaitStatus(small, "running")["status"], "running") << Logs(agent);
  const std::int64_t big =
      CreateId({{"name", "big"}, {"command", hold}, {"gpu_memory_mb", 30000}});
  ASSERT_EQ(WaitStatus(big, "running")["status"], "running") << Logs(agent);

  ASSERT_TRUE(server_->Restart(/*kill=*/true));
  HttpReply stats = api_->http().Get("/api/v1/slices/stats", api_->admin());
  ASSERT_EQ(stats.status, 200) << stats.Describe();
  EXPECT_EQ(stats.body["placement"]["policy"], "hf-frag") << stats.raw;
  EXPECT_EQ(stats.body["placement"]["mode"], "hf-frag") << stats.raw;
  EXPECT_EQ(stats.body["gpus"][0]["accounted_compute_percent"], 56)
      << stats.raw;

  const std::int64_t id = CreateId({{"name", "defaulted"},
                                    {"command", "echo ran"},
                                    {"gpu_memory_mb", 15000}});
  json t = WaitTerminal(id);
  ASSERT_EQ(t["status"], "succeeded")
      << t.dump() << "\n"
      << api_->GetTask(id, user_).dump() << Logs(agent);
  EXPECT_EQ(t["qos_level"], "gold") << t.dump();
  EXPECT_EQ(TaskLog(id), "ran\n");
  json slice = api_->GetSlice(t["slice_id"].get<std::int64_t>(), user_);
  // Charged as its partition, not at the 50% default.
  EXPECT_EQ(slice["compute_percent"], 14) << slice.dump();
  EXPECT_EQ(slice["compute_defaulted"], false) << slice.dump();
  EXPECT_EQ(slice["enforcement"], json({"mig"})) << slice.dump();
  bool charged_as_1g = false;
  for (const json& row : Requests("migfull")) {
    if (row["slice_id"] == t["slice_id"] && row["action"] == "create") {
      charged_as_1g = row["profile"] == "1g.20gb";
    }
  }
  EXPECT_TRUE(charged_as_1g) << Requests("migfull").dump();

  // The two held through the crash finish where they were.
  Touch(go);
  EXPECT_EQ(WaitTerminal(small)["status"], "succeeded") << Logs(agent);
  EXPECT_EQ(WaitTerminal(big)["status"], "succeeded") << Logs(agent);
}

TEST_F(AgentE2eTest, ServerCrashLosesNothingTheAgentHasToSay) {
  AgentProcess& agent = StartAgent("crash", {A100()});
  const fs::path go = agent.dir() / "go";
  const std::int64_t id =
      CreateId({{"name", "through-the-crash"},
                {"command", "echo before; " +
                                WaitForFileCommand(go, "echo after; exit 5")},
                {"gpu_memory_mb", 2048}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();

  ASSERT_TRUE(EndTaskWithTheServerDown(agent, id, go));
  ASSERT_TRUE(agent.WaitForLog("cycle:"));  // it noticed, and keeps going
  EXPECT_FALSE(agent.WaitExit(milliseconds(0)).has_value()) << agent.Log();

  ASSERT_TRUE(server_->Start());
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "failed") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 5) << t.dump();
  EXPECT_EQ(TaskLog(id), "before\nafter\n");
  json s = WaitSliceReleased(slice_id);
  EXPECT_EQ(s["state"], "released") << s.dump();
  EXPECT_TRUE(agent.running());
  // And it takes new work.
  const std::int64_t next = CreateId(
      {{"name", "next"}, {"command", "true"}, {"gpu_memory_mb", 2048}});
  EXPECT_EQ(WaitTerminal(next)["status"], "succeeded") << Logs(agent);
}

// ----------------------------------------------------------- lost GPU

TEST_F(AgentE2eTest, LostGpuKeepsItsSlicesTakesNoNewOnesAndRecovers) {
  // GPU 0 is the smaller one, so Best-Fit fills it first. It falls off the
  // bus 3 s after the agent starts and is back 3 s later.
  AgentProcess& agent = NewAgent(
      "lost",
      {A100(40960,
            {{{"kind", "lost"}, {"at_ms", 3000}, {"recover_at_ms", 6000}}}),
       A100()});
  const fs::path go = agent.dir() / "go";
  const std::int64_t first =
      CreateId({{"name", "first"},
                {"command", WaitForFileCommand(go, "true")},
                {"gpu_memory_mb", 4096}});
  ASSERT_TRUE(StartAndRegister(agent));
  json t = WaitStatus(first, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  ASSERT_EQ(t["gpu_indices"], json({0})) << t.dump();
  ASSERT_EQ(NodeView("lost")["gpus"][0]["health"], "ok")
      << "GPU 0 was lost before the test could use it (a slow machine?)";
  const std::int64_t first_slice = t["slice_id"].get<std::int64_t>();

  json node;
  ASSERT_TRUE(WaitFor(
      [&] {
        node = NodeView("lost");
        return node["gpus"][0]["health"] == "lost";
      },
      milliseconds(15'000)))
      << node.dump() << Logs(agent);
  EXPECT_EQ(node["gpus"][1]["health"], "ok");
  // Its slice stays, its task runs on.
  EXPECT_EQ(api_->GetSlice(first_slice, user_)["state"], "allocated");
  EXPECT_EQ(api_->GetSlice(first_slice, user_)["gpu_index"], 0);
  EXPECT_EQ(api_->GetTask(first, user_)["status"], "running");
  // A new slice avoids it although Best-Fit would prefer it.
  const std::int64_t during = CreateId(
      {{"name", "during"}, {"command", "true"}, {"gpu_memory_mb", 4096}});
  json d = api_->WaitNotPending(during, user_, kTaskTimeout);
  EXPECT_EQ(d["gpu_indices"], json({1})) << d.dump();
  ASSERT_EQ(NodeView("lost")["gpus"][0]["health"], "lost")
      << "GPU 0 recovered before the test could check it (a slow machine?)";
  d = WaitTerminal(during);
  EXPECT_EQ(d["status"], "succeeded") << d.dump() << Logs(agent);

  ASSERT_TRUE(WaitFor(
      [&] {
        node = NodeView("lost");
        return node["gpus"][0]["health"] == "ok";
      },
      milliseconds(15'000)))
      << node.dump() << Logs(agent);
  const std::int64_t after = CreateId(
      {{"name", "after"}, {"command", "true"}, {"gpu_memory_mb", 4096}});
  json a = WaitTerminal(after);
  EXPECT_EQ(a["status"], "succeeded") << a.dump() << Logs(agent);
  EXPECT_EQ(a["gpu_indices"], json({0})) << a.dump();

  Touch(go);
  EXPECT_EQ(WaitTerminal(first)["status"], "succeeded") << Logs(agent);
  EXPECT_EQ(WaitSliceReleased(first_slice)["state"], "released");
}

// ------------------------------------------------------------- docker

// The calls the fake docker CLI recorded: one argv per call.
std::vector<std::vector<std::string>> DockerCalls(const fs::path& state) {
  std::vector<std::vector<std::string>> calls;
  std::ifstream in(state / "calls");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> args;
    std::string arg;
    for (char c : line) {
      if (c == '\x1f') {
        args.push_back(arg);
        arg.clear();
      } else {
        arg += c;
      }
    }
    calls.push_back(std::move(args));
  }
  return calls;
}

// Runs a test control of the fake docker CLI (`__exit`, `__log`).
int FakeDockerControl(const fs::path& state, const std::string& args) {
  const std::string command = "FAKE_DOCKER_STATE='" + state.string() + "' '" +
                              FakeDockerPath() + "' " + args;
  return std::system(command.c_str());
}

bool HasArgPair(const std::vector<std::string>& argv, const std::string& flag,
                const std::string& value) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return true;
  }
  return false;
}

bool HasArg(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

// A node running processes needs a task's command, one running containers
// its image: each agent says which runtime it has, and the server binds a
// task only where it can be started (before, an image-only task could be
// bound to a process node and fail there, and a task with neither was
// bound and failed on any node).
TEST_F(AgentE2eTest, EachTaskGoesToANodeWhoseRuntimeCanStartIt) {
  ASSERT_TRUE(StartAndRegister(NewAgent("procs", {A100()})));
  AgentProcess& docker = NewAgent("containers", {A100()});
  docker.options().runtime = "docker";
  docker.options().docker = FakeDockerPath();
  docker.options().env.push_back(
      {"FAKE_DOCKER_STATE", (docker.dir() / "docker").string()});
  ASSERT_TRUE(StartAndRegister(docker));
  EXPECT_EQ(NodeView("procs")["runtime"], "process");
  EXPECT_EQ(NodeView("containers")["runtime"], "docker");

  std::vector<std::int64_t> images, commands;
  for (int i = 0; i < 3; ++i) {
    images.push_back(CreateId({{"name", "image-" + std::to_string(i)},
                               {"image", "pytorch/pytorch:2.0.0"},
                               {"gpu_memory_mb", 2048},
                               {"gpu_compute_ratio", 0.1}}));
    commands.push_back(CreateId({{"name", "command-" + std::to_string(i)},
                                 {"command", "sleep 60"},
                                 {"gpu_memory_mb", 2048},
                                 {"gpu_compute_ratio", 0.1}}));
  }
  for (const std::int64_t id : images) {
    const json t = WaitStatus(id, "running");
    EXPECT_EQ(t["status"], "running") << t.dump() << Logs(docker);
    EXPECT_EQ(t["node_id"], "containers") << t.dump();
  }
  for (const std::int64_t id : commands) {
    const json t = WaitStatus(id, "running");
    EXPECT_EQ(t["status"], "running") << t.dump();
    EXPECT_EQ(t["node_id"], "procs") << t.dump();
  }
  // Neither a command nor an image: nothing could start it, so it waits,
  // saying why, instead of being bound and failing on a node.
  const std::int64_t neither =
      CreateId({{"name", "neither"}, {"gpu_memory_mb", 2048}});
  const json waiting = api_->WaitTask(
      neither, user_,
      [](const json& t) {
        return t.value("pending_reason", "")
                   .find(
                       "neither a command nor an "
                       "image") != std::string::npos;
      },
      milliseconds(10'000));
  EXPECT_EQ(waiting["status"], "pending") << waiting.dump();
  EXPECT_NE(
      waiting.value("pending_reason", "").find("never fits in this cluster"),
      std::string::npos)
      << waiting.dump();
  std::this_thread::sleep_for(milliseconds(1500));
  HttpReply still =
      api_->http().Get("/api/v1/tasks/" + std::to_string(neither), user_);
  EXPECT_EQ(still.body["status"], "pending") << still.Describe();

  // After a SIGKILL and a restart of the server (the ledger rebuilt from
  // the store, the agents reporting again), the same holds.
  ASSERT_TRUE(server_->Kill());
  ASSERT_TRUE(server_->Start());
  const std::int64_t image_after = CreateId({{"name", "image-after"},
                                             {"image", "pytorch/pytorch:2.0.0"},
                                             {"gpu_memory_mb", 2048},
                                             {"gpu_compute_ratio", 0.1}});
  const std::int64_t command_after = CreateId({{"name", "command-after"},
                                               {"command", "sleep 60"},
                                               {"gpu_memory_mb", 2048},
                                               {"gpu_compute_ratio", 0.1}});
  json t = WaitStatus(image_after, "running");
  EXPECT_EQ(t["node_id"], "containers") << t.dump() << Logs(docker);
  t = WaitStatus(command_after, "running");
  EXPECT_EQ(t["node_id"], "procs") << t.dump();
  t = api_->WaitTask(
      neither, user_,
      [](const json& task) {
        return task.value("pending_reason", "").find("neither a command") !=
               std::string::npos;
      },
      milliseconds(10'000));
  EXPECT_EQ(t["status"], "pending") << t.dump();
}

TEST_F(AgentE2eTest, DockerRuntimeRunsSliceTasksAsContainers) {
  AgentProcess& agent = NewAgent("docker", {A100()});
  const fs::path docker_state = agent.dir() / "docker";
  agent.options().runtime = "docker";
  agent.options().docker = FakeDockerPath();
  agent.options().env.push_back({"FAKE_DOCKER_STATE", docker_state.string()});
  ASSERT_TRUE(StartAndRegister(agent));
  ASSERT_TRUE(WaitFor([&] {
    return NodeView("docker")["gpus"][0]["mps_capable"] == true;
  })) << Logs(agent);

  const std::int64_t id = CreateId({{"name", "container"},
                                    {"image", "pytorch/pytorch:2.0.0"},
                                    {"command", "python serve.py"},
                                    {"gpu_memory_mb", 4096},
                                    {"gpu_compute_ratio", 0.25}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  ASSERT_EQ(t["qos_level"], "silver");
  const std::string name = "hf-task-" + std::to_string(id);
  const std::string slice = std::to_string(t["slice_id"].get<std::int64_t>());

  std::vector<std::string> run;
  for (const auto& call : DockerCalls(docker_state)) {
    if (!call.empty() && call[0] == "run") run = call;
  }
  ASSERT_FALSE(run.empty()) << "no docker run" << Logs(agent);
  std::string argv;
  for (const std::string& a : run) argv += a + " ";
  EXPECT_TRUE(HasArgPair(run, "--name", name)) << argv;
  EXPECT_TRUE(HasArg(run, "--runtime=nvidia")) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "NVIDIA_VISIBLE_DEVICES=0")) << argv;
  EXPECT_TRUE(
      HasArgPair(run, "--label", "heteroflow.task=" + std::to_string(id)))
      << argv;
  EXPECT_TRUE(HasArgPair(run, "--label", "heteroflow.tenant=" + tenant_))
      << argv;
  EXPECT_TRUE(HasArgPair(run, "--label", "heteroflow.slice=" + slice)) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "HETEROFLOW_SLICE_ID=" + slice)) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "HETEROFLOW_SLICE_QOS=silver")) << argv;
  // Silver: the MPS pipe mounted at the same path, with the host's IPC.
  const std::string pipe = (agent.mps_dir() / "pipe").string();
  EXPECT_TRUE(HasArgPair(run, "-v", pipe + ":" + pipe)) << argv;
  EXPECT_TRUE(HasArg(run, "--ipc=host")) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "CUDA_MPS_PIPE_DIRECTORY=" + pipe)) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M"))
      << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"))
      << argv;
  // A container sees its devices renumbered: no host index leaks in.
  for (const std::string& a : run) {
    EXPECT_FALSE(a.starts_with("CUDA_VISIBLE_DEVICES=")) << argv;
  }
  // The image, then the command.
  ASSERT_GE(run.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(run.end() - 4, run.end()),
            (std::vector<std::string>{"pytorch/pytorch:2.0.0", "/bin/sh", "-c",
                                      "python serve.py"}))
      << argv;

  // A new agent finds the container through the engine.
  ASSERT_TRUE(agent.Kill());
  ASSERT_TRUE(agent.Start());
  ASSERT_TRUE(agent.WaitForLog("adopted task " + std::to_string(id)));

  // The container prints and ends as the fake engine says.
  ASSERT_EQ(FakeDockerControl(docker_state,
                              "__log " + name + " 1 'serving on :8000'"),
            0);
  ASSERT_EQ(FakeDockerControl(docker_state, "__exit " + name + " 3"), 0);
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "failed") << t.dump() << Logs(agent);
  EXPECT_EQ(t["exit_code"], 3) << t.dump();
  EXPECT_EQ(TaskLog(id), "serving on :8000\n");
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["state"], "released") << s.dump();
  // The finished container is removed.
  EXPECT_TRUE(WaitFor([&] {
    for (const auto& call : DockerCalls(docker_state)) {
      if (call.size() >= 2 && call[0] == "rm" && call.back() == name) {
        return true;
      }
    }
    return false;
  })) << Logs(agent);
}

TEST_F(AgentE2eTest, DockerRuntimeRunsGoldSlicesOnTheirMigDevice) {
  AgentProcess& agent = NewAgent("dockergold", {H100Mig()});
  const fs::path docker_state = agent.dir() / "docker";
  agent.options().runtime = "docker";
  agent.options().docker = FakeDockerPath();
  agent.options().env.push_back({"FAKE_DOCKER_STATE", docker_state.string()});
  ASSERT_TRUE(StartAndRegister(agent));
  const std::int64_t id = CreateId({{"name", "container"},
                                    {"image", "pytorch/pytorch:2.0.0"},
                                    {"command", "python serve.py"},
                                    {"gpu_memory_mb", 4096}});
  json t = WaitStatus(id, "running");
  ASSERT_EQ(t["status"], "running") << t.dump() << Logs(agent);
  const std::string device = t["labels"].value("heteroflow.mig_device_id", "");
  ASSERT_TRUE(device.starts_with("MIG-")) << t.dump();
  std::vector<std::string> run;
  for (const auto& call : DockerCalls(docker_state)) {
    if (!call.empty() && call[0] == "run") run = call;
  }
  ASSERT_FALSE(run.empty()) << "no docker run" << Logs(agent);
  std::string argv;
  for (const std::string& a : run) argv += a + " ";
  EXPECT_TRUE(HasArg(run, "--runtime=nvidia")) << argv;
  EXPECT_TRUE(HasArgPair(run, "-e", "NVIDIA_VISIBLE_DEVICES=" + device))
      << argv;
  EXPECT_TRUE(HasArgPair(run, "--label", "heteroflow.mig_device_id=" + device))
      << argv;
  // The partition is the boundary: no MPS pipe, no host IPC.
  EXPECT_FALSE(HasArg(run, "--ipc=host")) << argv;
  for (const std::string& a : run) {
    EXPECT_FALSE(a.starts_with("CUDA_MPS_PIPE_DIRECTORY=")) << argv;
    EXPECT_FALSE(a.starts_with("CUDA_VISIBLE_DEVICES=")) << argv;
  }
  ASSERT_EQ(FakeDockerControl(docker_state,
                              "__exit hf-task-" + std::to_string(id) + " 0"),
            0);
  t = WaitTerminal(id);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << Logs(agent);
  json s = WaitSliceReleased(t["slice_id"].get<std::int64_t>());
  EXPECT_EQ(s["state"], "released") << s.dump() << Logs(agent);
}

}  // namespace
}  // namespace hf::e2e
