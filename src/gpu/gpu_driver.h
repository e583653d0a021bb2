// GpuDriver: the hardware seam between the node agent and the GPUs it runs
// tasks on (docs/CONTRACT.md sections 3, 8). Two implementations: NvmlGpuDriver
// (nvml_driver.h; the real cards through libnvidia-ml.so.1, loaded with
// dlopen) and SimGpuDriver (sim_driver.h; an inventory file, for machines
// without GPUs and for tests, with injectable faults).
//
// Everything here is probed afresh on every call: the agent reports what the
// hardware says now, never a cached belief. Indices are the driver's own
// (NVML's device index), which is what CUDA_VISIBLE_DEVICES and the server's
// `gpu_index` mean; the UUID is the stable identity and is checked before
// any MIG change (guard against index/UUID drift, docs/CONTRACT.md section 8).
//
// Thread-safety: implementations are safe to call from several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/quantity.h"
#include "common/status.h"
#include "gpu/mig_profiles.h"

namespace hf::gpu {

struct GpuInfo {
  int index = 0;
  std::string uuid;  // "GPU-..."
  std::string vendor = "nvidia";
  std::string model;         // as NVML names it: "NVIDIA H100 80GB HBM3"
  MemoryMib memory_mib = 0;  // total, as the driver reports it
  int cc_major = 0;          // compute capability
  int cc_minor = 0;
  // MIG mode as it is now (current, not pending). The platform never
  // changes it.
  bool mig_enabled = false;
  // False when the driver reports the GPU lost / unreachable
  // (NVML_ERROR_GPU_IS_LOST and friends); `health_detail` says what.
  bool healthy = true;
  std::string health_detail;
  // Memory in use on the card as the driver measures it, when known.
  std::optional<MemoryMib> used_memory_mib;
};

// A MIG device: one GPU instance with one compute instance spanning it (the
// only shape HeteroFlow creates).
struct MigDevice {
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  std::string profile;  // "1g.10gb"
  MigPlacement placement;
  // What NVIDIA_VISIBLE_DEVICES takes: the MIG device UUID ("MIG-...").
  std::string device_uuid;
};

// A process using a GPU (or one of its MIG devices).
struct GpuProcess {
  std::int64_t pid = 0;
  std::optional<MemoryMib> used_memory_mib;
  // The MIG GPU instance the process runs in; nullopt on a whole GPU.
  std::optional<int> gpu_instance_id;
};

// One process's use of a GPU's time over a window, as the driver samples
// it (NVML: nvmlDeviceGetProcessUtilization).
struct ProcessUtilization {
  std::int64_t pid = 0;
  // Percent of the window during which a kernel of the process ran: the
  // mean of the driver's samples in the window.
  double sm_percent = 0;
  // The CPU timestamp (CLOCK_REALTIME, microseconds) of its newest sample.
  std::uint64_t last_sample_us = 0;
};

class GpuDriver {
 public:
  virtual ~GpuDriver() = default;

  // "nvml" or "sim", for logs and the heartbeat.
  virtual std::string Name() const = 0;

  // Every GPU the driver sees, ascending index. A GPU that is lost is still
  // listed (healthy=false) when the driver can name it. Unavailable when the
  // driver itself cannot be reached (library missing, init failed).
  virtual StatusOr<std::vector<GpuInfo>> ListGpus() = 0;

  // The MIG devices on a GPU. FailedPrecondition when the GPU is not in MIG
  // mode; NotFound for an unknown index; Unavailable when the GPU is lost.
  virtual StatusOr<std::vector<MigDevice>> ListMigDevices(int gpu_index) = 0;

  // Creates a GPU instance of `profile` (at `placement` when given, else
  // where the driver chooses) and one compute instance spanning it.
  // Errors: NotFound (unknown GPU or profile for this model),
  // FailedPrecondition (not in MIG mode), ResourceExhausted (no room /
  // placement taken / max instances reached), InvalidArgument (illegal
  // placement), Unavailable (GPU lost), Internal (driver failure). On
  // failure nothing is left behind: a GPU instance whose compute instance
  // could not be made is destroyed again before returning.
  virtual StatusOr<MigDevice> CreateMigDevice(
      int gpu_index, const std::string& profile,
      std::optional<MigPlacement> placement) = 0;

  // Destroys the compute instance, then the GPU instance. NotFound when the
  // GPU instance does not exist (callers treat that as already done);
  // FailedPrecondition (kInUse in the message) while processes still use it.
  virtual Status DestroyMigDevice(int gpu_index, int gpu_instance_id) = 0;

  // Processes running on the GPU (all of its MIG devices included).
  virtual StatusOr<std::vector<GpuProcess>> ListProcesses(int gpu_index) = 0;

  // The processes that used the GPU's time since `since_us` (a CPU
  // timestamp, CLOCK_REALTIME microseconds; 0: the driver's short history),
  // with their share of it. Empty when none did. FailedPrecondition where
  // the driver cannot say (a GPU in MIG mode, an old driver, no sampling in
  // the simulation): callers then go without.
  virtual StatusOr<std::vector<ProcessUtilization>> SampleProcessUtilization(
      int gpu_index, std::uint64_t since_us) {
    (void)gpu_index;
    (void)since_us;
    return Status::FailedPrecondition(
        Name() + ": per-process utilisation is not reported");
  }
};

}  // namespace hf::gpu
