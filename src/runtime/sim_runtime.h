// SimRuntime: a Runtime whose tasks are simulated processes on a simulated
// node (gpu::SimGpuDriver). It is the task runner of the whole-system
// simulation (src/simulation) and of the agent's in-process tests.
//
// The processes live in a SimHost, which stands for the machine: they
// outlive any agent and any SimRuntime over them, as a node's processes
// outlive a restart of hf-agent, and a new SimRuntime finds them again
// through Adopt. A process holds GPU memory on the card it really runs on
// (the pinning the agent gave it: CUDA_VISIBLE_DEVICES or a MIG device),
// registered with the driver while it runs, so ListProcesses and the MIG
// destroy's in-use check see it. How long a task runs, how much memory it
// holds and how it ends come from a behaviour function (the simulation's
// workload knows each task it created).
//
// It behaves like ProcessRuntime towards the agent, failures included: a
// task pinned to a lost GPU or a MIG device that does not exist starts and
// fails at once (as a CUDA program would), Kill is immediate (the grace
// period passes in no simulated time), Remove refuses a running task.
//
// Thread-safety: SimHost and SimRuntime are for one thread (the
// simulation's event loop).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gpu/sim_driver.h"
#include "runtime/runtime.h"

namespace hf::runtime {

// What a simulated task does once it runs.
struct SimTaskBehaviour {
  std::int64_t duration_ms = 60'000;
  // GPU memory held on each of its GPUs while it runs; 0 on a whole GPU
  // means the whole card.
  std::int64_t memory_mib = 0;
  int exit_code = 0;
  // What it prints once started (after the runtime's own first line).
  std::string output;
};

// One task the machine holds: the hardware truth of what runs where.
struct SimTaskProcess {
  std::int64_t task_id = 0;
  TaskSpec spec;                   // as the agent started it
  std::vector<int> gpu_indices;    // the physical GPUs it runs on
  std::string mig_device;          // the MIG device, when pinned to one
  std::int64_t memory_mib = 0;     // held on each GPU while running
  std::vector<std::int64_t> pids;  // one driver process per GPU
  std::int64_t started_at = 0;
  std::int64_t ends_at = 0;  // when it exits by itself
  int exit_code = 0;         // how it exits by itself
  TaskStatus status;         // kRunning until it ends
  std::int64_t ended_at = 0;
  std::string log;

  bool running() const { return status.state == TaskState::kRunning; }
};

class SimHost {
 public:
  using Behaviour = std::function<SimTaskBehaviour(const TaskSpec&)>;

  // `driver` and `clock` must outlive the host.
  SimHost(gpu::SimGpuDriver* driver, const Clock* clock, Behaviour behaviour);

  // Ends the processes whose time is up. Call as simulated time passes.
  void Tick();
  // The machine loses power: every process dies (its record stays, as the
  // runtime's files on disk do, and reads as lost).
  void PowerOff();
  // GPU `index` fell off the bus: the processes on it die.
  void FailGpu(int index);

  // Called once a task has started (the simulation checks the hardware the
  // moment a process begins, not only between steps).
  void set_on_start(std::function<void(const SimTaskProcess&)> on_start) {
    on_start_ = std::move(on_start);
  }

  // Every task the machine holds, running or ended, by task id.
  const std::map<std::int64_t, SimTaskProcess>& tasks() const { return tasks_; }
  gpu::SimGpuDriver* driver() const { return driver_; }

 private:
  friend class SimRuntime;

  // Ends `task` with `status` now and frees its GPU memory.
  void End(SimTaskProcess& task, TaskStatus status);

  gpu::SimGpuDriver* const driver_;
  const Clock* const clock_;
  const Behaviour behaviour_;
  std::map<std::int64_t, SimTaskProcess> tasks_;
  std::int64_t next_pid_ = 1000;
  std::function<void(const SimTaskProcess&)> on_start_;
};

class SimRuntime final : public Runtime {
 public:
  // `host` must outlive the runtime.
  explicit SimRuntime(SimHost* host) : host_(host) {}

  std::string_view Name() const override { return "sim"; }
  Status Start(const TaskSpec& spec) override;
  StatusOr<TaskStatus> Poll(std::int64_t task_id) override;
  bool PollIsCheap() const override { return true; }  // in memory
  Status Kill(std::int64_t task_id, std::chrono::milliseconds grace) override;
  StatusOr<std::vector<AdoptedTask>> Adopt() override;
  Status Remove(std::int64_t task_id) override;
  StatusOr<LogChunk> ReadLog(std::int64_t task_id, std::int64_t offset,
                             std::size_t max_bytes) override;

 private:
  SimHost* const host_;
};

}  // namespace hf::runtime
