// The chaos test (issue 14): an operator's worst day against the REAL
// binaries on loopback, checked from outside only. One hf-server (SQLite in
// a temporary directory, short GC interval and age) and three hf-agents on
// the simulated GPU backend with the process runtime, each with its own
// state directory:
//   - "mig-node":    an H100 in MIG mode (gold) and an A100 80GB (silver);
//   - "mps-node":    two A100 40GB with the simulated MPS daemon (silver);
//   - "bronze-node": two T4 whose MPS daemon cannot start (bronze).
// Three tenants: "chaos-a" and "chaos-b" in one shared group, "chaos-c" on
// its own.
//
// For a bounded time a seeded schedule (HF_CHAOS_SEED replays its actions;
// the seed is printed; wall-clock timing is not replayed) creates tasks
// (slices and whole GPUs), cancels them in every state (at once: pending;
// as soon as the task is seen bound: scheduled, often before its agent has
// reported it; later: running), reserves slices and deletes live slices as
// an admin (a scheduled task's slice is released once its node has stopped
// the task; a running task's is refused), resizes them (PATCH, never below
// what the task asked for), and SIGKILLs agents (4-8 per 40 s, restarted
// on the same state directory after 0.3-5 s) and the server (2-3 per 40 s,
// restarted on the same database after 0.3-2.5 s). Every task is a real
// process (`sleep`, or `sh -c 'sleep; exit 1'`) carrying CHAOS_RUN
// and CHAOS_KEY in its environment, so the test finds it in /proc; its
// working directory is its task directory in an agent's state directory,
// which names the node and the task id; CUDA_VISIBLE_DEVICES says which GPU
// or MIG device the agent pinned it to (MIG devices are looked up in the
// agent's simulated MIG state, the "hardware"), HETEROFLOW_SLICE_ID under
// which slice it was started.
//
// The checks are the simulation's (src/simulation/world.cc), made from
// outside, about every 0.5 s, 0.1-0.5 s after the actions that race the
// nodes most (cancel of a bound task, delete of its slice, a restart), and
// at the end:
//   OVERSOLD   per physical GPU, the memory of the running tasks (each its
//              gpu_memory_mb; a whole GPU the card) fits the card, and a
//              MIG device runs one task at most;
//   TENANCY    tenants outside one shared group never run on one GPU;
//   STATE      the server knows every running task as scheduled or
//              running, never as ended or pending;
//   GHOST      no process of a task runs once a reply has said it ended
//              (judged on one sighting: the reply came before the scan);
//   UNTRACKED / MISPLACED / WRONG TENANT / UNDERCHARGED / SLICE MISMATCH
//              every running task is covered by a live slice (allocated or
//              releasing) of its tenant on the node and GPU(s), or MIG
//              device, it really runs on, accounting at least what it asked
//              for, and the one it was started under;
// and once the chaos stops and everything is back: every task ends (the
// longest runs 15 s), no task process is left, no live slice is left after
// GC (and the reservations' deletion), the ledger accounts nothing, every
// MIG partition is gone (or reported MIG_PARTITION_ORPHANED), every
// acknowledged task exists and every acknowledged cancel held.
// Processes are read twice around the reads of the slices and tasks; only a
// process seen both times (same pid and start time) is judged, so it
// certainly ran while they were read and a check never races the product.
// A violation stops the test with what was seen (the processes, the task,
// the live slices on that GPU), the last actions and the logs.
//
// Environment: HF_CHAOS_SEED (replay), HF_CHAOS_SECONDS (length of the
// chaos phase, default 40; faults scale with it), HF_CHAOS_TRACE=1 (print
// every action as it happens), HF_E2E_KEEP=1 (keep the directories).
// Wall time: the chaos phase plus about 15-30 s to settle; little CPU (the
// tasks sleep).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/e2e/agent_harness.h"

namespace hf::e2e {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

constexpr int kDefaultChaosSeconds = 40;
// hf-frag places with Best-Fit until it has learned this many tasks.
constexpr int kColdStart = 10;
// After the chaos: every task ends within this...
constexpr milliseconds kSettleBound{75'000};
// ...and every slice is released (GC included) within this after that.
constexpr milliseconds kReleaseBound{30'000};
constexpr milliseconds kCheckEvery{500};

const char* const kTenants[] = {"chaos-a", "chaos-b", "chaos-c"};
const char kGroup[] = "chaos-shared";

// Tenants may share a GPU only inside the group (no approvals here).
bool MayShare(const std::string& a, const std::string& b) {
  const auto grouped = [](const std::string& t) {
    return t == "chaos-a" || t == "chaos-b";
  };
  return a == b || (grouped(a) && grouped(b));
}

// What a task asks for and does.
struct Shape {
  std::string tenant;
  int whole_gpus = 0;          // > 0: whole GPUs
  std::int64_t memory_mb = 0;  // slice
  std::optional<double> ratio;
  int duration_ds = 0;  // tenths of a second
  int exit_code = 0;

  std::string Describe() const {
    std::ostringstream out;
    out << tenant << ", ";
    if (whole_gpus > 0) {
      out << whole_gpus << " whole GPU(s)";
    } else {
      out << memory_mb << " MB";
      if (ratio) out << " " << *ratio;
    }
    out << ", " << duration_ds / 10 << "." << duration_ds % 10 << " s";
    if (exit_code != 0) out << ", exit " << exit_code;
    return out.str();
  }
};

// One process of a chaos task, as /proc shows it.
struct TaskProcess {
  pid_t pid = 0;
  std::string start;  // /proc/<pid>/stat start time: with pid, its identity
  std::string key;    // CHAOS_KEY
  std::string cwd;
  std::string node;          // whose state directory holds the cwd ("": none)
  std::int64_t task_id = 0;  // the task directory's name
  std::string devices;       // CUDA_VISIBLE_DEVICES
  std::string slice_id;      // HETEROFLOW_SLICE_ID

  std::string Describe() const {
    return "pid " + std::to_string(pid) + " (key " + key + ", cwd " + cwd +
           ", CUDA_VISIBLE_DEVICES=" + devices +
           ", HETEROFLOW_SLICE_ID=" + slice_id + ")";
  }
};

// A task's processes in one scan of /proc.
struct RunningTask {
  std::string key;
  std::vector<TaskProcess> processes;
  std::set<std::pair<pid_t, std::string>> identities;
};

// `value` of "NAME=value" in a NUL-separated environment block.
std::string EnvValue(const std::string& block, const std::string& name) {
  const std::string prefix = name + "=";
  std::size_t at = 0;
  while (at < block.size()) {
    std::size_t end = block.find('\0', at);
    if (end == std::string::npos) end = block.size();
    if (block.compare(at, prefix.size(), prefix) == 0) {
      return block.substr(at + prefix.size(), end - at - prefix.size());
    }
    at = end + 1;
  }
  return "";
}

std::string Str(const json& object, const std::string& name) {
  if (!object.is_object() || !object.contains(name) || object[name].is_null()) {
    return "";
  }
  if (!object[name].is_string()) return object[name].dump();
  return object[name].get<std::string>();
}

std::int64_t Int(const json& object, const std::string& name) {
  if (!object.is_object() || !object.contains(name) ||
      !object[name].is_number_integer()) {
    return -1;
  }
  return object[name].get<std::int64_t>();
}

bool Terminal(const std::string& status) {
  return status == "succeeded" || status == "failed" || status == "cancelled";
}

class ChaosE2eTest : public ::testing::Test {
 protected:
  struct Node {
    std::string name;
    json gpus;
    bool mps_daemon = true;
    std::unique_ptr<AgentProcess> agent;
    fs::path tasks_dir;                    // canonical state/runtime/tasks
    std::map<std::string, int> mig_cards;  // MIG device uuid -> GPU index
  };

  void SetUp() override {
    ASSERT_TRUE(fs::exists(HF_TASK_SHIM_PATH)) << HF_TASK_SHIM_PATH;
    seed_ = std::random_device{}();
    if (const char* s = std::getenv("HF_CHAOS_SEED"); s && *s) {
      seed_ = std::strtoull(s, nullptr, 10);
    }
    chaos_ = std::chrono::seconds(kDefaultChaosSeconds);
    if (const char* s = std::getenv("HF_CHAOS_SECONDS"); s && *s) {
      chaos_ = std::chrono::seconds(std::max(1, std::atoi(s)));
    }
    rng_.seed(seed_);
    run_ = "chaos-" + std::to_string(getpid()) + "-" + std::to_string(seed_);
    std::cout << "[chaos] seed " << seed_ << " (HF_CHAOS_SEED=" << seed_
              << " replays the schedule), " << chaos_.count() << " s of chaos\n"
              << std::flush;

    ServerOptions options;
    // The default policy (hf-frag) leaves its cold start (Best-Fit) after
    // a few tasks, so most of the chaos is placed by hf-frag itself.
    options.flags = {"--gc-interval",
                     "1",
                     "--gc-min-age",
                     "1",
                     "--policy-cold-start-tasks",
                     std::to_string(kColdStart)};
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    const Api api(*server_);
    for (const char* tenant : kTenants) {
      const std::optional<std::string> group =
          std::string(tenant) == "chaos-c" ? std::nullopt
                                           : std::optional<std::string>(kGroup);
      ASSERT_EQ(api.CreateTenant(tenant, group), tenant);
    }

    nodes_.push_back({"mig-node", {H100Mig(), A100()}, true, nullptr, {}, {}});
    nodes_.push_back(
        {"mps-node", {A100(40960), A100(40960)}, true, nullptr, {}, {}});
    nodes_.push_back({"bronze-node", {T4(), T4()}, false, nullptr, {}, {}});
    for (Node& n : nodes_) {
      AgentProcessOptions o;
      o.node_id = n.name;
      o.inventory = SimInventory(n.name, n.gpus, n.mps_daemon);
      o.token = CreateNodeToken(api, n.name);
      ASSERT_FALSE(o.token.empty());
      n.agent = std::make_unique<AgentProcess>(server_->url(), std::move(o));
      fs::create_directories(n.agent->state_dir() / "runtime" / "tasks");
      n.tasks_dir = fs::canonical(n.agent->state_dir() / "runtime" / "tasks");
      ASSERT_TRUE(n.agent->Start());
    }
    // Every node registered with the capabilities of its tier.
    std::string seen;
    ASSERT_TRUE(WaitFor(
        [&] {
          seen.clear();
          bool ready = true;
          for (const Node& n : nodes_) {
            const HttpReply r =
                api.http().Get("/api/v1/nodes/" + n.name, api.admin());
            seen += r.raw + "\n";
            if (r.status != 200 || r.body["gpus"].size() != 2) {
              ready = false;
              continue;
            }
            const json& g = r.body["gpus"];
            if (n.name == "mig-node") {
              ready = ready && g[0].value("mig_capable", false) &&
                      g[1].value("mps_capable", false);
            } else if (n.name == "mps-node") {
              ready = ready && g[0].value("mps_capable", false) &&
                      g[1].value("mps_capable", false);
            }
          }
          return ready;
        },
        milliseconds(30'000)))
        << seen << Logs();
  }

  void TearDown() override {
    for (Node& n : nodes_) {
      if (n.agent && n.agent->running()) {
        EXPECT_TRUE(n.agent->Stop());
      }
    }
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
    nodes_.clear();  // the agents' destructors kill leftover tasks
  }

  // ------------------------------------------------------------ helpers

  HttpClient http() const { return server_->client(); }
  const std::string& admin() const { return server_->admin_token(); }

  double Elapsed() const {
    return std::chrono::duration<double>(SteadyClock::now() - began_).count();
  }

  void Trace(const std::string& what) {
    std::ostringstream line;
    line.setf(std::ios::fixed);
    line.precision(2);
    line << "[+" << Elapsed() << " s] " << what;
    trace_.push_back(line.str());
    if (PrintTrace()) std::cout << "[chaos] " << trace_.back() << "\n";
    if (trace_.size() > 120) trace_.pop_front();
  }

  // HF_CHAOS_TRACE=1: every action is printed as it happens.
  static bool PrintTrace() {
    const char* v = std::getenv("HF_CHAOS_TRACE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }

  std::string TraceText() const {
    std::string out = "last actions (seed " + std::to_string(seed_) + "):\n";
    for (const std::string& t : trace_) out += "  " + t + "\n";
    return out;
  }

  std::string Logs() const {
    std::string out;
    for (const Node& n : nodes_) {
      if (n.agent) {
        out += "\n--- agent " + n.name + " log:\n" + n.agent->Log(4000);
      }
    }
    return out + "\n--- server log:\n" + server_->Log(6000);
  }

  std::int64_t Draw(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  double Uniform() {
    return std::uniform_real_distribution<double>(0, 1)(rng_);
  }

  const Node* NodeOfCwd(const fs::path& cwd) const {
    for (const Node& n : nodes_) {
      if (cwd.parent_path() == n.tasks_dir) return &n;
    }
    return nullptr;
  }

  // Every live process of this run's tasks, by key. `*began`: when the
  // scan started.
  std::map<std::string, RunningTask> ScanProcesses(
      SteadyClock::time_point* began = nullptr) const {
    if (began != nullptr) *began = SteadyClock::now();
    std::map<std::string, RunningTask> tasks;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() ||
          name.find_first_not_of("0123456789") != std::string::npos) {
        continue;
      }
      const std::string environ = ReadFile(e.path() / "environ");
      if (EnvValue(environ, "CHAOS_RUN") != run_) continue;
      const pid_t pid = std::atoi(name.c_str());
      const std::vector<std::string> stat = ProcStatFields(pid);
      if (stat.size() < 20 || stat[0] == "Z" || stat[0] == "X") continue;
      TaskProcess p;
      p.pid = pid;
      p.start = stat[19];
      p.key = EnvValue(environ, "CHAOS_KEY");
      p.cwd = fs::read_symlink(e.path() / "cwd", ec).string();
      if (const Node* n = NodeOfCwd(p.cwd)) {
        p.node = n->name;
        p.task_id = std::atoll(fs::path(p.cwd).filename().c_str());
      }
      p.devices = EnvValue(environ, "CUDA_VISIBLE_DEVICES");
      p.slice_id = EnvValue(environ, "HETEROFLOW_SLICE_ID");
      RunningTask& t = tasks[p.key];
      t.key = p.key;
      t.identities.emplace(p.pid, p.start);
      t.processes.push_back(std::move(p));
    }
    return tasks;
  }

  // The MIG devices on the cards now, as each agent's simulated driver
  // saved them (the hardware's truth): (node, GPU index, device uuid).
  std::vector<std::tuple<std::string, int, std::string>> MigDevices() const {
    std::vector<std::tuple<std::string, int, std::string>> out;
    for (const Node& n : nodes_) {
      const json state =
          json::parse(ReadFile(n.agent->state_dir() / "sim-mig-state.json"),
                      nullptr, false);
      if (!state.is_object() || !state["gpus"].is_array()) continue;
      for (const json& g : state["gpus"]) {
        for (const json& d : g["devices"]) {
          out.emplace_back(n.name, g.value("index", -1), Str(d, "device_uuid"));
        }
      }
    }
    return out;
  }

  // Remembers the card of every MIG device present now (uuids are never
  // reissued).
  void RefreshMigCards() {
    for (const auto& [node, card, uuid] : MigDevices()) {
      for (Node& n : nodes_) {
        if (n.name == node) n.mig_cards[uuid] = card;
      }
    }
  }

  const Node& NodeNamed(const std::string& name) const {
    for (const Node& n : nodes_) {
      if (n.name == name) return n;
    }
    return nodes_.front();
  }

  std::int64_t CardMemory(const std::string& node, int card) const {
    const json& gpus = NodeNamed(node).gpus;
    if (card < 0 || card >= static_cast<int>(gpus.size())) return 0;
    return gpus[card]["memory_mb"].get<std::int64_t>();
  }

  // GET a list (one page of up to 1000; the run stays far below); nullopt
  // when the server does not answer.
  std::optional<json> List(const std::string& path) const {
    const HttpReply r = http().Get(path, admin());
    if (r.status != 200 || !r.body.is_object() || !r.body["items"].is_array()) {
      return std::nullopt;
    }
    if (!r.body["next_cursor"].is_null()) {
      ADD_FAILURE() << "more than one page of " << path;
    }
    return r.body["items"];
  }

  std::string TaskView(std::int64_t id) const {
    const HttpReply r =
        http().Get("/api/v1/tasks/" + std::to_string(id), admin());
    if (r.status != 200) return r.Describe();
    json t = r.body;
    t.erase("env");  // long, and the same for every task
    return t.dump();
  }

  // A reply (just received) showed task `id` in `status`. The first that
  // shows it ended is when the server has said so: no process of it may
  // run after that.
  void Saw(std::int64_t id, const std::string& status) {
    status_[id] = status;
    if (Terminal(status)) ended_at_.emplace(id, SteadyClock::now());
  }

  // ------------------------------------------------------------ checks

  // The invariants, from outside. Returns the first violation, described.
  std::optional<std::string> Check() {
    ++checks_;
    SteadyClock::time_point first_began, second_began;
    const std::map<std::string, RunningTask> first =
        ScanProcesses(&first_began);
    std::optional<json> slices;
    std::optional<json> tasks;
    if (server_->running()) {
      slices = List("/api/v1/slices?limit=1000");
      tasks = List("/api/v1/tasks?limit=1000");
    }
    if (tasks) {
      for (const json& t : *tasks) Saw(Int(t, "id"), Str(t, "status"));
    }
    RefreshMigCards();
    const std::map<std::string, RunningTask> second =
        ScanProcesses(&second_began);
    if (slices) last_slices_ = *slices;

    // GHOST: a process alive after the server said its task had ended (in
    // any reply before the scan began). One sighting is enough.
    for (const auto* scan : {&first, &second}) {
      const SteadyClock::time_point began =
          scan == &first ? first_began : second_began;
      for (const auto& [key, t] : *scan) {
        const TaskProcess& p = t.processes.front();
        auto ended = ended_at_.find(p.task_id);
        if (p.task_id == 0 || ended == ended_at_.end() ||
            ended->second >= began) {
          continue;
        }
        const double ago =
            std::chrono::duration<double>(began - ended->second).count();
        return "GHOST: task " + std::to_string(p.task_id) + " runs on " +
               p.node + " as " + p.Describe() + ", " + std::to_string(ago) +
               " s after the server said it was " + status_[p.task_id] +
               "\n  the task: " + TaskView(p.task_id) +
               "\n  live slices: " + last_slices_.dump();
      }
    }

    // Only tasks seen running in both scans: they ran throughout.
    std::vector<const RunningTask*> stable;
    for (const auto& [key, t] : second) {
      auto it = first.find(key);
      if (it == first.end()) continue;
      bool common = false;
      for (const auto& id : t.identities) {
        common = common || it->second.identities.contains(id);
      }
      if (common) stable.push_back(&t);
    }
    max_running_ = std::max(max_running_, stable.size());

    // Where each task really runs.
    struct Placement {
      const RunningTask* task;
      const TaskProcess* p;
      Shape shape;
      std::vector<int> cards;
      std::string mig;
    };
    std::vector<Placement> placed;
    for (const RunningTask* t : stable) {
      const TaskProcess& p = t->processes.front();
      for (const TaskProcess& q : t->processes) {
        if (q.node != p.node || q.task_id != p.task_id ||
            q.devices != p.devices || q.slice_id != p.slice_id) {
          return "INCONSISTENT: the processes of task key " + t->key +
                 " disagree: " + p.Describe() + " vs " + q.Describe();
        }
      }
      auto shape = shapes_.find(t->key);
      if (shape == shapes_.end()) {
        return "STRAY: a process of this run with unknown key: " + p.Describe();
      }
      if (p.node.empty()) {
        return "STRAY: task key " + t->key + " runs outside every agent's " +
               "task directories: " + p.Describe();
      }
      if (auto id = ids_.find(t->key);
          id != ids_.end() && id->second != p.task_id) {
        return "STRAY: task key " + t->key + " was acknowledged as task " +
               std::to_string(id->second) + " but runs in the directory of " +
               "task " + std::to_string(p.task_id) + ": " + p.Describe();
      }
      Placement pl{t, &p, shape->second, {}, ""};
      if (p.devices.starts_with("MIG-")) {
        const auto& cards = NodeNamed(p.node).mig_cards;
        auto card = cards.find(p.devices);
        if (card == cards.end()) {
          return "MISPLACED: task " + std::to_string(p.task_id) + " on " +
                 p.node + " runs in MIG device " + p.devices +
                 ", which the node's GPUs never had: " + p.Describe();
        }
        pl.cards = {card->second};
        pl.mig = p.devices;
      } else {
        std::stringstream in(p.devices);
        std::string part;
        while (std::getline(in, part, ',')) {
          if (!part.empty()) pl.cards.push_back(std::atoi(part.c_str()));
        }
        std::sort(pl.cards.begin(), pl.cards.end());
      }
      if (pl.cards.empty()) {
        return "UNPINNED: task " + std::to_string(p.task_id) + " on " + p.node +
               " sees every GPU: " + p.Describe();
      }
      placed.push_back(std::move(pl));
    }
    const auto task_line = [&](const Placement& pl) {
      return "\n  task " + std::to_string(pl.p->task_id) + " (" +
             pl.shape.Describe() + "): " + pl.p->Describe();
    };

    // OVERSOLD and TENANCY, per physical GPU; one task per MIG device.
    std::map<std::pair<std::string, int>, std::vector<const Placement*>> on;
    std::map<std::string, const Placement*> on_mig;
    for (const Placement& pl : placed) {
      for (int card : pl.cards) on[{pl.p->node, card}].push_back(&pl);
      if (!pl.mig.empty()) {
        auto [it, fresh] = on_mig.emplace(pl.mig, &pl);
        if (!fresh) {
          return "OVERSOLD: MIG device " + pl.mig + " on " + pl.p->node +
                 " runs two tasks:" + task_line(*it->second) + task_line(pl);
        }
      }
    }
    for (const auto& [where, tasks] : on) {
      const std::int64_t card = CardMemory(where.first, where.second);
      std::int64_t used = 0;
      std::string who;
      for (const Placement* pl : tasks) {
        used += pl->shape.whole_gpus > 0 ? card : pl->shape.memory_mb;
        who += task_line(*pl);
      }
      if (used > card) {
        return "OVERSOLD: " + where.first + " GPU " +
               std::to_string(where.second) + " runs " + std::to_string(used) +
               " MB of tasks on a " + std::to_string(card) + " MB card:" + who +
               SlicesOn(where.first, where.second);
      }
      for (const Placement* a : tasks) {
        for (const Placement* b : tasks) {
          if (!MayShare(a->shape.tenant, b->shape.tenant)) {
            return "TENANCY: " + where.first + " GPU " +
                   std::to_string(where.second) + " runs tasks of " +
                   a->shape.tenant + " and " + b->shape.tenant +
                   ", who may not share:" + task_line(*a) + task_line(*b) +
                   SlicesOn(where.first, where.second);
          }
        }
      }
    }

    // The server knows each running task as bound: scheduled (the agent
    // has not reported it yet) or running; never ended, never pending.
    if (tasks) {
      std::map<std::int64_t, const json*> by_id;
      for (const json& t : *tasks) by_id[Int(t, "id")] = &t;
      for (const Placement& pl : placed) {
        auto t = by_id.find(pl.p->task_id);
        const std::string status =
            t == by_id.end() ? "(not listed)" : Str(*t->second, "status");
        if (status != "scheduled" && status != "running") {
          return "STATE: task " + std::to_string(pl.p->task_id) + " (" +
                 pl.shape.Describe() + ") runs on " + pl.p->node + " as " +
                 pl.p->Describe() + ", but the server says it is " + status +
                 "\n  the task: " + TaskView(pl.p->task_id) +
                 SlicesOn(pl.p->node, pl.cards.front());
        }
      }
    }

    // Coverage: a live slice of the task's tenant where it really runs.
    if (!slices) return std::nullopt;
    std::multimap<std::int64_t, const json*> by_task;
    for (const json& s : *slices) {
      if (s["task_id"].is_number_integer()) {
        by_task.emplace(s["task_id"].get<std::int64_t>(), &s);
      }
    }
    for (const Placement& pl : placed) {
      const std::int64_t id = pl.p->task_id;
      const std::string where = "task " + std::to_string(id) + " (" +
                                pl.shape.Describe() + ") running on " +
                                pl.p->node + " as " + pl.p->Describe();
      // What a failure shows besides (read only then).
      const auto context = [&] {
        return "\n  the task: " + TaskView(id) +
               SlicesOn(pl.p->node, pl.cards.front());
      };
      auto [from, to] = by_task.equal_range(id);
      if (from == to) {
        return "UNTRACKED: " + where + " has no live slice" + context();
      }
      std::string why;
      bool covered = false;
      for (auto it = from; it != to && !covered; ++it) {
        const json& s = *it->second;
        std::vector<int> have;
        for (const json& g : s["gpu_indices"]) have.push_back(g.get<int>());
        std::sort(have.begin(), have.end());
        if (Str(s, "node_id") != pl.p->node || have != pl.cards) {
          why = "MISPLACED: " + where + " but its slice is " + s.dump();
        } else if (Str(s, "tenant") != pl.shape.tenant) {
          why = "WRONG TENANT: " + where + " but its slice is " + s.dump();
        } else if (!pl.mig.empty() && Str(s, "mig_device_id") != pl.mig) {
          why = "MISPLACED: " + where + " but its slice owns MIG device '" +
                Str(s, "mig_device_id") + "': " + s.dump();
        } else if (Str(s, "kind") != "whole" &&
                   Int(s, "memory_mb") < pl.shape.memory_mb) {
          why = "UNDERCHARGED: " + where +
                " but its slice accounts less: " + s.dump();
        } else if (std::to_string(Int(s, "id")) != pl.p->slice_id) {
          why =
              "SLICE MISMATCH: " + where + " but its live slice is " + s.dump();
        } else {
          covered = true;
        }
      }
      if (!covered) return why + context();
    }
    return std::nullopt;
  }

  // The live slices on one GPU as last read, for messages.
  std::string SlicesOn(const std::string& node, int card) const {
    std::string out =
        "\n  live slices on " + node + " GPU " + std::to_string(card) + ":";
    for (const json& s : last_slices_) {
      bool here = false;
      for (const json& g : s["gpu_indices"]) here = here || g == card;
      if (Str(s, "node_id") == node && here) out += "\n    " + s.dump();
    }
    return out;
  }

  // Runs the checks; on a violation records a failure with what was seen.
  bool CheckOrFail(const std::string& when) {
    std::optional<std::string> v = Check();
    if (!v) return true;
    ADD_FAILURE() << "[chaos] " << when << ": " << *v << "\n"
                  << TraceText() << Logs();
    return false;
  }

  // ----------------------------------------------------------- actions

  Shape RandomShape() {
    Shape s;
    s.tenant = kTenants[Draw(0, 2)];
    const double r = Uniform();
    if (r < 0.07) {
      s.whole_gpus = 1;
    } else if (r < 0.10) {
      s.whole_gpus = 2;
    } else {
      static const std::int64_t kSizes[] = {1024,  2048,  4096,  8192,
                                            12288, 16384, 24576, 40960};
      s.memory_mb = kSizes[Draw(0, 7)];
      if (Uniform() < 0.5) {
        static const double kRatios[] = {0.1, 0.25, 0.5};
        s.ratio = kRatios[Draw(0, 2)];
      }
    }
    s.duration_ds = static_cast<int>(Draw(20, 150));
    s.exit_code = Uniform() < 0.1 ? 1 : 0;
    return s;
  }

  void CreateTask() {
    const Shape shape = RandomShape();
    // How it is cancelled, if at all: at once (pending), as soon as it is
    // seen bound (scheduled, with luck before its agent reports it), or a
    // little later (often running).
    // Or its slice is deleted as soon as it is seen bound.
    enum class Soon { kNo, kAtOnce, kWhenBound, kLater, kDeleteWhenBound };
    Soon soon = Soon::kNo;
    const double c = Uniform();
    const std::int64_t later_ms = Draw(300, 3000);
    if (c < 0.08) {
      soon = Soon::kAtOnce;
    } else if (c < 0.30) {
      soon = Soon::kWhenBound;
    } else if (c < 0.36) {
      soon = Soon::kLater;
    } else if (c < 0.44) {
      soon = Soon::kDeleteWhenBound;
    }
    const std::string key = "k" + std::to_string(shapes_.size() + 1);
    shapes_[key] = shape;
    const std::string seconds = std::to_string(shape.duration_ds / 10) + "." +
                                std::to_string(shape.duration_ds % 10);
    json body = {
        {"name", "chaos-" + key},
        {"tenant", shape.tenant},
        {"labels", {{"chaos-key", key}}},
        {"env", {{"CHAOS_RUN", run_}, {"CHAOS_KEY", key}}},
    };
    if (shape.exit_code == 0) {
      body["command"] = json::array({"sleep", seconds});
    } else {
      body["command"] = json::array(
          {"sh", "-c",
           "sleep " + seconds + "; exit " + std::to_string(shape.exit_code)});
    }
    if (shape.whole_gpus > 0) {
      body["gpu_required"] = shape.whole_gpus;
    } else {
      body["gpu_memory_mb"] = shape.memory_mb;
      if (shape.ratio) body["gpu_compute_ratio"] = *shape.ratio;
    }
    const HttpReply r = http().Post("/api/v1/tasks", body, admin());
    if (r.status != 201) {
      Trace("create " + key + " (" + shape.Describe() + ") -> " +
            std::to_string(r.status) + " " + r.error);
      return;
    }
    const std::int64_t id = r.body["id"].get<std::int64_t>();
    ids_[key] = id;
    Saw(id, Str(r.body, "status"));
    ++counters_["create"];
    Trace("create " + key + " (" + shape.Describe() + ") -> task " +
          std::to_string(id));
    switch (soon) {
      case Soon::kNo:
        break;
      case Soon::kAtOnce:
        Cancel(id);
        break;
      case Soon::kWhenBound:
        WhenBound(id, SteadyClock::now() + milliseconds(3000),
                  /*delete_slice=*/false);
        break;
      case Soon::kDeleteWhenBound:
        WhenBound(id, SteadyClock::now() + milliseconds(3000),
                  /*delete_slice=*/true);
        break;
      case Soon::kLater:
        At(milliseconds(later_ms), [this, id] { Cancel(id); });
        break;
    }
  }

  // Polls the task every 20 ms; once it is bound (or at the deadline)
  // cancels it, or deletes its slice.
  void WhenBound(std::int64_t id, SteadyClock::time_point deadline,
                 bool delete_slice) {
    const HttpReply r =
        http().Get("/api/v1/tasks/" + std::to_string(id), admin());
    const std::string status = Str(r.body, "status");
    if (r.status == 200) Saw(id, status);
    if (Terminal(status)) return;
    const bool bound =
        r.status == 200 && (status == "scheduled" || status == "running");
    if (!bound && SteadyClock::now() < deadline) {
      At(milliseconds(20), [this, id, deadline, delete_slice] {
        WhenBound(id, deadline, delete_slice);
      });
      return;
    }
    if (!delete_slice) {
      Cancel(id);
      return;
    }
    if (Int(r.body, "slice_id") <= 0) return;
    const std::string slice = std::to_string(Int(r.body, "slice_id"));
    const HttpReply d =
        http().Delete("/api/v1/slices/" + slice + "?reason=chaos", admin());
    if (d.status == 200) {
      ++counters_["delete (task " + status + ")"];
      CheckSoon();
    }
    Trace("delete slice " + slice + " of task " + std::to_string(id) + " (" +
          status + ") -> " + std::to_string(d.status) + " " +
          Str(d.body, "state") + Str(d.body, "message"));
  }

  void Cancel(std::int64_t id) {
    const HttpReply before =
        http().Get("/api/v1/tasks/" + std::to_string(id), admin());
    const std::string was = Str(before.body, "status");
    if (before.status == 200) Saw(id, was);
    const HttpReply r =
        http().Post("/api/v1/tasks/" + std::to_string(id) + "/cancel",
                    json::object(), admin());
    if (r.status == 200) {
      ++counters_["cancel " + was];
      Saw(id, Str(r.body, "status"));
      if (status_[id] == "cancelled") cancelled_.insert(id);
    }
    Trace("cancel task " + std::to_string(id) + " (was " + was + ") -> " +
          std::to_string(r.status) + " " + Str(r.body, "status"));
    if (was == "scheduled") CheckSoon();
  }

  // A bound task's cancel or slice delete, and a restart, are when the
  // product's state machines race the node: extra checks follow them (a
  // process left running where it should not is mostly short-lived).
  void CheckSoon() {
    for (const int ms : {100, 250, 500}) {
      At(milliseconds(ms), [this] {
        if (ok_ && !CheckOrFail("soon after the last action")) ok_ = false;
      });
    }
  }

  void CancelSomeTask() {
    const std::uint64_t pick = rng_();
    std::vector<std::int64_t> open;
    for (const auto& [id, status] : status_) {
      if (!Terminal(status)) open.push_back(id);
    }
    if (open.empty()) return;
    Cancel(open[pick % open.size()]);
  }

  // Deletes a live slice: half the time one whose task was last seen
  // scheduled (the only task slices DELETE releases; a running task's
  // answers 409), else any (operator reservations among them).
  void DeleteSomeSlice() {
    const std::uint64_t pick = rng_();
    const bool bound = Uniform() < 0.5;
    std::vector<const json*> from;
    for (const json& s : last_slices_) {
      auto seen = status_.find(Int(s, "task_id"));
      if (bound && seen != status_.end() && seen->second == "scheduled") {
        from.push_back(&s);
      }
    }
    if (from.empty()) {
      for (const json& s : last_slices_) from.push_back(&s);
    }
    if (from.empty()) return;
    const json& s = *from[pick % from.size()];
    const std::string id = std::to_string(Int(s, "id"));
    const HttpReply r =
        http().Delete("/api/v1/slices/" + id + "?reason=chaos", admin());
    if (r.status == 200) ++counters_["delete (any)"];
    Trace("delete slice " + id + " (task " + Str(s, "task_id") + ", " +
          Str(s, "state") + ") -> " + std::to_string(r.status) + " " +
          Str(r.body, "state") + Str(r.body, "message"));
  }

  // An operator reservation: a slice with no task, placed by the policy.
  void ReserveSlice() {
    const std::string tenant = kTenants[Draw(0, 2)];
    const std::int64_t mb = 1024 * Draw(1, 16);
    const HttpReply r = http().Post("/api/v1/slices",
                                    {{"tenant", tenant},
                                     {"gpu_memory_mb", mb},
                                     {"reason", "chaos reservation"}},
                                    admin());
    if (r.status == 201) ++counters_["reserve"];
    Trace("reserve " + std::to_string(mb) + " MB for " + tenant + " -> " +
          std::to_string(r.status) + " slice " + Str(r.body, "id") + " on " +
          Str(r.body, "node_id") + " GPU " + Str(r.body, "gpu_index"));
  }

  void ResizeSomeSlice() {
    const std::uint64_t pick = rng_();
    const std::int64_t extra = 32 * Draw(0, 64);
    std::vector<std::pair<std::int64_t, std::int64_t>> open;  // slice, asked
    for (const json& s : last_slices_) {
      if (Str(s, "kind") != "slice" || !Str(s, "mig_device_id").empty() ||
          Str(s, "state") != "allocated" || !s["task_id"].is_number()) {
        continue;
      }
      for (const auto& [key, id] : ids_) {
        if (id == Int(s, "task_id")) {
          open.emplace_back(Int(s, "id"), shapes_[key].memory_mb);
        }
      }
    }
    if (open.empty()) return;
    const auto [slice, asked] = open[pick % open.size()];
    // Never below what the task asked for: its process holds that much.
    const std::int64_t mb = (asked + 31) / 32 * 32 + extra;
    const HttpReply r =
        http().Patch("/api/v1/slices/" + std::to_string(slice),
                     {{"memory_mb", mb}, {"reason", "chaos"}}, admin());
    if (r.status == 200) ++counters_["resize"];
    Trace("resize slice " + std::to_string(slice) + " to " +
          std::to_string(mb) + " MB -> " + std::to_string(r.status));
  }

  // Restarts the server on its database; agents follow it if the port had
  // to change.
  bool StartServer() {
    const int port = server_->port();
    const ::testing::AssertionResult started = server_->Start();
    if (!started) {
      ADD_FAILURE() << "[chaos] the server did not come back: "
                    << started.message() << "\n"
                    << TraceText();
      return false;
    }
    Trace("server restarted");
    CheckSoon();
    if (server_->port() != port) {
      for (Node& n : nodes_) {
        n.agent->set_server_url(server_->url());
        if (n.agent->running()) {
          EXPECT_TRUE(n.agent->Restart(/*kill=*/true));
        }
      }
    }
    return true;
  }

  // Plans the faults of the whole chaos phase from the seed.
  void PlanFaults() {
    const std::int64_t span = chaos_.count() * 1000;
    // 2-3 server and 4-8 agent kills per 40 s.
    const std::int64_t per40 = std::max<std::int64_t>(1, span / 40'000);
    const int server_kills = static_cast<int>(Draw(2 * per40, 3 * per40));
    for (int i = 0; i < server_kills; ++i) {
      const std::int64_t at =
          Draw(3000, std::max<std::int64_t>(3001, span - 6000));
      const std::int64_t down = Draw(300, 2500);
      At(milliseconds(at), [this, down] {
        if (!server_->running()) return;
        EXPECT_TRUE(server_->Kill());
        ++counters_["server kill"];
        Trace("SIGKILL the server, down for " + std::to_string(down) + " ms");
        At(milliseconds(down), [this] {
          if (!server_->running()) ok_ = StartServer() && ok_;
        });
      });
    }
    const int agent_kills = static_cast<int>(Draw(4 * per40, 8 * per40));
    for (int i = 0; i < agent_kills; ++i) {
      const std::int64_t at =
          Draw(1500, std::max<std::int64_t>(1501, span - 3000));
      const std::size_t node = static_cast<std::size_t>(Draw(0, 2));
      const std::int64_t down = Draw(300, 5000);
      At(milliseconds(at), [this, node, down] {
        AgentProcess& agent = *nodes_[node].agent;
        if (!agent.running()) return;
        EXPECT_TRUE(agent.Kill());
        ++counters_["agent kill"];
        Trace("SIGKILL agent " + nodes_[node].name + ", down for " +
              std::to_string(down) + " ms");
        At(milliseconds(down), [this, node] {
          AgentProcess& a = *nodes_[node].agent;
          if (a.running()) return;
          EXPECT_TRUE(a.Start());
          Trace("agent " + nodes_[node].name + " restarted");
          CheckSoon();
        });
      });
    }
  }

  // ------------------------------------------------------------ events

  void At(milliseconds after, std::function<void()> fn) {
    events_.emplace(std::make_pair(SteadyClock::now() + after, event_seq_++),
                    std::move(fn));
  }

  void RunDueEvents() {
    while (!events_.empty() &&
           events_.begin()->first.first <= SteadyClock::now()) {
      std::function<void()> fn = std::move(events_.begin()->second);
      events_.erase(events_.begin());
      fn();
    }
  }

  // Every pending event, restarts included, each at its time.
  void RunAllEvents() {
    while (!events_.empty()) {
      std::this_thread::sleep_until(events_.begin()->first.first);
      std::function<void()> fn = std::move(events_.begin()->second);
      events_.erase(events_.begin());
      fn();
    }
  }

  std::string Counters() const {
    std::string out;
    for (const auto& [name, n] : counters_) {
      out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
    }
    return out + "; " + std::to_string(checks_) + " checks, at most " +
           std::to_string(max_running_) + " tasks running at once";
  }

  std::uint64_t seed_ = 0;
  std::chrono::seconds chaos_{kDefaultChaosSeconds};
  std::mt19937_64 rng_;
  std::string run_;
  std::unique_ptr<ServerProcess> server_;
  std::vector<Node> nodes_;
  SteadyClock::time_point began_ = SteadyClock::now();

  std::map<std::string, Shape> shapes_;      // every key sent, acked or not
  std::map<std::string, std::int64_t> ids_;  // key -> acknowledged task id
  std::set<std::int64_t> cancelled_;         // acknowledged as cancelled
  // task id -> when a reply first showed it ended
  std::map<std::int64_t, SteadyClock::time_point> ended_at_;
  std::map<std::int64_t, std::string> status_;  // task id -> status last seen
  json last_slices_ = json::array();
  std::map<std::pair<SteadyClock::time_point, int>, std::function<void()>>
      events_;
  int event_seq_ = 0;
  std::deque<std::string> trace_;
  std::map<std::string, int> counters_;
  int checks_ = 0;
  std::size_t max_running_ = 0;
  bool ok_ = true;
};

TEST_F(ChaosE2eTest, AnOperatorsWorstDayKeepsEveryInvariant) {
  began_ = SteadyClock::now();
  PlanFaults();
  const SteadyClock::time_point chaos_end = began_ + chaos_;
  SteadyClock::time_point next_check = began_;
  SteadyClock::time_point next_refresh = began_;

  // ---- chaos
  while (ok_ && SteadyClock::now() < chaos_end) {
    RunDueEvents();
    if (SteadyClock::now() >= next_check) {
      if (!CheckOrFail("during the chaos")) return;
      next_check = SteadyClock::now() + kCheckEvery;
    }
    if (SteadyClock::now() >= next_refresh && server_->running()) {
      // What the server says of every task, for picking what to cancel.
      if (std::optional<json> tasks = List("/api/v1/tasks?limit=1000")) {
        for (const json& t : *tasks) Saw(Int(t, "id"), Str(t, "status"));
      }
      next_refresh = SteadyClock::now() + milliseconds(2000);
    }
    const double r = Uniform();
    if (r < 0.36) {
      CreateTask();
    } else if (r < 0.46) {
      CancelSomeTask();
    } else if (r < 0.54) {
      DeleteSomeSlice();
    } else if (r < 0.62) {
      ResizeSomeSlice();
    } else if (r < 0.64) {
      ReserveSlice();
    }
    std::this_thread::sleep_for(milliseconds(Draw(60, 260)));
  }
  ASSERT_TRUE(ok_);

  // ---- everything comes back; nothing more happens
  RunAllEvents();
  ASSERT_TRUE(ok_);
  for (Node& n : nodes_) {
    if (!n.agent->running()) {
      ASSERT_TRUE(n.agent->Start());
    }
  }
  Trace("chaos over");
  // The operator gives back the reservations.
  if (std::optional<json> live = List("/api/v1/slices?limit=1000")) {
    for (const json& s : *live) {
      if (!s["task_id"].is_null()) continue;
      EXPECT_TRUE(HasStatus(
          http().Delete("/api/v1/slices/" + Str(s, "id"), admin()), 200));
    }
  }
  std::cout << "[chaos] chaos phase over after " << Elapsed()
            << " s: " << Counters() << "\n"
            << std::flush;

  // ---- every task ends, the invariants holding all the while
  json tasks;
  std::string open;
  const SteadyClock::time_point settle_end = SteadyClock::now() + kSettleBound;
  for (;;) {
    if (!CheckOrFail("while settling")) return;
    open.clear();
    if (std::optional<json> all = List("/api/v1/tasks?limit=1000")) {
      tasks = *all;
      for (const json& t : tasks) {
        if (!Terminal(Str(t, "status"))) {
          json shown = t;
          shown.erase("env");
          open += "\n  " + shown.dump();
        }
      }
      if (open.empty()) break;
    } else {
      open = "\n  (the server does not answer)";
    }
    if (SteadyClock::now() >= settle_end) {
      FAIL() << "[chaos] LIVENESS: tasks still not ended "
             << kSettleBound.count() / 1000 << " s after the chaos:" << open
             << "\n"
             << TraceText() << Logs();
    }
    std::this_thread::sleep_for(milliseconds(500));
  }
  const double settled_at = Elapsed();

  // Nothing the server calls ended still runs.
  const std::map<std::string, RunningTask> left = ScanProcesses();
  for (const auto& [key, t] : left) {
    ADD_FAILURE() << "[chaos] LEFT OVER: every task has ended, yet key " << key
                  << " still runs: " << t.processes.front().Describe()
                  << "\n  the task: " << TaskView(t.processes.front().task_id);
  }

  // Every acknowledged task is there; every acknowledged cancel held.
  std::map<std::int64_t, std::string> final_status;
  for (const json& t : tasks) final_status[Int(t, "id")] = Str(t, "status");
  for (const auto& [key, id] : ids_) {
    EXPECT_TRUE(final_status.contains(id))
        << "[chaos] LOST: acknowledged task " << id << " (" << key << ")";
  }
  for (std::int64_t id : cancelled_) {
    EXPECT_EQ(final_status[id], "cancelled")
        << "[chaos] LOST: task " << id
        << " was acknowledged cancelled: " << TaskView(id);
  }

  // No live slice is left once GC has run (no slice of an ended task).
  json live;
  const bool released = WaitFor(
      [&] {
        std::optional<json> l = List("/api/v1/slices?limit=1000");
        if (!l) return false;
        live = *l;
        return live.empty();
      },
      kReleaseBound, milliseconds(250));
  if (!released) {
    std::string why;
    for (const json& s : live) {
      why += "\n  " + s.dump() + "\n    its task: " +
             (s["task_id"].is_number() ? TaskView(Int(s, "task_id"))
                                       : std::string("none"));
    }
    ADD_FAILURE() << "[chaos] LEAK: every task has ended, yet "
                  << kReleaseBound.count() / 1000
                  << " s later these slices are live:" << why << "\n"
                  << TraceText() << Logs();
  }

  // The ledger accounts nothing.
  const HttpReply stats = http().Get("/api/v1/slices/stats", admin());
  ASSERT_TRUE(HasStatus(stats, 200));
  for (const json& g : stats.body["gpus"]) {
    EXPECT_EQ(Int(g, "accounted_memory_mb"), 0)
        << "[chaos] the ledger still accounts memory: " << g.dump();
  }
  // The chaos was placed by hf-frag past its cold start, not by Best-Fit.
  const json& placement = stats.body["placement"];
  EXPECT_EQ(placement.value("policy", ""), "hf-frag") << placement.dump();
  EXPECT_EQ(placement.value("mode", ""), "hf-frag") << placement.dump();
  EXPECT_GE(placement.value("tasks_learned", 0), kColdStart)
      << placement.dump();
  std::cout << "[chaos] placement " << placement.dump() << "\n";

  // Every MIG partition is gone, or reported orphaned.
  std::vector<std::tuple<std::string, int, std::string>> devices;
  WaitFor(
      [&] {
        devices = MigDevices();
        return devices.empty();
      },
      milliseconds(10'000), milliseconds(250));
  if (!devices.empty()) {
    const json history =
        Api(*server_).ListAll("/api/v1/slices/history?limit=1000", admin());
    for (const auto& [node, card, uuid] : devices) {
      bool reported = false;
      for (const json& h : history) {
        reported =
            reported || (Str(h, "op") == "mig_orphaned" &&
                         Str(h, "reason").find(uuid) != std::string::npos);
      }
      EXPECT_TRUE(reported) << "[chaos] ORPHAN: MIG device " << uuid << " on "
                            << node << " GPU " << card
                            << " is owned by no live slice and not reported "
                               "MIG_PARTITION_ORPHANED";
    }
  }

  std::map<std::string, int> tiers;
  for (const json& t : tasks) {
    if (t["qos_level"].is_string()) ++tiers[Str(t, "qos_level")];
  }
  std::cout << "[chaos] seed " << seed_ << ": every task ended after "
            << settled_at << " s, done after " << Elapsed() << " s; "
            << Counters() << "; tasks bound gold " << tiers["gold"]
            << ", silver " << tiers["silver"] << ", bronze " << tiers["bronze"]
            << "\n"
            << std::flush;
}

}  // namespace
}  // namespace hf::e2e
