// The agent's proof that the hook runs in every process of a slice that
// uses its GPU, and its measurement of the memory the hook does not count,
// against the fake NVML (src/gpu/nvml/fake_nvml.cc) listing real processes
// of this machine: children spawned with the environment a task gets, in
// this pid namespace or a new one. The task itself runs on the simulated
// runtime; what the agent reads of the processes is /proc, as on a node.
#include "agent/hook_proof.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/server_client.h"
#include "agent/testing/forwarding_driver.h"
#include "common/clock.h"
#include "gpu/inventory.h"
#include "gpu/nvml/nvml_driver.h"
#include "gpu/sim_driver.h"
#include "hook/gpu_region.h"
#include "runtime/sim_runtime.h"

#ifndef HF_FAKE_NVML_PATH
#error "HF_FAKE_NVML_PATH must name the fake libnvidia-ml.so.1"
#endif
#ifndef HF_HOOK_PATH
#error "HF_HOOK_PATH must name libhfhook.so"
#endif
#ifndef HF_PROBE_PATH
#error "HF_PROBE_PATH must name hook_probe"
#endif
#ifndef HF_SHARE_WORKER_PATH
#error "HF_SHARE_WORKER_PATH must name share_worker"
#endif
#ifndef HF_FAKE_CUDA_DIR
#error "HF_FAKE_CUDA_DIR must name the directory of the fake libcuda.so.1"
#endif

namespace hf::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::uint64_t kMib = std::uint64_t{1} << 20;
constexpr std::int64_t kTask = 1;
constexpr std::int64_t kSlice = 10;

constexpr char kInventory[] = R"({
  "node_id": "n1", "cpu_milli": 64000, "host_memory_mb": 524288,
  "gpus": [{"model": "NVIDIA A100-SXM4-40GB", "memory_mb": 40960,
            "compute_capability": "8.0"}]})";

// A control plane that assigns one hooked task and keeps the heartbeats.
class OneTaskServer final : public Transport {
 public:
  StatusOr<WireReply> RoundTrip(const WireRequest& request) override {
    WireReply reply{200, "{}"};
    const std::string& p = request.path;
    if (p.ends_with("/assignments")) {
      reply.body = assignments.dump();
    } else if (p.ends_with("/slice-requests/claim")) {
      reply.body = R"({"items": []})";
    } else if (p.ends_with("/logs")) {
      reply.body = R"({"size": 0})";
    } else if (p.ends_with("/heartbeat")) {
      heartbeats.push_back(json::parse(request.body, nullptr, false));
    }
    return reply;
  }

  json assignments = {{"run",
                       {{{"id", kTask},
                         {"tenant", "acme"},
                         {"slice_id", kSlice},
                         {"command", "train"},
                         {"gpu_indices", {0}},
                         {"env",
                          {{"HETEROFLOW_SLICE_QOS", "bronze"},
                           {"HETEROFLOW_SLICE_ID", std::to_string(kSlice)},
                           {"HETEROFLOW_SLICE_MEMORY_MB", "4096"}}},
                         {"labels", json::object()}}}},
                      {"cancel", json::array()},
                      {"bound", {kTask}}};
  std::vector<json> heartbeats;
};

// Passes every call to the driver underneath, counting the per-process
// utilisation samples asked for.
class CountingDriver final : public test_driver::ForwardingDriver {
 public:
  using ForwardingDriver::ForwardingDriver;
  StatusOr<std::vector<gpu::ProcessUtilization>> SampleProcessUtilization(
      int index, std::uint64_t since_us) override {
    ++samples;
    return real()->SampleProcessUtilization(index, since_us);
  }

  int samples = 0;
};

class HookProofTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hf-hook-proof-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    region_path_ =
        fs::absolute(dir_ / "state" / "hook" /
                     ("slice-" + std::to_string(kSlice) + ".region"));
    auto inventory = gpu::ParseInventory(kInventory);
    ASSERT_TRUE(inventory.ok()) << inventory.status().ToString();
    auto sim = gpu::SimGpuDriver::Create(std::move(*inventory), clock_);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    sim_ = std::move(*sim);
    host_ = std::make_unique<runtime::SimHost>(sim_.get(), &clock_,
                                               [](const runtime::TaskSpec&) {
                                                 runtime::SimTaskBehaviour b;
                                                 b.duration_ms = 3'600'000;
                                                 b.memory_mib = 1024;
                                                 return b;
                                               });
    runtime_ = std::make_unique<runtime::SimRuntime>(host_.get());
    auto server = std::make_unique<OneTaskServer>();
    server_ = server.get();
    client_ = std::make_unique<ServerClient>(std::move(server), "token");
  }

  void TearDown() override {
    agent_.reset();
    nvml_.reset();
    unsetenv("HF_FAKE_NVML_CONFIG");
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  // The environment a task's process gets from the agent: the slice's
  // region among it.
  std::vector<std::string> TaskEnv() const {
    return {"PATH=/usr/bin:/bin",
            "HETEROFLOW_SLICE_ID=" + std::to_string(kSlice),
            "HETEROFLOW_HOOK_REGION=" + region_path_.string()};
  }

  // /bin/sleep with exactly `env`; killed at the end of the test.
  // Whether `pid` maps a file whose path contains `name`, within 5 s.
  static bool WaitForMapped(pid_t pid, const std::string& name) {
    for (int i = 0; i < 5000; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
      std::string line;
      while (std::getline(in, line)) {
        if (line.find(name) != std::string::npos) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  pid_t Spawn(const std::vector<std::string>& env) {
    return SpawnArgv({"/bin/sleep", "60"}, env);
  }

  pid_t SpawnArgv(const std::vector<std::string>& argv,
                  const std::vector<std::string>& env) {
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (const std::string& e : env) {
      envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(
        posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), envp.data()),
        0);
    children_.push_back(pid);
    // Until the exec is done, /proc shows this test's environment.
    for (int i = 0; i < 2000; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
      std::string cmdline;
      std::getline(in, cmdline, '\0');
      if (cmdline == argv[0]) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pid;
  }

  // The fake NVML with one GPU (the inventory's) and these processes on it,
  // each using `used_mib`.
  // With `fake_cuda_dir`, the GPU is the shared fake GPU of that directory
  // (its processes listed as the CUDA programs on it make them), of
  // `memory_mib`.
  void UseNvml(const std::vector<std::pair<pid_t, int>>& processes,
               const std::string& fake_cuda_dir = "", int memory_mib = 40960) {
    json listed = json::array();
    for (const auto& [pid, mib] : processes) {
      listed.push_back({{"pid", pid}, {"used_mib", mib}});
    }
    json config = {{"devices",
                    {{{"name", "NVIDIA A100-SXM4-40GB"},
                      {"uuid", "GPU-aaaaaaaa-0000-0000-0000-000000000000"},
                      {"memory_total_mib", memory_mib},
                      {"cc", {8, 0}},
                      {"mig", false},
                      {"processes", listed}}}}};
    if (!fake_cuda_dir.empty()) {
      config["devices"][0]["fake_cuda"] = {{"dir", fake_cuda_dir},
                                           {"index", 0}};
    }
    const fs::path path = dir_ / "nvml.json";
    std::ofstream(path) << config.dump();
    agent_.reset();
    nvml_.reset();  // shut the previous one down: the file is read at init
    setenv("HF_FAKE_NVML_CONFIG", path.c_str(), 1);
    nvml_ = std::make_unique<gpu::NvmlGpuDriver>(
        gpu::NvmlGpuDriver::Options{.library_path = HF_FAKE_NVML_PATH});
    ASSERT_TRUE(nvml_->load_status().ok()) << nvml_->load_status().ToString();
  }

  // The agent on the fake NVML; its first cycle starts the task (and makes
  // its region).
  void StartAgent() {
    AgentOptions o;
    o.node_id = "n1";
    o.agent_version = "test";
    o.state_dir = dir_ / "state";
    o.kill_grace = std::chrono::milliseconds(0);
    o.hook_library = HF_HOOK_PATH;
    o.hook_attach_grace = std::chrono::milliseconds(5000);
    gpu::GpuDriver* driver = nvml_.get();
    if (counting_) {
      counting_driver_ = std::make_unique<CountingDriver>(nvml_.get());
      driver = counting_driver_.get();
    }
    auto a = Agent::Create(o, client_.get(), driver, runtime_.get(), nullptr,
                           HostFacts{}, &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    agent_ = std::move(*a);
    ASSERT_TRUE(agent_->RunOnce().ok());
    ASSERT_TRUE(fs::exists(region_path_));
  }

  // The task's "hook" in the last heartbeat.
  json LastHook() const {
    for (auto it = server_->heartbeats.rbegin();
         it != server_->heartbeats.rend(); ++it) {
      for (const json& t : (*it)["tasks"]) {
        if (t["task_id"] == kTask && t.contains("hook")) return t["hook"];
      }
    }
    return nullptr;
  }

  // Attaches to the task's region as the hook in process `pid` would (pid
  // as that process knows itself, start time from /proc), holding `mib`.
  std::unique_ptr<hook::Region> AttachAs(pid_t pid, std::uint32_t own_pid,
                                         std::uint64_t mib) {
    auto r = std::make_unique<hook::Region>();
    const char* error = nullptr;
    EXPECT_TRUE(r->Open(region_path_.c_str(), hook::kUnlimited, 0, &error))
        << (error ? error : "");
    r->Attach(static_cast<int>(own_pid), hook::Region::ProcessStartTicks(pid));
    if (mib > 0) {
      EXPECT_EQ(r->Reserve(mib * kMib), hook::ReserveResult::kOk);
    }
    return r;
  }

  FakeClock clock_{1'000'000};
  fs::path dir_;
  fs::path region_path_;
  std::unique_ptr<gpu::SimGpuDriver> sim_;
  std::unique_ptr<runtime::SimHost> host_;
  std::unique_ptr<runtime::SimRuntime> runtime_;
  OneTaskServer* server_ = nullptr;
  std::unique_ptr<ServerClient> client_;
  std::unique_ptr<gpu::NvmlGpuDriver> nvml_;
  bool counting_ = false;  // StartAgent wraps the driver in a CountingDriver
  std::unique_ptr<CountingDriver> counting_driver_;
  std::unique_ptr<Agent> agent_;
  std::vector<pid_t> children_;
};

TEST_F(HookProofTest, AProcessThatNeverAttachesIsReportedAfterTheGrace) {
  const pid_t hooked = Spawn(TaskEnv());
  const pid_t bare = Spawn(TaskEnv());
  const pid_t stranger = Spawn({"PATH=/bin"});  // not this slice's
  UseNvml({{hooked, 300}, {bare, 50}, {stranger, 70}});
  StartAgent();
  auto hook = AttachAs(hooked, static_cast<std::uint32_t>(hooked), 100);

  ASSERT_TRUE(agent_->RunOnce().ok());
  // Within the grace: nothing is said yet.
  json h = LastHook();
  ASSERT_TRUE(h.is_object()) << server_->heartbeats.back().dump();
  EXPECT_TRUE(h["attached"].get<bool>());
  EXPECT_FALSE(h.contains("unhooked_pids")) << h.dump();

  clock_.Advance(4999);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_FALSE(LastHook().contains("unhooked_pids")) << LastHook().dump();

  clock_.Advance(1);
  ASSERT_TRUE(agent_->RunOnce().ok());
  h = LastHook();
  ASSERT_EQ(h["unhooked_pids"], json::array({bare})) << h.dump();
  const std::string reason = h["unhooked_reason"];
  EXPECT_NE(reason.find("process " + std::to_string(bare) +
                        " runs without the hook: libhfhook.so is not loaded"),
            std::string::npos)
      << reason;

  // It attaches: the proof holds again.
  auto late = AttachAs(bare, static_cast<std::uint32_t>(bare), 0);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_FALSE(LastHook().contains("unhooked_pids")) << LastHook().dump();
}

// The share feedback and the interference meter read one answer of the
// driver per cycle and GPU (NVML's per-process utilisation is not free).
TEST_F(HookProofTest, TheDriverIsAskedOnceACycleForTheProcessesOnAGpu) {
  const pid_t hooked = Spawn(TaskEnv());
  UseNvml({{hooked, 300}});
  counting_ = true;
  StartAgent();
  auto hook = AttachAs(hooked, static_cast<std::uint32_t>(hooked), 100);
  const int before = counting_driver_->samples;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1000);
    ASSERT_TRUE(agent_->RunOnce().ok());
  }
  EXPECT_EQ(counting_driver_->samples - before, 3);
}

TEST_F(HookProofTest, AProcessThatExitsNoLongerCounts) {
  const pid_t bare = Spawn(TaskEnv());
  UseNvml({{bare, 50}});
  StartAgent();
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(5000);
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_EQ(LastHook()["unhooked_pids"], json::array({bare}));
  // Gone (NVML, here a fixed list, still names it): nothing to prove.
  kill(bare, SIGKILL);
  waitpid(bare, nullptr, 0);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_FALSE(LastHook().contains("unhooked_pids")) << LastHook().dump();
  EXPECT_EQ(LastHook()["driver_bytes"], 0);
}

TEST_F(HookProofTest, ARecycledPidIsNotTakenForTheAttachedProcess) {
  const pid_t process = Spawn(TaskEnv());
  UseNvml({{process, 10}});
  StartAgent();
  // A slot with the process's pid but another start time: its pid's
  // earlier owner.
  hook::Region r;
  const char* error = nullptr;
  ASSERT_TRUE(r.Open(region_path_.c_str(), hook::kUnlimited, 0, &error));
  r.Attach(process, hook::Region::ProcessStartTicks(process) + 1);
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(5000);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(LastHook()["unhooked_pids"], json::array({process}))
      << LastHook().dump();
}

TEST_F(HookProofTest, AProcessThatLoadedTheHookButDidNotAttachIsToldApart) {
  std::vector<std::string> env = TaskEnv();
  env.push_back(std::string("LD_PRELOAD=") + HF_HOOK_PATH);
  const pid_t loaded = Spawn(env);  // sleep never calls the driver
  // The exec is done, but the loader may not have mapped the hook yet.
  ASSERT_TRUE(WaitForMapped(loaded, "libhfhook.so"));
  UseNvml({{loaded, 10}});
  StartAgent();
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(5000);
  ASSERT_TRUE(agent_->RunOnce().ok());
  const json h = LastHook();
  ASSERT_EQ(h["unhooked_pids"], json::array({loaded})) << h.dump();
  EXPECT_NE(h["unhooked_reason"].get<std::string>().find(
                "loaded libhfhook.so but has not attached"),
            std::string::npos)
      << h.dump();
}

// A launcher that clears the environment (env -i) leaves its child without
// HETEROFLOW_HOOK_REGION: its parent's names the slice.
TEST_F(HookProofTest, AChildWithAClearedEnvironmentBelongsToItsParentsSlice) {
  const fs::path pid_file = dir_ / "child.pid";
  SpawnArgv(
      {"/bin/sh", "-c",
       "env -i /bin/sleep 60 & echo $! > " + pid_file.string() + "; wait"},
      TaskEnv());
  pid_t child = 0;
  for (int i = 0; i < 5000 && child == 0; ++i) {
    std::ifstream in(pid_file);
    if (!(in >> child)) {
      child = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_GT(child, 0);
  children_.push_back(child);
  auto facts = ReadProcessFacts("/proc", child, "libhfhook.so");
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->hook_region, region_path_.string());
  EXPECT_FALSE(facts->hook_loaded);
  UseNvml({{child, 10}});
  StartAgent();
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(5000);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_EQ(LastHook()["unhooked_pids"], json::array({child}))
      << LastHook().dump();
}

// A process in a container has another pid in its own pid namespace: its
// slot holds that one, and the agent finds it through NSpid.
TEST_F(HookProofTest, AProcessInItsOwnPidNamespaceIsMatchedByNsPid) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  // Built before fork: the children only exec.
  const std::vector<std::string> env = TaskEnv();
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const std::string& e : env) {
    envp.push_back(const_cast<char*>(e.c_str()));
  }
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("60"),
                  nullptr};
  const pid_t middle = fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    close(pipefd[0]);
    pid_t inner = -1;
    if (unshare(CLONE_NEWPID) != 0 &&
        unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) {
      if (write(pipefd[1], &inner, sizeof(inner)) != sizeof(inner)) _exit(2);
      _exit(0);
    }
    inner = fork();
    if (inner == 0) {
      execve(argv[0], argv, envp.data());
      _exit(127);
    }
    if (write(pipefd[1], &inner, sizeof(inner)) != sizeof(inner)) _exit(2);
    waitpid(inner, nullptr, 0);
    _exit(0);
  }
  close(pipefd[1]);
  pid_t inner = -1;
  ASSERT_EQ(read(pipefd[0], &inner, sizeof(inner)),
            static_cast<ssize_t>(sizeof(inner)));
  close(pipefd[0]);
  children_.push_back(middle);
  if (inner <= 0) GTEST_SKIP() << "no new pid namespace can be made here";
  children_.insert(children_.begin(), inner);
  // Until the exec is done, /proc shows this test's environment.
  std::optional<ProcessFacts> facts;
  for (int i = 0; i < 2000; ++i) {
    facts = ReadProcessFacts("/proc", inner, "");
    if (facts && !facts->hook_region.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->ns_pid, 1u);  // the first process of its namespace
  EXPECT_EQ(facts->hook_region, region_path_.string());

  UseNvml({{inner, 20}});
  StartAgent();
  // Its slot names pid 1, as the hook inside sees itself.
  auto hook = AttachAs(inner, 1, 5);
  ASSERT_TRUE(agent_->RunOnce().ok());
  clock_.Advance(5000);
  ASSERT_TRUE(agent_->RunOnce().ok());
  const json h = LastHook();
  EXPECT_FALSE(h.contains("unhooked_pids")) << h.dump();
  EXPECT_EQ(h["driver_bytes"], 15 * kMib) << h.dump();
}

// NVML's usage of a process includes its context and modules; what it
// shows beyond what the hook counted is charged in the process's slot, and
// the usage of a process without the hook to the region: the quota holds
// the real footprint.
TEST_F(HookProofTest, TheDriversMemoryIsMeasuredIntoTheRegion) {
  const pid_t a = Spawn(TaskEnv());
  const pid_t b = Spawn(TaskEnv());
  const pid_t bare = Spawn(TaskEnv());
  UseNvml({{a, 300}, {b, 100}, {bare, 50}});
  StartAgent();
  auto hook_a = AttachAs(a, static_cast<std::uint32_t>(a), 100);
  auto hook_b = AttachAs(b, static_cast<std::uint32_t>(b), 120);
  ASSERT_TRUE(agent_->RunOnce().ok());
  // a: 300 - 100; b: NVML shows less than counted, nothing; bare: all 50.
  EXPECT_EQ(hook_a->driver_bytes(), (200 + 50) * kMib);
  EXPECT_EQ(hook_a->counted(), 220 * kMib);
  EXPECT_EQ(hook_a->used(), 470 * kMib);
  hook::Region::SlotView v;
  ASSERT_GT(hook_a->FindSlot(static_cast<std::uint32_t>(a), 0, &v), 0);
  EXPECT_EQ(v.driver_bytes, 200 * kMib);
  ASSERT_GT(hook_a->FindSlot(static_cast<std::uint32_t>(b), 0, &v), 0);
  EXPECT_EQ(v.driver_bytes, 0u);
  const json h = LastHook();
  EXPECT_EQ(h["driver_bytes"], 250 * kMib) << h.dump();
  EXPECT_EQ(h["used_bytes"], 470 * kMib) << h.dump();
  // The quota (4096 MiB) now refuses what would fit the count alone.
  EXPECT_EQ(hook_a->Reserve((4096 - 220 - 100) * kMib),
            hook::ReserveResult::kOverQuota);
  EXPECT_EQ(hook_a->Reserve((4096 - 470) * kMib), hook::ReserveResult::kOk);
  hook_a->Release((4096 - 470) * kMib);
  // The hook counts more of a's memory (it allocated): the measurement
  // follows, never charging the same bytes twice.
  ASSERT_EQ(hook_a->Reserve(150 * kMib), hook::ReserveResult::kOk);
  ASSERT_TRUE(agent_->RunOnce().ok());
  ASSERT_GT(hook_a->FindSlot(static_cast<std::uint32_t>(a), 0, &v), 0);
  EXPECT_EQ(v.driver_bytes, 50 * kMib);
  EXPECT_EQ(hook_a->used(), (250 + 120 + 50 + 50) * kMib);
}

// A CUDA program (hook_probe repl) with pipes on stdin and stdout.
class ProbeProcess {
 public:
  explicit ProbeProcess(const std::vector<std::string>& env) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (const std::string& e : env) {
      envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    char* argv[] = {
        const_cast<char*>(HF_PROBE_PATH), const_cast<char*>("--resolve"),
        const_cast<char*>("procaddr"), const_cast<char*>("repl"), nullptr};
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv, envp.data()) !=
        0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
  }
  ~ProbeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(in_);
    close(out_);
  }
  ProbeProcess(const ProbeProcess&) = delete;
  ProbeProcess& operator=(const ProbeProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends a command (none for the first line) and returns the JSON line it
  // answers; null after 20 s without one.
  json Ask(const std::string& command = "") {
    if (!command.empty()) {
      const std::string line = command + "\n";
      if (write(in_, line.data(), line.size()) !=
          static_cast<ssize_t>(line.size())) {
        return nullptr;
      }
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return json::parse(line, nullptr, false);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return nullptr;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return nullptr;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buf_;
};

// vLLM sizes its KV cache as a fraction (0.9) of the free memory
// cuMemGetInfo reports once the model is loaded, then allocates it. On a
// GPU whose contexts take memory, a quota that counts only allocations
// tells it the context's memory is free: the cache overshoots the slice
// and, with a neighbour on the card, runs the GPU out of memory.
class VllmProbeTest : public HookProofTest {
 protected:
  static constexpr int kCardMib = 2048;
  static constexpr int kContextMib = 256;
  static constexpr int kQuotaMib = 1024;
  static constexpr int kNeighbourMib = 644;  // + its context: 900
  static constexpr int kWeightsMib = 200;

  std::vector<std::string> CudaEnv() const {
    return {"PATH=/usr/bin:/bin",
            std::string("LD_LIBRARY_PATH=") + HF_FAKE_CUDA_DIR,
            "HF_FAKE_CUDA_GPU_DIR=" + gpu_dir_.string(),
            "HF_FAKE_CUDA_MEMORY_MB=" + std::to_string(kCardMib),
            "HF_FAKE_CUDA_CONTEXT_MB=" + std::to_string(kContextMib)};
  }

  // The neighbour on the card, the agent, and the slice's program with
  // its weights loaded.
  void SetUpCard() {
    gpu_dir_ = dir_ / "gpu";
    fs::create_directories(gpu_dir_);
    neighbour_ = std::make_unique<ProbeProcess>(CudaEnv());
    ASSERT_EQ(neighbour_->Ask()["ready"], true);
    ASSERT_EQ(
        neighbour_->Ask("alloc " + std::to_string(kNeighbourMib))["alloc"],
        "CUDA_SUCCESS");
    UseNvml({}, gpu_dir_.string(), kCardMib);
    server_->assignments["run"][0]["env"]["HETEROFLOW_SLICE_MEMORY_MB"] =
        std::to_string(kQuotaMib);
    StartAgent();
    std::vector<std::string> env = CudaEnv();
    for (const std::string& e : TaskEnv()) {
      if (!e.starts_with("PATH=")) env.push_back(e);
    }
    env.push_back("HETEROFLOW_SLICE_MEMORY_MB=" + std::to_string(kQuotaMib));
    env.push_back(std::string("LD_PRELOAD=") + HF_HOOK_PATH);
    vllm_ = std::make_unique<ProbeProcess>(env);
    ASSERT_EQ(vllm_->Ask()["ready"], true);
    ASSERT_EQ(vllm_->Ask("alloc " + std::to_string(kWeightsMib))["alloc"],
              "CUDA_SUCCESS");
    const char* error = nullptr;
    ASSERT_TRUE(region_.Open(region_path_.c_str(), hook::kUnlimited, 0, &error))
        << (error ? error : "");
  }

  // What NVML says the slice's program holds on the card, MiB.
  std::int64_t FootprintMib() {
    auto processes = nvml_->ListProcesses(0);
    EXPECT_TRUE(processes.ok()) << processes.status().ToString();
    for (const gpu::GpuProcess& p :
         processes.ok() ? *processes : std::vector<gpu::GpuProcess>{}) {
      if (p.pid == vllm_->pid()) return p.used_memory_mib.value_or(-1);
    }
    return -1;
  }

  fs::path gpu_dir_;
  std::unique_ptr<ProbeProcess> neighbour_;
  std::unique_ptr<ProbeProcess> vllm_;
  hook::Region region_;
};

TEST_F(VllmProbeTest, TheCacheFitsTheQuotaOnceTheAgentMeasuredTheContext) {
  SetUpCard();
  EXPECT_EQ(FootprintMib(), kWeightsMib + kContextMib);
  ASSERT_TRUE(agent_->RunOnce().ok());  // the agent's cycle, as vLLM loads
  EXPECT_EQ(region_.driver_bytes(), kContextMib * kMib);
  const json cache = vllm_->Ask("cache 90");
  ASSERT_TRUE(cache.is_object());
  EXPECT_EQ(cache["cache"], "CUDA_SUCCESS") << cache.dump();
  EXPECT_EQ(cache["total"], kQuotaMib * kMib);
  EXPECT_EQ(cache["free"], (kQuotaMib - kWeightsMib - kContextMib) * kMib);
  // Within the quota by the card's own count, and never a physical OOM.
  const std::int64_t footprint = FootprintMib();
  EXPECT_LE(footprint, kQuotaMib);
  EXPECT_GT(footprint, kWeightsMib + kContextMib);
  EXPECT_EQ(region_.Stats().physical_ooms, 0u);
  EXPECT_EQ(region_.Stats().quota_ooms, 0u);
  ASSERT_TRUE(agent_->RunOnce().ok());
  EXPECT_LE(region_.used(), kQuotaMib * kMib);
  EXPECT_LE(LastHook()["used_bytes"].get<std::int64_t>(),
            std::int64_t{kQuotaMib} * static_cast<std::int64_t>(kMib));
  std::printf("vLLM-style cache: %lld MiB; slice footprint %lld of %d MiB\n",
              static_cast<long long>(cache["bytes"].get<std::int64_t>() >> 20),
              static_cast<long long>(footprint), kQuotaMib);
}

// The control: sized before the agent measured the context, the cache
// overshoots the slice and the card refuses it.
TEST_F(VllmProbeTest, UnmeasuredTheContextIsTakenForFreeMemory) {
  SetUpCard();
  const json cache = vllm_->Ask("cache 90");
  ASSERT_TRUE(cache.is_object());
  EXPECT_EQ(cache["free"], (kQuotaMib - kWeightsMib) * kMib);
  EXPECT_EQ(cache["cache"], "CUDA_ERROR_OUT_OF_MEMORY") << cache.dump();
  EXPECT_EQ(region_.Stats().physical_ooms, 1u);
}

// The NVML feedback on the shared fake GPU: a strict 25% slice whose one
// process runs under the hook and another without it. The turns see only
// the first; NVML sees both, and the agent charges the slice for the GPU
// time it used outside its turns.
class ShareFeedbackTest : public HookProofTest {
 protected:
  void SetUpSlice() {
    gpu_dir_ = dir_ / "gpu";
    fs::create_directories(gpu_dir_);
    UseNvml({}, gpu_dir_.string(), 4096);
    json& env = server_->assignments["run"][0]["env"];
    env["HETEROFLOW_SLICE_COMPUTE_PERCENT"] = "25";
    env["HETEROFLOW_SLICE_COMPUTE_MODE"] = "strict";
    StartAgent();
    gpu_region_path_ = region_path_.parent_path() / "gpu-0.region";
    ASSERT_TRUE(fs::exists(gpu_region_path_));
  }

  // share_worker with the task's environment, GPU-bound `duty` percent of
  // the time, with or without the hook.
  void StartWorker(bool hooked, int duty) {
    std::vector<std::string> env = TaskEnv();
    env.push_back(std::string("LD_LIBRARY_PATH=") + HF_FAKE_CUDA_DIR);
    env.push_back("HF_FAKE_CUDA_GPU_DIR=" + gpu_dir_.string());
    env.push_back("HF_FAKE_CUDA_KERNEL_US=1000");
    env.push_back("HETEROFLOW_SLICE_COMPUTE_PERCENT=25");
    env.push_back("HETEROFLOW_SLICE_COMPUTE_MODE=strict");
    env.push_back("HETEROFLOW_HOOK_GPU_REGION=" + gpu_region_path_.string());
    if (hooked) env.push_back(std::string("LD_PRELOAD=") + HF_HOOK_PATH);
    SpawnArgv(
        {HF_SHARE_WORKER_PATH, "kernel", "4000", "1000", std::to_string(duty)},
        env);
  }

  // The slice's credit after two agent cycles 1.5 s apart.
  std::int64_t CreditAfterTwoCycles() {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(agent_->RunOnce().ok());  // the window starts
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(agent_->RunOnce().ok());  // NVML's figures are applied
    hook::GpuRegion gpu;
    const char* error = "";
    EXPECT_TRUE(gpu.Open(gpu_region_path_.c_str(), &error)) << error;
    const hook::GpuSliceStats stats = gpu.SliceStats(kSlice);
    EXPECT_EQ(stats.key, static_cast<std::uint64_t>(kSlice));
    return stats.credit_ns;
  }

  fs::path gpu_dir_;
  fs::path gpu_region_path_;
};

TEST_F(ShareFeedbackTest, GpuTimeUsedOutsideTheTurnsIsChargedToTheSlice) {
  SetUpSlice();
  StartWorker(true, 100);
  StartWorker(false, 30);
  // About a fifth of the 1.5 s ran outside the slice's turns: the slice
  // owes it (a 25% slice's credit is at most 25 ms otherwise).
  EXPECT_LT(CreditAfterTwoCycles(), -100'000'000);
}

// The control: every process of the slice under the hook, nothing escapes
// the turns and nothing is charged.
TEST_F(ShareFeedbackTest, NothingIsChargedWhenTheTurnsSawEverything) {
  SetUpSlice();
  StartWorker(true, 100);
  StartWorker(true, 30);
  EXPECT_GT(CreditAfterTwoCycles(), -20'000'000);
}

// Interference on the shared fake GPU: the slice's process runs alone
// first (its baseline), then a process of no task keeps the GPU busy too.
// The driver time-slices between them, the slice's sampled kernels take
// about twice as long, and the agent reports it.
class InterferenceTest : public HookProofTest {
 protected:
  void SetUpGpu() {
    gpu_dir_ = dir_ / "gpu";
    fs::create_directories(gpu_dir_);
    UseNvml({}, gpu_dir_.string(), 4096);
    StartAgent();
  }

  std::vector<std::string> CudaEnv() const {
    return {std::string("LD_LIBRARY_PATH=") + HF_FAKE_CUDA_DIR,
            "HF_FAKE_CUDA_GPU_DIR=" + gpu_dir_.string(),
            "HF_FAKE_CUDA_KERNEL_US=1000"};
  }

  // share_worker, GPU-bound for `ms`: the slice's (under the hook) or a
  // stranger's (no task's environment, no hook).
  void StartWorker(bool slice, int ms) {
    std::vector<std::string> env = CudaEnv();
    if (slice) {
      for (const std::string& e : TaskEnv()) env.push_back(e);
      env.push_back(std::string("LD_PRELOAD=") + HF_HOOK_PATH);
    } else {
      env.push_back("PATH=/usr/bin:/bin");
    }
    SpawnArgv({HF_SHARE_WORKER_PATH, "kernel", std::to_string(ms), "1000"},
              env);
  }

  // `n` agent cycles 0.7 s apart.
  void Cycles(int n) {
    for (int i = 0; i < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      ASSERT_TRUE(agent_->RunOnce().ok());
    }
  }

  fs::path gpu_dir_;
};

TEST_F(InterferenceTest,
       AStrangerOnTheGpuSlowsTheSlicesKernelsAndItIsReported) {
  SetUpGpu();
  StartWorker(/*slice=*/true, 12'000);
  ASSERT_NO_FATAL_FAILURE(Cycles(4));  // alone: the baseline
  json h = LastHook();
  ASSERT_TRUE(h.is_object());
  EXPECT_FALSE(h.contains("interference")) << "alone: " << h.dump();
  StartWorker(/*slice=*/false, 10'000);
  ASSERT_NO_FATAL_FAILURE(Cycles(4));
  h = LastHook();
  ASSERT_TRUE(h.contains("interference")) << h.dump();
  const double ratio = h["interference"].get<double>();
  // Two busy contexts in 2 ms time slices: of the two 1 ms kernels in each
  // of the slice's time slices, the first also waited out the other's 2 ms
  // (its start was recorded behind the previous kernel): 2x on average.
  EXPECT_GT(ratio, 1.6) << h.dump();
  EXPECT_LT(ratio, 2.6) << h.dump();
  EXPECT_GE(h["interference_samples"].get<std::int64_t>(), 10) << h.dump();
  std::printf(
      "interference with a busy neighbour: %.2f (%lld samples)\n", ratio,
      static_cast<long long>(h["interference_samples"].get<std::int64_t>()));
}

// The control: alone all along, the slice is never reported as slowed.
TEST_F(InterferenceTest, AloneNothingIsReported) {
  SetUpGpu();
  StartWorker(/*slice=*/true, 8'000);
  ASSERT_NO_FATAL_FAILURE(Cycles(7));
  const json h = LastHook();
  ASSERT_TRUE(h.is_object());
  EXPECT_FALSE(h.contains("interference")) << h.dump();
}

}  // namespace
}  // namespace hf::agent
