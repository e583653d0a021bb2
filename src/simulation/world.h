// World: the whole system in one process, on one simulated clock, for
// deterministic simulation testing (docs/ARCHITECTURE.md, "Whole-system
// simulation").
//
// What is real: the control plane (ControlPlane over a real SQLite store in
// a temporary directory, behind the real route table through LocalApi, so
// requests and replies are the same JSON as over HTTP), the node agents
// (agent::Agent with its real ServerClient over an in-process Transport),
// the ledger, the scheduler and every state machine. What is simulated is
// only the hardware seam: GPUs (gpu::SimGpuDriver), processes
// (runtime::SimHost / SimRuntime), the MPS daemon (mps::SimMpsControl), the
// network between agents and server (this file's transport: drop, delay,
// duplicate, partition) and crashes (CrashingStore for the server, dropping
// the Agent object for an agent).
//
// Nothing runs on its own thread: the control plane's periodic work (bind,
// GC) and every agent's cycle are events on the world's queue, taken in
// (time, sequence) order; one event is one step. The same seed replays the
// same steps exactly.
//
// The checks (CheckInvariants) compare the hardware's truth (which
// processes hold how much memory on which physical GPU, which MIG instances
// exist) with what the control plane claims (its live slices): see
// invariants in world.cc.
//
// Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "api/http_api.h"
#include "common/clock.h"
#include "gpu/sim_driver.h"
#include "mps/sim_mps_control.h"
#include "runtime/sim_runtime.h"
#include "server/control_plane.h"
#include "simulation/crashing_store.h"

namespace hf::simulation {

// The kinds of machine a node can be (its inventory).
enum class NodeKind {
  kMig,     // an H100 in MIG mode (gold) and an A100 80GB (silver)
  kMps,     // two A100 40GB with MPS (silver)
  kBronze,  // two T4 whose MPS daemon cannot start (bronze)
  kMixed,   // a V100 (silver) and an H100 in MIG mode (gold)
};

struct WorldOptions {
  std::uint64_t seed = 1;
  std::filesystem::path dir;  // scratch space; created, removed at the end
  std::int64_t start_ms = 1'767'225'600'000;  // 2026-01-01T00:00:00Z
  std::int64_t heartbeat_ms = 5'000;
  std::int64_t scheduler_ms = 1'000;
  std::int64_t gc_ms = 30'000;
  std::int64_t gc_min_age_ms = 30'000;
  std::int64_t mig_deadline_ms = 60'000;
  std::int64_t node_lost_ms = 600'000;
  // Holds (ControlPlaneOptions::hold_after_ms): shorter than the server's
  // default, so that the random runs' waiting tasks are held, and the holds
  // meet the faults.
  std::int64_t hold_after_ms = 20'000;
  // Several at once (ControlPlaneOptions::max_holds), so that holds meet
  // each other too.
  int max_holds = 2;
  // A MIG instance no live slice owns must be in the history as
  // MIG_PARTITION_ORPHANED within this long.
  std::int64_t orphan_report_bound_ms = 120'000;
  int tenants = 4;
  std::size_t trace_events = 60;  // the last events kept for a failure
  bool keep_dir = false;          // leave `dir` behind (to look at the store)
  // Run CheckInvariants after every step (scenario tests that stage a
  // violation on purpose check at the points they choose).
  bool check_every_step = true;
};

// How a workload task looks.
struct TaskShape {
  std::string tenant;
  int whole_gpus = 0;           // > 0: whole GPUs
  std::int64_t memory_mib = 0;  // slice
  std::optional<double> compute_ratio;
  std::int64_t duration_ms = 60'000;
  int exit_code = 0;
  // false: the task names an image but no command, which no node of the
  // world can start (every agent runs tasks as processes, which need one):
  // it must wait, never be bound (CheckInvariants, CheckSettled).
  bool command = true;
};

// Network faults between one agent and the server, as probabilities per
// request.
struct NetworkFaults {
  double drop_request = 0;
  double drop_reply = 0;
  double duplicate = 0;
  double delay = 0;  // delivered 1-20 s later; the caller times out
  // Only requests whose path contains this suffer them ("" : every one).
  std::string only_paths_containing;
};

class World {
 public:
  static StatusOr<std::unique_ptr<World>> Create(WorldOptions options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // ---- topology
  // Adds a powered-on node with a running agent; returns its index.
  StatusOr<int> AddNode(NodeKind kind);
  int node_count() const { return static_cast<int>(nodes_.size()); }
  std::string NodeName(int node) const;

  // ---- time
  std::int64_t now() const { return clock_.NowMillis(); }
  std::int64_t steps() const { return steps_; }
  // Takes the next event off the queue and runs it, then the checks.
  // Returns the first invariant violation found (and stops there).
  std::optional<std::string> Step();
  // Steps until simulated time reaches now + ms (or a violation).
  std::optional<std::string> RunFor(std::int64_t ms);
  // Runs `fn` as one step of its own at the current time (a workload or
  // fault action), then the checks.
  std::optional<std::string> Act(const std::string& what,
                                 const std::function<void()>& fn);

  // ---- users and admins (through the API; nullopt: not acknowledged)
  std::optional<std::int64_t> CreateTask(const TaskShape& shape);
  bool CancelTask(std::int64_t task_id, const std::string& tenant);
  bool DeleteSlice(std::int64_t slice_id);
  bool ResizeSlice(std::int64_t slice_id, std::int64_t memory_mib);
  bool SetTenantGroup(const std::string& tenant,
                      const std::optional<std::string>& group);
  bool Approve(const std::string& a, const std::string& b, std::int64_t ttl_s);
  bool RevokeApproval(std::int64_t id);
  std::vector<std::string> tenants() const { return tenant_names_; }
  // Approvals the world made that it has not revoked.
  std::vector<std::int64_t> ApprovalIds() const;

  // ---- faults
  // The server dies at the `writes_from_now`-th store write from now.
  void ArmServerCrash(CrashPoint point, int writes_from_now);
  // The server dies now (between requests); restarted after `down_ms`.
  void CrashServer(std::int64_t down_ms);
  bool server_up() const { return server_ != nullptr; }
  void CrashAgent(int node, std::int64_t down_ms);
  void PowerOff(int node);
  void PowerOn(int node);
  void Partition(int node, std::int64_t ms);
  void SetNetworkFaults(int node, const NetworkFaults& faults);
  // The node's task-state reports do not get through for `ms` (an
  // overloaded path, say); its other calls do.
  void StallReports(int node, std::int64_t ms);
  void LoseGpu(int node, int gpu, std::int64_t for_ms);
  void FailMigCreates(int node, int gpu, int count, StatusCode code);
  // The node's next `count` MIG creates succeed but take `ms` each: the
  // agent is busy in the driver, and its calls after it go out that much
  // later (a create that can outlast its deadline).
  void SlowMigCreates(int node, int count, std::int64_t ms);
  void StopMpsDaemon(int node, std::int64_t for_ms);
  void JumpClock(std::int64_t ms);
  // Ends every fault: partitions heal, agents and the server come back,
  // GPUs recover, MPS can start, the network is clean.
  void HealAll();

  // ---- checks
  // Hardware truth against the control plane's claims; nullopt when all
  // hold. Cheap enough to run after every step.
  std::optional<std::string> CheckInvariants();
  // Once faults have stopped: every task is terminal or running (or, where
  // no node can start it, pending and saying so), and no live slice belongs
  // to a terminal task. Nullopt when settled.
  std::optional<std::string> CheckSettled();
  // The last events, oldest first (for a failure report).
  std::vector<std::string> Trace() const;

  // ---- what the world sees (tests)
  std::mt19937_64& rng() { return rng_; }
  std::vector<store::TaskRow> Tasks();
  std::vector<store::SliceRow> LiveSlices();
  // Running processes per node (the hardware truth).
  const runtime::SimHost& host(int node) const;
  gpu::SimGpuDriver& driver(int node);
  store::Store* store() const;  // null while the server is down

  struct Counters {
    std::int64_t tasks_created = 0;
    std::int64_t server_crashes = 0;
    std::int64_t agent_crashes = 0;
    std::int64_t dropped = 0;
    std::int64_t delayed = 0;
    std::int64_t duplicated = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Node;
  struct Event {
    std::int64_t at = 0;
    std::uint64_t seq = 0;
    std::string what;
    std::function<void()> run;
  };
  struct EventLater {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };
  struct Server {
    std::unique_ptr<CrashingStore> store;
    std::unique_ptr<server::ControlPlane> cp;
    std::unique_ptr<api::LocalApi> api;
    int incarnation = 0;
  };
  class AgentTransport;
  class AgentDriver;

  explicit World(WorldOptions options);
  Status Boot();
  Status StartServer();
  void TearDownServer();
  Status StartAgent(int node);
  void StopAgent(int node);
  void Schedule(std::int64_t delay_ms, std::string what,
                std::function<void()> run);
  void AgentCycle(int node, int generation);
  void ScheduleServerWork(int incarnation);
  void RunScheduler(int incarnation);
  void RunGc(int incarnation);
  // After every step: processes end as time passes, then the checks.
  std::optional<std::string> AfterStep();
  void Note(const std::string& line);
  void SetClocks();  // the clocks the system sees, from sim_now_

  // One request to the server as a caller with `token`; nullopt when no
  // reply came (server down, or it crashed serving the request).
  std::optional<api::LocalResponse> Call(const std::string& token,
                                         const std::string& method,
                                         const std::string& target,
                                         const std::string& body);
  // After any server work: a crash that fired tears the server down.
  void ReapCrash();
  // The oracle of who may share a GPU, from the calls the world made.
  // True when `a` and `b` were allowed to share at some instant of
  // [from, to] (the same group, an approval in force, or a change whose
  // outcome a crash left unknown).
  bool MayShare(const std::string& a, const std::string& b, std::int64_t from,
                std::int64_t to) const;
  // Opens or closes the pair's group interval from group_of_ now.
  void RefreshPair(const std::string& a, const std::string& b);
  // After a restart: what the calls whose replies were lost really did.
  void ResyncSharingFromStore();

  std::optional<std::string> CheckHardware();
  std::optional<std::string> CheckCoverage();
  std::optional<std::string> CheckMig();
  std::optional<std::string> CheckDurable();
  std::optional<std::string> CheckUnstartable();

  const WorldOptions options_;
  FakeClock clock_;
  FakeClock monotonic_;  // the control plane's steady clock: sim_now_
  std::mt19937_64 rng_;
  // The event queue's time (monotonic); the clock the system sees is this
  // plus clock_offset_ (clock jumps move only the offset).
  std::int64_t sim_now_ = 0;
  std::int64_t clock_offset_ = 0;
  // (sim time, offset) at the start and after every clock jump.
  std::vector<std::pair<std::int64_t, std::int64_t>> offsets_;
  std::optional<std::string> violation_;
  std::priority_queue<Event, std::vector<Event>, EventLater> events_;
  std::uint64_t next_seq_ = 0;
  std::int64_t steps_ = 0;
  std::deque<std::string> trace_;
  Counters counters_;

  std::unique_ptr<Server> server_;
  int incarnations_ = 0;
  bool server_restart_pending_ = false;
  std::string admin_token_;
  std::map<std::string, std::string> user_tokens_;  // tenant -> token
  std::vector<std::string> tenant_names_;
  std::vector<std::unique_ptr<Node>> nodes_;

  // Sharing oracle: per unordered tenant pair, the intervals [from, to)
  // during which both were in one group (as the world's acknowledged calls
  // set them).
  std::map<std::pair<std::string, std::string>,
           std::vector<std::pair<std::int64_t, std::int64_t>>>
      group_sharing_;
  std::map<std::string, std::string> group_of_;  // tenant -> group
  // Sim time, except expires_at: the server's wall clock.
  struct Approval {
    std::string a, b;
    std::int64_t created_at = 0;
    std::int64_t expires_at = 0;
    std::int64_t revoked_at = 0;  // kForever: not revoked
  };
  std::map<std::int64_t, Approval> approvals_;
  // Sharing changes whose replies a crash lost: from when (open) and the
  // closed windows (up to the restart that told what happened).
  std::int64_t uncertain_since_ = std::numeric_limits<std::int64_t>::max();
  std::vector<std::pair<std::int64_t, std::int64_t>> uncertain_;

  // Durability: what the API acknowledged.
  struct AckedTask {
    std::string tenant;
    std::string name;
    bool cancel_acked = false;
  };
  std::map<std::int64_t, AckedTask> acked_tasks_;
  // Acknowledged tasks created without a command (TaskShape::command).
  std::set<std::int64_t> commandless_;
  std::set<std::int64_t> acked_deletes_;  // slice ids
  bool check_durable_ = false;            // after a restart

  // MIG: device UUID -> since when no live slice has owned it.
  std::map<std::string, std::int64_t> unowned_since_;
  std::set<std::string> orphans_seen_in_history_;
  // The creation time of each task the world created (by name).
  std::map<std::string, std::int64_t> created_at_;
  std::int64_t task_seq_ = 0;
};

}  // namespace hf::simulation
