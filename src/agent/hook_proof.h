// HookProof: the agent's proof that the hook enforces a slice, and its
// measurement of the slice's memory the hook cannot count (docs/HOOK.md,
// "Proof of enforcement" and "Context memory").
//
// Proof. The hook attaches to its slice's region on the first driver call a
// process makes, before the process has a context, so before NVML lists it
// among the processes using the GPU. Every process NVML lists on a slice's
// GPU that belongs to the slice must therefore hold a slot of the slice's
// region. One that holds none a grace time after the agent first saw it
// runs without the hook (a loader that refused the library, a launcher that
// cleared LD_PRELOAD, a static binary), and the slice's enforcement cannot
// claim "hook" until it attaches or exits.
//
// Which slice a process belongs to: HETEROFLOW_HOOK_REGION in its
// environment (/proc/PID/environ, which the agent, running as root, can
// read), else in that of its nearest ancestor that has one (a launcher
// that cleared the environment). The region path is the agent's own file
// (a container sees it mounted at the same path), so it names one slice of
// this agent and nothing else. A process in a container has another pid in
// its own pid namespace, which is what its slot holds: the agent's pid is
// translated through /proc/PID/status `NSpid` (the last entry is the
// innermost), and the slot's start time (/proc/PID/stat field 22) must
// match too, so a recycled pid is never taken for an attached process.
//
// Measurement. NVML's per-process usage (usedGpuMemory) includes the
// context, the modules and the driver's rounding, which the hook does not
// see; what it shows beyond the process's slot is written into the slot
// (Region::SetDriverBytes), and the usage of processes holding no slot is
// charged to the region as a whole. The quota then holds the real
// footprint.
//
// Thread-safety: none; the agent calls it from its loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_driver.h"
#include "hook/region.h"

namespace hf::agent {

// What the proof needs to know of one process, read from /proc.
struct ProcessFacts {
  std::int64_t pid = 0;           // in the agent's pid namespace
  std::uint32_t ns_pid = 0;       // in its own (innermost) pid namespace
  std::uint64_t start_ticks = 0;  // /proc/PID/stat field 22
  // HETEROFLOW_HOOK_REGION of the process, or of its nearest ancestor that
  // has one; empty when none does.
  std::string hook_region;
  bool hook_loaded = false;  // the hook library is mapped in the process
};

// Reads `pid` under `proc_root` (normally /proc). `hook_file_name` is the
// hook library's file name, looked for in /proc/PID/maps (empty: not
// looked for). nullopt when the process is gone or cannot be read.
std::optional<ProcessFacts> ReadProcessFacts(
    const std::filesystem::path& proc_root, std::int64_t pid,
    const std::string& hook_file_name);

class HookProof {
 public:
  struct Options {
    std::filesystem::path proc_root = "/proc";
    // How long a process of a slice may use its GPU before it must have
    // attached to the slice's region.
    std::chrono::milliseconds grace{5000};
    // The hook library (its file name is looked for in /proc/PID/maps, to
    // say why a process is not attached).
    std::string hook_library;
  };

  // A running task the hook should enforce, with its region.
  struct Slice {
    std::int64_t task_id = 0;
    std::filesystem::path region_path;  // as the task's env names it
    hook::Region* region = nullptr;     // the agent's mapping
    std::vector<int> gpu_indices;
  };

  // What Check concluded for a task.
  struct Verdict {
    // Processes of the task on its GPUs that have held no slot of its
    // region for the grace time (the agent's pids, ascending).
    std::vector<std::int64_t> unhooked_pids;
    std::string reason;  // for people; empty when unhooked_pids is
  };

  explicit HookProof(Options options);

  // One round at `now_ms` (the agent's clock): lists each GPU's processes
  // once through `driver`, attributes them to `slices`, checks that each
  // attached, and writes each region's driver bytes. A GPU whose processes
  // cannot be listed leaves the verdicts and measurements of its slices as
  // they were (nothing is proven or disproven). Tasks not in `slices` are
  // forgotten.
  void Check(const std::vector<Slice>& slices, gpu::GpuDriver& driver,
             std::int64_t now_ms);

  // The verdict for `task_id` after the last Check (empty: nothing against
  // it).
  Verdict VerdictOf(std::int64_t task_id) const;

  // Which task each process NVML listed on GPU `gpu_index` belongs to, as
  // the last Check attributed them (agent pids; attached or not). Empty
  // for a GPU whose processes could not be listed.
  std::map<std::int64_t, std::int64_t> TasksOfProcesses(int gpu_index) const;

 private:
  // A process seen without a slot: since when, and whether the hook
  // library was loaded in it then.
  struct Unattached {
    std::int64_t first_seen_ms = 0;
    bool hook_loaded = false;
  };
  struct TaskState {
    // By (agent pid, start ticks): a recycled pid is a new process.
    std::map<std::pair<std::int64_t, std::uint64_t>, Unattached> unattached;
    Verdict verdict;
  };

  const Options options_;
  const std::string hook_file_name_;
  std::map<std::int64_t, TaskState> tasks_;
  // GPU index -> agent pid -> task id, from the last Check.
  std::map<int, std::map<std::int64_t, std::int64_t>> attributed_;
};

}  // namespace hf::agent
