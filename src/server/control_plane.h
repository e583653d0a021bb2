// The control plane's core (docs/CONTRACT.md sections 2-8): tenants, tokens,
// tasks, the scheduler's bind, releases, orphan GC, restart recovery, the
// compensation path and the MIG command channel, on top of the ledger and
// the store. The HTTP layer (src/api) parses requests into the structs
// below and renders what these methods return; it holds no state.
//
// Ordering rule (GuardedLedger, guarded_ledger.h): every change to the
// ledger is mirrored in the store, and the ledger is only changed while its
// lock (core_.mu(), `mu_` in the comments here) is held. The ledger never
// holds less than the store: a placement is reserved in the ledger before
// the store write that records it, and undone if that write fails; a
// release is applied to the ledger only after its write has committed.
// The write itself runs without `mu_` (placements and heartbeats go on
// meanwhile), inside the ledger's write gate held shared; whoever must see
// the ledger equal to the live slices in the store (CheckLedgerMatchesStore)
// holds the gate alone. A restart rebuilds the ledger from the store alone.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/gpu_compute_mode.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "ledger/ledger.h"
#include "ledger/placement_policy.h"
#include "scheduler/policy/registry.h"
#include "scheduler/qos.h"
#include "server/defrag.h"
#include "server/gc.h"
#include "server/guarded_ledger.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/leadership.h"
#include "server/mig_channel.h"
#include "server/names.h"
#include "server/node_beats.h"
#include "server/node_work.h"
#include "server/nodes.h"
#include "server/operator_slices.h"
#include "server/page.h"
#include "server/recovery.h"
#include "server/releases.h"
#include "server/scheduler.h"
#include "server/scheduler_queue.h"
#include "server/slice_env.h"
#include "server/slice_usage.h"
#include "server/tasks.h"
#include "server/telemetry.h"
#include "server/tenancy.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

using store::RowId;

struct ControlPlaneOptions {
  ComputePercent default_compute_percent = 50;  // slices with no ratio
  // scheduler/policy/registry; the default, hf-frag, learns its target
  // workload from the task history (`learned`).
  std::string policy = std::string(scheduler::kDefaultPolicyName);
  scheduler::LearnedOptions learned;
  // The ledger's node tie-break ranks (LedgerOptions::tie_break_seed): 0,
  // the lowest node id; a seed gives the simulator's seeded ranks (the
  // sim / server agreement test).
  std::uint64_t tie_break_seed = 0;
  std::int64_t gc_interval_ms = 60'000;
  std::int64_t gc_min_age_ms = 60'000;  // GC skips slices younger than this
  std::int64_t mig_command_deadline_ms = 120'000;  // then "stuck"
  int heartbeat_interval_s = 5;            // told to agents at registration
  int bind_batch = 512;                    // most tasks bound per store commit
  std::int64_t retry_interval_ms = 5'000;  // unplaceable tasks retry at least
  // A task waiting this long for room gets GPUs held for it (Scheduler;
  // 0: never), while fewer than `max_holds` tasks have a hold.
  std::int64_t hold_after_ms = 120'000;
  int max_holds = 1;
  // Every pending task is re-read from the store this often: a safety
  // sweep. Tasks other server instances create reach the leader at once
  // through the store's task feed (Store::WatchTasks) where there is one.
  std::int64_t resync_interval_ms = 30'000;
  // Several instances (issue 8): Create does not rebuild the ledger; the
  // instance is a follower until Promote() (after it won the lease).
  bool defer_recovery = false;
  // A node silent this long (no register or heartbeat, measured on
  // `monotonic_clock`) is lost: the tasks it was asked to stop are taken as
  // stopped and their slices released (RunGcOnce). Its other tasks keep
  // their slices.
  std::int64_t node_lost_ms = 600'000;
  // A heartbeat that repeats its node's last applied report is answered
  // from memory (NodeBeats); the node's stored row is written again once
  // its last write is this old (0: every heartbeat is written).
  std::int64_t heartbeat_write_every_ms = 15'000;
  // Measures node silence; never jumps with the wall clock. Null: the
  // process's steady clock. Must outlive the ControlPlane.
  const Clock* monotonic_clock = nullptr;
  // Defragmentation plans (docs/CONTRACT.md section 10): how often applying
  // plans advance, and how long a proposed plan may wait before it expires.
  std::int64_t defrag_tick_ms = 200;
  std::int64_t defrag_plan_ttl_ms = 900'000;
  // Automatic mode (off by default): when a node's fragmentation is at
  // least the threshold and a pending task would fit there after a plan,
  // the leader proposes and applies one, at most one per interval.
  bool defrag_auto = false;
  double defrag_auto_threshold = 0.5;
  std::int64_t defrag_auto_interval_ms = 60'000;
  // Agents waiting for work (GET /api/v1/nodes/{node}/work) at once; each
  // holds an HTTP worker, so keep it well below the server's workers. Past
  // it a wait returns at once and the agent cycles on its interval.
  int max_work_waiters = 64;
  // Tests: places with this policy instead of `policy` (which must still
  // name a registered one). Must outlive the ControlPlane.
  const ledger::PlacementPolicy* policy_for_testing = nullptr;
};

struct SliceQuery {
  std::optional<std::string> node;
  std::optional<int> gpu_index;
  std::optional<store::SliceState> state;  // none: live slices
  bool all_states = false;
  RowId after_id = 0;
  int limit = 100;
};

// The node endpoints' messages, shared with hf-agent (src/wire).
using wire::GpuReport;
using wire::HeartbeatReply;
using wire::HookReport;
using wire::MigResult;
using wire::NodeReport;
using wire::QuotaDirective;
using wire::ReportNumber;
using wire::RunningTask;
using wire::TaskStateReport;

// A GPU where a live slice would be admitted now (ControlPlane::SliceTargets,
// for GET /api/v1/advice).
struct SliceTarget {
  std::string node;  // the node's name
  int gpu_index = 0;
  int slices = 0;  // live slices on it now
  // In MIG mode: the partition the slice would get there; "" otherwise.
  std::string mig_profile;
};

// What a node's agent must do (GET /api/v1/nodes/{node}/assignments), from
// one snapshot: start `run`; stop `cancel` (cancelled, or their slice was
// deleted) and report them; keep `bound` running. A task the node runs that
// is in neither `bound` nor `cancel` is not the node's (terminal, unknown,
// or bound elsewhere) and is stopped.
struct Assignments {
  std::vector<store::TaskRow> run;  // scheduled here, to start
  std::vector<RowId> cancel;        // to stop, then report
  std::vector<RowId> bound;         // every task the node should run
  std::map<RowId, RowId> slices;    // task id -> its slice, for reports
};

struct GpuStats {
  std::string node;
  int index = 0;
  std::string uuid;
  std::string model;
  std::string vendor;
  bool lost = false;
  bool mig_capable = false;
  bool mps_capable = false;
  std::string qos_level;  // the tier a new slice here would get
  std::int64_t total_memory_mib = 0;
  std::int64_t accounted_memory_mib = 0;
  int accounted_compute_percent = 0;
  int slices = 0;
  bool whole_owned = false;
  std::vector<std::string> tenants;
};

// The GPUs held for a task that waited long (Scheduler), as stats show them.
struct HoldStats {
  RowId task_id = 0;
  std::string node;
  std::vector<int> gpu_indices;
  store::Millis since = 0;
};

struct SliceStats {
  bool cluster_scope = true;  // false: narrowed to `tenant`
  std::string tenant;
  int nodes = 0;
  int gpus = 0;
  int live_slices = 0;
  std::int64_t total_memory_mib = 0;
  std::int64_t accounted_memory_mib = 0;
  std::int64_t free_memory_mib = 0;
  std::int64_t largest_placeable_slice_mib = 0;  // 0 in tenant scope
  int pending_tasks = 0;
  std::vector<GpuStats> per_gpu;
  // Cluster scope only: the placement policy and, for the learned hf-frag,
  // whether it still places with Best-Fit (cold start) and how many tasks
  // its target workload has seen.
  std::string policy;
  bool policy_learns = false;
  bool policy_cold_start = false;
  std::int64_t policy_tasks_learned = 0;
  // Cluster scope only: the GPUs held for waiting tasks, in the order the
  // holds began.
  std::vector<HoldStats> holds;
};

class ControlPlane : private LeaderWriter,
                     private TenancyLedger,
                     private TaskHost,
                     private MigChannelHost,
                     private GcHost,
                     private SchedulerHost,
                     private DefragHost,
                     private OperatorSlicesHost {
 public:
  // `store`, `clock` and `fence` must outlive the ControlPlane. Rebuilds
  // the ledger from the store (restart recovery) before returning, unless
  // options.defer_recovery. With a `fence` (several instances), every write
  // that changes the ledger or does leader work (bind, release, GC, MIG
  // commands, inventory, tenancy) first asks fence->MayAct() and runs
  // fence->CheckInTxn inside its transaction, so a stale leader's write
  // aborts (Unavailable). Without one, this instance is the only one.
  static StatusOr<std::unique_ptr<ControlPlane>> Create(
      store::Store* store, const Clock* clock, ControlPlaneOptions options,
      const WriteFence* fence = nullptr);
  ~ControlPlane() override;

  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Starts / stops the scheduler and GC threads. Stop is idempotent.
  void Start();
  void Stop();
  // This instance won the leader lease: rebuilds the ledger from the store
  // (restart recovery, docs/CONTRACT.md section 5), then Start(). Nothing is
  // bound before the rebuild is complete. REQUIRES: created with
  // options.defer_recovery; called at most once (a demoted leader exits).
  Status Promote();

  // --- identity (Identity, server/identity.h) ---
  // Unauthenticated for an unknown or revoked token.
  StatusOr<Caller> Authenticate(std::string_view secret);
  // With `secret`: makes it a valid admin token (idempotent). Without: on a
  // database with no admin token yet, creates one and returns its secret
  // (nullopt when an admin token already exists).
  StatusOr<std::optional<std::string>> BootstrapAdmin(
      const std::optional<std::string>& secret);

  // --- tenants, groups, tokens (admin; Tenancy, server/tenancy.h; tokens:
  // Identity) ---
  StatusOr<store::TenantRow> CreateTenant(
      const Caller& caller, const std::string& name,
      const std::optional<std::string>& group);
  StatusOr<std::vector<store::TenantRow>> ListTenants(const Caller& caller);
  StatusOr<store::TenantRow> GetTenant(const Caller& caller,
                                       const std::string& name);
  StatusOr<store::TenantRow> SetTenantGroup(
      const Caller& caller, const std::string& name,
      const std::optional<std::string>& group);
  StatusOr<store::GroupRow> CreateGroup(const Caller& caller,
                                        const std::string& name);
  StatusOr<std::vector<store::GroupRow>> ListGroups(const Caller& caller);
  // Returns the deleted group; its former members share with nobody.
  StatusOr<store::GroupRow> DeleteGroup(const Caller& caller,
                                        const std::string& name);
  // Returns the row and the secret (shown once). `node` binds a node token
  // to one node name.
  StatusOr<std::pair<store::TokenRow, std::string>> CreateToken(
      const Caller& caller, store::Role role,
      const std::optional<std::string>& tenant, const std::string& description,
      const std::optional<std::string>& node = std::nullopt);
  StatusOr<std::vector<store::TokenRow>> ListTokens(const Caller& caller);
  StatusOr<store::TokenRow> RevokeToken(const Caller& caller, RowId id);

  // --- cross-tenant sharing approvals (admin; docs/CONTRACT.md section 7;
  // Tenancy) ---
  StatusOr<store::ApprovalRow> CreateApproval(const Caller& caller,
                                              const ApprovalCreate& request);
  StatusOr<std::vector<store::ApprovalRow>> ListApprovals(const Caller& caller);
  StatusOr<store::ApprovalRow> RevokeApproval(const Caller& caller, RowId id);

  // --- tasks ---
  StatusOr<store::TaskRow> CreateTask(const Caller& caller, TaskCreate task);
  StatusOr<store::TaskRow> GetTask(const Caller& caller, RowId id);
  StatusOr<Page<store::TaskRow>> ListTasks(const Caller& caller,
                                           const TaskQuery& query);
  StatusOr<store::TaskRow> CancelTask(const Caller& caller, RowId id);
  // Up to `limit` bytes of the task's log from `offset`; 404 as GetTask.
  StatusOr<TaskLog> ReadTaskLog(const Caller& caller, RowId id,
                                std::int64_t offset, std::int64_t limit);

  // --- slices ---
  // NotFound for a slice the caller may not see.
  StatusOr<store::SliceRow> GetSlice(const Caller& caller, RowId id) override;
  StatusOr<Page<store::SliceRow>> ListSlices(const Caller& caller,
                                             const SliceQuery& query);
  StatusOr<SliceStats> Stats(const Caller& caller);
  // Pages for clients: from `after` in store::ListPosition order (the
  // history's f.after unset: from the beginning).
  StatusOr<Page<store::HistoryRow>> History(const Caller& caller,
                                            const store::HistoryFilter& f);
  // Operator reservations, DELETE and resizes (OperatorSlices,
  // server/operator_slices.h). A resize is persisted with the task's slice
  // env; the agent learns it from its next heartbeat reply and sets it in
  // the task's hook region.
  StatusOr<store::SliceRow> CreateSlice(const Caller& caller,
                                        const SliceCreate& request) {
    return operator_slices_.Create(caller, request);
  }
  StatusOr<store::SliceRow> DeleteSlice(const Caller& caller, RowId id,
                                        const std::string& reason) {
    return operator_slices_.Delete(caller, id, reason);
  }
  StatusOr<SliceResize> ResizeSlice(const Caller& caller, RowId id,
                                    const SliceResizeRequest& request) {
    return operator_slices_.Resize(caller, id, request);
  }
  // The hook usage last reported for slice `id`, if any.
  std::optional<HookUsage> SliceHookUsage(RowId id);
  // Slice `id`'s stored usage over time (store::ListSliceUsageHistory:
  // reported_at >= since, the newest `limit`, oldest first), read from the
  // database so any instance answers; NotFound as GetSlice. Rows that do
  // not read are left out.
  StatusOr<std::vector<HookUsage>> SliceUsageHistory(const Caller& caller,
                                                     RowId id,
                                                     store::Millis since,
                                                     int limit);
  // The GPUs other than its own that would take live slice `id` now, as it
  // is (its tenant, memory, compute share and its task's GPU models), by
  // the ledger's admission rules (ClusterView::CheckSlice: health, models,
  // tenancy, whole-GPU holds, memory, compute, MIG geometry), without the
  // GPUs the scheduler leaves out (fenced, MIG GPUs taking no new
  // partition). Ascending (node, index). Changes nothing (but withdraws
  // expired approvals, as every placement does first); NotFound for a slice
  // that is not live on one GPU. Needs the ledger (the leader).
  StatusOr<std::vector<SliceTarget>> SliceTargets(RowId id);
  // The same for several slices at once, in one pass over the GPUs (one
  // store read, one critical section): by slice id; a slice that is not
  // live on one GPU is left out.
  StatusOr<std::map<RowId, std::vector<SliceTarget>>> SliceTargets(
      const std::vector<RowId>& ids);
  StatusOr<Page<store::SliceRequestRow>> ListSliceRequests(
      const Caller& caller, const store::SliceRequestFilter& f);

  // --- defragmentation plans (admin; docs/CONTRACT.md section 10; Defrag,
  // server/defrag.h) ---
  StatusOr<nlohmann::json> ProposeDefrag(const Caller& caller,
                                         const DefragPlanCreate& request) {
    return defrag_.Propose(caller, request);
  }
  StatusOr<nlohmann::json> ApplyDefrag(const Caller& caller, RowId id) {
    return defrag_.Apply(caller, id);
  }
  StatusOr<nlohmann::json> CancelDefrag(const Caller& caller, RowId id) {
    return defrag_.Cancel(caller, id);
  }
  StatusOr<std::vector<nlohmann::json>> ListDefrag(const Caller& caller) {
    return defrag_.List(caller);
  }
  StatusOr<nlohmann::json> GetDefrag(const Caller& caller, RowId id) {
    return defrag_.Get(caller, id);
  }
  // Advances every applying plan by at most one step; the defrag thread
  // does every defrag_tick_ms.
  Status DefragTickOnce() { return defrag_.TickOnce(); }
  // Automatic mode's pass (ControlPlaneOptions::defrag_auto): proposes and
  // applies at most one plan for a pending task. Returns the plan's id, or
  // 0 when none was needed or found.
  StatusOr<RowId> DefragAutoOnce() { return defrag_.AutoOnce(); }

  // --- nodes and agents (registration, heartbeats, node views: Nodes,
  // server/nodes.h; assignments, task states, logs: server/agent_tasks.cc)
  StatusOr<AppliedNodeReport> RegisterNode(const Caller& caller,
                                           const NodeReport& report) {
    return nodes_.Register(caller, report);
  }
  StatusOr<HeartbeatReply> Heartbeat(const Caller& caller,
                                     const NodeReport& report,
                                     const std::vector<RunningTask>& tasks) {
    return nodes_.Heartbeat(caller, report, tasks);
  }
  StatusOr<Assignments> GetAssignments(const Caller& caller,
                                       const std::string& node);
  // Waits, up to `timeout`, until the server has new work for `node`
  // (NodeWork): its generation differs from `after`. The caller must be
  // the node's agent, as for its assignments.
  StatusOr<NodeWork::Waited> WaitForNodeWork(const Caller& caller,
                                             const std::string& node,
                                             std::uint64_t after,
                                             std::chrono::milliseconds timeout);
  // Every wait for work returns at once, now and later (shutdown).
  void ReleaseWorkWaits() { node_work_.Stop(); }
  StatusOr<int> ReportTaskStates(const Caller& caller, const std::string& node,
                                 const std::vector<TaskStateReport>& states);
  StatusOr<std::vector<store::SliceRequestRow>> ClaimSliceRequests(
      const Caller& caller, const std::string& node);
  StatusOr<store::SliceRequestRow> ReportSliceRequest(const Caller& caller,
                                                      RowId id,
                                                      const MigResult& result);
  // Whether `caller` may report on slice request `id` (MigChannel).
  Status CheckSliceRequestReporter(const Caller& caller, RowId id);
  // An agent ships a task's output: `data` at `offset` (bytes the server
  // already holds are skipped, so a retry is harmless; a gap is
  // InvalidArgument). Returns the log size the server holds afterwards.
  // Past kMaxTaskLogBytes the rest is dropped (the size stops growing).
  StatusOr<std::int64_t> AppendTaskLog(const Caller& caller,
                                       const std::string& node, RowId task_id,
                                       std::int64_t offset,
                                       std::string_view data);
  StatusOr<std::vector<NodeView>> ListNodes(const Caller& caller) {
    return nodes_.List(caller);
  }
  StatusOr<NodeView> GetNode(const Caller& caller, const std::string& name) {
    return nodes_.Get(caller, name);
  }

  // --- background work, also callable directly (tests, benchmarks) ---
  // Binds up to one batch of pending tasks; returns how many were bound.
  // `more` (optional) is set when the batch was full: call again at once.
  StatusOr<int> BindPendingOnce(bool* more = nullptr) {
    return scheduler_.BindPendingOnce(more);
  }
  // One turn of the scheduler loop: the periodic rescan of pending tasks in
  // the store when it is due (ControlPlaneOptions::resync_interval_ms),
  // then one bind pass. The loop thread calls it; so does the whole-system
  // simulation, which drives the control plane on its own clock instead of
  // Start()ing its threads.
  StatusOr<int> SchedulerPass(bool* more = nullptr) {
    return scheduler_.Pass(more);
  }
  // Releases orphaned slices and marks stuck MIG commands; returns the
  // number of slices released.
  StatusOr<int> RunGcOnce();
  // Checks that the ledger equals the live slices in the store.
  Status CheckLedgerMatchesStore();

  // --- names for rendering (Names, server/names.h; cached; "" when
  // unknown) ---
  std::string TenantName(RowId id);
  std::string NodeName(RowId id);
  std::string GroupName(RowId id);
  std::string GpuUuid(RowId node_id, int index) override;

  const ControlPlaneOptions& options() const { return options_; }
  store::Store* store() const { return store_; }

  // --- metrics (docs/METRICS.md) ---
  Telemetry& telemetry() { return *telemetry_; }
  // The series a scrape builds from the ledger and the store: per-GPU
  // capacity, the largest slice each GPU could take, fragmentation, node
  // heartbeat ages, stuck MIG commands, plus Telemetry::CollectState. Holds
  // the ledger's lock only to copy the per-GPU figures. A follower (no
  // ledger) returns only what it knows without one.
  metrics::Families CollectMetrics();

 private:
  ControlPlane(store::Store* store, const Clock* clock,
               ControlPlaneOptions options,
               std::unique_ptr<ledger::Ledger> ledger,
               scheduler::MadePolicy policy, const WriteFence* fence);

  // LeaderWriter, for every unit: store_->Write, fenced when there is a
  // fence (see Create); Unavailable without running `fn` when this
  // instance may not act.
  Status LeaderWrite(const WriteFn& fn) override;
  // A releasing write: written with the write gate shared and without
  // mu_; the releases reach the ledger (under mu_) after the commit and
  // after `committed`.
  StatusOr<int> WriteReleases(const ReleasingFn& fn,
                              const std::function<void()>& committed) override
      HF_EXCLUDES(core_.mu());
  using LeaderWriter::WriteReleases;

  Status Recover();  // REQUIRES: called once, before any other use
  Status EnsureDefaultTenant();

  // TenancyLedger: a tenancy change committed (Tenancy); each takes mu_.
  Status GroupCreated(const store::GroupRow& group) override
      HF_EXCLUDES(core_.mu());
  Status TenantChanged(const store::TenantRow& tenant) override
      HF_EXCLUDES(core_.mu());
  Status GroupDeleted(RowId group, const std::vector<RowId>& members) override
      HF_EXCLUDES(core_.mu());
  Status ApprovalGranted(const store::ApprovalRow& approval) override
      HF_EXCLUDES(core_.mu());
  Status ApprovalRevoked(RowId approval) override HF_EXCLUDES(core_.mu());

  void ApplyReleasesLocked(const std::vector<RowId>& released)
      HF_REQUIRES(core_.mu());
  Status ReleaseTaskSliceInTxn(store::Txn& txn, const store::TaskRow& task,
                               const std::string& actor,
                               const std::string& reason,
                               std::vector<RowId>& released) override {
    return releases_.ReleaseTaskSliceInTxn(txn, task, actor, reason, released);
  }
  // TaskHost (Tasks): the rest of its part.
  bool Scheduling() const override { return recovered_.load(); }
  void TaskQueued(const store::TaskRow& task) override { queue_.Created(task); }

  // Builds the env input of `slice`, bound to `task` (whose
  // gpu_compute_mode the env names).
  SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                            const store::TaskRow& task) override;

  // MigChannelHost.
  StatusOr<store::NodeRow> NodeForAgent(const Caller& caller,
                                        const std::string& node) override {
    return nodes_.NodeForAgent(caller, node);
  }

  // SchedulerHost, TaskHost, DefragHost, OperatorSlicesHost: wakes the
  // node's agent.
  void NodeHasWork(RowId node) override { node_work_.Changed(node); }

  void GcLoop();
  // GcHost, and the task-state reports (agent_tasks.cc).
  StatusOr<bool> LandMoveInTxn(store::Txn& txn, store::TaskRow& task,
                               RowId slice, bool rebind,
                               std::vector<RowId>& released) override {
    return defrag_.LandMoveInTxn(txn, task, slice, rebind, released);
  }

  store::Store* const store_;
  const Clock* const clock_;
  const ControlPlaneOptions options_;
  SteadyClock steady_;
  const Clock* const monotonic_;   // options_.monotonic_clock or &steady_
  const WriteFence* const fence_;  // null: the only instance
  const std::unique_ptr<Telemetry> telemetry_ = std::make_unique<Telemetry>();
  // The ledger holds the store's state (recovered): a follower's is empty,
  // and a follower queues no created task for a scheduler it does not run.
  std::atomic<bool> recovered_{false};

  // When each node last registered or heartbeat (monotonic_ ms; a node
  // not heard from since this server started counts from its start), and
  // the report last applied for it. Its own lock (order: mu_, then it).
  NodeBeats beats_;
  // The MIG command channel, with the partitions the agents report, the
  // orphaned ones, and the MIG GPUs that take no new gold slice (its
  // MigBook: its own lock; order: mu_, then it). Calls this
  // (MigChannelHost) without holding a lock.
  MigChannel mig_channel_;
  // How a slice's release is written (no state of its own).
  Releases releases_;
  // Orphaned slices, lost nodes, stuck MIG commands (no state of its own;
  // calls this, as GcHost, without holding a lock).
  Gc gc_;
  // The hook usage reported per live slice (rendered without mu_). Its own
  // lock (order: mu_, then it).
  SliceUsage usage_;
  // Per node, whether the server has new work for its agent since it
  // last looked, and the agents waiting for it. Its own lock, a leaf.
  NodeWork node_work_{options_.max_work_waiters};

  // Tenant, node and group names, and the card the ledger holds at each
  // (node, index): slices, commands and a slice's env (built inside store
  // writes) are rendered without mu_. Its own lock (order: mu_, then it).
  Names names_;
  // Tokens and the token cache. Its own lock, held alone.
  Identity identity_;
  // Tenants, groups and approvals as stored; tells the ledger (this, as
  // TenancyLedger) after each commit. Its own lock, taken before mu_.
  Tenancy tenancy_;
  // The task API (tasks as stored); asks this (TaskHost) to queue and to
  // release. No state of its own.
  Tasks tasks_;

  // What the next bind pass must read (tasks created, committed
  // elsewhere, a rescan), the capacity generation, and the threads' stop
  // signal. Its own lock, a leaf.
  SchedulerQueue queue_;
  // The ledger with its inventory mirror, its side of tenancy and how
  // placements ask it, behind its lock (core_.mu(), "mu_" in the comments
  // here) and its write gate (core_.write_gate(): shared by every write
  // that changes the store and then the ledger, or the ledger, the store
  // and the ledger again; held alone to see both settled; taken before
  // mu_, never while holding it).
  GuardedLedger core_;
  // The bind pass and its loop, with the tasks waiting to be bound (its
  // own lock, taken before the write gate); calls this, as
  // SchedulerHost, holding no lock or mu_ only.
  Scheduler scheduler_;
  // Registration and heartbeats, the compensation path, the hook's
  // reports (one registration of a node at a time: its lock, taken before
  // the write gate).
  Nodes nodes_;
  // Operator reservations, DELETE and resizes (one resize at a time: its
  // lock, taken before the write gate).
  OperatorSlices operator_slices_;
  // Defragmentation plans and automatic mode (no state of its own: the
  // store holds the plans; reserves under mu_, writes without it).
  Defrag defrag_;
  // Restart recovery: rebuilds core_ from the store (holds mu_ across its
  // reads and writes: nothing else runs meanwhile).
  Recovery recovery_;

  std::thread scheduler_thread_;
  std::thread gc_thread_;
  std::thread defrag_thread_;
  // Start / Stop, one at a time: whether the threads run.
  Mutex run_mu_;
  bool started_ HF_GUARDED_BY(run_mu_) = false;
  // The store's task feed while this instance leads (Store::WatchTasks;
  // null on SQLite). Set once, by recovery; declared last: stopped first on
  // destruction, while what its callback touches is still there.
  std::unique_ptr<store::TaskFeed> task_feed_;
};

}  // namespace hf::server
