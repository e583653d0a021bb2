// NvmlGpuDriver: GpuDriver on real NVIDIA GPUs through NVML
// (libnvidia-ml.so.1), opened with dlopen at run time so the agent builds and
// runs on machines without an NVIDIA driver (docs/CONTRACT.md section 2;
// STYLE.md, the Mesos lesson). docs/NVML.md lists the entry points used and
// why.
//
// The library is opened and nvmlInit_v2 called once, in the constructor.
// When that fails (library missing, a required symbol missing, nvmlInit_v2
// failing) the driver still constructs, and every call returns Unavailable
// with the reason ("Failed to nvmlInit_v2: Driver Not Loaded"); build a new
// driver to retry. A missing *optional* symbol (an older driver) disables
// only the feature that needs it, with an error naming the symbol.
//
// NVML errors become Status values in one place (NvmlStatus below), with the
// call and the GPU as context: "nvmlDeviceGetMemoryInfo_v2(GPU 2): GPU is
// lost".
//
// Thread-safety: safe to call from several threads. After construction the
// driver's own state (library handle, symbol table) is immutable; NVML is
// itself thread-safe. MIG calls (list, create, destroy) are serialised by a
// mutex so that a create's roll-back and a destroy's CI-then-GI sequence
// never interleave with another MIG call made through this driver.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/gpu_driver.h"

namespace hf::gpu {

// Maps an NVML return code to a Status: OK for NVML_SUCCESS, otherwise the
// code's Status kind with message "<context>: <error_string>" (error_string
// is what nvmlErrorString said; when null, "NVML error <rc>"). The one place
// NVML errors are translated; docs/NVML.md has the table.
Status NvmlStatus(int nvml_return, std::string_view context,
                  const char* error_string);

// True for the return codes that mean the card itself is unreachable or
// broken (GPU_IS_LOST, UNKNOWN — what a card that fell off the bus gives —,
// RESET_REQUIRED, IRQ_ISSUE, TIMEOUT, CORRUPTED_INFOROM): a GPU answering so
// is reported healthy=false.
bool IsNvmlGpuHealthError(int nvml_return);

class NvmlGpuDriver final : public GpuDriver {
 public:
  struct Options {
    // What dlopen is given: a soname (searched on the library path) or a
    // path. Tests point it at the fake (fake_nvml.cc).
    std::string library_path = "libnvidia-ml.so.1";
  };

  NvmlGpuDriver();
  explicit NvmlGpuDriver(Options options);
  // Calls nvmlShutdown (when init succeeded) and closes the library.
  ~NvmlGpuDriver() override;

  NvmlGpuDriver(const NvmlGpuDriver&) = delete;
  NvmlGpuDriver& operator=(const NvmlGpuDriver&) = delete;

  // OK when NVML was opened and initialised; otherwise the Unavailable
  // status every call returns.
  const Status& load_status() const { return load_status_; }

  std::string Name() const override { return "nvml"; }
  StatusOr<std::vector<GpuInfo>> ListGpus() override;
  StatusOr<std::vector<MigDevice>> ListMigDevices(int gpu_index) override;
  StatusOr<MigDevice> CreateMigDevice(
      int gpu_index, const std::string& profile,
      std::optional<MigPlacement> placement) override;
  Status DestroyMigDevice(int gpu_index, int gpu_instance_id) override;
  StatusOr<std::vector<GpuProcess>> ListProcesses(int gpu_index) override;
  StatusOr<std::vector<ProcessUtilization>> SampleProcessUtilization(
      int gpu_index, std::uint64_t since_us) override;

  // Implementation types, public only so the .cc's helpers can name them.
  struct Api;
  struct Profile;

 private:
  void Load();

  Options options_;
  void* library_ = nullptr;         // dlopen handle; null when not opened
  std::unique_ptr<const Api> api_;  // resolved symbols; null unless loaded
  Status load_status_;
  // Serialises the MIG calls (see the file comment).
  std::mutex mig_mu_;
};

}  // namespace hf::gpu
