// SimGpuDriver: a GpuDriver over an inventory file (inventory.h), for
// machines without GPUs (`make run`) and for tests. It behaves like the
// NVML-backed driver, failures included: MIG requests are checked against
// NVIDIA's profile tables (mig_profiles.h) with the error kinds gpu_driver.h
// documents, GPU instance ids are small integers reused after a destroy, and
// the inventory's faults (lost GPUs, failing MIG creates, UUID drift) take
// effect by the time the injected Clock shows since the driver was created.
//
// MIG instances outlive an agent restart on real hardware, so they do here:
// with a state file in the options every MIG change is written to it
// atomically (temporary file, fsync, rename), and a new driver over the same
// inventory and state file starts with the same instances. Without one the
// state lives in memory only.
//
// Processes are not simulated by themselves: a test or the simulation harness
// registers them (RegisterProcess) so that ListProcesses and the in-use check
// of DestroyMigDevice see them. They are not persisted.
//
// Thread-safety: every public method is safe to call from several threads
// (one mutex guards all state). The Clock must outlive the driver.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "gpu/gpu_driver.h"
#include "gpu/inventory.h"

namespace hf::gpu {

struct SimDriverOptions {
  // Where the MIG state is persisted; empty keeps it in memory only. The
  // file is created on the first MIG change; its directory must exist.
  std::string state_file;
};

// A process the harness says is running on a GPU.
struct SimProcess {
  std::int64_t pid = 0;
  int gpu_index = 0;
  // Required on a GPU in MIG mode (processes there run inside a MIG
  // device), forbidden otherwise.
  std::optional<int> gpu_instance_id;
  std::optional<MemoryMib> used_memory_mib;
};

class SimGpuDriver final : public GpuDriver {
 public:
  // A driver over `inventory`, with the driver's start (time zero for the
  // faults) at clock.NowMillis(). When options.state_file exists, its MIG
  // instances replace the inventory's for the GPUs it names. Fails with
  // InvalidArgument when the state file is unreadable JSON or disagrees with
  // the inventory (another GPU UUID, a GPU not in MIG mode, an instance the
  // tables reject), and Unavailable when it cannot be read.
  static StatusOr<std::unique_ptr<SimGpuDriver>> Create(
      Inventory inventory, const Clock& clock, SimDriverOptions options = {});

  // LoadInventory(inventory_path), then Create.
  static StatusOr<std::unique_ptr<SimGpuDriver>> CreateFromFile(
      const std::string& inventory_path, const Clock& clock,
      SimDriverOptions options = {});

  std::string Name() const override { return "sim"; }

  // A lost GPU is listed with healthy=false, mig_enabled=false (MIG mode
  // cannot be read off a lost GPU) and no used memory. used_memory_mib of a
  // healthy GPU is the sum of its registered processes' memory.
  StatusOr<std::vector<GpuInfo>> ListGpus() override;
  // Ascending gpu_instance_id.
  StatusOr<std::vector<MigDevice>> ListMigDevices(int gpu_index) override;
  // As GpuDriver, plus: a failing create fault returns its error kind and
  // message (nothing is created); Internal when the state file cannot be
  // written (the instance is not created either).
  StatusOr<MigDevice> CreateMigDevice(
      int gpu_index, const std::string& profile,
      std::optional<MigPlacement> placement) override;
  // As GpuDriver; Internal when the state file cannot be written (the
  // instance is then kept).
  Status DestroyMigDevice(int gpu_index, int gpu_instance_id) override;
  // Ascending pid.
  StatusOr<std::vector<GpuProcess>> ListProcesses(int gpu_index) override;

  // ---- Test / simulation seam ----

  // Records a running process. NotFound for an unknown GPU or GPU instance,
  // Unavailable when the GPU is lost, InvalidArgument when gpu_instance_id
  // is missing on a MIG GPU (or given on a non-MIG one) or pid <= 0,
  // AlreadyExists when the pid is registered.
  Status RegisterProcess(const SimProcess& process);
  // Forgets a process. NotFound when the pid is not registered.
  Status UnregisterProcess(std::int64_t pid);

  // Faults decided while the driver runs (the whole-system simulation
  // injects them at random), on top of the inventory's scheduled ones.
  // GPU `index` is lost from now on (true) or reachable again (false).
  // NotFound for an unknown index.
  Status SetLost(int gpu_index, bool lost);
  // The next `count` MIG creates on GPU `index` fail with `code` (nothing is
  // created). NotFound for an unknown index.
  Status FailNextMigCreates(int gpu_index, int count, StatusCode code);
  // The MIG device UUIDs on every GPU, lost ones included (what is really
  // on the cards), by GPU index.
  std::map<int, std::vector<MigDevice>> AllMigDevices() const;

  // The node the driver simulates (immutable after Create).
  const Inventory& inventory() const { return inventory_; }

 private:
  // What the driver knows about one GPU beyond its inventory entry.
  struct GpuState {
    std::vector<MigDevice> devices;  // ascending gpu_instance_id
    std::int64_t next_mig_sequence = 0;
    // Per inventory mig_create_fails fault: failures it has caused so far.
    std::vector<int> create_failures_used;
    bool lost_now = false;  // SetLost
    int fail_creates = 0;   // FailNextMigCreates: failures still to come
    StatusCode fail_code = StatusCode::kInternal;
  };

  SimGpuDriver(Inventory inventory, const Clock& clock,
               SimDriverOptions options);

  // Builds the GPU states from the inventory, then the state file.
  Status Initialize();
  Status LoadStateFile() HF_REQUIRES(mu_);
  Status ApplySavedGpu(const SimGpuMigState& saved) HF_REQUIRES(mu_);

  // Each of these requires mu_.
  std::int64_t ElapsedMillis() const HF_REQUIRES(mu_);
  bool IsLost(const InventoryGpu& gpu, std::int64_t elapsed) const
      HF_REQUIRES(mu_);
  std::string CurrentUuid(const InventoryGpu& gpu, std::int64_t elapsed) const
      HF_REQUIRES(mu_);
  // NotFound for an unknown index, Unavailable when the GPU is lost.
  Status CheckReachable(int gpu_index, std::int64_t elapsed) const
      HF_REQUIRES(mu_);
  // CheckReachable, then FailedPrecondition when not in MIG mode.
  Status CheckMigMode(int gpu_index, std::int64_t elapsed) const
      HF_REQUIRES(mu_);
  // The error of the first mig_create_fails fault that applies now (and
  // counts it), or OK.
  Status ConsumeCreateFault(int gpu_index, std::int64_t elapsed)
      HF_REQUIRES(mu_);
  // Adds an instance with fresh ids and UUID; returns it.
  MigDevice AddDevice(int gpu_index, const MigInstance& instance)
      HF_REQUIRES(mu_);
  std::vector<MigInstance> Instances(int gpu_index) const HF_REQUIRES(mu_);
  std::string NewDeviceUuid(int gpu_index) HF_REQUIRES(mu_);
  // Writes every GPU's MIG state to the state file (no-op without one).
  Status SaveState() const HF_REQUIRES(mu_);

  const Inventory inventory_;
  const Clock& clock_;
  const SimDriverOptions options_;
  const std::int64_t start_millis_;

  mutable Mutex mu_;
  std::vector<GpuState> gpus_ HF_GUARDED_BY(mu_);                    // by index
  std::map<std::int64_t, SimProcess> processes_ HF_GUARDED_BY(mu_);  // by pid
};

}  // namespace hf::gpu
