// fake_nvml: a stand-in for libnvidia-ml.so.1, the test double behind the
// hardware seam. Built as a shared library named libnvidia-ml.so.1 (in its
// own directory) that exports the NVML entry points of nvml_api.h with C
// linkage, so NvmlGpuDriver (and later the CUDA hook, which may call
// nvmlDeviceGetMemoryInfo) can be pointed at it instead of the real one.
//
// It behaves like the real library, failures included: every entry point
// answers NVML_ERROR_UNINITIALIZED before nvmlInit_v2, INVALID_ARGUMENT for
// unknown handles and null pointers, INSUFFICIENT_SIZE with the needed count,
// NOT_FOUND, IN_USE, INSUFFICIENT_RESOURCES, ARGUMENT_VERSION_MISMATCH for a
// wrong struct version, and the configured GPU_IS_LOST (or UNKNOWN) for a
// lost card. MIG instances are created and destroyed in memory and honour
// the official tables (gpu/mig_profiles.h): legal placements, no overlap,
// max instances per profile, compute instances within a GPU instance.
//
// Configuration: a JSON file named by HF_FAKE_NVML_CONFIG, read when
// nvmlInit_v2 takes the init count from 0 to 1 (so every init/shutdown cycle
// starts from the file again; unset means no GPUs). Schema (all optional):
//
//   {
//     "init_error": 9,                 // nvmlInit_v2 returns this code
//     "call_log": "<test dir>/calls.log",  // MIG create/destroy calls appended
//     "errors": {"nvmlDeviceGetCount_v2": 999},   // injected, per entry point
//     "devices": [{
//       "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
//       "memory_total_mib": 81559, "memory_used_mib": 0,
//       "memory_reserved_mib": 0, "cc": [9, 0], "mig": true,
//       "lost": false, "lost_error": 15,   // every query but name/UUID fails
//       "handle_error": 15,                // nvmlDeviceGetHandleByIndex_v2
//       "errors": {"nvmlDeviceGetMemoryInfo_v2": 999},  // for this device
//       "gpu_instances": [{"profile": "3g.40gb", "start": 4, "ci": true}],
//       "processes": [{"pid": 7, "used_mib": 100, "gpu_instance_id": 1,
//                      "compute_instance_id": 0}],
//       "process_growth": 5,  // processes that appear after every
//                             // INSUFFICIENT_SIZE answer (twice at most)
//       "fake_cuda": {"dir": "/abs/dir", "index": 0}
//         // the device is the fake CUDA driver's shared device `index` in
//         // HF_FAKE_CUDA_GPU_DIR=dir (src/hook/testing/fake_gpu.h): its
//         // processes (with their memory), memory in use and utilisation
//         // are the ones CUDA programs on it make, besides any listed here
//     }]
//   }
//
// The call log has one line per MIG change, e.g.
// "nvmlComputeInstanceDestroy gpu=0 gi=1 ci=0 rc=0", in call order.
//
// Built with -DHF_FAKE_NVML_LEGACY it leaves out the entry points an older
// driver lacks (nvmlDeviceGetMemoryInfo_v2,
// nvmlDeviceGetGpuInstanceProfileInfoV,
// nvmlDeviceGetGpuInstancePossiblePlacements_v2,
// nvmlDeviceCreateGpuInstanceWithPlacement and the MIG device handle calls),
// to test the driver's fallbacks.
//
// Thread-safety: one mutex guards all state; every entry point may be called
// from any thread, as with the real library. No exception leaves an entry
// point (each is wrapped; an escaped one becomes NVML_ERROR_UNKNOWN).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/mig_profiles.h"
#include "gpu/nvml/nvml_api.h"
#include "hook/testing/fake_gpu.h"

#define HF_NVML_EXPORT __attribute__((visibility("default")))

namespace {

constexpr unsigned long long kMib = 1024ULL * 1024ULL;
constexpr unsigned int kMaxProcessGrowths = 2;

struct FakeProcess {
  unsigned int pid = 0;
  unsigned long long used_bytes = 0;
  unsigned int gpu_instance_id = kNvmlNoInstanceId;
  unsigned int compute_instance_id = kNvmlNoInstanceId;
};

}  // namespace

// The opaque handle types of nvml_api.h, defined for the fake only. A device
// handle is either a physical GPU (mig == nullptr) or a MIG device (the
// compute instance it stands for).
struct nvmlDevice_st {
  int index = -1;
  nvmlComputeInstance_st* mig = nullptr;
};

struct nvmlComputeInstance_st {
  nvmlGpuInstance_st* gpu_instance = nullptr;
  unsigned int id = 0;
  unsigned int selector = 0;  // == profile id
  unsigned int slices = 0;
  std::string uuid;
  nvmlDevice_st mig_handle;
};

struct nvmlGpuInstance_st {
  int device = -1;
  unsigned int id = 0;
  unsigned int selector = 0;
  const hf::gpu::MigProfile* profile = nullptr;
  hf::gpu::MigPlacement placement;
  std::vector<std::unique_ptr<nvmlComputeInstance_st>> compute_instances;
};

namespace {

struct FakeDevice {
  nvmlDevice_st handle;
  std::string name;
  std::string uuid;
  unsigned long long total_bytes = 0;
  unsigned long long used_bytes = 0;
  unsigned long long reserved_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
  bool mig = false;
  bool lost = false;
  nvmlReturn_t lost_error = NVML_ERROR_GPU_IS_LOST;
  nvmlReturn_t handle_error = NVML_SUCCESS;
  std::map<std::string, int> errors;
  const hf::gpu::MigModelTable* table = nullptr;
  std::vector<std::unique_ptr<nvmlGpuInstance_st>> gpu_instances;
  std::vector<FakeProcess> processes;
  unsigned int process_growth = 0;
  unsigned int growths_done = 0;
  unsigned int next_pid = 100000;
  // The shared fake GPU behind it ("fake_cuda"); null: figures from the
  // config only.
  std::unique_ptr<hf::fake_gpu::SharedDevice> gpu;
};

struct State {
  std::mutex mu;
  int init_count = 0;
  std::string call_log;
  std::map<std::string, int> errors;
  std::vector<std::unique_ptr<FakeDevice>> devices;
};

State& S() {
  static State state;
  return state;
}

// The strings libnvidia-ml's nvmlErrorString gives.
const char* ErrorText(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Version mismatch between passed in argument and expected";
    case NVML_ERROR_NOT_READY:
      return "Not ready";
    default:  // NVML_ERROR_UNKNOWN and anything newer
      return "Unknown Error";
  }
}

// Runs an entry point's body; an escaped exception becomes UNKNOWN.
template <typename Body>
nvmlReturn_t Guarded(Body body) {
  try {
    return body();
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

// The NVML_GPU_INSTANCE_PROFILE_* selector of a table profile (the
// selectors are named by compute slices; REV1 is "+me", REV2 the one-slice
// profile on two memory slices).
std::optional<unsigned int> Selector(const hf::gpu::MigProfile& p) {
  if (p.compute_slices == 1) {
    if (p.media_extensions) return NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1;
    return p.memory_slices == 2 ? NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
                                : NVML_GPU_INSTANCE_PROFILE_1_SLICE;
  }
  if (p.compute_slices == 2) {
    return p.media_extensions ? NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
                              : NVML_GPU_INSTANCE_PROFILE_2_SLICE;
  }
  if (p.media_extensions) return std::nullopt;
  switch (p.compute_slices) {
    case 3:
      return NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 4:
      return NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 7:
      return NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    default:
      return std::nullopt;
  }
}

const hf::gpu::MigProfile* ProfileBySelector(const FakeDevice& d,
                                             unsigned int selector) {
  if (d.table == nullptr) return nullptr;
  for (const hf::gpu::MigProfile& p : d.table->profiles) {
    if (Selector(p) == selector) return &p;
  }
  return nullptr;
}

// The profile ID NVML reports: the table's where known, else a made-up one
// (so the driver cannot lean on the table for cards whose IDs are unknown).
unsigned int ProfileId(const hf::gpu::MigProfile& p, unsigned int selector) {
  return p.profile_id >= 0 ? static_cast<unsigned int>(p.profile_id)
                           : 0x40U + selector;
}

std::optional<unsigned int> SelectorById(const FakeDevice& d, unsigned int id) {
  for (unsigned int s = 0; s < NVML_GPU_INSTANCE_PROFILE_COUNT; ++s) {
    const hf::gpu::MigProfile* p = ProfileBySelector(d, s);
    if (p != nullptr && ProfileId(*p, s) == id) return s;
  }
  return std::nullopt;
}

// Compute instance profile selector -> compute slices (0 when not offered).
unsigned int ComputeSlices(unsigned int selector) {
  switch (selector) {
    case NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE:
      return 1;
    case NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE:
      return 2;
    case NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE:
      return 3;
    case NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE:
      return 4;
    case NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE:
      return 7;
    default:
      return 0;
  }
}

void LogCall(const State& s, const std::string& line) {
  if (s.call_log.empty()) return;
  std::ofstream out(s.call_log, std::ios::app);
  out << line << "\n";
}

// REQUIRES: S().mu held. The injected error for `call`, or SUCCESS.
nvmlReturn_t Injected(const std::map<std::string, int>& errors,
                      const char* call) {
  auto it = errors.find(call);
  return it == errors.end() ? NVML_SUCCESS
                            : static_cast<nvmlReturn_t>(it->second);
}

// REQUIRES: S().mu held. Common entry checks: initialised, injected error.
nvmlReturn_t Enter(const char* call) {
  State& s = S();
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return Injected(s.errors, call);
}

// REQUIRES: S().mu held. The device (physical or MIG) a handle names.
FakeDevice* FindDevice(nvmlDevice_t handle, nvmlComputeInstance_st** mig) {
  if (mig != nullptr) *mig = nullptr;
  if (handle == nullptr) return nullptr;
  for (auto& d : S().devices) {
    if (&d->handle == handle) return d.get();
    for (auto& gi : d->gpu_instances) {
      for (auto& ci : gi->compute_instances) {
        if (&ci->mig_handle == handle) {
          if (mig != nullptr) *mig = ci.get();
          return d.get();
        }
      }
    }
  }
  return nullptr;
}

// REQUIRES: S().mu held. Entry checks for a device call: init, injected
// errors (global, then the device's), a valid handle, a lost card (unless
// `works_when_lost`: NVML keeps name and UUID cached).
nvmlReturn_t EnterDevice(const char* call, nvmlDevice_t handle,
                         FakeDevice** device, nvmlComputeInstance_st** mig,
                         bool works_when_lost = false) {
  if (nvmlReturn_t rc = Enter(call); rc != NVML_SUCCESS) return rc;
  FakeDevice* d = FindDevice(handle, mig);
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t rc = Injected(d->errors, call); rc != NVML_SUCCESS) {
    return rc;
  }
  if (d->lost && !works_when_lost) return d->lost_error;
  *device = d;
  return NVML_SUCCESS;
}

// REQUIRES: S().mu held.
nvmlGpuInstance_st* FindGpuInstance(nvmlGpuInstance_t handle,
                                    FakeDevice** device) {
  if (handle == nullptr) return nullptr;
  for (auto& d : S().devices) {
    for (auto& gi : d->gpu_instances) {
      if (gi.get() == handle) {
        *device = d.get();
        return gi.get();
      }
    }
  }
  return nullptr;
}

// REQUIRES: S().mu held.
nvmlComputeInstance_st* FindComputeInstance(nvmlComputeInstance_t handle,
                                            FakeDevice** device) {
  if (handle == nullptr) return nullptr;
  for (auto& d : S().devices) {
    for (auto& gi : d->gpu_instances) {
      for (auto& ci : gi->compute_instances) {
        if (ci.get() == handle) {
          *device = d.get();
          return ci.get();
        }
      }
    }
  }
  return nullptr;
}

// REQUIRES: S().mu held. Entry checks for a GPU/compute instance call.
template <typename Found>
nvmlReturn_t EnterInstance(const char* call, Found* found, FakeDevice* d) {
  if (nvmlReturn_t rc = Enter(call); rc != NVML_SUCCESS) return rc;
  if (found == nullptr || d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t rc = Injected(d->errors, call); rc != NVML_SUCCESS) {
    return rc;
  }
  if (d->lost) return d->lost_error;
  return NVML_SUCCESS;
}

std::string MigUuid(int device, unsigned int gi, unsigned int ci) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "MIG-%08x-%04x-4%03x-8000-%012x",
                static_cast<unsigned int>(0xfa4e0000U + device), gi, ci,
                static_cast<unsigned int>(device * 1000 + gi * 10 + ci));
  return buffer;
}

// REQUIRES: S().mu held. Creates a GPU instance of `selector` at
// `placement` (or the lowest free legal start), like the driver would.
nvmlReturn_t CreateGi(FakeDevice& d, unsigned int selector,
                      const hf::gpu::MigPlacement* placement,
                      nvmlGpuInstance_st** out) {
  if (!d.mig) return NVML_ERROR_NOT_SUPPORTED;
  const hf::gpu::MigProfile* profile = ProfileBySelector(d, selector);
  if (profile == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto same =
      std::count_if(d.gpu_instances.begin(), d.gpu_instances.end(),
                    [&](const auto& gi) { return gi->selector == selector; });
  if (same >= profile->max_instances) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  auto is_free = [&](const hf::gpu::MigPlacement& p) {
    return std::none_of(
        d.gpu_instances.begin(), d.gpu_instances.end(),
        [&](const auto& gi) { return gi->placement.Overlaps(p); });
  };
  std::optional<hf::gpu::MigPlacement> where;
  if (placement != nullptr) {
    if (std::find(profile->placements.begin(), profile->placements.end(),
                  *placement) == profile->placements.end()) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!is_free(*placement)) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    where = *placement;
  } else {
    for (const hf::gpu::MigPlacement& p : profile->placements) {
      if (is_free(p)) {
        where = p;
        break;
      }
    }
    if (!where) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  unsigned int id = 1;
  while (std::any_of(d.gpu_instances.begin(), d.gpu_instances.end(),
                     [&](const auto& gi) { return gi->id == id; })) {
    ++id;
  }
  auto gi = std::make_unique<nvmlGpuInstance_st>();
  gi->device = d.handle.index;
  gi->id = id;
  gi->selector = selector;
  gi->profile = profile;
  gi->placement = *where;
  *out = gi.get();
  d.gpu_instances.push_back(std::move(gi));
  return NVML_SUCCESS;
}

// REQUIRES: S().mu held.
nvmlReturn_t CreateCi(FakeDevice& d, nvmlGpuInstance_st& gi,
                      unsigned int selector, nvmlComputeInstance_st** out) {
  const unsigned int slices = ComputeSlices(selector);
  const auto gi_slices = static_cast<unsigned int>(gi.profile->compute_slices);
  if (slices == 0 || slices > gi_slices) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int used = 0;
  for (const auto& ci : gi.compute_instances) used += ci->slices;
  if (used + slices > gi_slices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  unsigned int id = 0;
  while (std::any_of(gi.compute_instances.begin(), gi.compute_instances.end(),
                     [&](const auto& ci) { return ci->id == id; })) {
    ++id;
  }
  auto ci = std::make_unique<nvmlComputeInstance_st>();
  ci->gpu_instance = &gi;
  ci->id = id;
  ci->selector = selector;
  ci->slices = slices;
  ci->uuid = MigUuid(d.handle.index, gi.id, id);
  ci->mig_handle.index = d.handle.index;
  ci->mig_handle.mig = ci.get();
  *out = ci.get();
  gi.compute_instances.push_back(std::move(ci));
  return NVML_SUCCESS;
}

nvmlReturn_t ParseErrors(const nlohmann::json& j,
                         std::map<std::string, int>* out) {
  if (!j.is_object()) return NVML_ERROR_UNKNOWN;
  for (auto it = j.begin(); it != j.end(); ++it) {
    (*out)[it.key()] = it.value().get<int>();
  }
  return NVML_SUCCESS;
}

// REQUIRES: S().mu held. Resets the state from HF_FAKE_NVML_CONFIG.
nvmlReturn_t LoadConfig() {
  State& s = S();
  s.devices.clear();
  s.errors.clear();
  s.call_log.clear();
  const char* path = std::getenv("HF_FAKE_NVML_CONFIG");
  if (path == nullptr || *path == '\0') return NVML_SUCCESS;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "fake_nvml: cannot read %s\n", path);
    return NVML_ERROR_UNKNOWN;
  }
  try {
    const nlohmann::json config = nlohmann::json::parse(in);
    if (config.contains("init_error")) {
      const int rc = config["init_error"].get<int>();
      if (rc != NVML_SUCCESS) return static_cast<nvmlReturn_t>(rc);
    }
    s.call_log = config.value("call_log", std::string());
    if (config.contains("errors")) ParseErrors(config["errors"], &s.errors);
    int index = 0;
    for (const nlohmann::json& dj :
         config.value("devices", nlohmann::json::array())) {
      auto d = std::make_unique<FakeDevice>();
      d->handle.index = index++;
      d->name = dj.value("name", std::string("NVIDIA Fake GPU"));
      d->uuid = dj.value("uuid", "GPU-fa4e0000-0000-4000-8000-00000000000" +
                                     std::to_string(d->handle.index));
      d->total_bytes = dj.value("memory_total_mib", 0ULL) * kMib;
      d->used_bytes = dj.value("memory_used_mib", 0ULL) * kMib;
      d->reserved_bytes = dj.value("memory_reserved_mib", 0ULL) * kMib;
      if (dj.contains("cc")) {
        d->cc_major = dj["cc"].at(0).get<int>();
        d->cc_minor = dj["cc"].at(1).get<int>();
      }
      d->mig = dj.value("mig", false);
      d->lost = dj.value("lost", false);
      d->lost_error = static_cast<nvmlReturn_t>(
          dj.value("lost_error", static_cast<int>(NVML_ERROR_GPU_IS_LOST)));
      d->handle_error = static_cast<nvmlReturn_t>(dj.value("handle_error", 0));
      if (dj.contains("errors")) ParseErrors(dj["errors"], &d->errors);
      d->table = hf::gpu::FindMigTable(
          d->name, static_cast<hf::MemoryMib>(d->total_bytes / kMib));
      d->process_growth = dj.value("process_growth", 0U);
      if (dj.contains("fake_cuda")) {
        const nlohmann::json& fj = dj["fake_cuda"];
        hf::fake_gpu::DeviceOptions options;
        options.memory_bytes = d->total_bytes;
        d->gpu = std::make_unique<hf::fake_gpu::SharedDevice>();
        std::string error;
        if (!d->gpu->Open(fj.at("dir").get<std::string>(), fj.value("index", 0),
                          options, &error)) {
          std::fprintf(stderr, "fake_nvml: %s\n", error.c_str());
          return NVML_ERROR_UNKNOWN;
        }
      }
      for (const nlohmann::json& pj :
           dj.value("processes", nlohmann::json::array())) {
        FakeProcess p;
        p.pid = pj.value("pid", 0U);
        p.used_bytes = pj.value("used_mib", 0ULL) * kMib;
        p.gpu_instance_id = pj.value("gpu_instance_id", kNvmlNoInstanceId);
        p.compute_instance_id =
            pj.value("compute_instance_id", kNvmlNoInstanceId);
        d->processes.push_back(p);
      }
      for (const nlohmann::json& gj :
           dj.value("gpu_instances", nlohmann::json::array())) {
        const hf::gpu::MigProfile* profile =
            d->table == nullptr
                ? nullptr
                : hf::gpu::FindProfile(*d->table, gj.value("profile", ""));
        if (profile == nullptr || !Selector(*profile)) {
          std::fprintf(stderr, "fake_nvml: unknown profile in %s\n", path);
          return NVML_ERROR_UNKNOWN;
        }
        hf::gpu::MigPlacement where{gj.value("start", 0),
                                    profile->memory_slices};
        nvmlGpuInstance_st* gi = nullptr;
        if (CreateGi(*d, *Selector(*profile), &where, &gi) != NVML_SUCCESS) {
          std::fprintf(stderr, "fake_nvml: bad gpu_instances in %s\n", path);
          return NVML_ERROR_UNKNOWN;
        }
        if (gj.value("ci", true)) {
          nvmlComputeInstance_st* ci = nullptr;
          const unsigned int slices =
              static_cast<unsigned int>(profile->compute_slices);
          for (unsigned int sel = 0; sel < NVML_COMPUTE_INSTANCE_PROFILE_COUNT;
               ++sel) {
            if (ComputeSlices(sel) == slices) {
              (void)CreateCi(*d, *gi, sel, &ci);
              break;
            }
          }
        }
      }
      s.devices.push_back(std::move(d));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_nvml: bad config %s: %s\n", path, e.what());
    s.devices.clear();
    return NVML_ERROR_UNKNOWN;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t CopyString(const std::string& value, char* out,
                        unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

// REQUIRES: S().mu held. MIG devices of a GPU in (GI id, CI id) order.
[[maybe_unused]] std::vector<nvmlComputeInstance_st*> MigDevices(
    FakeDevice& d) {
  std::vector<nvmlComputeInstance_st*> out;
  for (auto& gi : d.gpu_instances) {
    for (auto& ci : gi->compute_instances) out.push_back(ci.get());
  }
  std::sort(out.begin(), out.end(), [](const auto* a, const auto* b) {
    return std::make_pair(a->gpu_instance->id, a->id) <
           std::make_pair(b->gpu_instance->id, b->id);
  });
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Initialisation and errors.

HF_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  return Guarded([] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.init_count == 0) {
      const nvmlReturn_t rc = LoadConfig();
      if (rc != NVML_SUCCESS) return rc;
    }
    ++s.init_count;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  return Guarded([] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    --s.init_count;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  return ErrorText(result);
}

// ---------------------------------------------------------------------------
// Device queries.

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    if (nvmlReturn_t rc = Enter("nvmlDeviceGetCount_v2"); rc != NVML_SUCCESS) {
      return rc;
    }
    if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = static_cast<unsigned int>(S().devices.size());
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    if (nvmlReturn_t rc = Enter("nvmlDeviceGetHandleByIndex_v2");
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (device == nullptr || index >= S().devices.size()) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    FakeDevice& d = *S().devices[index];
    if (d.handle_error != NVML_SUCCESS) return d.handle_error;
    *device = &d.handle;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                              unsigned int length) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetName", device, &d, &mig, true);
        rc != NVML_SUCCESS) {
      return rc;
    }
    std::string value = d->name;
    if (mig != nullptr) value += " MIG " + mig->gpu_instance->profile->name;
    return CopyString(value, name, length);
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                              unsigned int length) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetUUID", device, &d, &mig, true);
        rc != NVML_SUCCESS) {
      return rc;
    }
    return CopyString(mig != nullptr ? mig->uuid : d->uuid, uuid, length);
  });
}

namespace {
// REQUIRES: S().mu held. Total/used/reserved bytes of a device or of a MIG
// device (its profile's share of the card).
void MemoryOf(const FakeDevice& d, const nvmlComputeInstance_st* mig,
              unsigned long long* total, unsigned long long* used,
              unsigned long long* reserved) {
  if (mig == nullptr) {
    *total = d.total_bytes;
    *used = d.used_bytes + (d.gpu != nullptr ? d.gpu->used_bytes() : 0);
    *reserved = d.reserved_bytes;
    return;
  }
  *total =
      static_cast<unsigned long long>(mig->gpu_instance->profile->memory_mib) *
      kMib;
  *used = 0;
  *reserved = 0;
  for (const FakeProcess& p : d.processes) {
    if (p.gpu_instance_id == mig->gpu_instance->id) *used += p.used_bytes;
  }
}
}  // namespace

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                    nvmlMemory_t* memory) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetMemoryInfo", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = 0;
    unsigned long long used = 0;
    unsigned long long reserved = 0;
    MemoryOf(*d, mig, &total, &used, &reserved);
    // v1's `used` is "Sum of Reserved and Allocated device memory" ([H]).
    memory->total = total;
    memory->used = std::min(total, used + reserved);
    memory->free = total - memory->used;
    return NVML_SUCCESS;
  });
}

#ifndef HF_FAKE_NVML_LEGACY
HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetMemoryInfo_v2", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) {
      return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    unsigned long long total = 0;
    unsigned long long used = 0;
    unsigned long long reserved = 0;
    MemoryOf(*d, mig, &total, &used, &reserved);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = std::min(total, used);
    memory->free = total - std::min(total, used + reserved);
    return NVML_SUCCESS;
  });
}
#endif

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(
    nvmlDevice_t device, int* major, int* minor) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetCudaComputeCapability", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (major == nullptr || minor == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice("nvmlDeviceGetComputeRunningProcesses_v3",
                                      device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<FakeProcess> visible;
    for (const FakeProcess& p : d->processes) {
      if (mig == nullptr || p.gpu_instance_id == mig->gpu_instance->id) {
        visible.push_back(p);
      }
    }
    if (d->gpu != nullptr && mig == nullptr) {
      // Every process with a context on the shared device; its memory
      // includes its contexts' (the driver's own), as on a real GPU.
      for (const hf::fake_gpu::ProcessUsage& u : d->gpu->Processes()) {
        if (u.contexts == 0) continue;
        FakeProcess p;
        p.pid = static_cast<unsigned int>(u.pid);
        p.used_bytes = u.used_bytes;
        visible.push_back(p);
      }
    }
    const auto needed = static_cast<unsigned int>(visible.size());
    if (*infoCount < needed) {
      *infoCount = needed;
      // Processes that start between this answer and the next call.
      if (d->process_growth > 0 && d->growths_done < kMaxProcessGrowths) {
        ++d->growths_done;
        for (unsigned int i = 0; i < d->process_growth; ++i) {
          FakeProcess p;
          p.pid = d->next_pid++;
          p.used_bytes = kMib;
          d->processes.push_back(p);
        }
      }
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (needed > 0 && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < needed; ++i) {
      infos[i].pid = visible[i].pid;
      infos[i].usedGpuMemory = visible[i].used_bytes;
      infos[i].gpuInstanceId =
          d->mig ? visible[i].gpu_instance_id : kNvmlNoInstanceId;
      infos[i].computeInstanceId =
          d->mig ? visible[i].compute_instance_id : kNvmlNoInstanceId;
    }
    *infoCount = needed;
    return NVML_SUCCESS;
  });
}

namespace {
// CLOCK_REALTIME microseconds (NVML's sample timestamps) and the
// CLOCK_MONOTONIC nanoseconds of the shared device, now.
void Clocks(unsigned long long* real_us, int64_t* mono_ns) {
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  *mono_ns = hf::fake_gpu::SharedDevice::NowNs();
  *real_us = static_cast<unsigned long long>(real.tv_sec) * 1000000ULL +
             static_cast<unsigned long long>(real.tv_nsec) / 1000ULL;
}
}  // namespace

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetProcessUtilization", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig != nullptr) return NVML_ERROR_NOT_SUPPORTED;  // as on MIG GPUs
    unsigned long long now_us = 0;
    int64_t now_ns = 0;
    Clocks(&now_us, &now_ns);
    std::vector<hf::fake_gpu::ProcessUtilization> busy;
    if (d->gpu != nullptr) {
      // lastSeenTimeStamp 0: the last second (a real GPU keeps a short
      // history of samples too).
      const unsigned long long since_us =
          lastSeenTimeStamp == 0 || lastSeenTimeStamp > now_us
              ? (now_us > 1000000ULL ? now_us - 1000000ULL : 0)
              : lastSeenTimeStamp;
      const int64_t since_ns =
          now_ns - static_cast<int64_t>((now_us - since_us) * 1000ULL);
      for (const auto& p : d->gpu->UtilizationSince(since_ns).processes) {
        if (p.executed_ns > 0) busy.push_back(p);
      }
    }
    const auto needed = static_cast<unsigned int>(busy.size());
    if (utilization == nullptr || *processSamplesCount < needed) {
      *processSamplesCount = needed;
      return needed == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (needed == 0) {
      *processSamplesCount = 0;
      return NVML_ERROR_NOT_FOUND;
    }
    for (unsigned int i = 0; i < needed; ++i) {
      utilization[i] = nvmlProcessUtilizationSample_t{};
      utilization[i].pid = static_cast<unsigned int>(busy[i].pid);
      utilization[i].timeStamp = now_us;
      utilization[i].smUtil = busy[i].sm_percent;
    }
    *processSamplesCount = needed;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t device, nvmlUtilization_t* utilization) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetUtilizationRates", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig != nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *utilization = nvmlUtilization_t{};
    if (d->gpu != nullptr) {
      // The past second, as the driver's sample period is up to one.
      const int64_t now = hf::fake_gpu::SharedDevice::NowNs();
      utilization->gpu =
          d->gpu->UtilizationSince(now - 1'000'000'000).gpu_percent;
    }
    return NVML_SUCCESS;
  });
}

// ---------------------------------------------------------------------------
// Multi-Instance GPU.

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                                 unsigned int* currentMode,
                                                 unsigned int* pendingMode) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice("nvmlDeviceGetMigMode", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (currentMode == nullptr || pendingMode == nullptr || mig != nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (d->table == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = d->mig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = *currentMode;
    return NVML_SUCCESS;
  });
}

namespace {
// REQUIRES: S().mu held. Profile info of `selector` on a MIG-enabled GPU.
nvmlReturn_t ProfileInfo(const FakeDevice& d, unsigned int selector,
                         nvmlGpuInstanceProfileInfo_t* info,
                         std::string* name) {
  if (selector >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!d.mig) return NVML_ERROR_NOT_SUPPORTED;
  const hf::gpu::MigProfile* p = ProfileBySelector(d, selector);
  if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  *info = {};
  info->id = ProfileId(*p, selector);
  info->isP2pSupported = 0;
  info->sliceCount = static_cast<unsigned int>(p->compute_slices);
  info->instanceCount = static_cast<unsigned int>(p->max_instances);
  info->multiprocessorCount = info->sliceCount * 16;
  info->copyEngineCount = info->sliceCount;
  info->memorySizeMB = static_cast<unsigned long long>(p->memory_mib);
  *name = "MIG " + p->name;
  return NVML_SUCCESS;
}
}  // namespace

HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                    nvmlGpuInstanceProfileInfo_t* info) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice("nvmlDeviceGetGpuInstanceProfileInfo",
                                      device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (info == nullptr || mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::string name;
    return ProfileInfo(*d, profile, info, &name);
  });
}

#ifndef HF_FAKE_NVML_LEGACY
HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                     nvmlGpuInstanceProfileInfo_v2_t* info) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice("nvmlDeviceGetGpuInstanceProfileInfoV",
                                      device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (info == nullptr || mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) {
      return NVML_ERROR_INVALID_ARGUMENT;  // [H]: "info->version invalid"
    }
    nvmlGpuInstanceProfileInfo_t v1{};
    std::string name;
    const nvmlReturn_t rc = ProfileInfo(*d, profile, &v1, &name);
    if (rc != NVML_SUCCESS) return rc;
    info->id = v1.id;
    info->isP2pSupported = v1.isP2pSupported;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    std::memset(info->name, 0, sizeof(info->name));
    std::memcpy(info->name, name.c_str(),
                std::min(name.size(), sizeof(info->name) - 1));
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId,
    nvmlGpuInstancePlacement_t* placements, unsigned int* count) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice(
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (count == nullptr || mig != nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig) return NVML_ERROR_NOT_SUPPORTED;
    const std::optional<unsigned int> selector = SelectorById(*d, profileId);
    if (!selector) return NVML_ERROR_INVALID_ARGUMENT;
    const auto& legal = ProfileBySelector(*d, *selector)->placements;
    const auto n = static_cast<unsigned int>(legal.size());
    if (placements == nullptr) {
      *count = n;
      return NVML_SUCCESS;
    }
    if (*count < n) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < n; ++i) {
      placements[i].start = static_cast<unsigned int>(legal[i].start);
      placements[i].size = static_cast<unsigned int>(legal[i].size);
    }
    *count = n;
    return NVML_SUCCESS;
  });
}
#endif

namespace {
// REQUIRES: S().mu held. Shared body of the two create calls.
nvmlReturn_t CreateGiEntry(const char* call, nvmlDevice_t device,
                           unsigned int profileId,
                           const nvmlGpuInstancePlacement_t* placement,
                           bool with_placement,
                           nvmlGpuInstance_t* gpuInstance) {
  FakeDevice* d = nullptr;
  nvmlComputeInstance_st* mig = nullptr;
  nvmlReturn_t rc = EnterDevice(call, device, &d, &mig);
  if (rc == NVML_SUCCESS && (gpuInstance == nullptr || mig != nullptr ||
                             (with_placement && placement == nullptr))) {
    rc = NVML_ERROR_INVALID_ARGUMENT;
  }
  nvmlGpuInstance_st* gi = nullptr;
  if (rc == NVML_SUCCESS) {
    const std::optional<unsigned int> selector = SelectorById(*d, profileId);
    if (!d->mig) {
      rc = NVML_ERROR_NOT_SUPPORTED;
    } else if (!selector) {
      rc = NVML_ERROR_INVALID_ARGUMENT;
    } else if (placement != nullptr) {
      const hf::gpu::MigPlacement where{static_cast<int>(placement->start),
                                        static_cast<int>(placement->size)};
      rc = CreateGi(*d, *selector, &where, &gi);
    } else {
      rc = CreateGi(*d, *selector, nullptr, &gi);
    }
  }
  if (rc == NVML_SUCCESS) *gpuInstance = gi;
  const int index = d != nullptr ? d->handle.index : -1;
  LogCall(S(), std::string(call) + " gpu=" + std::to_string(index) +
                   " profile=" + std::to_string(profileId) +
                   " gi=" + (gi != nullptr ? std::to_string(gi->id) : "-") +
                   " rc=" + std::to_string(rc));
  return rc;
}
}  // namespace

HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                            nvmlGpuInstance_t* gpuInstance) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    return CreateGiEntry("nvmlDeviceCreateGpuInstance", device, profileId,
                         nullptr, /*with_placement=*/false, gpuInstance);
  });
}

#ifndef HF_FAKE_NVML_LEGACY
HF_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId,
    const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    return CreateGiEntry("nvmlDeviceCreateGpuInstanceWithPlacement", device,
                         profileId, placement, /*with_placement=*/true,
                         gpuInstance);
  });
}
#endif

HF_NVML_EXPORT nvmlReturn_t
nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return Guarded([&] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    FakeDevice* d = nullptr;
    nvmlGpuInstance_st* gi = FindGpuInstance(gpuInstance, &d);
    nvmlReturn_t rc = EnterInstance("nvmlGpuInstanceDestroy", gi, d);
    const std::string ids = gi != nullptr
                                ? " gpu=" + std::to_string(gi->device) +
                                      " gi=" + std::to_string(gi->id)
                                : std::string(" gi=?");
    if (rc == NVML_SUCCESS) {
      const bool busy = !gi->compute_instances.empty() ||
                        std::any_of(d->processes.begin(), d->processes.end(),
                                    [&](const FakeProcess& p) {
                                      return p.gpu_instance_id == gi->id;
                                    });
      if (busy) {
        rc = NVML_ERROR_IN_USE;
      } else {
        std::erase_if(d->gpu_instances,
                      [&](const auto& owned) { return owned.get() == gi; });
      }
    }
    LogCall(s, "nvmlGpuInstanceDestroy" + ids + " rc=" + std::to_string(rc));
    return rc;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(
    nvmlDevice_t device, unsigned int profileId,
    nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetGpuInstances", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (gpuInstances == nullptr || count == nullptr || mig != nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->mig) return NVML_ERROR_NOT_SUPPORTED;
    const std::optional<unsigned int> selector = SelectorById(*d, profileId);
    if (!selector) return NVML_ERROR_INVALID_ARGUMENT;
    // [H]: the buffer holds the profile's instanceCount; count is output.
    unsigned int n = 0;
    for (auto& gi : d->gpu_instances) {
      if (gi->selector == *selector) gpuInstances[n++] = gi.get();
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(
    nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t* gpuInstance) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetGpuInstanceById", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (gpuInstance == nullptr || mig != nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->mig) return NVML_ERROR_NOT_SUPPORTED;
    for (auto& gi : d->gpu_instances) {
      if (gi->id == id) {
        *gpuInstance = gi.get();
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(
    nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlGpuInstance_st* gi = FindGpuInstance(gpuInstance, &d);
    if (nvmlReturn_t rc = EnterInstance("nvmlGpuInstanceGetInfo", gi, d);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &d->handle;
    info->id = gi->id;
    info->profileId = ProfileId(*gi->profile, gi->selector);
    info->placement.start = static_cast<unsigned int>(gi->placement.start);
    info->placement.size = static_cast<unsigned int>(gi->placement.size);
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile,
    unsigned int engProfile, nvmlComputeInstanceProfileInfo_t* info) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlGpuInstance_st* gi = FindGpuInstance(gpuInstance, &d);
    if (nvmlReturn_t rc = EnterInstance(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, d);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (info == nullptr || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const unsigned int slices = ComputeSlices(profile);
    const auto gi_slices =
        static_cast<unsigned int>(gi->profile->compute_slices);
    if (slices == 0 || slices > gi_slices) return NVML_ERROR_NOT_SUPPORTED;
    *info = {};
    info->id = profile;
    info->sliceCount = slices;
    info->instanceCount = gi_slices / slices;
    info->multiprocessorCount = slices * 16;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstance_t* computeInstance) {
  return Guarded([&] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    FakeDevice* d = nullptr;
    nvmlGpuInstance_st* gi = FindGpuInstance(gpuInstance, &d);
    nvmlReturn_t rc =
        EnterInstance("nvmlGpuInstanceCreateComputeInstance", gi, d);
    if (rc == NVML_SUCCESS && computeInstance == nullptr) {
      rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlComputeInstance_st* ci = nullptr;
    if (rc == NVML_SUCCESS) rc = CreateCi(*d, *gi, profileId, &ci);
    if (rc == NVML_SUCCESS) *computeInstance = ci;
    LogCall(s, std::string("nvmlGpuInstanceCreateComputeInstance") +
                   (gi != nullptr ? " gpu=" + std::to_string(gi->device) +
                                        " gi=" + std::to_string(gi->id)
                                  : std::string(" gi=?")) +
                   " ci=" + (ci != nullptr ? std::to_string(ci->id) : "-") +
                   " rc=" + std::to_string(rc));
    return rc;
  });
}

HF_NVML_EXPORT nvmlReturn_t
nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return Guarded([&] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* ci = FindComputeInstance(computeInstance, &d);
    nvmlReturn_t rc = EnterInstance("nvmlComputeInstanceDestroy", ci, d);
    std::string ids = " ci=?";
    if (ci != nullptr) {
      ids = " gpu=" + std::to_string(ci->gpu_instance->device) +
            " gi=" + std::to_string(ci->gpu_instance->id) +
            " ci=" + std::to_string(ci->id);
    }
    if (rc == NVML_SUCCESS) {
      const bool busy = std::any_of(
          d->processes.begin(), d->processes.end(), [&](const FakeProcess& p) {
            return p.gpu_instance_id == ci->gpu_instance->id &&
                   (p.compute_instance_id == ci->id ||
                    p.compute_instance_id == kNvmlNoInstanceId);
          });
      if (busy) {
        rc = NVML_ERROR_IN_USE;
      } else {
        std::erase_if(ci->gpu_instance->compute_instances,
                      [&](const auto& owned) { return owned.get() == ci; });
      }
    }
    LogCall(s,
            "nvmlComputeInstanceDestroy" + ids + " rc=" + std::to_string(rc));
    return rc;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstance_t* computeInstances, unsigned int* count) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlGpuInstance_st* gi = FindGpuInstance(gpuInstance, &d);
    if (nvmlReturn_t rc =
            EnterInstance("nvmlGpuInstanceGetComputeInstances", gi, d);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (computeInstances == nullptr || count == nullptr ||
        ComputeSlices(profileId) == 0) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int n = 0;
    for (auto& ci : gi->compute_instances) {
      if (ci->selector == profileId) computeInstances[n++] = ci.get();
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(
    nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t* info) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* ci = FindComputeInstance(computeInstance, &d);
    if (nvmlReturn_t rc = EnterInstance("nvmlComputeInstanceGetInfo_v2", ci, d);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &d->handle;
    info->gpuInstance = ci->gpu_instance;
    info->id = ci->id;
    info->profileId = ci->selector;
    info->placement.start = 0;
    info->placement.size = ci->slices;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetMaxMigDeviceCount", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = d->mig && d->table != nullptr
                 ? static_cast<unsigned int>(d->table->compute_slices)
                 : 0;
    return NVML_SUCCESS;
  });
}

#ifndef HF_FAKE_NVML_LEGACY
HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(
    nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc = EnterDevice("nvmlDeviceGetMigDeviceHandleByIndex",
                                      device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (migDevice == nullptr || mig != nullptr || d->table == nullptr ||
        index >= static_cast<unsigned int>(d->table->compute_slices)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->mig) return NVML_ERROR_NOT_SUPPORTED;
    const std::vector<nvmlComputeInstance_st*> devices = MigDevices(*d);
    if (index >= devices.size()) return NVML_ERROR_NOT_FOUND;
    *migDevice = &devices[index]->mig_handle;
    return NVML_SUCCESS;
  });
}
#endif

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device,
                                                       unsigned int* id) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetGpuInstanceId", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *id = mig->gpu_instance->id;
    return NVML_SUCCESS;
  });
}

HF_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                           unsigned int* id) {
  return Guarded([&] {
    std::lock_guard<std::mutex> lock(S().mu);
    FakeDevice* d = nullptr;
    nvmlComputeInstance_st* mig = nullptr;
    if (nvmlReturn_t rc =
            EnterDevice("nvmlDeviceGetComputeInstanceId", device, &d, &mig);
        rc != NVML_SUCCESS) {
      return rc;
    }
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *id = mig->id;
    return NVML_SUCCESS;
  });
}
