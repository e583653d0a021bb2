// Agent: the node agent's loop (docs/CONTRACT.md sections 2, 3, 8, 9). Each
// cycle it
//   1. probes the GPUs afresh (GpuDriver) and supervises the MPS control
//      daemon (MpsControl::Ensure), deriving mig_capable / mps_capable;
//   2. registers, then heartbeats with the tasks it runs (the server's
//      compensation path covers running tasks it holds no slice for);
//   3. claims MIG commands and carries them out: the GPU's UUID is checked
//      first; a destroy waits until the task's processes are gone, is
//      idempotent, and an instance left behind is reported orphaned;
//   4. starts the tasks the server assigns (env from the server, GPU or MIG
//      pinning, the MPS pipe for silver slices, the hook for non-MIG
//      slices, with the slice's hook region) and stops the ones it cancels;
//   5. reports every task that ended, ships its output, and only then
//      forgets it (and removes its hook region).
// The hook region (src/hook/region.h, docs/HOOK.md): for every task it
// preloads the hook into, the agent creates STATE/hook/slice-<id>.region
// holding the slice's memory quota and compute share, hands its path to the
// task (HETEROFLOW_HOOK_REGION), reports the region's counters in every
// heartbeat (the server lists "hook" in the slice's enforcement once a
// process attached, and only while the agent proves every process of the
// task that uses the GPU attached: HookProof, which also measures into the
// region the memory the hook does not count) and sets the quota the
// server's heartbeat reply names (dynamic quota, docs/CONTRACT.md section 13)
// without restarting the task.
// Nothing important lives only in memory: tasks are found again through the
// runtime after a restart (Runtime::Adopt), their regions are reopened
// (never recreated: that would forget the usage), claimed MIG commands are
// kept in the state directory, and log offsets are asked of the server.
//
// Thread-safety: RunOnce/Run from one thread; Stop from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/hook_proof.h"
#include "agent/interference.h"
#include "agent/server_client.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "gpu/gpu_driver.h"
#include "hook/gpu_region.h"
#include "hook/region.h"
#include "hook/share_feedback.h"
#include "metrics/metrics.h"
#include "mps/mps_control.h"
#include "runtime/runtime.h"
#include "wire/node_wire.h"

namespace hf::agent {

using nlohmann::json;

// Node-level facts the heartbeat carries besides the GPUs.
struct HostFacts {
  bool containerized = false;
  std::int64_t cpu_milli = 0;
  std::int64_t host_memory_mib = 0;
};

// What this machine looks like from inside: in a container (/.dockerenv,
// /run/.containerenv, or a container runtime in PID 1's cgroup), its CPUs
// and memory.
HostFacts ProbeHost();

struct AgentOptions {
  std::string node_id;
  std::string agent_version;
  std::filesystem::path state_dir;  // required; created when missing
  std::chrono::milliseconds heartbeat_interval{5000};
  // Between heartbeats, how often Run looks for a task that ended, to run
  // the next cycle at once (its slice goes back to the server then, not at
  // the next heartbeat); zero: only at heartbeats. Only with a runtime
  // whose Poll is cheap (runtime::Runtime::PollIsCheap: processes, not
  // Docker, where a poll is an engine call per task).
  std::chrono::milliseconds exit_poll_interval{250};
  // SIGTERM to SIGKILL when the server cancels a task.
  std::chrono::milliseconds kill_grace{10'000};
  // How long a MIG destroy waits for the task's processes to be gone before
  // reporting the partition orphaned.
  std::chrono::milliseconds mig_destroy_wait{60'000};
  // How long a silver task waits for a dead MPS daemon to come back before
  // it is failed (it is never run without its limits).
  std::chrono::milliseconds mps_wait{60'000};
  // The hook library (libhfhook.so) for every slice that is not a MIG
  // partition; empty: none (the node reports hook_available=false).
  std::string hook_library;
  // How the hook reaches a container's processes (runtime::PreloadRoute;
  // host processes always get LD_PRELOAD). With a file route the agent
  // writes STATE/ld.so.preload naming hook_library; the Docker runtime
  // mounts it read-only at /etc/ld.so.preload. docs/HOOK.md says which to
  // use when.
  runtime::PreloadRoute hook_preload = runtime::PreloadRoute::kBoth;
  // How long a process of a hooked slice may use its GPU (NVML's process
  // list) before it must have attached to the slice's region; past it the
  // slice's enforcement loses "hook" (agent/hook_proof.h).
  std::chrono::milliseconds hook_attach_grace{5000};
  // Where the processes are read (/proc; tests may point elsewhere).
  std::filesystem::path proc_root = "/proc";
  std::size_t log_chunk_bytes = std::size_t{256} * 1024;
};

class Agent {
 public:
  // Every pointer must outlive the Agent; `mps` may be null (no MPS on this
  // node). Fails on a missing state dir option or when it cannot be made.
  static StatusOr<std::unique_ptr<Agent>> Create(
      AgentOptions options, ServerClient* server, gpu::GpuDriver* driver,
      runtime::Runtime* runtime, mps::MpsControl* mps, HostFacts host,
      const Clock* clock);

  // One cycle. Errors talking to the server are returned (the caller logs
  // them and tries again next cycle); local failures are reported to the
  // server where they belong (a task that cannot start fails).
  Status RunOnce();

  // Cycles every heartbeat interval until Stop. Returns the last error that
  // means "do not retry" (a revoked token, a node name another token owns).
  // With a work waiter (SetWorkWaiter), a thread of its own keeps a wait
  // for the node's work open on the server (GET .../work) and the next
  // cycle runs as soon as the server has some.
  Status Run();
  void Stop();
  // A second client of the same server (its own connection: a wait holds
  // it up to kWorkWaitS seconds), used by Run's waiter thread only. Must
  // outlive Run; null (the default): cycles on the interval alone.
  void SetWorkWaiter(ServerClient* waiter) { work_waiter_ = waiter; }
  // How long one wait for work is held on the server.
  static constexpr int kWorkWaitS = 20;

  // The node report (register body) of the last probe.
  json last_report() const { return wire::ToJson(report_, true); }
  // The agent's Prometheus series (docs/METRICS.md): per slice from its
  // hook region (read live) and the last cycle's share feedback, per GPU
  // from the last probe. Safe to call from any thread.
  metrics::Families CollectMetrics() const;

  // Probes the GPUs and MPS now, talks to no server, and returns the report
  // (`hf-agent --probe`).
  json ProbeOnly() {
    Probe();
    return wire::ToJson(report_, true);
  }

 private:
  struct LocalTask {
    std::vector<int> gpu_indices;
    bool reported_running = false;
    bool cancel_requested = false;  // we stop it because the server said so
    std::optional<runtime::TaskStatus> finished;
    std::int64_t log_offset = -1;  // what the server holds; -1: ask
    bool log_done = false;         // the server's cap was reached
    std::int64_t slice_id = 0;
    // The slice's hook region (shared with the task's processes), when the
    // hook was preloaded into the task; null otherwise.
    std::shared_ptr<hook::Region> region;
    std::filesystem::path region_path;
  };
  // A MIG command the agent holds until the server has its result. Each
  // command is carried out at most once: its outcome is written down
  // before it is reported, and a create that was under way when the agent
  // died is found again by the partition it left (`before`).
  // NOLINTNEXTLINE(bugprone-exception-escape): json() does not throw
  struct PendingMig {
    json command;
    std::int64_t first_seen_ms = 0;
    bool executing = false;           // a create was started
    std::vector<std::string> before;  // the GPU's partitions before it
    json outcome;                     // the result to report; null: none yet
  };
  // A partition this agent made, by slice id (what a destroy with no
  // device id removes: the cleanup after a create's deadline passed).
  struct MadePartition {
    int gpu_index = 0;
    std::string device_uuid;
  };

  Agent(AgentOptions options, ServerClient* server, gpu::GpuDriver* driver,
        runtime::Runtime* runtime, mps::MpsControl* mps, HostFacts host,
        const Clock* clock);

  Status Cycle();  // RunOnce's work
  // Waits until the next cycle is due: `heartbeat_interval` after `start`,
  // or sooner when a task ended (exit_poll_interval). True when Stop was
  // called.
  bool WaitForNextCycle(std::chrono::steady_clock::time_point start);
  // Run's waiter thread: waits for the node's work on the server and sets
  // work_ready_ when it moved, until stop_ or waiter_done_.
  void WaitForWorkLoop();
  // Notes the tasks this agent tracks as running that have ended (runtime
  // Poll, as ReportFinished does); whether there was one.
  bool NoteEndedTasks();
  // Polls running task `task_id` once and notes in `task` how it ended (one
  // the runtime no longer holds: lost); whether it has. The poll's error
  // otherwise.
  StatusOr<bool> NoteIfEnded(std::int64_t task_id, LocalTask& task);
  // Copies what CollectMetrics reports out of the cycle's state.
  void SnapshotMetrics();
  Status Adopt();
  void Probe();
  Status RegisterOrHeartbeat();
  Status HandleMigCommands();
  // True when the command is finished (reported) and can be dropped.
  StatusOr<bool> HandleMigCommand(PendingMig& pending);
  // Carries out a create once (or finds the partition an interrupted one
  // made) and writes the outcome down; the result to report.
  json CreateMigOnce(PendingMig& pending, int index, std::int64_t slice_id);
  // The placement a create command asks for (`placement_start` with its
  // profile's size on GPU `index`), or nullopt: the driver's choice.
  std::optional<gpu::MigPlacement> PlacementOf(
      const json& cmd, int index, const std::string& profile) const;
  Status HandleAssignments();
  // Stops every task this node runs that the server's assignments do not
  // name (terminal, unknown, or bound elsewhere), as a kubelet syncs pods.
  void Reconcile(const json& reply);
  Status StartTask(const json& task);
  Status ReportFinished();
  Status ShipLogs(std::int64_t task_id, LocalTask& task, bool drain);
  // `slice_id` > 0 names the binding the report is about.
  Status ReportState(std::int64_t task_id, std::int64_t slice_id,
                     TaskState state, std::optional<int> exit_code,
                     const std::string& message);
  void LoadPendingMig();
  void SavePendingMig();
  // Reports a task it will not start as failed, and remembers it (in
  // STATE/gave-up.json) so that binding is never started later: the
  // report may still be on its way when the server assigns it again.
  Status GiveUp(std::int64_t task_id, std::int64_t slice_id,
                const std::string& message);
  void LoadGaveUp();
  void SaveGaveUp();
  // Counts this start in STATE/report-epoch.json: the epoch of its reports.
  void StartReportEpoch();
  // The number of the next register or heartbeat.
  wire::ReportNumber NextReportNumber();
  // A reply saying the report was not applied because the server applied a
  // newer one: an epoch at or above ours is an earlier life of this node
  // (its state directory wiped), and the next epoch starts above it.
  void NoteReportReply(const wire::HeartbeatReply& reply);
  // STATE/<name>, replaced atomically (a temporary file and a rename).
  void SaveStateFile(const std::string& name, const json& content);
  // STATE/hook/slice-<id>.region (absolute).
  std::filesystem::path RegionPath(std::int64_t slice_id) const;
  // Opens (creating it when missing) the region of a task about to start,
  // with the quota and compute share of its slice env; an existing file (a
  // task the runtime already held) keeps its usage and gets the quota.
  StatusOr<std::shared_ptr<hook::Region>> OpenRegionForStart(
      const std::filesystem::path& path, const runtime::StringMap& env);
  // After a restart: reopens the regions of adopted tasks (never creating
  // one) and removes region files no adopted task uses.
  void AdoptRegions();
  // Unmaps and deletes a finished task's region.
  void RemoveRegion(LocalTask& task);
  // The heartbeat's "hook" report for a task with a region.
  static wire::HookReport ReadHookReport(const hook::Region& region);
  // Proves that every process of each hooked task that uses its GPU runs
  // under the hook, and measures into the regions what the hook does not
  // count (HookProof::Check).
  void CheckHookProof();
  // Asks the driver, once per cycle and GPU with a hooked single-GPU task,
  // which processes used the GPU since the last cycle (process_samples_):
  // the share feedback and the interference meter read the same answer.
  void SampleProcesses();
  // Corrects the compute shares on each GPU with NVML's per-process
  // utilisation since the last cycle (hook::ShareFeedback): GPU time a
  // slice used outside its turns is charged to it. After CheckHookProof,
  // whose attribution of processes to tasks it uses.
  void FeedShares();
  // Feeds each hooked slice's kernel samples to the interference meter,
  // with whether anything else used its GPU since the last round.
  void MeasureInterference();
  // Sets the quotas the server's heartbeat reply names on their regions.
  void ApplyQuotas(const wire::HeartbeatReply& reply);
  const gpu::GpuInfo* GpuAt(int index) const;

  const AgentOptions options_;
  ServerClient* const server_;
  gpu::GpuDriver* const driver_;
  runtime::Runtime* const runtime_;
  mps::MpsControl* const mps_;
  const HostFacts host_;
  const Clock* const clock_;

  bool adopted_ = false;
  bool registered_ = false;
  std::vector<gpu::GpuInfo> gpus_;  // last probe; lost GPUs keep old facts
  std::map<int, gpu::GpuInfo> known_gpus_;  // last healthy facts by index
  bool mps_alive_ = false;
  std::set<std::string> mps_caps_;  // GPUs whose daemon-side cap was set
  wire::NodeReport report_;
  std::int64_t report_epoch_ = 1;
  std::int64_t report_seq_ = 0;
  std::map<std::int64_t, LocalTask> tasks_;
  // Silver tasks waiting for the MPS daemon: task id -> first seen.
  std::map<std::int64_t, std::int64_t> waiting_for_mps_;
  // Tasks reported failed without being started, by task id: the binding
  // (slice id) and the message, sent again while the server still assigns
  // that binding here.
  struct GaveUp {
    std::int64_t slice_id = 0;
    std::string message;
  };
  std::map<std::int64_t, GaveUp> gave_up_;
  std::map<std::int64_t, PendingMig> pending_mig_;         // by command id
  std::map<std::int64_t, MadePartition> made_partitions_;  // by slice id
  // The outcomes of the last kDoneMigKept commands reported, by command id.
  static constexpr std::size_t kDoneMigKept = 256;
  std::map<std::int64_t, json> done_mig_;
  std::string last_probe_error_;
  HookProof hook_proof_;
  // A GPU's region as the agent maps it for the NVML feedback, with the
  // feedback's state and when NVML was last asked.
  struct GpuShares {
    std::unique_ptr<hook::GpuRegion> region;
    hook::ShareFeedback feedback;
    bool started = false;  // the feedback's baseline is taken
    std::vector<hook::SliceFeedback> last;
  };
  std::map<int, GpuShares> gpu_shares_;
  // This cycle's answer of the driver for one GPU: the processes that used
  // it in [since_us, now_us) (CLOCK_REALTIME microseconds). `window` is
  // false on the first cycle and after the driver failed to answer.
  struct ProcessSample {
    std::uint64_t since_us = 0;
    std::uint64_t now_us = 0;
    bool window = false;
    std::vector<gpu::ProcessUtilization> processes;
  };
  std::map<int, ProcessSample> process_samples_;
  InterferenceMeter interference_;
  // Per slice: its regions' timed launches at the last round.
  std::map<std::int64_t, std::uint64_t> interference_seen_;

  // What a scrape reads (SnapshotMetrics), apart from the agent's thread.
  struct SliceMetrics {
    std::int64_t slice_id = 0;
    std::shared_ptr<hook::Region> region;  // null: no hook region
    double share_set = 0;                  // ratio, from the region
    double share_achieved = 0;             // ratio, the last window
    double waited_seconds = 0;             // in the GPU region's turns
    double interference = 0;               // 0: not measured
  };
  struct GpuMetrics {
    int index = 0;
    bool healthy = true;
    double total_bytes = 0;
    std::optional<double> used_bytes;
    double utilization = 0;
    int mig_instances = 0;
  };
  mutable Mutex metrics_mu_;
  std::vector<SliceMetrics> slice_metrics_ HF_GUARDED_BY(metrics_mu_);
  std::vector<GpuMetrics> gpu_metrics_ HF_GUARDED_BY(metrics_mu_);
  bool metrics_mps_up_ HF_GUARDED_BY(metrics_mu_) = false;
  bool metrics_mps_present_ HF_GUARDED_BY(metrics_mu_) = false;
  std::int64_t cycles_ HF_GUARDED_BY(metrics_mu_) = 0;

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stop_ HF_GUARDED_BY(stop_mu_) = false;
  // The server has new work: the next cycle runs now (WaitForNextCycle
  // clears it; the waiter waits for that before it waits again).
  bool work_ready_ HF_GUARDED_BY(stop_mu_) = false;
  bool waiter_done_ HF_GUARDED_BY(stop_mu_) = false;  // Run returned
  ServerClient* work_waiter_ = nullptr;
};

}  // namespace hf::agent
