// The node endpoints' messages (docs/API.md, "Nodes and agents"), as one
// set of types for both ends: hf-agent fills them and encodes them with
// ToJson; hf-server decodes the same types from what it receives, strictly
// (src/api/codec.cc: every field named and bounded), and encodes its
// heartbeat reply with ToJson, which the agent reads back with
// ReadHeartbeatReply. What one end writes, the other reads as the same
// values (node_wire_test checks the round trip through the server's
// decoders).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/task_state.h"

namespace hf::wire {

using json = nlohmann::json;

struct GpuReport {
  int index = 0;
  std::string uuid;
  std::string vendor = "nvidia";
  std::string model;
  std::int64_t memory_mib = 0;
  int cc_major = 0;
  int cc_minor = 0;
  bool mig_capable = false;
  bool mps_capable = false;
  bool lost = false;
  // MIG devices present on the GPU (their "MIG-..." UUIDs), when the agent
  // reports them: ones no live slice owns are MIG_PARTITION_ORPHANED.
  std::optional<std::vector<std::string>> mig_devices;
  bool operator==(const GpuReport&) const = default;
};

// Where a report stands among its agent's reports: the agent's start count
// (kept in its state directory) and the report's number since that start.
// A report is applied only if it is newer than the last one applied for
// its node; one delivered late is answered without being applied.
// The largest report_epoch and report_seq (an integer a JSON double holds
// exactly; docs/API.md).
inline constexpr std::int64_t kMaxReportNumber = (std::int64_t{1} << 53) - 1;

struct ReportNumber {
  std::int64_t epoch = 0;
  std::int64_t seq = 0;
  bool operator==(const ReportNumber&) const = default;
  bool operator<(const ReportNumber& o) const {
    return std::tie(epoch, seq) < std::tie(o.epoch, o.seq);
  }
  bool operator<=(const ReportNumber& o) const { return !(o < *this); }
};

// The body of a register (with `name` as "node_id") or a heartbeat.
struct NodeReport {
  std::string name;
  std::optional<ReportNumber> number;  // none: an agent that numbers none
  bool containerized = false;
  bool hook_available = false;
  // The agent's task runtime ("process", "docker", "sim"; empty: not said),
  // which decides what the node can start a task from (CONTRACT.md
  // section 5).
  std::string runtime;
  std::int64_t cpu_milli = 0;
  std::int64_t host_memory_mib = 0;
  std::string agent_version;
  std::vector<GpuReport> gpus;
  bool operator==(const NodeReport&) const = default;
};

// A task's hook region as its agent read it (heartbeat `tasks[].hook`):
// the counters of src/hook/region.h.
struct HookReport {
  bool attached = false;      // a process of the task loaded the hook
  std::int64_t attaches = 0;  // processes that ever attached
  int processes = 0;          // attached processes alive now
  std::int64_t used_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::optional<std::int64_t> quota_bytes;  // none: no memory cap
  std::int64_t quota_ooms = 0;              // allocations the quota refused
  std::int64_t physical_ooms = 0;           // allocations the driver refused
  // Of used_bytes, what the hook did not count and the agent measured
  // through NVML (context and module memory, processes without the hook).
  std::int64_t driver_bytes = 0;
  // The share of its GPU's time the slice's processes used in the agent's
  // last feedback window (NVML per-process utilisation), 0..100; none when
  // not measured (no throttled single-GPU slice, or no sample yet).
  std::optional<double> share_achieved_percent;
  // Interference (docs/HOOK.md, "Interference"): the slice's sampled
  // kernels' time while other slices used its GPU, divided by the same
  // kernels' time while it had the GPU alone (1.0: no slowdown, 1.5: 50%
  // slower), over the agent's recent windows; none until both were seen.
  // interference_samples: the timed launches behind it.
  std::optional<double> interference;
  std::int64_t interference_samples = 0;
  // The proof (agent/hook_proof.h): processes of the task on its GPUs that
  // have not attached to its region within the agent's grace time, at most
  // kMaxUnhookedPids of them, and why, for people ("process 4242 runs
  // without the hook: ..."; at most kMaxUnhookedReason bytes). Empty: every
  // process that uses the GPU is under the hook.
  std::vector<std::int64_t> unhooked_pids;
  std::string unhooked_reason;
  bool operator==(const HookReport&) const = default;
};
inline constexpr std::size_t kMaxUnhookedPids = 64;
inline constexpr std::size_t kMaxUnhookedReason = 1024;
// The largest interference ratio a report may carry.
inline constexpr double kMaxInterference = 1000;

// A heartbeat's `tasks[]` entry.
struct RunningTask {
  std::int64_t task_id = 0;
  std::string state;  // as the agent sees it: "running", ...
  std::vector<int> gpu_indices;
  std::optional<HookReport> hook;  // the task runs with a hook region
  bool operator==(const RunningTask&) const = default;
};

// The memory quota a running task's hook region must hold (the heartbeat
// reply): the slice's memory_mb, none for a slice without a memory cap.
struct QuotaDirective {
  std::int64_t task_id = 0;
  std::int64_t slice_id = 0;
  std::optional<std::int64_t> memory_mib;
  bool operator==(const QuotaDirective&) const = default;
};

struct HeartbeatReply {
  // One per reported running task whose live slice the hook may enforce
  // (a slice that is neither gold nor whole GPUs).
  std::vector<QuotaDirective> quotas;
  // Set when the report was not applied: the node has applied this newer
  // one (an agent whose state directory was wiped starts above it).
  std::optional<ReportNumber> newer_applied;
  bool operator==(const HeartbeatReply&) const = default;
};

// A `task-states` entry: what became of a task on the node.
struct TaskStateReport {
  std::int64_t task_id = 0;
  TaskState state = TaskState::kRunning;
  std::optional<int> exit_code;
  std::string message;
  // The slice the node ran (or was to run) the task with. A report naming
  // another slice than the task's current one is about an older binding
  // (a delayed message) and is ignored. Unset: the current one.
  std::optional<std::int64_t> slice_id;
  bool operator==(const TaskStateReport&) const = default;
};

// The result of a MIG command (`slice-requests/{id}/result`).
struct MigResult {
  bool ok = false;
  std::string device_id;  // the partition a create made
  std::string error;
  bool orphaned = false;  // a destroy failed and left an instance behind
  bool operator==(const MigResult&) const = default;
};

// Register body (with "node_id"); a heartbeat body leaves the name out (it
// is in the path) and adds "tasks".
json ToJson(const NodeReport& report, bool with_name);
json ToJson(const GpuReport& gpu);
json ToJson(const HookReport& hook);
json ToJson(const RunningTask& task);
json ToJson(const HeartbeatReply& reply);
// {"report_epoch", "report_seq"}.
json ToJson(const ReportNumber& number);
json ToJson(const TaskStateReport& report);
json ToJson(const MigResult& result);

// The agent's reading of a heartbeat (or register) reply, from a server it
// does not take on trust: anything not of the documented shape is left
// out (a quota entry without integer ids, a negative memory_mb), never
// thrown on. A reply that is not an object reads as an empty one.
HeartbeatReply ReadHeartbeatReply(const json& reply);

// ToJson(HookReport) read back, leniently in the same way (the server
// reads its stored slice usage with it; a field of the wrong type reads as
// its default). ReadHookReport(ToJson(h)) == h.
HookReport ReadHookReport(const json& hook);

}  // namespace hf::wire
