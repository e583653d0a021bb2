// The agent on its own, in process: a scripted control plane behind the
// Transport seam (every request recorded, any reply lost or replaced), the
// simulated GPU driver and the simulated task runtime. What the whole-system
// simulation finds across components, these pin down for the agent alone:
// it reconciles with the server's desired state, carries a MIG command out
// once however often its report is lost or the agent dies, and survives any
// reply a server (or something pretending to be one) sends.
#include "agent/agent.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/server_client.h"
#include "agent/testing/forwarding_driver.h"
#include "agent/testing/test_node.h"
#include "common/clock.h"
#include "gpu/inventory.h"
#include "gpu/sim_driver.h"
#include "mps/sim_mps_control.h"
#include "runtime/sim_runtime.h"

namespace hf::agent {
namespace {

// A control plane that answers from a script. The node endpoints' shapes are
// those of docs/API.md ("Nodes and agents").
class ScriptedServer final : public Transport {
 public:
  struct Call {
    std::string method;
    std::string path;
    json body;
  };

  StatusOr<WireReply> RoundTrip(const WireRequest& request) override {
    json body = json::parse(request.body, nullptr, false);
    calls.push_back({request.method, request.path, body});
    if (replace) {
      if (auto reply = replace(request)) return *reply;
    }
    // Carried out, then the reply is lost: the agent must retry harmlessly.
    const bool lost = lose && lose(request);
    WireReply reply{200, "{}"};
    const std::string& p = request.path;
    if (p.ends_with("/assignments")) {
      reply.body = assignments.dump();
    } else if (p.ends_with("/slice-requests/claim")) {
      reply.body = json{{"items", claims}}.dump();
    } else if (p.ends_with("/result")) {
      results.push_back(body);
    } else if (p.ends_with("/task-states")) {
      for (const json& s : body["states"]) states.push_back(s);
    } else if (p.ends_with("/logs")) {
      reply.body = json{{"size", 0}}.dump();
    } else if (p.ends_with("/heartbeat")) {
      reply.body = heartbeat_reply.dump();
    }
    if (lost) return Status::Unavailable("the reply was lost");
    return reply;
  }

  // The states reported for `task`, in order.
  std::vector<std::string> StatesOf(std::int64_t task) const {
    std::vector<std::string> out;
    for (const json& s : states) {
      if (s.value("task_id", 0) == task) out.push_back(s.value("state", ""));
    }
    return out;
  }

  json assignments = {{"run", json::array()},
                      {"cancel", json::array()},
                      {"bound", json::array()}};
  json claims = json::array();
  json heartbeat_reply = json::object();
  std::function<bool(const WireRequest&)> lose;
  std::function<std::optional<WireReply>(const WireRequest&)> replace;

  std::vector<Call> calls;
  std::vector<json> results;  // MIG command results, as posted
  std::vector<json> states;   // task-state entries, as posted
};

// A driver whose MIG creates can "crash the agent" halfway: after the
// partition exists and before the call returns, the agent's state directory
// is copied aside, as a kill -9 at that instant would leave it.
class CrashingDriver final : public test_driver::ForwardingDriver {
 public:
  using ForwardingDriver::ForwardingDriver;
  StatusOr<gpu::MigDevice> CreateMigDevice(
      int index, const std::string& profile,
      std::optional<gpu::MigPlacement> placement) override {
    auto made = real()->CreateMigDevice(index, profile, placement);
    ++creates;
    if (on_create) on_create();
    return made;
  }

  int creates = 0;
  std::function<void()> on_create;
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hf-agent-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto inventory = gpu::ParseInventory(test_node::kInventory);
    ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
    auto driver = gpu::SimGpuDriver::Create(std::move(*inventory), clock_);
    ASSERT_TRUE(driver.ok()) << driver.status().ToString();
    driver_ = std::move(*driver);
    crashing_ = std::make_unique<CrashingDriver>(driver_.get());
    host_ = std::make_unique<runtime::SimHost>(
        driver_.get(), &clock_, [this](const runtime::TaskSpec& spec) {
          auto it = behaviours_.find(spec.task_id);
          if (it != behaviours_.end()) return it->second;
          runtime::SimTaskBehaviour b;
          b.duration_ms = 3'600'000;
          b.memory_mib = 1024;
          return b;
        });
    runtime_ = std::make_unique<runtime::SimRuntime>(host_.get());
    auto server = std::make_unique<ScriptedServer>();
    server_ = server.get();
    client_ = std::make_unique<ServerClient>(std::move(server), "token");
    StartAgent();
  }

  void TearDown() override {
    agent_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A fresh Agent on the same state directory, driver and runtime: a
  // restart after kill -9.
  void StartAgent() {
    agent_.reset();
    AgentOptions o;
    o.node_id = "n1";
    o.agent_version = "test";
    o.state_dir = dir_ / "state";
    o.kill_grace = std::chrono::milliseconds(0);
    o.hook_library = hook_library_;
    o.hook_preload = hook_preload_;
    auto a = Agent::Create(o, client_.get(), crashing_.get(), runtime_.get(),
                           mps_, HostFacts{}, &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    agent_ = std::move(*a);
  }

  std::string GpuUuid(int index) {
    auto gpus = driver_->ListGpus();
    EXPECT_TRUE(gpus.ok());
    for (const gpu::GpuInfo& g : *gpus) {
      if (g.index == index) return g.uuid;
    }
    return "";
  }

  static json Task(std::int64_t id, std::int64_t slice, int gpu) {
    return {{"id", id},
            {"tenant", "acme"},
            {"slice_id", slice},
            {"command", "train"},
            {"gpu_indices", {gpu}},
            {"env", {{"HETEROFLOW_SLICE_QOS", "bronze"}}},
            {"labels", json::object()}};
  }

  json CreateCommand(std::int64_t id, std::int64_t slice) {
    return {{"id", id},
            {"action", "create"},
            {"gpu_index", 0},
            {"gpu_uuid", GpuUuid(0)},
            {"profile", "1g.10gb"},
            {"slice_id", slice},
            {"task_id", 1}};
  }

  bool Running(std::int64_t task) const {
    auto it = host_->tasks().find(task);
    return it != host_->tasks().end() && it->second.running();
  }

  FakeClock clock_{1'000'000};
  std::filesystem::path dir_;
  std::unique_ptr<gpu::SimGpuDriver> driver_;
  std::unique_ptr<CrashingDriver> crashing_;
  std::unique_ptr<runtime::SimHost> host_;
  std::unique_ptr<runtime::SimRuntime> runtime_;
  ScriptedServer* server_ = nullptr;
  std::unique_ptr<ServerClient> client_;
  std::unique_ptr<Agent> agent_;
  mps::MpsControl* mps_ = nullptr;
  // The agent's hook options (StartAgent); no hook by default.
  std::string hook_library_;
  runtime::PreloadRoute hook_preload_ = runtime::PreloadRoute::kBoth;
  // How a task behaves when it starts, by task id (default: runs an hour).
  std::map<std::int64_t, runtime::SimTaskBehaviour> behaviours_;
};

TEST_F(AgentTest, StartsWhatTheServerAssignsAndSaysWhichBinding) {
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_TRUE(Running(1));
  EXPECT_EQ(host_->tasks().at(1).gpu_indices, std::vector<int>{1});
  ASSERT_EQ(server_->StatesOf(1), std::vector<std::string>{"running"});
  EXPECT_EQ(server_->states.back()["slice_id"], 5);
  // Assigned again (the report was not seen yet): never a second start.
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(host_->tasks().size(), 1U);
}

// A task whose programs the dynamic loader stops (the hook in an image with
// an older glibc) fails with the loader's line in its reason, not a bare
// exit code; a task that fails otherwise says only how it ended.
TEST_F(AgentTest, AFailureTheLoaderCausedNamesTheLoadersLine) {
  const std::string loader =
      "/bin/sh: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not "
      "found (required by /opt/heteroflow/libhfhook.so)";
  runtime::SimTaskBehaviour refused;
  refused.duration_ms = 1;
  refused.exit_code = 1;
  refused.output = loader + "\n";
  behaviours_[1] = refused;
  runtime::SimTaskBehaviour failing = refused;
  failing.output = "Traceback: no module named torch\n";
  behaviours_[2] = failing;
  server_->assignments["run"] = json::array({Task(1, 5, 1), Task(2, 6, 1)});
  server_->assignments["bound"] = {1, 2};
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(10);
  host_->Tick();
  ASSERT_TRUE(agent_->RunOnce().ok());
  std::map<std::int64_t, std::string> failed;
  for (const json& s : server_->states) {
    if (s.value("state", "") == "failed") {
      failed[s.value("task_id", 0)] = s.value("message", "");
    }
  }
  ASSERT_EQ(failed.size(), 2u) << server_->states.size();
  EXPECT_EQ(failed[1], "exited 1; the dynamic loader: " + loader);
  EXPECT_EQ(failed[2], "exited 1");
}

// With a file route the agent writes the preload file that names the hook
// and hands it to the runtime (which mounts it at /etc/ld.so.preload in a
// container); with "env" there is none.
TEST_F(AgentTest, AFilePreloadRouteGetsThePreloadFile) {
  hook_library_ = "/opt/heteroflow/lib/libhfhook.so";
  StartAgent();
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_TRUE(Running(1));
  const runtime::TaskSpec& spec = host_->tasks().at(1).spec;
  EXPECT_EQ(spec.preload_library, hook_library_);
  EXPECT_EQ(spec.preload_route, runtime::PreloadRoute::kBoth);
  ASSERT_FALSE(spec.preload_file.empty());
  EXPECT_EQ(std::filesystem::path(spec.preload_file).filename(),
            "ld.so.preload");
  std::ifstream in(spec.preload_file);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, hook_library_);
  EXPECT_EQ(std::filesystem::status(spec.preload_file).permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::others_read);

  hook_preload_ = runtime::PreloadRoute::kEnv;
  StartAgent();
  server_->assignments["run"] = json::array({Task(1, 5, 1), Task(2, 6, 1)});
  server_->assignments["bound"] = {1, 2};
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_TRUE(Running(2));
  EXPECT_EQ(host_->tasks().at(2).spec.preload_route,
            runtime::PreloadRoute::kEnv);
  EXPECT_EQ(host_->tasks().at(2).spec.preload_file, "");
}

// The numbers of its reports (register and heartbeat) only grow, across
// restarts too, so the server can tell a report delivered late from a new
// one; after its state directory is wiped, the agent starts above the
// numbers the server says it applied.
TEST_F(AgentTest, NumbersItsReportsUpwardAcrossRestartsAndAfterAWipe) {
  std::vector<std::pair<std::int64_t, std::int64_t>> numbers;
  const auto take = [&] {
    for (const auto& c : server_->calls) {
      if (c.path.ends_with("/register") || c.path.ends_with("/heartbeat")) {
        numbers.emplace_back(c.body.value("report_epoch", -1),
                             c.body.value("report_seq", -1));
      }
    }
    server_->calls.clear();
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(agent_->RunOnce().ok());
  StartAgent();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(agent_->RunOnce().ok());
  take();
  ASSERT_EQ(numbers.size(), 7U);  // a register and 3 heartbeats, then 1 + 2
  EXPECT_EQ(numbers.front(), std::make_pair(std::int64_t{1}, std::int64_t{1}));
  for (std::size_t i = 1; i < numbers.size(); ++i) {
    EXPECT_LT(numbers[i - 1], numbers[i]) << i;
  }
  EXPECT_EQ(numbers[4].first, 2);  // the second start
  // Wiped: it starts at epoch 1 again, and the server, having applied
  // epoch 2's reports, says so instead of applying them.
  agent_.reset();
  std::filesystem::remove_all(dir_ / "state");
  server_->heartbeat_reply = {
      {"ok", true},
      {"quotas", json::array()},
      {"applied", false},
      {"newer_report", {{"report_epoch", 2}, {"report_seq", 3}}}};
  StartAgent();
  numbers.clear();
  (void)agent_->RunOnce();
  server_->heartbeat_reply = json::object();
  ASSERT_TRUE(agent_->RunOnce().ok());
  take();
  ASSERT_EQ(numbers.size(), 3U);
  EXPECT_EQ(numbers[1].first, 1);
  EXPECT_EQ(numbers[2], std::make_pair(std::int64_t{3}, std::int64_t{1}));
  // Remembered: the next start is above that too.
  StartAgent();
  ASSERT_TRUE(agent_->RunOnce().ok());
  take();
  ASSERT_FALSE(numbers.empty());
  EXPECT_EQ(numbers.back().first, 4);
}

TEST_F(AgentTest, StopsATaskTheServerNoLongerAssignsToThisNode) {
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_TRUE(Running(1));
  // Terminal at the server, unknown to it, or bound elsewhere: the server
  // names it nowhere.
  server_->assignments["run"] = json::array();
  server_->assignments["bound"] = json::array();
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_FALSE(Running(1));
  const auto states = server_->StatesOf(1);
  ASSERT_EQ(states.size(), 2U);
  EXPECT_EQ(states[1], "cancelled");
  EXPECT_EQ(server_->states.back()["slice_id"], 5);
}

TEST_F(AgentTest, KeepsATaskTheServerStillHoldsBound) {
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  server_->assignments["run"] = json::array();  // running: not "run" again
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(Running(1));
  // An older server that sends no "bound": the agent leaves its tasks be.
  server_->assignments.erase("bound");
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(Running(1));
}

TEST_F(AgentTest, AnAssignmentWithoutGpusOfThisNodeFailsUnstarted) {
  // With no GPU pinned a process would see every GPU of the machine.
  json unreadable = Task(3, 13, 1);
  unreadable["gpu_indices"] = "1";
  json missing = Task(4, 14, 1);
  missing.erase("gpu_indices");
  json none = Task(5, 15, 1);
  none["gpu_indices"] = json::array();
  json elsewhere = Task(6, 16, 7);  // this node has GPUs 0 and 1
  json mixed = Task(7, 17, 1);
  mixed["gpu_indices"] = {1, "0"};
  json huge = Task(8, 18, 1);
  huge["gpu_indices"] = {4294967297LL};  // 1 once cut to 32 bits
  server_->assignments["run"] = {unreadable, missing, none,
                                 elsewhere,  mixed,   huge};
  server_->assignments["bound"] = {3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(host_->tasks().empty());
  for (std::int64_t id = 3; id <= 8; ++id) {
    EXPECT_EQ(server_->StatesOf(id), std::vector<std::string>{"failed"})
        << "task " << id;
  }
}

// Found by the simulation: a silver task waited for a dead MPS daemon, was
// reported failed (the report delayed on the way), and was then started
// when the daemon came back, while the server still assigned it; the late
// report then ended it at the server with its process running.
TEST_F(AgentTest, ATaskReportedFailedIsNeverStartedLaterUnderThatBinding) {
  mps::SimMpsControl mps(mps::SimMpsOptions{.daemon_can_start = false});
  mps_ = &mps;
  StartAgent();
  json silver = Task(1, 5, 1);
  silver["env"]["HETEROFLOW_SLICE_QOS"] = "silver";
  server_->assignments["run"] = json::array({silver});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());  // waits for the daemon
  EXPECT_TRUE(server_->StatesOf(1).empty());
  clock_.Advance(61'000);
  server_->lose = [](const WireRequest& r) {
    return r.path.ends_with("/task-states");
  };
  (void)agent_->RunOnce();  // gives up; the reply to its report is lost
  ASSERT_EQ(server_->StatesOf(1), std::vector<std::string>{"failed"});
  mps.SetDaemonCanStart(true);
  server_->lose = nullptr;
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(host_->tasks().empty()) << "started after it was reported failed";
  EXPECT_EQ(server_->StatesOf(1),
            (std::vector<std::string>{"failed", "failed"}));
  StartAgent();  // remembered across a restart
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(host_->tasks().empty());
  // Bound again (a new slice): that binding starts.
  silver["slice_id"] = 6;
  server_->assignments["run"] = json::array({silver});
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(Running(1));
  agent_.reset();  // before the MPS control it holds
}

TEST_F(AgentTest, ACancelledTaskThatNeverStartedIsReportedWithItsSlice) {
  server_->assignments["cancel"] = {9};
  server_->assignments["slices"] = {{"9", 12}};
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_EQ(server_->StatesOf(9), std::vector<std::string>{"cancelled"});
  EXPECT_EQ(server_->states.back()["slice_id"], 12);
  EXPECT_TRUE(host_->tasks().empty());
}

TEST_F(AgentTest, AMigCreateIsCarriedOutOnceHoweverOftenItsReportIsLost) {
  server_->claims = json::array({CreateCommand(7, 3)});
  int lost = 0;
  server_->lose = [&](const WireRequest& r) {
    return r.path.ends_with("/7/result") && lost++ < 3;
  };
  for (int i = 0; i < 5; ++i) (void)agent_->RunOnce();
  EXPECT_EQ(crashing_->creates, 1);
  auto devices = driver_->ListMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1U);
  // Every report (the lost ones too, and the one for the command offered
  // again after it was done) names the one partition.
  ASSERT_EQ(server_->results.size(), 5U);
  for (const json& r : server_->results) {
    EXPECT_EQ(r["ok"], true);
    EXPECT_EQ(r["device_id"], (*devices)[0].device_uuid);
  }
  // A replay after a restart (a server restored from a backup offers the
  // done command again): still one partition.
  StartAgent();
  (void)agent_->RunOnce();
  EXPECT_EQ(crashing_->creates, 1);
  EXPECT_EQ(server_->results.back()["device_id"], (*devices)[0].device_uuid);
}

TEST_F(AgentTest, AMigCreateOutcomeSurvivesARestartBeforeItsReport) {
  server_->claims = json::array({CreateCommand(7, 3)});
  server_->lose = [](const WireRequest& r) {
    return r.path.ends_with("/result");
  };
  (void)agent_->RunOnce();
  ASSERT_EQ(crashing_->creates, 1);
  StartAgent();  // kill -9 after the create, before any report got through
  server_->lose = nullptr;
  (void)agent_->RunOnce();
  EXPECT_EQ(crashing_->creates, 1);
  auto devices = driver_->ListMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1U);
  ASSERT_FALSE(server_->results.empty());
  EXPECT_EQ(server_->results.back()["device_id"], (*devices)[0].device_uuid);
}

TEST_F(AgentTest, AMigCreateInterruptedByACrashIsFoundAgainNotRepeated) {
  // A partition someone made earlier is not ours to claim.
  auto old = driver_->CreateMigDevice(0, "1g.10gb", {});
  ASSERT_TRUE(old.ok());
  server_->claims = json::array({CreateCommand(7, 3)});
  const std::filesystem::path state = dir_ / "state";
  const std::filesystem::path frozen = dir_ / "frozen";
  crashing_->on_create = [&] {
    // The agent's files as a kill -9 inside the driver call leaves them.
    std::filesystem::copy(state, frozen,
                          std::filesystem::copy_options::recursive);
  };
  server_->lose = [](const WireRequest& r) {
    return r.path.ends_with("/result");
  };
  (void)agent_->RunOnce();
  ASSERT_EQ(crashing_->creates, 1);
  crashing_->on_create = nullptr;
  agent_.reset();
  std::filesystem::remove_all(state);
  std::filesystem::rename(frozen, state);
  StartAgent();
  server_->lose = nullptr;
  (void)agent_->RunOnce();
  EXPECT_EQ(crashing_->creates, 1) << "the create was carried out again";
  auto devices = driver_->ListMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 2U);
  ASSERT_FALSE(server_->results.empty());
  const json& last = server_->results.back();
  EXPECT_EQ(last["ok"], true);
  EXPECT_NE(last["device_id"], old->device_uuid);
}

TEST_F(AgentTest, ACleanupDestroyRemovesWhatTheAgentMadeForTheSlice) {
  server_->claims = json::array({CreateCommand(7, 3)});
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_EQ(driver_->ListMigDevices(0)->size(), 1U);
  // The server gave up on the create (its deadline passed) and asks for
  // whatever was made for slice 3: no device id.
  server_->claims = json::array({{{"id", 8},
                                  {"action", "destroy"},
                                  {"gpu_index", 0},
                                  {"gpu_uuid", GpuUuid(0)},
                                  {"slice_id", 3}}});
  StartAgent();  // what it made is remembered across a restart
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_TRUE(driver_->ListMigDevices(0)->empty());
  EXPECT_EQ(server_->results.back()["ok"], true);
}

TEST_F(AgentTest, ACommandForAnotherCardIsRefusedUntouched) {
  json cmd = CreateCommand(7, 3);
  cmd["gpu_uuid"] = "GPU-00000000-0000-0000-0000-000000000000";
  server_->claims = json::array({cmd});
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(crashing_->creates, 0);
  ASSERT_EQ(server_->results.size(), 1U);
  EXPECT_EQ(server_->results[0]["ok"], false);
  EXPECT_NE(server_->results[0]["error"].get<std::string>().find("drift"),
            std::string::npos);
}

TEST_F(AgentTest, ACreateThatNamesNoCardIsRefusedUntouched) {
  json cmd = CreateCommand(7, 3);
  cmd.erase("gpu_uuid");
  server_->claims = json::array({cmd});
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(crashing_->creates, 0);
  ASSERT_EQ(server_->results.size(), 1U);
  EXPECT_EQ(server_->results[0]["ok"], false);
}

TEST_F(AgentTest, ARestartFindsItsTasksAndHeartbeatsThem) {
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  StartAgent();
  server_->calls.clear();
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(host_->tasks().size(), 1U) << "started twice after a restart";
  bool heartbeat_names_it = false;
  for (const auto& c : server_->calls) {
    if (!c.path.ends_with("/heartbeat")) continue;
    for (const json& t : c.body["tasks"]) {
      heartbeat_names_it |= t.value("task_id", 0) == 1;
    }
  }
  EXPECT_TRUE(heartbeat_names_it);
}

// Replies of every shape to every call: the agent returns errors or ignores
// what it cannot read, and never throws, crashes or starts anything from a
// reply it does not understand.
TEST_F(AgentTest, SurvivesAnyReplyTheServerSends) {
  const std::vector<std::string> bodies = {
      "",
      "null",
      "[]",
      "\"run\"",
      "42",
      "{",
      R"({"run": 5, "cancel": "x", "bound": {}})",
      R"({"bound": [1]})",
      R"({"bound": [1], "run": [5, "x", null, [], {"id": "1"}]})",
      R"({"run": [{"id": 3, "gpu_indices": "0", "env": [], "labels": 4,
                   "command": {"a": 1}}], "bound": [3]})",
      R"({"cancel": [{"id": 1}, -4, 1e300], "slices": [1]})",
      R"({"items": {}})",
      R"({"items": [1, "x", {"id": "7"}, {"id": 7, "action": 5}]})",
      R"({"items": [{"id": 7, "action": "create", "gpu_index": 1e10}]})",
      R"({"quotas": 3})",
      R"({"quotas": [1, {"task_id": "1"}, {"task_id": 1, "memory_mb": -1}]})",
      R"({"size": "big"})",
      R"({"size": -5})",
  };
  const std::vector<std::string> endpoints = {"/register",    "/heartbeat",
                                              "/assignments", "/claim",
                                              "/task-states", "/logs"};
  server_->assignments["run"] = json::array({Task(1, 5, 1)});
  server_->assignments["bound"] = {1};
  ASSERT_TRUE(agent_->RunOnce().ok());
  for (const std::string& endpoint : endpoints) {
    for (const std::string& body : bodies) {
      for (int status : {200, 400, 500}) {
        SCOPED_TRACE(endpoint + " " + std::to_string(status) + " " + body);
        server_->replace =
            [&](const WireRequest& r) -> std::optional<WireReply> {
          if (r.path.ends_with(endpoint)) return WireReply{status, body};
          return std::nullopt;
        };
        EXPECT_NO_THROW((void)agent_->RunOnce());
      }
    }
  }
  server_->replace = nullptr;
  // Task 3 of the malformed assignment was never a well-formed task: the
  // only process is still task 1's.
  for (const auto& [id, t] : host_->tasks()) {
    EXPECT_TRUE(id == 1 || !t.running()) << "task " << id << " started";
  }
  EXPECT_EQ(crashing_->creates, 0);
}

}  // namespace
}  // namespace hf::agent
