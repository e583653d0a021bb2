// End-to-end test of a whole (small) cluster (issue 5): ONE real hf-server
// and THREE real hf-agents running at the same time on the simulated GPU
// backend, each with its own node token bound to its node, its own state
// directory and its own inventory:
//   - "gold-node":   an H100 in MIG mode (gold, enforcement ["mig"]);
//   - "silver-node": an A100 40GB with an MPS daemon (silver, ["mps"]);
//   - "bronze-node": a containerized node with a T4 (bronze, []), which
//                    would be silver were it not in a container.
// Slice and whole-GPU tasks of several tenants (two of them in one shared
// group, so they share the MPS GPU) print their environment (`env | sort`)
// and wait for a file the test creates. The tests watch them only through
// the server's API, the tasks' logs, and the simulated MIG state the gold
// agent keeps on disk.
//
// Placement is Best-Fit (the least free memory among the GPUs that pass),
// and tenants outside one shared group never share a GPU; with GPUs of
// 15360 (T4) < 40960 (A100) < 81559 MB (H100), submitting the bronze tenant
// first, then the silver tenants, then the gold one, puts each on its node
// deterministically (each is waited bound before the next is submitted).
//
// Covered:
//   1. QoS per node, slices' enforcement, whole-GPU tasks on whole GPUs,
//      and a whole-GPU task that waits rather than take the empty MIG GPU;
//   2. gold: the MIG device id in labels, the slice and the task's env (as
//      the API shows it and as the process saw it); silver: the MPS limits
//      in both envs match the slice;
//   3. every slice released when its task ends, MIG partitions destroyed
//      (slice-requests, the simulated hardware), the ledger empty again;
//   4. the gold agent SIGKILLed and restarted while its task runs: the task
//      runs on, is adopted, finishes and is reported; the other agents run
//      new tasks meanwhile, a gold task bound during the outage waits for
//      its partition and then runs; nothing lost, nothing oversold;
//   5. the server SIGKILLed and restarted mid-run: the three agents come
//      back, the ledger is rebuilt from the store (the same slices, no
//      compensation), a task that ended during the outage is reported, and
//      everything completes.
// No fixed sleeps: every wait polls a condition with a timeout.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/e2e/agent_harness.h"

namespace hf::e2e {
namespace {

namespace fs = std::filesystem;

constexpr milliseconds kTaskTimeout{30'000};

const char kGoldNode[] = "gold-node";
const char kSilverNode[] = "silver-node";
const char kBronzeNode[] = "bronze-node";

constexpr std::int64_t kT4MemoryMb = 15360;

// `object[name]` when it is a string; "" when it is null or absent (and a
// description of it otherwise), so a comparison fails without throwing.
std::string Str(const json& object, const std::string& name) {
  if (!object.is_object() || !object.contains(name) || object[name].is_null()) {
    return "";
  }
  if (!object[name].is_string()) return "<" + object[name].dump() + ">";
  return object[name].get<std::string>();
}

// `object[name]` when it is an integer; -1 otherwise.
std::int64_t Int(const json& object, const std::string& name) {
  if (!object.is_object() || !object.contains(name) ||
      !object[name].is_number_integer()) {
    return -1;
  }
  return object[name].get<std::int64_t>();
}

bool Terminal(const json& t) {
  const std::string s = Str(t, "status");
  return s == "succeeded" || s == "failed" || s == "cancelled";
}

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string("<unset>") : it->second;
}

std::string JsonGet(const json& object, const std::string& name) {
  if (!object.is_object() || !object.contains(name) ||
      !object[name].is_string()) {
    return "<unset>";
  }
  return object[name].get<std::string>();
}

class ClusterE2eTest : public ::testing::Test {
 protected:
  // A task the test submitted: it prints its environment, then waits for
  // `go` and ends with "finished" (unless it was submitted without `go`).
  struct Task {
    std::int64_t id = 0;
    std::string tenant;
    fs::path go;
  };

  void SetUp() override {
    ASSERT_TRUE(fs::exists(HF_TASK_SHIM_PATH)) << HF_TASK_SHIM_PATH;
    ASSERT_EQ(fs::path(HF_TASK_SHIM_PATH).parent_path(),
              fs::path(HF_AGENT_PATH).parent_path());
    ServerOptions options;
    options.flags = {"--gc-interval", "1"};
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);

    // Tenants: one per tier, two silver ones sharing a group, one for
    // whole GPUs.
    bronze_ = api_->NewTenant("bronze");
    const std::string group = UniqueName("shared");
    silver_a_ = api_->NewTenant("silver-a", group);
    silver_b_ = api_->NewTenant("silver-b", group);
    gold_ = api_->NewTenant("gold");
    whole_ = api_->NewTenant("whole");
    for (const std::string* t :
         {&bronze_, &silver_a_, &silver_b_, &gold_, &whole_}) {
      ASSERT_FALSE(t->empty());
    }

    gold_agent_ = NewAgent(kGoldNode, {H100Mig()});
    silver_agent_ = NewAgent(kSilverNode, {A100(40960)});
    // The T4 is MPS-capable: only the container makes it bronze.
    bronze_agent_ = NewAgent(kBronzeNode, {T4()});
    bronze_agent_->options().inventory["containerized"] = true;
    for (AgentProcess* agent : {gold_agent_, silver_agent_, bronze_agent_}) {
      ASSERT_FALSE(agent->options().token.empty());
      ASSERT_TRUE(agent->Start());
    }
    // Every node registered with the capabilities its tier needs (the MPS
    // daemon may come up a heartbeat after the first report).
    json gold_view, silver_view, bronze_view;
    ASSERT_TRUE(WaitFor(
        [&] {
          gold_view = NodeView(kGoldNode, /*expect_found=*/false);
          silver_view = NodeView(kSilverNode, false);
          bronze_view = NodeView(kBronzeNode, false);
          return GpuFlag(gold_view, "mig_capable") &&
                 GpuFlag(silver_view, "mps_capable") &&
                 bronze_view.value("containerized", false) &&
                 bronze_view["gpus"].size() == 1;
        },
        milliseconds(20'000)))
        << gold_view.dump() << "\n"
        << silver_view.dump() << "\n"
        << bronze_view.dump() << AllLogs();
    // The tier a slice would get on each GPU. A registration reaches the
    // ledger (which the stats read) just after its row is stored (which
    // the node view reads): wait for all three GPUs.
    json stats;
    std::map<std::string, std::string> tiers;
    WaitFor(
        [&] {
          stats = Stats();
          tiers.clear();
          for (const json& g : stats["gpus"]) {
            tiers[Str(g, "node_id") + "/" +
                  std::to_string(g.value("gpu_index", -1))] =
                Str(g, "qos_level");
          }
          return tiers.size() == 3;
        },
        milliseconds(5'000));
    ASSERT_EQ(tiers, (std::map<std::string, std::string>{
                         {std::string(kGoldNode) + "/0", "gold"},
                         {std::string(kSilverNode) + "/0", "silver"},
                         {std::string(kBronzeNode) + "/0", "bronze"}}))
        << stats.dump();
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

  // An agent for `node` (not started) with its own node token, bound to it.
  AgentProcess* NewAgent(const std::string& node, json gpus) {
    AgentProcessOptions options;
    options.node_id = node;
    options.inventory = SimInventory(node, std::move(gpus));
    options.token = CreateNodeToken(*api_, node);
    agents_.push_back(
        std::make_unique<AgentProcess>(server_->url(), std::move(options)));
    return agents_.back().get();
  }

  AgentProcess& AgentOf(const std::string& node) {
    if (node == kGoldNode) return *gold_agent_;
    if (node == kSilverNode) return *silver_agent_;
    return *bronze_agent_;
  }

  static bool GpuFlag(const json& node, const std::string& flag) {
    return node.is_object() && node.contains("gpus") &&
           node["gpus"].is_array() && node["gpus"].size() == 1 &&
           node["gpus"][0].value(flag, false);
  }

  // Submits a task of `tenant` (as the admin, on the tenant's behalf) with
  // the slice or whole-GPU fields of `shape`. With `wait`, it waits for its
  // go file after printing its environment.
  Task Submit(const std::string& name, const std::string& tenant, json shape,
              bool wait = true) {
    Task task;
    task.tenant = tenant;
    std::string command = "env | sort; echo env-done; ";
    if (wait) {
      task.go = server_->dir() / ("go-" + name);
      command += WaitForFileCommand(task.go, "echo finished");
    } else {
      command += "echo finished";
    }
    json body = std::move(shape);
    body["name"] = name;
    body["tenant"] = tenant;
    body["command"] = command;
    json t = api_->CreateTask(body, api_->admin());
    if (t.is_object()) {
      EXPECT_EQ(Str(t, "tenant"), tenant) << t.dump();
      task.id = t["id"].get<std::int64_t>();
    }
    return task;
  }

  json GetTask(const Task& t) const { return api_->GetTask(t.id, admin()); }

  json WaitStatus(const Task& t, const std::string& status,
                  milliseconds timeout = kTaskTimeout) const {
    return api_->WaitTask(
        t.id, admin(),
        [&](const json& j) { return Str(j, "status") == status; }, timeout);
  }

  json WaitBound(const Task& t) const {
    return api_->WaitNotPending(t.id, admin(), kTaskTimeout);
  }

  json WaitTerminal(const Task& t) const {
    return api_->WaitTask(t.id, admin(), Terminal, kTaskTimeout);
  }

  std::string TaskLog(std::int64_t id) const {
    HttpReply r = api_->http().Get(
        "/api/v1/tasks/" + std::to_string(id) + "/logs?limit=1048576", admin());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.body.is_object() ? Str(r.body, "data") : "";
  }

  // The environment the task's process printed (waits until it is with the
  // server).
  std::map<std::string, std::string> ProcessEnv(const Task& t) const {
    std::string log;
    EXPECT_TRUE(WaitFor(
        [&] {
          log = TaskLog(t.id);
          return log.find("env-done\n") != std::string::npos;
        },
        kTaskTimeout))
        << "task " << t.id << " never printed its environment: " << log;
    return ParseEnvLines(log.substr(0, log.find("env-done\n")));
  }

  // GET /api/v1/nodes/{node}; {} when not (yet) there.
  json NodeView(const std::string& node, bool expect_found = true) const {
    HttpReply r = api_->http().Get("/api/v1/nodes/" + node, admin());
    if (expect_found) {
      EXPECT_EQ(r.status, 200) << r.Describe();
    }
    return r.status == 200 ? r.body : json::object();
  }

  json Stats() const {
    HttpReply r = api_->http().Get("/api/v1/slices/stats", admin());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.body;
  }

  json LiveSlices() const { return api_->ListAll("/api/v1/slices", admin()); }

  json Slice(std::int64_t id) const { return api_->GetSlice(id, admin()); }

  json Requests(const std::string& node) const {
    return api_->ListAll("/api/v1/slice-requests?node_id=" + node, admin());
  }

  json WaitSliceReleased(std::int64_t slice_id) const {
    json s;
    WaitFor(
        [&] {
          HttpReply r = api_->http().Get(
              "/api/v1/slices/" + std::to_string(slice_id), admin());
          s = r.body;
          return r.status == 200 && Str(s, "state") == "released";
        },
        kTaskTimeout, milliseconds(50));
    return s;
  }

  // The MIG devices on the simulated H100 of the gold node, as its agent's
  // driver last saved them: device uuid -> profile.
  std::map<std::string, std::string> SimMigDevices() const {
    std::ifstream in(gold_agent_->state_dir() / "sim-mig-state.json");
    json state = json::parse(in, nullptr, false);
    std::map<std::string, std::string> devices;
    if (!state.is_object() || !state["gpus"].is_array() ||
        state["gpus"].empty()) {
      ADD_FAILURE() << "no readable MIG state file in "
                    << gold_agent_->state_dir();
      return devices;
    }
    for (const json& d : state["gpus"][0]["devices"]) {
      devices[Str(d, "device_uuid")] = Str(d, "profile");
    }
    return devices;
  }

  // The ledger as stats show it equals the live slices, GPU by GPU, and
  // nothing is oversold. Retried briefly: the two reads are not atomic.
  ::testing::AssertionResult LedgerMatchesLiveSlices() const {
    std::string why;
    json stats, live;
    const bool ok = WaitFor(
        [&] {
          why.clear();
          stats = Stats();
          live = LiveSlices();
          struct Expected {
            std::int64_t memory = 0;
            int compute = 0;
            int slices = 0;
            std::set<std::string> tenants;
          };
          std::map<std::string, Expected> expected;
          for (const json& s : live) {
            for (const json& index : s["gpu_indices"]) {
              Expected& e = expected[Str(s, "node_id") + "/" +
                                     std::to_string(index.get<int>())];
              e.memory += Int(s, "memory_mb") /
                          static_cast<std::int64_t>(s["gpu_indices"].size());
              e.compute += s.value("compute_percent", 0);
              e.slices += 1;
              e.tenants.insert(Str(s, "tenant"));
            }
          }
          if (!stats.contains("gpus") || stats["gpus"].size() != 3) {
            why = "stats list " + std::to_string(stats["gpus"].size()) +
                  " GPUs, not 3";
            return false;
          }
          for (const json& g : stats["gpus"]) {
            const std::string key = Str(g, "node_id") + "/" +
                                    std::to_string(g.value("gpu_index", -1));
            const Expected e =
                expected.contains(key) ? expected[key] : Expected{};
            const std::int64_t accounted =
                g.value("accounted_memory_mb", std::int64_t{-1});
            const int compute = g.value("accounted_compute_percent", -1);
            std::set<std::string> tenants;
            for (const json& t : g["tenants"]) {
              tenants.insert(t.is_string() ? t.get<std::string>() : t.dump());
            }
            if (accounted != e.memory || compute != e.compute ||
                g.value("slices", -1) != e.slices || tenants != e.tenants) {
              why += key + ": stats say " + std::to_string(accounted) +
                     " MB, " + std::to_string(compute) + "%, " +
                     std::to_string(g.value("slices", -1)) +
                     " slices; the live slices add up to " +
                     std::to_string(e.memory) + " MB, " +
                     std::to_string(e.compute) + "%, " +
                     std::to_string(e.slices) + " slices. ";
            }
            if (accounted > Int(g, "total_memory_mb") || compute > 100) {
              why += key + " is oversold. ";
            }
          }
          if (stats["totals"].value("live_slices", -1) !=
              static_cast<int>(live.size())) {
            why += "totals.live_slices " +
                   stats["totals"].value("live_slices", json()).dump() +
                   " != " + std::to_string(live.size()) + " live slices. ";
          }
          return why.empty();
        },
        milliseconds(5'000), milliseconds(100));
    if (ok) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << why << "\nstats: " << stats.dump() << "\nlive: " << live.dump();
  }

  // A running slice task: its QoS, enforcement and environment (both the
  // one the API shows and the one its process printed) agree with its
  // slice. Returns the slice.
  json CheckSliceTask(const Task& task, const std::string& node,
                      const std::string& qos, const json& enforcement) {
    SCOPED_TRACE("task " + std::to_string(task.id) + " on " + node);
    json t = WaitStatus(task, "running");
    EXPECT_EQ(Str(t, "status"), "running") << t.dump() << AllLogs();
    EXPECT_EQ(Str(t, "node_id"), node) << t.dump();
    EXPECT_EQ(Str(t, "qos_level"), qos) << t.dump();
    if (!t["slice_id"].is_number_integer()) {
      ADD_FAILURE() << "no slice: " << t.dump();
      return json();
    }
    const std::int64_t slice_id = t["slice_id"].get<std::int64_t>();
    json s = Slice(slice_id);
    EXPECT_EQ(Str(s, "kind"), "slice") << s.dump();
    EXPECT_EQ(Str(s, "state"), "allocated") << s.dump();
    EXPECT_EQ(Str(s, "node_id"), node) << s.dump();
    EXPECT_EQ(Str(s, "tenant"), task.tenant) << s.dump();
    EXPECT_EQ(Str(s, "qos_level"), qos) << s.dump();
    EXPECT_EQ(s["enforcement"], enforcement) << s.dump();
    EXPECT_EQ(Int(s, "task_id"), task.id) << s.dump();
    EXPECT_EQ(t["gpu_indices"], s["gpu_indices"]) << t.dump() << s.dump();

    const auto env = ProcessEnv(task);
    const json& api_env = t["env"];
    const std::string index = std::to_string(s.value("gpu_index", -1));
    EXPECT_EQ(Get(env, "HETEROFLOW_SLICE_ID"), std::to_string(slice_id));
    EXPECT_EQ(Get(env, "HETEROFLOW_SLICE_QOS"), qos);
    EXPECT_EQ(Get(env, "HETEROFLOW_GPU_INDEX"), index);
    EXPECT_EQ(Get(env, "HETEROFLOW_GPU_UUID"), s.value("gpu_uuid", "?"));
    EXPECT_EQ(Get(env, "HETEROFLOW_SLICE_MEMORY_MB"),
              std::to_string(s.value("memory_mb", std::int64_t{-1})));
    for (const char* name :
         {"HETEROFLOW_SLICE_ID", "HETEROFLOW_SLICE_QOS",
          "HETEROFLOW_SLICE_MEMORY_MB", "HETEROFLOW_SLICE_COMPUTE_PERCENT",
          "HETEROFLOW_SLICE_COMPUTE_MODE"}) {
      EXPECT_EQ(Get(env, name), JsonGet(api_env, name))
          << name << ": the process and the API disagree";
    }
    // The task's compute mode comes with its compute share.
    if (JsonGet(api_env, "HETEROFLOW_SLICE_COMPUTE_PERCENT") != "<unset>") {
      EXPECT_EQ(Get(env, "HETEROFLOW_SLICE_COMPUTE_MODE"),
                Str(t, "gpu_compute_mode"))
          << t.dump();
    }
    const std::string device =
        t["labels"].is_object() ? Str(t["labels"], "heteroflow.mig_device_id")
                                : "";
    if (qos == "gold") {
      // The partition: in the label, on the slice, and the only device
      // the task sees.
      EXPECT_TRUE(device.starts_with("MIG-")) << t.dump();
      EXPECT_EQ(Str(s, "mig_device_id"), device) << s.dump();
      EXPECT_EQ(Get(env, "NVIDIA_VISIBLE_DEVICES"), device);
      EXPECT_EQ(Get(env, "CUDA_VISIBLE_DEVICES"), device);
      EXPECT_EQ(JsonGet(api_env, "NVIDIA_VISIBLE_DEVICES"), device);
      EXPECT_EQ(JsonGet(api_env, "CUDA_VISIBLE_DEVICES"), device);
      EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY"));
      EXPECT_FALSE(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    } else {
      EXPECT_EQ(device, "")
          << "a MIG label on a " << qos << " task " << t.dump();
      EXPECT_EQ(Str(s, "mig_device_id"), "") << s.dump();
      EXPECT_EQ(Get(env, "CUDA_VISIBLE_DEVICES"), index);
      EXPECT_EQ(Get(env, "NVIDIA_VISIBLE_DEVICES"), index);
    }
    if (qos == "silver") {
      const std::string memory_limit =
          "0=" + std::to_string(s.value("memory_mb", std::int64_t{-1})) + "M";
      const std::string percent =
          std::to_string(s.value("compute_percent", -1));
      EXPECT_EQ(Get(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), memory_limit);
      EXPECT_EQ(Get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), percent);
      EXPECT_EQ(JsonGet(api_env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
                memory_limit);
      EXPECT_EQ(JsonGet(api_env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), percent);
      EXPECT_EQ(Get(env, "CUDA_MPS_PIPE_DIRECTORY"),
                (AgentOf(node).mps_dir() / "pipe").string());
    }
    if (qos == "bronze") {
      // No pipe that leads nowhere.
      EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY"));
    }
    return s;
  }

  // A running whole-GPU task on `node`'s GPU 0 of `memory_mb`.
  json CheckWholeTask(const Task& task, const std::string& node,
                      std::int64_t memory_mb, const std::string& qos) {
    SCOPED_TRACE("whole-GPU task " + std::to_string(task.id));
    json t = WaitStatus(task, "running");
    EXPECT_EQ(Str(t, "status"), "running") << t.dump() << AllLogs();
    EXPECT_EQ(Str(t, "node_id"), node) << t.dump();
    EXPECT_EQ(t["gpu_indices"], json({0})) << t.dump();
    EXPECT_EQ(Str(t, "qos_level"), qos) << t.dump();
    if (!t["slice_id"].is_number_integer()) {
      ADD_FAILURE() << "no slice: " << t.dump();
      return json();
    }
    json s = Slice(t["slice_id"].get<std::int64_t>());
    EXPECT_EQ(Str(s, "kind"), "whole") << s.dump();
    EXPECT_EQ(Int(s, "memory_mb"), memory_mb) << s.dump();
    EXPECT_EQ(s.value("compute_percent", 0), 100) << s.dump();
    EXPECT_EQ(Str(s, "mig_device_id"), "") << s.dump();
    EXPECT_EQ(s["enforcement"], json::array()) << s.dump();
    const auto env = ProcessEnv(task);
    EXPECT_EQ(Get(env, "CUDA_VISIBLE_DEVICES"), "0");
    EXPECT_EQ(Get(env, "NVIDIA_VISIBLE_DEVICES"), "0");
    EXPECT_EQ(Get(env, "HETEROFLOW_SLICE_QOS"), qos);
    EXPECT_FALSE(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    EXPECT_FALSE(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY"));
    return s;
  }

  // Lets `tasks` end and checks that each succeeded after printing
  // "finished" exactly once, with its slice released.
  void FinishAndCheckReleased(const std::vector<Task>& tasks) {
    for (const Task& t : tasks) {
      if (!t.go.empty()) Touch(t.go);
    }
    for (const Task& t : tasks) {
      SCOPED_TRACE("task " + std::to_string(t.id));
      json done = WaitTerminal(t);
      EXPECT_EQ(Str(done, "status"), "succeeded") << done.dump() << AllLogs();
      EXPECT_EQ(done["exit_code"], 0) << done.dump();
      const std::string log = TaskLog(t.id);
      EXPECT_TRUE(log.ends_with("env-done\nfinished\n")) << log;
      EXPECT_EQ(log.find("env-done"), log.rfind("env-done")) << log;
      if (!done["slice_id"].is_number_integer()) {
        ADD_FAILURE() << "no slice: " << done.dump();
        continue;
      }
      json s = WaitSliceReleased(done["slice_id"].get<std::int64_t>());
      EXPECT_EQ(Str(s, "state"), "released") << s.dump() << AllLogs();
    }
  }

  // At the end: no live slice, nothing accounted, every MIG partition that
  // was created destroyed (on the server's channel and on the simulated
  // card), and no partition ever reported orphaned.
  void CheckClusterIsClean(std::size_t gold_slices) {
    EXPECT_TRUE(WaitFor([&] { return LiveSlices().empty(); }, kTaskTimeout))
        << LiveSlices().dump();
    EXPECT_TRUE(LedgerMatchesLiveSlices());
    json stats = Stats();
    EXPECT_EQ(stats["totals"].value("accounted_memory_mb", -1), 0)
        << stats.dump();
    EXPECT_EQ(stats["totals"].value("live_slices", -1), 0) << stats.dump();

    const json rows = Requests(kGoldNode);
    std::map<std::int64_t, std::string> created, destroyed;
    for (const json& row : rows) {
      if (Str(row, "state") != "done") {
        ADD_FAILURE() << "a MIG command did not succeed: " << row.dump();
        continue;
      }
      const std::int64_t slice = Int(row, "slice_id");
      auto& into = Str(row, "action") == "create" ? created : destroyed;
      EXPECT_FALSE(into.contains(slice)) << "twice: " << rows.dump();
      // The device and its profile, as the create made them and the
      // destroy must name them.
      into[slice] = Str(row, "device_id") + " " + Str(row, "profile");
      EXPECT_NE(Str(row, "profile").rfind("MIG-", 0), 0u) << row.dump();
    }
    EXPECT_EQ(created.size(), gold_slices) << rows.dump();
    EXPECT_EQ(created, destroyed) << rows.dump();
    for (const char* other : {kSilverNode, kBronzeNode}) {
      EXPECT_EQ(Requests(other), json::array()) << other;
    }
    EXPECT_EQ(SimMigDevices(), (std::map<std::string, std::string>{}));

    const json history =
        api_->ListAll("/api/v1/slices/history?limit=1000", admin());
    for (const json& h : history) {
      EXPECT_NE(Str(h, "op"), "mig_orphaned") << h.dump();
    }
  }

  const std::string& admin() const { return server_->admin_token(); }

  std::string AllLogs() const {
    std::string out;
    for (const auto& agent : agents_) {
      out += "\n--- agent " + agent->node_id() + " log:\n" + agent->Log(6000);
    }
    return out + "\n--- server log:\n" + server_->Log(6000);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  AgentProcess* gold_agent_ = nullptr;
  AgentProcess* silver_agent_ = nullptr;
  AgentProcess* bronze_agent_ = nullptr;
  std::string bronze_, silver_a_, silver_b_, gold_, whole_;
};

// ------------------------------------------------------ QoS and release

TEST_F(ClusterE2eTest, EveryNodeGivesItsTierAndReleasesEverything) {
  // The three node tokens are bound, each to its own node.
  std::map<std::string, int> bound;
  for (const json& tok : api_->ListAll("/api/v1/tokens", admin())) {
    if (Str(tok, "role") == "node" && tok["node"].is_string()) {
      ++bound[tok["node"].get<std::string>()];
    }
  }
  EXPECT_EQ(bound, (std::map<std::string, int>{
                       {kGoldNode, 1}, {kSilverNode, 1}, {kBronzeNode, 1}}));

  // Bronze first: the T4 is the tightest GPU.
  const Task bronze =
      Submit("bronze", bronze_,
             {{"gpu_memory_mb", 2048}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(bronze), "node_id"), kBronzeNode)
      << GetTask(bronze).dump();
  // Two tenants of one shared group share the MPS GPU.
  const Task silver_a =
      Submit("silver-a", silver_a_,
             {{"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(silver_a), "node_id"), kSilverNode)
      << GetTask(silver_a).dump();
  const Task silver_b = Submit("silver-b", silver_b_,
                               {{"gpu_memory_mb", 2048},
                                {"gpu_compute_ratio", 0.5},
                                {"gpu_compute_mode", "strict"}});
  ASSERT_EQ(Str(WaitBound(silver_b), "node_id"), kSilverNode)
      << GetTask(silver_b).dump();
  EXPECT_EQ(Str(GetTask(silver_b), "gpu_compute_mode"), "strict");
  EXPECT_EQ(Str(GetTask(silver_a), "gpu_compute_mode"), "work-conserving");

  // A whole GPU: the only empty GPU is the H100, in MIG mode, so it waits.
  const Task whole = Submit("whole", whole_, {{"gpu_required", 1}});
  json w = api_->WaitTried(whole.id, admin(), kTaskTimeout);
  ASSERT_EQ(Str(w, "status"), "pending") << w.dump();
  EXPECT_NE(Str(w, "pending_reason").find("MIG mode"), std::string::npos)
      << w.dump();

  // Gold: two partitions on the H100.
  const Task gold_small =
      Submit("gold-small", gold_,
             {{"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.1}});
  ASSERT_EQ(Str(WaitBound(gold_small), "node_id"), kGoldNode)
      << GetTask(gold_small).dump();
  const Task gold_big = Submit("gold-big", gold_, {{"gpu_memory_mb", 16384}});
  ASSERT_EQ(Str(WaitBound(gold_big), "node_id"), kGoldNode)
      << GetTask(gold_big).dump();

  // 1 and 2: tiers, enforcement and environments.
  CheckSliceTask(bronze, kBronzeNode, "bronze", json::array());
  json sa = CheckSliceTask(silver_a, kSilverNode, "silver", json({"mps"}));
  json sb = CheckSliceTask(silver_b, kSilverNode, "silver", json({"mps"}));
  EXPECT_EQ(sa.value("compute_percent", 0), 25) << sa.dump();
  EXPECT_EQ(sb.value("compute_percent", 0), 50) << sb.dump();
  EXPECT_EQ(sa["gpu_uuid"], sb["gpu_uuid"]) << "the group shares one GPU";
  json gs = CheckSliceTask(gold_small, kGoldNode, "gold", json({"mig"}));
  json gb = CheckSliceTask(gold_big, kGoldNode, "gold", json({"mig"}));
  ASSERT_TRUE(gs.is_object() && gb.is_object());
  EXPECT_NE(Str(gs, "mig_device_id"), Str(gb, "mig_device_id"));
  // A partition covers the request, and is charged as the partition.
  EXPECT_GE(gs.value("memory_mb", 0), 4096) << gs.dump();
  EXPECT_GE(gb.value("memory_mb", 0), 16384) << gb.dump();
  // The partitions are really on the (simulated) card, with the profiles
  // the server asked for.
  std::map<std::string, std::string> profiles;
  for (const json& row : Requests(kGoldNode)) {
    EXPECT_EQ(Str(row, "action"), "create") << row.dump();
    EXPECT_EQ(Str(row, "state"), "done") << row.dump();
    profiles[Str(row, "device_id")] = Str(row, "profile");
  }
  EXPECT_EQ(SimMigDevices(), profiles);
  EXPECT_EQ(profiles.size(), 2u);
  EXPECT_TRUE(profiles.contains(Str(gs, "mig_device_id")));
  EXPECT_TRUE(profiles.contains(Str(gb, "mig_device_id")));
  // The whole-GPU task still waits; nothing is oversold.
  EXPECT_EQ(Str(GetTask(whole), "status"), "pending");
  EXPECT_TRUE(LedgerMatchesLiveSlices());
  json stats = Stats();
  for (const json& g : stats["gpus"]) {
    if (g["node_id"] == kSilverNode) {
      EXPECT_EQ(g["tenants"].size(), 2u) << g.dump();
      EXPECT_EQ(g.value("accounted_compute_percent", 0), 75) << g.dump();
    }
    EXPECT_EQ(g.value("whole_gpu_task", true), false) << g.dump();
  }

  // The bronze task ends: the T4 is empty, and the whole-GPU task takes it.
  FinishAndCheckReleased({bronze});
  json ws = CheckWholeTask(whole, kBronzeNode, kT4MemoryMb, "exclusive");
  EXPECT_EQ(Str(ws, "qos_level"), "exclusive") << ws.dump();
  EXPECT_TRUE(LedgerMatchesLiveSlices());
  stats = Stats();
  for (const json& g : stats["gpus"]) {
    EXPECT_EQ(g.value("whole_gpu_task", false), g["node_id"] == kBronzeNode)
        << g.dump();
  }

  // 3: everything ends and everything is given back.
  FinishAndCheckReleased({silver_a, silver_b, gold_small, gold_big, whole});
  CheckClusterIsClean(/*gold_slices=*/2);
}

// ---------------------------------------------------------- agent crash

TEST_F(ClusterE2eTest, KilledAgentReadoptsItsTaskWhileTheOthersWork) {
  const Task bronze =
      Submit("bronze", bronze_,
             {{"gpu_memory_mb", 2048}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(bronze), "node_id"), kBronzeNode);
  const Task silver =
      Submit("silver", silver_a_,
             {{"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(silver), "node_id"), kSilverNode);
  const Task gold = Submit("gold", gold_, {{"gpu_memory_mb", 4096}});
  ASSERT_EQ(Str(WaitBound(gold), "node_id"), kGoldNode);
  CheckSliceTask(bronze, kBronzeNode, "bronze", json::array());
  CheckSliceTask(silver, kSilverNode, "silver", json({"mps"}));
  const json gold_slice =
      CheckSliceTask(gold, kGoldNode, "gold", json({"mig"}));
  ASSERT_TRUE(gold_slice.is_object());
  const std::string device = Str(gold_slice, "mig_device_id");
  const std::optional<pid_t> pgid = gold_agent_->WaitTaskPid(gold.id);
  ASSERT_TRUE(pgid.has_value()) << AllLogs();

  // The gold agent dies; its task does not.
  ASSERT_TRUE(gold_agent_->Kill());
  EXPECT_GT(LiveProcessesInGroup(*pgid), 0) << "the task died with the agent";

  // Meanwhile the other two nodes take and finish new work.
  const Task silver_next = Submit("silver-next", silver_b_,
                                  {{"gpu_memory_mb", 1024}}, /*wait=*/false);
  const Task bronze_next =
      Submit("bronze-next", bronze_, {{"gpu_memory_mb", 1024}}, /*wait=*/false);
  // A gold task bound during the outage waits for its partition: nobody
  // claims the create command until the agent is back.
  const Task gold_next = Submit("gold-next", gold_, {{"gpu_memory_mb", 4096}});
  json gn = WaitBound(gold_next);
  EXPECT_EQ(Str(gn, "node_id"), kGoldNode) << gn.dump();
  for (const Task* t : {&silver_next, &bronze_next}) {
    json done = WaitTerminal(*t);
    EXPECT_EQ(Str(done, "status"), "succeeded") << done.dump() << AllLogs();
    EXPECT_EQ(Str(done, "node_id"),
              t == &silver_next ? kSilverNode : kBronzeNode)
        << done.dump();
    EXPECT_EQ(Str(done, "qos_level"), t == &silver_next ? "silver" : "bronze")
        << done.dump();
    EXPECT_EQ(Str(WaitSliceReleased(Int(done, "slice_id")), "state"),
              "released");
  }
  gn = GetTask(gold_next);
  EXPECT_EQ(Str(gn, "status"), "scheduled") << gn.dump();
  bool create_pending = false;
  for (const json& row : Requests(kGoldNode)) {
    if (Int(row, "task_id") == gold_next.id) {
      create_pending = Str(row, "state") == "pending";
    }
  }
  EXPECT_TRUE(create_pending) << Requests(kGoldNode).dump();
  // The first gold task is still running as far as the server knows, its
  // slice held; nothing is oversold.
  EXPECT_EQ(Str(GetTask(gold), "status"), "running");
  EXPECT_EQ(Str(Slice(gold_slice["id"].get<std::int64_t>()), "state"),
            "allocated");
  EXPECT_EQ(Str(GetTask(silver), "status"), "running");
  EXPECT_EQ(Str(GetTask(bronze), "status"), "running");
  EXPECT_TRUE(LedgerMatchesLiveSlices());

  // The agent comes back on the same state directory and adopts the task.
  ASSERT_TRUE(gold_agent_->Start());
  ASSERT_TRUE(
      gold_agent_->WaitForLog("adopted task " + std::to_string(gold.id)));
  EXPECT_GT(LiveProcessesInGroup(*pgid), 0);
  // The task bound during the outage gets its partition and runs.
  json gns = CheckSliceTask(gold_next, kGoldNode, "gold", json({"mig"}));
  EXPECT_NE(Str(gns, "mig_device_id"), device);
  EXPECT_EQ(SimMigDevices().size(), 2u);

  FinishAndCheckReleased({gold, gold_next, silver, bronze});
  // Started once only, by the first agent.
  const std::string log = gold_agent_->Log(1 << 20);
  const std::string started = "task " + std::to_string(gold.id) + " started";
  EXPECT_NE(log.find(started), std::string::npos) << log;
  EXPECT_EQ(log.find(started), log.rfind(started)) << log;
  CheckClusterIsClean(/*gold_slices=*/2);
}

// --------------------------------------------------------- server crash

TEST_F(ClusterE2eTest, ServerCrashRebuildsTheLedgerAndEveryAgentReconnects) {
  const Task bronze =
      Submit("bronze", bronze_,
             {{"gpu_memory_mb", 2048}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(bronze), "node_id"), kBronzeNode);
  const Task silver_a =
      Submit("silver-a", silver_a_,
             {{"gpu_memory_mb", 4096}, {"gpu_compute_ratio", 0.25}});
  ASSERT_EQ(Str(WaitBound(silver_a), "node_id"), kSilverNode);
  const Task silver_b =
      Submit("silver-b", silver_b_,
             {{"gpu_memory_mb", 2048}, {"gpu_compute_ratio", 0.5}});
  ASSERT_EQ(Str(WaitBound(silver_b), "node_id"), kSilverNode);
  const Task whole = Submit("whole", whole_, {{"gpu_required", 1}});
  ASSERT_EQ(Str(api_->WaitTried(whole.id, admin()), "status"), "pending");
  const Task gold = Submit("gold", gold_, {{"gpu_memory_mb", 4096}});
  ASSERT_EQ(Str(WaitBound(gold), "node_id"), kGoldNode);
  CheckSliceTask(bronze, kBronzeNode, "bronze", json::array());
  CheckSliceTask(silver_a, kSilverNode, "silver", json({"mps"}));
  CheckSliceTask(silver_b, kSilverNode, "silver", json({"mps"}));
  CheckSliceTask(gold, kGoldNode, "gold", json({"mig"}));
  ASSERT_TRUE(LedgerMatchesLiveSlices());

  const json before = LiveSlices();
  ASSERT_EQ(before.size(), 4u) << before.dump();
  std::int64_t max_slice_id = 0;
  for (const json& s : before) {
    max_slice_id = std::max(max_slice_id, s["id"].get<std::int64_t>());
  }
  std::map<std::string, std::string> heartbeats;
  for (const std::string node : {kGoldNode, kSilverNode, kBronzeNode}) {
    heartbeats[node] = Str(NodeView(node), "last_heartbeat_at");
  }
  const int port = server_->port();

  // The server dies; a task ends while nobody is there to hear it.
  ASSERT_TRUE(server_->Kill());
  Touch(silver_b.go);
  ASSERT_TRUE(WaitFor(
      [&] { return fs::exists(silver_agent_->TaskDir(silver_b.id) / "exit"); },
      kTaskTimeout))
      << AllLogs();
  for (AgentProcess* agent : {gold_agent_, silver_agent_, bronze_agent_}) {
    EXPECT_FALSE(agent->WaitExit(milliseconds(0)).has_value())
        << agent->node_id() << " exited" << AllLogs();
  }

  ASSERT_TRUE(server_->Start());
  ASSERT_EQ(server_->port(), port) << "the server came back on another port";
  // All three agents reconnect.
  for (const std::string node : {kGoldNode, kSilverNode, kBronzeNode}) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return Str(NodeView(node), "last_heartbeat_at") != heartbeats[node];
        },
        kTaskTimeout))
        << node << " never came back" << AllLogs();
  }
  // The end that happened during the outage is reported.
  json sb = WaitTerminal(silver_b);
  EXPECT_EQ(Str(sb, "status"), "succeeded") << sb.dump() << AllLogs();
  EXPECT_TRUE(TaskLog(silver_b.id).ends_with("env-done\nfinished\n"))
      << TaskLog(silver_b.id);
  EXPECT_EQ(Str(WaitSliceReleased(Int(sb, "slice_id")), "state"), "released");

  // The ledger is rebuilt from the store: the same slices (no compensation
  // slice for the tasks that ran on), matching the running tasks.
  const json after = LiveSlices();
  std::set<std::int64_t> expected_ids, live_ids;
  for (const json& s : before) {
    if (Int(s, "task_id") != silver_b.id) {
      expected_ids.insert(s["id"].get<std::int64_t>());
    }
  }
  for (const json& s : after) {
    live_ids.insert(s["id"].get<std::int64_t>());
    EXPECT_EQ(Str(s, "origin"), "scheduler") << s.dump();
    const json t = api_->GetTask(Int(s, "task_id"), admin());
    EXPECT_EQ(Str(t, "status"), "running") << t.dump();
    EXPECT_EQ(t["slice_id"], s["id"]) << t.dump();
  }
  EXPECT_EQ(live_ids, expected_ids) << after.dump();
  EXPECT_TRUE(LedgerMatchesLiveSlices());
  EXPECT_EQ(Str(GetTask(whole), "status"), "pending");

  // A new slice gets a fresh id, and runs.
  const Task silver_c =
      Submit("silver-c", silver_b_, {{"gpu_memory_mb", 1024}}, /*wait=*/false);
  json sc = WaitTerminal(silver_c);
  EXPECT_EQ(Str(sc, "status"), "succeeded") << sc.dump() << AllLogs();
  EXPECT_EQ(Str(sc, "node_id"), kSilverNode) << sc.dump();
  EXPECT_GT(Int(sc, "slice_id"), max_slice_id) << sc.dump();

  // The rebuilt ledger still keeps the whole-GPU task off the MIG GPU: it
  // takes the T4 once the bronze task is gone.
  FinishAndCheckReleased({bronze});
  CheckWholeTask(whole, kBronzeNode, kT4MemoryMb, "exclusive");
  EXPECT_TRUE(LedgerMatchesLiveSlices());

  FinishAndCheckReleased({silver_a, gold, whole});
  CheckClusterIsClean(/*gold_slices=*/1);
}

}  // namespace
}  // namespace hf::e2e
