// NvmlGpuDriver: the NVML-backed GpuDriver. See nvml_driver.h for the
// contract and docs/NVML.md for the entry points, struct versions, profile
// mapping and error table.
//
// Thread-safety: see nvml_driver.h (immutable after construction; MIG
// calls serialised by mig_mu_).
#include "gpu/nvml/nvml_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/mig_profiles.h"
#include "gpu/nvml/nvml_api.h"

namespace hf::gpu {

// The resolved entry points. A field is null when the library lacks the
// symbol; the required ones are checked in Load(), the optional ones where
// they are used. Fields are named after the NVML symbol they hold.
struct NvmlGpuDriver::Api {
  // Required: without these the driver is Unavailable.
  decltype(&::nvmlInit_v2) nvmlInit_v2 = nullptr;
  decltype(&::nvmlShutdown) nvmlShutdown = nullptr;
  decltype(&::nvmlErrorString) nvmlErrorString = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) nvmlDeviceGetCount_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) nvmlDeviceGetHandleByIndex_v2 =
      nullptr;
  decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
  decltype(&::nvmlDeviceGetName) nvmlDeviceGetName = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) nvmlDeviceGetMemoryInfo = nullptr;

  // Optional: a missing one disables the feature that needs it.
  decltype(&::nvmlDeviceGetMemoryInfo_v2) nvmlDeviceGetMemoryInfo_v2 = nullptr;
  decltype(&::nvmlDeviceGetCudaComputeCapability)
      nvmlDeviceGetCudaComputeCapability = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3)
      nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;
  decltype(&::nvmlDeviceGetProcessUtilization) nvmlDeviceGetProcessUtilization =
      nullptr;
  decltype(&::nvmlDeviceGetMigMode) nvmlDeviceGetMigMode = nullptr;
  decltype(&::nvmlDeviceGetGpuInstanceProfileInfo)
      nvmlDeviceGetGpuInstanceProfileInfo = nullptr;
  decltype(&::nvmlDeviceGetGpuInstanceProfileInfoV)
      nvmlDeviceGetGpuInstanceProfileInfoV = nullptr;
  decltype(&::nvmlDeviceGetGpuInstancePossiblePlacements_v2)
      nvmlDeviceGetGpuInstancePossiblePlacements_v2 = nullptr;
  decltype(&::nvmlDeviceCreateGpuInstance) nvmlDeviceCreateGpuInstance =
      nullptr;
  decltype(&::nvmlDeviceCreateGpuInstanceWithPlacement)
      nvmlDeviceCreateGpuInstanceWithPlacement = nullptr;
  decltype(&::nvmlGpuInstanceDestroy) nvmlGpuInstanceDestroy = nullptr;
  decltype(&::nvmlDeviceGetGpuInstances) nvmlDeviceGetGpuInstances = nullptr;
  decltype(&::nvmlDeviceGetGpuInstanceById) nvmlDeviceGetGpuInstanceById =
      nullptr;
  decltype(&::nvmlGpuInstanceGetInfo) nvmlGpuInstanceGetInfo = nullptr;
  decltype(&::nvmlGpuInstanceGetComputeInstanceProfileInfo)
      nvmlGpuInstanceGetComputeInstanceProfileInfo = nullptr;
  decltype(&::nvmlGpuInstanceCreateComputeInstance)
      nvmlGpuInstanceCreateComputeInstance = nullptr;
  decltype(&::nvmlComputeInstanceDestroy) nvmlComputeInstanceDestroy = nullptr;
  decltype(&::nvmlGpuInstanceGetComputeInstances)
      nvmlGpuInstanceGetComputeInstances = nullptr;
  decltype(&::nvmlComputeInstanceGetInfo_v2) nvmlComputeInstanceGetInfo_v2 =
      nullptr;
  decltype(&::nvmlDeviceGetMaxMigDeviceCount) nvmlDeviceGetMaxMigDeviceCount =
      nullptr;
  decltype(&::nvmlDeviceGetMigDeviceHandleByIndex)
      nvmlDeviceGetMigDeviceHandleByIndex = nullptr;
  decltype(&::nvmlDeviceGetGpuInstanceId) nvmlDeviceGetGpuInstanceId = nullptr;
  decltype(&::nvmlDeviceGetComputeInstanceId) nvmlDeviceGetComputeInstanceId =
      nullptr;
};

// One GPU instance profile as this GPU's NVML reports it.
struct NvmlGpuDriver::Profile {
  std::string name;       // "1g.10gb", no "MIG " prefix; "" when unknown
  unsigned int selector;  // the NVML_GPU_INSTANCE_PROFILE_* it was read with
  nvmlGpuInstanceProfileInfo_t info;  // info.id is what create/list take
};

namespace {

using Api = NvmlGpuDriver::Api;
using Profile = NvmlGpuDriver::Profile;

constexpr unsigned long long kBytesPerMib = 1024ULL * 1024ULL;
// ListProcesses gives up after this many INSUFFICIENT_SIZE answers in a row
// (the process table grew between every pair of calls).
constexpr int kMaxProcessListAttempts = 8;

// dlsym into a typed function pointer. POSIX guarantees that the object
// pointer dlsym returns converts to the function pointer it names.
template <typename FnPtr>
void ResolveSymbol(void* library, const char* name, FnPtr& out) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dlsym ABI
  out = reinterpret_cast<FnPtr>(dlsym(library, name));
}

Status MakeStatus(StatusCode code, std::string message) {
  switch (code) {
    case StatusCode::kOk:
      return Status::Ok();
    case StatusCode::kInvalidArgument:
      return Status::InvalidArgument(std::move(message));
    case StatusCode::kNotFound:
      return Status::NotFound(std::move(message));
    case StatusCode::kAlreadyExists:
      return Status::AlreadyExists(std::move(message));
    case StatusCode::kFailedPrecondition:
      return Status::FailedPrecondition(std::move(message));
    case StatusCode::kResourceExhausted:
      return Status::ResourceExhausted(std::move(message));
    case StatusCode::kUnavailable:
      return Status::Unavailable(std::move(message));
    case StatusCode::kUnauthenticated:
      return Status::Unauthenticated(std::move(message));
    case StatusCode::kPermissionDenied:
      return Status::PermissionDenied(std::move(message));
    case StatusCode::kAborted:
      return Status::Aborted(std::move(message));
    case StatusCode::kInternal:
      break;
  }
  return Status::Internal(std::move(message));
}

// The NVML error as a Status, with `context` ("nvmlX(GPU 2)") in front.
Status Err(const Api& api, nvmlReturn_t rc, std::string_view context) {
  const char* text =
      api.nvmlErrorString != nullptr ? api.nvmlErrorString(rc) : nullptr;
  return NvmlStatus(rc, context, text);
}

std::string Ctx(std::string_view call, int gpu_index) {
  return std::string(call) + "(GPU " + std::to_string(gpu_index) + ")";
}

std::string Ctx(std::string_view call, int gpu_index, std::string_view what) {
  return std::string(call) + "(GPU " + std::to_string(gpu_index) + ", " +
         std::string(what) + ")";
}

// FailedPrecondition naming a symbol this libnvidia-ml lacks.
Status MissingSymbol(std::string_view symbol, std::string_view feature) {
  return Status::FailedPrecondition(
      std::string(symbol) + " is not in this libnvidia-ml (driver too old?); " +
      std::string(feature) + " is unavailable");
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// "MIG 1g.10gb" / "1G.10GB" -> "1g.10gb".
std::string CanonicalProfileName(std::string_view name) {
  std::string lower = ToLower(name);
  if (lower.starts_with("mig ")) lower.erase(0, 4);
  return lower;
}

std::string PlacementText(unsigned int start, unsigned int size) {
  return std::to_string(start) + ":" + std::to_string(size);
}

MemoryMib BytesToMibFloor(unsigned long long bytes) {
  return static_cast<MemoryMib>(bytes / kBytesPerMib);
}

MemoryMib BytesToMibCeil(unsigned long long bytes) {
  return static_cast<MemoryMib>((bytes + kBytesPerMib - 1) / kBytesPerMib);
}

// A NUL-terminated string out of a fixed NVML buffer (never reads past it).
std::string FromBuffer(const char* buffer, std::size_t size) {
  const char* end = std::find(buffer, buffer + size, '\0');
  return std::string(buffer, end);
}

// Memory info: nvmlDeviceGetMemoryInfo_v2 where the library has it (it
// separates reserved memory), else v1. Returns the NVML code.
nvmlReturn_t ReadMemory(const Api& api, nvmlDevice_t device,
                        unsigned long long* total, unsigned long long* used,
                        std::string* call) {
  if (api.nvmlDeviceGetMemoryInfo_v2 != nullptr) {
    nvmlMemory_v2_t memory{};
    memory.version = nvmlMemory_v2;
    *call = "nvmlDeviceGetMemoryInfo_v2";
    const nvmlReturn_t rc = api.nvmlDeviceGetMemoryInfo_v2(device, &memory);
    if (rc == NVML_SUCCESS) {
      *total = memory.total;
      *used = memory.used;
    }
    // A driver that rejects this struct version still has v1.
    if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) return rc;
  }
  nvmlMemory_t memory{};
  *call = "nvmlDeviceGetMemoryInfo";
  const nvmlReturn_t rc = api.nvmlDeviceGetMemoryInfo(device, &memory);
  if (rc == NVML_SUCCESS) {
    *total = memory.total;
    *used = memory.used;
  }
  return rc;
}

// The device handle for `gpu_index`; NotFound when NVML has no such index.
StatusOr<nvmlDevice_t> DeviceHandle(const Api& api, int gpu_index) {
  unsigned int count = 0;
  nvmlReturn_t rc = api.nvmlDeviceGetCount_v2(&count);
  if (rc != NVML_SUCCESS) return Err(api, rc, "nvmlDeviceGetCount_v2");
  if (gpu_index < 0 || static_cast<unsigned int>(gpu_index) >= count) {
    return Status::NotFound("GPU " + std::to_string(gpu_index) +
                            " not found: NVML sees " + std::to_string(count) +
                            " GPU(s)");
  }
  nvmlDevice_t device = nullptr;
  rc = api.nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned int>(gpu_index),
                                         &device);
  if (rc != NVML_SUCCESS) {
    return Err(api, rc, Ctx("nvmlDeviceGetHandleByIndex_v2", gpu_index));
  }
  return device;
}

// The symbols every MIG operation needs.
Status RequireMigSymbols(const Api& api) {
  const std::pair<bool, const char*> required[] = {
      {api.nvmlDeviceGetMigMode != nullptr, "nvmlDeviceGetMigMode"},
      {api.nvmlDeviceGetGpuInstanceProfileInfo != nullptr ||
           api.nvmlDeviceGetGpuInstanceProfileInfoV != nullptr,
       "nvmlDeviceGetGpuInstanceProfileInfo"},
      {api.nvmlDeviceGetGpuInstances != nullptr, "nvmlDeviceGetGpuInstances"},
      {api.nvmlDeviceGetGpuInstanceById != nullptr,
       "nvmlDeviceGetGpuInstanceById"},
      {api.nvmlGpuInstanceGetInfo != nullptr, "nvmlGpuInstanceGetInfo"},
      {api.nvmlDeviceCreateGpuInstance != nullptr,
       "nvmlDeviceCreateGpuInstance"},
      {api.nvmlGpuInstanceDestroy != nullptr, "nvmlGpuInstanceDestroy"},
      {api.nvmlGpuInstanceGetComputeInstanceProfileInfo != nullptr,
       "nvmlGpuInstanceGetComputeInstanceProfileInfo"},
      {api.nvmlGpuInstanceCreateComputeInstance != nullptr,
       "nvmlGpuInstanceCreateComputeInstance"},
      {api.nvmlGpuInstanceGetComputeInstances != nullptr,
       "nvmlGpuInstanceGetComputeInstances"},
      {api.nvmlComputeInstanceGetInfo_v2 != nullptr,
       "nvmlComputeInstanceGetInfo_v2"},
      {api.nvmlComputeInstanceDestroy != nullptr, "nvmlComputeInstanceDestroy"},
  };
  for (const auto& [present, name] : required) {
    if (!present) return MissingSymbol(name, "MIG management");
  }
  return Status::Ok();
}

// FailedPrecondition unless the GPU's current MIG mode is Enabled.
Status CheckMigEnabled(const Api& api, nvmlDevice_t device, int gpu_index) {
  unsigned int current = NVML_DEVICE_MIG_DISABLE;
  unsigned int pending = NVML_DEVICE_MIG_DISABLE;
  const nvmlReturn_t rc = api.nvmlDeviceGetMigMode(device, &current, &pending);
  if (rc == NVML_ERROR_NOT_SUPPORTED) {
    return Status::FailedPrecondition("GPU " + std::to_string(gpu_index) +
                                      " does not support MIG");
  }
  if (rc != NVML_SUCCESS) {
    return Err(api, rc, Ctx("nvmlDeviceGetMigMode", gpu_index));
  }
  if (current != NVML_DEVICE_MIG_ENABLE) {
    return Status::FailedPrecondition("GPU " + std::to_string(gpu_index) +
                                      " is not in MIG mode");
  }
  return Status::Ok();
}

// The card's name and the MIG table for it (nullptr when the model has
// none or the name cannot be read).
const MigModelTable* TableFor(const Api& api, nvmlDevice_t device,
                              std::string* model) {
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (api.nvmlDeviceGetName(device, name, sizeof(name)) != NVML_SUCCESS) {
    return nullptr;
  }
  *model = FromBuffer(name, sizeof(name));
  unsigned long long total = 0;
  unsigned long long used = 0;
  std::string call;
  MemoryMib total_mib = 0;
  if (ReadMemory(api, device, &total, &used, &call) == NVML_SUCCESS) {
    total_mib = BytesToMibFloor(total);
  }
  return FindMigTable(*model, total_mib);
}

// The NVML_GPU_INSTANCE_PROFILE_* selector for a table profile, from its
// geometry: the selectors are named by compute slices, REV1 is the "+me"
// variant and REV2 the one-compute-slice profile on two memory slices ([H]
// group nvmlMultiInstanceGPU; reference/NVIDIA-FACTS.md, MIG geometry).
std::optional<unsigned int> SelectorForGeometry(const MigProfile& profile) {
  const int cs = profile.compute_slices;
  const bool me = profile.media_extensions;
  if (cs == 1 && me) return NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1;
  if (cs == 1 && profile.memory_slices == 2) {
    return NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2;
  }
  if (cs == 1) return NVML_GPU_INSTANCE_PROFILE_1_SLICE;
  if (cs == 2 && me) return NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1;
  if (me) return std::nullopt;
  switch (cs) {
    case 2:
      return NVML_GPU_INSTANCE_PROFILE_2_SLICE;
    case 3:
      return NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 4:
      return NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 6:
      return NVML_GPU_INSTANCE_PROFILE_6_SLICE;
    case 7:
      return NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    case 8:
      return NVML_GPU_INSTANCE_PROFILE_8_SLICE;
    default:
      return std::nullopt;
  }
}

// Every GPU instance profile this GPU offers, as NVML reports it, named.
//
// With nvmlDeviceGetGpuInstanceProfileInfoV the name comes from NVML itself
// (the v2 struct's `name`, "MIG 1g.10gb"). Without it (older drivers) the
// name comes from the mig_profiles.h table: the selector follows from the
// profile's geometry, and where the table knows the profile ID it must
// equal NVML's info.id, else the table does not describe this card and
// Internal is returned rather than creating the wrong profile.
StatusOr<std::vector<Profile>> ReadProfiles(const Api& api, nvmlDevice_t device,
                                            int gpu_index,
                                            const MigModelTable* table) {
  std::vector<Profile> profiles;
  for (unsigned int selector = 0; selector < NVML_GPU_INSTANCE_PROFILE_COUNT;
       ++selector) {
    Profile profile{{}, selector, {}};
    nvmlReturn_t rc = NVML_SUCCESS;
    const std::string what = "profile selector " + std::to_string(selector);
    std::string call;
    bool read = false;
    if (api.nvmlDeviceGetGpuInstanceProfileInfoV != nullptr) {
      nvmlGpuInstanceProfileInfo_v2_t v2{};
      v2.version = nvmlGpuInstanceProfileInfo_v2;
      call = "nvmlDeviceGetGpuInstanceProfileInfoV";
      rc = api.nvmlDeviceGetGpuInstanceProfileInfoV(device, selector, &v2);
      if (rc == NVML_SUCCESS) {
        profile.name =
            CanonicalProfileName(FromBuffer(v2.name, sizeof(v2.name)));
        profile.info = {v2.id,
                        v2.isP2pSupported,
                        v2.sliceCount,
                        v2.instanceCount,
                        v2.multiprocessorCount,
                        v2.copyEngineCount,
                        v2.decoderCount,
                        v2.encoderCount,
                        v2.jpegCount,
                        v2.ofaCount,
                        v2.memorySizeMB};
      }
      // A driver that rejects the v2 struct version still has the v1 call.
      read = rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH ||
             api.nvmlDeviceGetGpuInstanceProfileInfo == nullptr;
    }
    if (!read) {
      call = "nvmlDeviceGetGpuInstanceProfileInfo";
      rc = api.nvmlDeviceGetGpuInstanceProfileInfo(device, selector,
                                                   &profile.info);
    }
    // Selectors the card does not offer answer NOT_SUPPORTED (or
    // INVALID_ARGUMENT for selectors newer than the driver).
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT ||
        rc == NVML_ERROR_NOT_FOUND) {
      continue;
    }
    if (rc != NVML_SUCCESS) return Err(api, rc, Ctx(call, gpu_index, what));
    if (profile.name.empty() && table != nullptr) {
      for (const MigProfile& candidate : table->profiles) {
        if (SelectorForGeometry(candidate) != selector) continue;
        if (candidate.profile_id >= 0 &&
            static_cast<unsigned int>(candidate.profile_id) !=
                profile.info.id) {
          return Status::Internal("the MIG table for " + table->model_key +
                                  " gives " + candidate.name + " profile ID " +
                                  std::to_string(candidate.profile_id) +
                                  " but " + Ctx(call, gpu_index, what) +
                                  " reports ID " +
                                  std::to_string(profile.info.id));
        }
        profile.name = candidate.name;
        break;
      }
    }
    profiles.push_back(std::move(profile));
  }
  return profiles;
}

const Profile* FindByName(const std::vector<Profile>& profiles,
                          std::string_view name) {
  const std::string wanted = CanonicalProfileName(name);
  for (const Profile& p : profiles) {
    if (!p.name.empty() && p.name == wanted) return &p;
  }
  return nullptr;
}

const Profile* FindById(const std::vector<Profile>& profiles, unsigned int id) {
  for (const Profile& p : profiles) {
    if (p.info.id == id) return &p;
  }
  return nullptr;
}

struct GpuInstanceEntry {
  nvmlGpuInstance_t handle = nullptr;
  nvmlGpuInstanceInfo_t info{};
};

// Every GPU instance on the device, over all profiles.
StatusOr<std::vector<GpuInstanceEntry>> ReadGpuInstances(
    const Api& api, nvmlDevice_t device, int gpu_index,
    const std::vector<Profile>& profiles) {
  std::vector<GpuInstanceEntry> out;
  for (const Profile& profile : profiles) {
    // The buffer must hold every instance the profile allows ([H]).
    std::vector<nvmlGpuInstance_t> handles(
        std::max(1U, profile.info.instanceCount));
    auto count = static_cast<unsigned int>(handles.size());
    const nvmlReturn_t rc = api.nvmlDeviceGetGpuInstances(
        device, profile.info.id, handles.data(), &count);
    if (rc == NVML_ERROR_NOT_SUPPORTED) continue;
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlDeviceGetGpuInstances", gpu_index,
                     "profile ID " + std::to_string(profile.info.id)));
    }
    count = std::min(count, static_cast<unsigned int>(handles.size()));
    for (unsigned int i = 0; i < count; ++i) {
      GpuInstanceEntry entry;
      entry.handle = handles[i];
      const nvmlReturn_t info_rc =
          api.nvmlGpuInstanceGetInfo(entry.handle, &entry.info);
      if (info_rc != NVML_SUCCESS) {
        return Err(api, info_rc, Ctx("nvmlGpuInstanceGetInfo", gpu_index));
      }
      out.push_back(entry);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.info.id < b.info.id; });
  return out;
}

struct ComputeInstanceEntry {
  nvmlComputeInstance_t handle = nullptr;
  nvmlComputeInstanceInfo_t info{};
};

// Every compute instance in a GPU instance, over all compute profiles.
StatusOr<std::vector<ComputeInstanceEntry>> ReadComputeInstances(
    const Api& api, nvmlGpuInstance_t gpu_instance, int gpu_index,
    unsigned int gpu_instance_id) {
  const std::string gi = "GI " + std::to_string(gpu_instance_id);
  std::vector<ComputeInstanceEntry> out;
  for (unsigned int selector = 0;
       selector < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++selector) {
    nvmlComputeInstanceProfileInfo_t profile{};
    nvmlReturn_t rc = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gpu_instance, selector, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        &profile);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) {
      continue;
    }
    if (rc != NVML_SUCCESS) {
      return Err(
          api, rc,
          Ctx("nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu_index, gi));
    }
    std::vector<nvmlComputeInstance_t> handles(
        std::max(1U, profile.instanceCount));
    auto count = static_cast<unsigned int>(handles.size());
    rc = api.nvmlGpuInstanceGetComputeInstances(gpu_instance, profile.id,
                                                handles.data(), &count);
    if (rc == NVML_ERROR_NOT_SUPPORTED) continue;
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlGpuInstanceGetComputeInstances", gpu_index, gi));
    }
    count = std::min(count, static_cast<unsigned int>(handles.size()));
    for (unsigned int i = 0; i < count; ++i) {
      // Two selectors can name one profile; list each instance once.
      const bool seen = std::any_of(
          out.begin(), out.end(),
          [&](const auto& entry) { return entry.handle == handles[i]; });
      if (seen) continue;
      ComputeInstanceEntry entry;
      entry.handle = handles[i];
      rc = api.nvmlComputeInstanceGetInfo_v2(entry.handle, &entry.info);
      if (rc != NVML_SUCCESS) {
        return Err(api, rc,
                   Ctx("nvmlComputeInstanceGetInfo_v2", gpu_index, gi));
      }
      out.push_back(entry);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.info.id < b.info.id; });
  return out;
}

// The MIG device UUID ("MIG-...") of every compute instance, keyed by
// (GPU instance id, compute instance id), read through the MIG device
// handles. Empty when the library lacks those entry points; callers then
// fall back to the "MIG-<gpu-uuid>/<gi>/<ci>" form.
StatusOr<std::map<std::pair<unsigned int, unsigned int>, std::string>>
ReadMigUuids(const Api& api, nvmlDevice_t device, int gpu_index) {
  std::map<std::pair<unsigned int, unsigned int>, std::string> uuids;
  if (api.nvmlDeviceGetMaxMigDeviceCount == nullptr ||
      api.nvmlDeviceGetMigDeviceHandleByIndex == nullptr ||
      api.nvmlDeviceGetGpuInstanceId == nullptr ||
      api.nvmlDeviceGetComputeInstanceId == nullptr) {
    return uuids;
  }
  unsigned int max_count = 0;
  nvmlReturn_t rc = api.nvmlDeviceGetMaxMigDeviceCount(device, &max_count);
  if (rc != NVML_SUCCESS) {
    return Err(api, rc, Ctx("nvmlDeviceGetMaxMigDeviceCount", gpu_index));
  }
  for (unsigned int i = 0; i < max_count; ++i) {
    nvmlDevice_t mig = nullptr;
    rc = api.nvmlDeviceGetMigDeviceHandleByIndex(device, i, &mig);
    if (rc == NVML_ERROR_NOT_FOUND) continue;  // no MIG device at i
    const std::string what = "MIG device " + std::to_string(i);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlDeviceGetMigDeviceHandleByIndex", gpu_index, what));
    }
    unsigned int gi = 0;
    unsigned int ci = 0;
    rc = api.nvmlDeviceGetGpuInstanceId(mig, &gi);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc, Ctx("nvmlDeviceGetGpuInstanceId", gpu_index, what));
    }
    rc = api.nvmlDeviceGetComputeInstanceId(mig, &ci);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlDeviceGetComputeInstanceId", gpu_index, what));
    }
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    rc = api.nvmlDeviceGetUUID(mig, uuid, sizeof(uuid));
    if (rc != NVML_SUCCESS) {
      return Err(api, rc, Ctx("nvmlDeviceGetUUID", gpu_index, what));
    }
    uuids[{gi, ci}] = FromBuffer(uuid, sizeof(uuid));
  }
  return uuids;
}

// The parent GPU's UUID, for the fallback MIG device name.
std::string GpuUuid(const Api& api, nvmlDevice_t device) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (api.nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) != NVML_SUCCESS) {
    return {};
  }
  return FromBuffer(uuid, sizeof(uuid));
}

std::string MigDeviceName(
    const std::map<std::pair<unsigned int, unsigned int>, std::string>& uuids,
    const std::string& gpu_uuid, unsigned int gi, unsigned int ci) {
  auto it = uuids.find({gi, ci});
  if (it != uuids.end()) return it->second;
  return "MIG-" + gpu_uuid + "/" + std::to_string(gi) + "/" +
         std::to_string(ci);
}

// The compute instance profile spanning the whole GPU instance: the one
// with the most slices (equal to the GPU instance's slice count).
StatusOr<nvmlComputeInstanceProfileInfo_t> FullComputeProfile(
    const Api& api, nvmlGpuInstance_t gpu_instance, int gpu_index,
    unsigned int gpu_instance_id, unsigned int gi_slices) {
  std::optional<nvmlComputeInstanceProfileInfo_t> best;
  for (unsigned int selector = 0;
       selector < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++selector) {
    nvmlComputeInstanceProfileInfo_t info{};
    const nvmlReturn_t rc = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gpu_instance, selector, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) {
      continue;
    }
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu_index,
                     "GI " + std::to_string(gpu_instance_id)));
    }
    if (info.sliceCount > gi_slices) continue;
    if (!best || info.sliceCount > best->sliceCount) best = info;
  }
  if (!best || best->sliceCount != gi_slices) {
    return Status::Internal("no compute instance profile spans GPU instance " +
                            std::to_string(gpu_instance_id) + " on GPU " +
                            std::to_string(gpu_index) + " (" +
                            std::to_string(gi_slices) + " slices)");
  }
  return *best;
}

// The legal placements of a profile: from NVML where it can say, else from
// the table; empty when neither knows (NVML then judges the placement).
std::vector<MigPlacement> LegalPlacements(const Api& api, nvmlDevice_t device,
                                          const Profile& profile,
                                          const MigModelTable* table) {
  std::vector<MigPlacement> legal;
  if (api.nvmlDeviceGetGpuInstancePossiblePlacements_v2 != nullptr) {
    unsigned int count = 0;
    nvmlReturn_t rc = api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        device, profile.info.id, nullptr, &count);
    if (rc == NVML_SUCCESS && count > 0) {
      std::vector<nvmlGpuInstancePlacement_t> buffer(count);
      rc = api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(
          device, profile.info.id, buffer.data(), &count);
      if (rc == NVML_SUCCESS) {
        count = std::min(count, static_cast<unsigned int>(buffer.size()));
        for (unsigned int i = 0; i < count; ++i) {
          legal.push_back({static_cast<int>(buffer[i].start),
                           static_cast<int>(buffer[i].size)});
        }
        return legal;
      }
    }
  }
  if (table != nullptr) {
    if (const MigProfile* p = FindProfile(*table, profile.name)) {
      legal = p->placements;
    }
  }
  return legal;
}

}  // namespace

Status NvmlStatus(int nvml_return, std::string_view context,
                  const char* error_string) {
  if (nvml_return == NVML_SUCCESS) return Status::Ok();
  std::string message(context);
  message += ": ";
  message += error_string != nullptr
                 ? std::string(error_string)
                 : "NVML error " + std::to_string(nvml_return);
  switch (nvml_return) {
    case NVML_ERROR_INVALID_ARGUMENT:
      return Status::InvalidArgument(std::move(message));
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_NO_DATA:
      return Status::NotFound(std::move(message));
    case NVML_ERROR_NO_PERMISSION:
      return Status::PermissionDenied(std::move(message));
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
    case NVML_ERROR_MEMORY:
      return Status::ResourceExhausted(std::move(message));
    case NVML_ERROR_IN_USE:
      // gpu_driver.h: callers recognise "still in use" by kInUse.
      return Status::FailedPrecondition(message + " (kInUse)");
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_INVALID_STATE:
    case NVML_ERROR_DEPRECATED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
    case NVML_ERROR_INSUFFICIENT_POWER:
      return Status::FailedPrecondition(std::move(message));
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_IRQ_ISSUE:
    case NVML_ERROR_NOT_READY:
    case NVML_ERROR_OPERATING_SYSTEM:
    case NVML_ERROR_CORRUPTED_INFOROM:
      return Status::Unavailable(std::move(message));
    default:
      // UNKNOWN, INSUFFICIENT_SIZE, ARGUMENT_VERSION_MISMATCH,
      // ALREADY_INITIALIZED and codes newer than this file: a driver failure
      // or a bug on our side.
      return Status::Internal(std::move(message));
  }
}

bool IsNvmlGpuHealthError(int nvml_return) {
  switch (nvml_return) {
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_UNKNOWN:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_IRQ_ISSUE:
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_CORRUPTED_INFOROM:
      return true;
    default:
      return false;
  }
}

NvmlGpuDriver::NvmlGpuDriver() : NvmlGpuDriver(Options{}) {}

NvmlGpuDriver::NvmlGpuDriver(Options options) : options_(std::move(options)) {
  Load();
}

NvmlGpuDriver::~NvmlGpuDriver() {
  if (api_ != nullptr && load_status_.ok()) {
    // Nothing useful can be done with a shutdown failure at this point.
    (void)api_->nvmlShutdown();
  }
  if (library_ != nullptr) dlclose(library_);
}

void NvmlGpuDriver::Load() {
  library_ = dlopen(options_.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    load_status_ = Status::Unavailable(
        "Failed to dlopen " + options_.library_path + ": " +
        (why != nullptr ? std::string(why) : std::string("unknown error")));
    return;
  }
  auto api = std::make_unique<Api>();
  void* lib = library_;
#define HF_NVML_RESOLVE(symbol) ResolveSymbol(lib, #symbol, api->symbol)
  HF_NVML_RESOLVE(nvmlInit_v2);
  HF_NVML_RESOLVE(nvmlShutdown);
  HF_NVML_RESOLVE(nvmlErrorString);
  HF_NVML_RESOLVE(nvmlDeviceGetCount_v2);
  HF_NVML_RESOLVE(nvmlDeviceGetHandleByIndex_v2);
  HF_NVML_RESOLVE(nvmlDeviceGetUUID);
  HF_NVML_RESOLVE(nvmlDeviceGetName);
  HF_NVML_RESOLVE(nvmlDeviceGetMemoryInfo);
  HF_NVML_RESOLVE(nvmlDeviceGetMemoryInfo_v2);
  HF_NVML_RESOLVE(nvmlDeviceGetCudaComputeCapability);
  HF_NVML_RESOLVE(nvmlDeviceGetComputeRunningProcesses_v3);
  HF_NVML_RESOLVE(nvmlDeviceGetProcessUtilization);
  HF_NVML_RESOLVE(nvmlDeviceGetMigMode);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstanceProfileInfo);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstanceProfileInfoV);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstancePossiblePlacements_v2);
  HF_NVML_RESOLVE(nvmlDeviceCreateGpuInstance);
  HF_NVML_RESOLVE(nvmlDeviceCreateGpuInstanceWithPlacement);
  HF_NVML_RESOLVE(nvmlGpuInstanceDestroy);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstances);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstanceById);
  HF_NVML_RESOLVE(nvmlGpuInstanceGetInfo);
  HF_NVML_RESOLVE(nvmlGpuInstanceGetComputeInstanceProfileInfo);
  HF_NVML_RESOLVE(nvmlGpuInstanceCreateComputeInstance);
  HF_NVML_RESOLVE(nvmlComputeInstanceDestroy);
  HF_NVML_RESOLVE(nvmlGpuInstanceGetComputeInstances);
  HF_NVML_RESOLVE(nvmlComputeInstanceGetInfo_v2);
  HF_NVML_RESOLVE(nvmlDeviceGetMaxMigDeviceCount);
  HF_NVML_RESOLVE(nvmlDeviceGetMigDeviceHandleByIndex);
  HF_NVML_RESOLVE(nvmlDeviceGetGpuInstanceId);
  HF_NVML_RESOLVE(nvmlDeviceGetComputeInstanceId);
#undef HF_NVML_RESOLVE

  const std::pair<bool, const char*> required[] = {
      {api->nvmlInit_v2 != nullptr, "nvmlInit_v2"},
      {api->nvmlShutdown != nullptr, "nvmlShutdown"},
      {api->nvmlErrorString != nullptr, "nvmlErrorString"},
      {api->nvmlDeviceGetCount_v2 != nullptr, "nvmlDeviceGetCount_v2"},
      {api->nvmlDeviceGetHandleByIndex_v2 != nullptr,
       "nvmlDeviceGetHandleByIndex_v2"},
      {api->nvmlDeviceGetUUID != nullptr, "nvmlDeviceGetUUID"},
      {api->nvmlDeviceGetName != nullptr, "nvmlDeviceGetName"},
      {api->nvmlDeviceGetMemoryInfo != nullptr, "nvmlDeviceGetMemoryInfo"},
  };
  for (const auto& [present, name] : required) {
    if (!present) {
      load_status_ = Status::Unavailable(options_.library_path + " lacks " +
                                         name + "; not a usable NVML");
      return;
    }
  }
  const nvmlReturn_t rc = api->nvmlInit_v2();
  if (rc != NVML_SUCCESS) {
    const Status status = Err(*api, rc, "Failed to nvmlInit_v2");
    load_status_ = Status::Unavailable(status.message());
    return;
  }
  api_ = std::move(api);
}

StatusOr<std::vector<GpuInfo>> NvmlGpuDriver::ListGpus() {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  unsigned int count = 0;
  const nvmlReturn_t count_rc = api.nvmlDeviceGetCount_v2(&count);
  if (count_rc != NVML_SUCCESS) {
    return Err(api, count_rc, "nvmlDeviceGetCount_v2");
  }
  std::vector<GpuInfo> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.index = static_cast<int>(i);
    // Marks the GPU unhealthy with the (first) failure as the detail.
    auto mark_unhealthy = [&](nvmlReturn_t rc, std::string_view call) {
      const std::string detail = Err(api, rc, Ctx(call, gpu.index)).message();
      gpu.health_detail += gpu.health_detail.empty() ? detail : "; " + detail;
      gpu.healthy = false;
    };

    nvmlDevice_t device = nullptr;
    nvmlReturn_t rc = api.nvmlDeviceGetHandleByIndex_v2(i, &device);
    // nvmlDeviceGetCount_v2 counts GPUs this process may not open (cgroups,
    // [H]); those are not this node's to report.
    if (rc == NVML_ERROR_NO_PERMISSION) continue;
    if (rc != NVML_SUCCESS) {
      // Cannot even name it: listed by index only, unhealthy.
      mark_unhealthy(rc, "nvmlDeviceGetHandleByIndex_v2");
      gpus.push_back(std::move(gpu));
      continue;
    }

    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    rc = api.nvmlDeviceGetUUID(device, uuid, sizeof(uuid));
    if (rc == NVML_SUCCESS) {
      gpu.uuid = FromBuffer(uuid, sizeof(uuid));
    } else {
      // No identity, no MIG guard: never schedule on it.
      mark_unhealthy(rc, "nvmlDeviceGetUUID");
    }

    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    rc = api.nvmlDeviceGetName(device, name, sizeof(name));
    if (rc == NVML_SUCCESS) {
      gpu.model = FromBuffer(name, sizeof(name));
    } else if (IsNvmlGpuHealthError(rc)) {
      mark_unhealthy(rc, "nvmlDeviceGetName");
    }

    unsigned long long total = 0;
    unsigned long long used = 0;
    std::string call;
    rc = ReadMemory(api, device, &total, &used, &call);
    if (rc == NVML_SUCCESS) {
      // Total rounded down and use rounded up: never overstate what is free.
      gpu.memory_mib = BytesToMibFloor(total);
      gpu.used_memory_mib = BytesToMibCeil(used);
    } else if (IsNvmlGpuHealthError(rc)) {
      mark_unhealthy(rc, call);
    }

    if (api.nvmlDeviceGetCudaComputeCapability != nullptr) {
      int major = 0;
      int minor = 0;
      rc = api.nvmlDeviceGetCudaComputeCapability(device, &major, &minor);
      if (rc == NVML_SUCCESS) {
        gpu.cc_major = major;
        gpu.cc_minor = minor;
      } else if (IsNvmlGpuHealthError(rc)) {
        mark_unhealthy(rc, "nvmlDeviceGetCudaComputeCapability");
      }
    }

    if (api.nvmlDeviceGetMigMode != nullptr) {
      unsigned int current = NVML_DEVICE_MIG_DISABLE;
      unsigned int pending = NVML_DEVICE_MIG_DISABLE;
      rc = api.nvmlDeviceGetMigMode(device, &current, &pending);
      if (rc == NVML_SUCCESS) {
        gpu.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
      } else if (IsNvmlGpuHealthError(rc)) {
        mark_unhealthy(rc, "nvmlDeviceGetMigMode");
      }
      // NOT_SUPPORTED: a card without MIG; mig_enabled stays false.
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

StatusOr<std::vector<MigDevice>> NvmlGpuDriver::ListMigDevices(int gpu_index) {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  HF_RETURN_IF_ERROR(RequireMigSymbols(api));
  // Under the MIG lock: never list a GPU instance whose compute instance a
  // concurrent create is still making (or a destroy has half undone).
  std::lock_guard<std::mutex> lock(mig_mu_);
  StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu_index);
  if (!device.ok()) return device.status();
  HF_RETURN_IF_ERROR(CheckMigEnabled(api, *device, gpu_index));

  std::string model;
  const MigModelTable* table = TableFor(api, *device, &model);
  auto profiles = ReadProfiles(api, *device, gpu_index, table);
  if (!profiles.ok()) return profiles.status();
  auto instances = ReadGpuInstances(api, *device, gpu_index, *profiles);
  if (!instances.ok()) return instances.status();
  auto uuids = ReadMigUuids(api, *device, gpu_index);
  if (!uuids.ok()) return uuids.status();
  const std::string gpu_uuid = GpuUuid(api, *device);

  std::vector<MigDevice> out;
  for (const GpuInstanceEntry& gi : *instances) {
    MigDevice mig;
    mig.gpu_instance_id = static_cast<int>(gi.info.id);
    const Profile* profile = FindById(*profiles, gi.info.profileId);
    mig.profile = profile != nullptr && !profile->name.empty()
                      ? profile->name
                      : "profile-id-" + std::to_string(gi.info.profileId);
    mig.placement = {static_cast<int>(gi.info.placement.start),
                     static_cast<int>(gi.info.placement.size)};
    auto cis = ReadComputeInstances(api, gi.handle, gpu_index, gi.info.id);
    if (!cis.ok()) return cis.status();
    if (!cis->empty()) {
      // HeteroFlow makes one compute instance per GPU instance; with
      // several (made by hand) the lowest id stands for the device.
      const unsigned int ci = cis->front().info.id;
      mig.compute_instance_id = static_cast<int>(ci);
      mig.device_uuid = MigDeviceName(*uuids, gpu_uuid, gi.info.id, ci);
    }
    out.push_back(std::move(mig));
  }
  return out;
}

StatusOr<MigDevice> NvmlGpuDriver::CreateMigDevice(
    int gpu_index, const std::string& profile_name,
    std::optional<MigPlacement> placement) {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  HF_RETURN_IF_ERROR(RequireMigSymbols(api));
  std::lock_guard<std::mutex> lock(mig_mu_);
  StatusOr<nvmlDevice_t> device_or = DeviceHandle(api, gpu_index);
  if (!device_or.ok()) return device_or.status();
  nvmlDevice_t device = *device_or;
  HF_RETURN_IF_ERROR(CheckMigEnabled(api, device, gpu_index));

  std::string model;
  const MigModelTable* table = TableFor(api, device, &model);
  auto profiles = ReadProfiles(api, device, gpu_index, table);
  if (!profiles.ok()) return profiles.status();
  const Profile* profile = FindByName(*profiles, profile_name);
  if (profile == nullptr) {
    std::string offered;
    for (const Profile& p : *profiles) {
      if (p.name.empty()) continue;
      offered += offered.empty() ? p.name : ", " + p.name;
    }
    return Status::NotFound("no MIG profile \"" + profile_name + "\" on GPU " +
                            std::to_string(gpu_index) + " (" + model +
                            "); it offers: " + offered);
  }
  const std::string what = profile->name;

  nvmlGpuInstance_t gi = nullptr;
  if (placement) {
    if (placement->start < 0 || placement->size <= 0) {
      return Status::InvalidArgument(
          "placement " + std::to_string(placement->start) + ":" +
          std::to_string(placement->size) + " is not a placement");
    }
    const std::vector<MigPlacement> legal =
        LegalPlacements(api, device, *profile, table);
    if (!legal.empty() &&
        std::find(legal.begin(), legal.end(), *placement) == legal.end()) {
      std::string listed;
      for (const MigPlacement& p : legal) {
        const std::string text = PlacementText(p.start, p.size);
        listed += listed.empty() ? text : ", " + text;
      }
      return Status::InvalidArgument(
          "placement " + PlacementText(placement->start, placement->size) +
          " is not legal for " + what + " on GPU " + std::to_string(gpu_index) +
          " (legal: " + listed + ")");
    }
    if (api.nvmlDeviceCreateGpuInstanceWithPlacement == nullptr) {
      return MissingSymbol("nvmlDeviceCreateGpuInstanceWithPlacement",
                           "creating a GPU instance at a chosen placement");
    }
    const nvmlGpuInstancePlacement_t where{
        static_cast<unsigned int>(placement->start),
        static_cast<unsigned int>(placement->size)};
    const nvmlReturn_t rc = api.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, profile->info.id, &where, &gi);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlDeviceCreateGpuInstanceWithPlacement", gpu_index,
                     what + " at " + PlacementText(where.start, where.size)));
    }
  } else {
    const nvmlReturn_t rc =
        api.nvmlDeviceCreateGpuInstance(device, profile->info.id, &gi);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc, Ctx("nvmlDeviceCreateGpuInstance", gpu_index, what));
    }
  }

  // From here on a failure must not leave the GPU instance behind.
  auto roll_back = [&](Status failure, unsigned int gi_id) -> Status {
    const nvmlReturn_t rc = api.nvmlGpuInstanceDestroy(gi);
    if (rc == NVML_SUCCESS) return failure;
    const Status rollback = Err(api, rc,
                                Ctx("nvmlGpuInstanceDestroy", gpu_index,
                                    "GI " + std::to_string(gi_id)));
    return MakeStatus(failure.code(),
                      failure.message() + "; rolling back failed, the GPU " +
                          "instance is left behind: " + rollback.message());
  };

  nvmlGpuInstanceInfo_t gi_info{};
  nvmlReturn_t rc = api.nvmlGpuInstanceGetInfo(gi, &gi_info);
  if (rc != NVML_SUCCESS) {
    return roll_back(Err(api, rc, Ctx("nvmlGpuInstanceGetInfo", gpu_index)), 0);
  }
  const std::string gi_text = "GI " + std::to_string(gi_info.id);
  auto ci_profile = FullComputeProfile(api, gi, gpu_index, gi_info.id,
                                       profile->info.sliceCount);
  if (!ci_profile.ok()) return roll_back(ci_profile.status(), gi_info.id);

  nvmlComputeInstance_t ci = nullptr;
  rc = api.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile->id, &ci);
  if (rc != NVML_SUCCESS) {
    return roll_back(
        Err(api, rc,
            Ctx("nvmlGpuInstanceCreateComputeInstance", gpu_index, gi_text)),
        gi_info.id);
  }
  nvmlComputeInstanceInfo_t ci_info{};
  rc = api.nvmlComputeInstanceGetInfo_v2(ci, &ci_info);
  if (rc != NVML_SUCCESS) {
    const Status failure =
        Err(api, rc, Ctx("nvmlComputeInstanceGetInfo_v2", gpu_index, gi_text));
    const nvmlReturn_t destroy_rc = api.nvmlComputeInstanceDestroy(ci);
    if (destroy_rc != NVML_SUCCESS) {
      return MakeStatus(
          failure.code(),
          failure.message() + "; rolling back failed, the GPU instance is " +
              "left behind: " +
              Err(api, destroy_rc,
                  Ctx("nvmlComputeInstanceDestroy", gpu_index, gi_text))
                  .message());
    }
    return roll_back(failure, gi_info.id);
  }

  MigDevice mig;
  mig.gpu_instance_id = static_cast<int>(gi_info.id);
  mig.compute_instance_id = static_cast<int>(ci_info.id);
  mig.profile = profile->name;
  mig.placement = {static_cast<int>(gi_info.placement.start),
                   static_cast<int>(gi_info.placement.size)};
  // The instance exists now; a failure to read its UUID falls back to the
  // "MIG-<gpu-uuid>/<gi>/<ci>" name rather than undoing a good partition.
  auto uuids = ReadMigUuids(api, device, gpu_index);
  const std::map<std::pair<unsigned int, unsigned int>, std::string> none;
  mig.device_uuid = MigDeviceName(uuids.ok() ? *uuids : none,
                                  GpuUuid(api, device), gi_info.id, ci_info.id);
  return mig;
}

Status NvmlGpuDriver::DestroyMigDevice(int gpu_index, int gpu_instance_id) {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  HF_RETURN_IF_ERROR(RequireMigSymbols(api));
  std::lock_guard<std::mutex> lock(mig_mu_);
  StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu_index);
  if (!device.ok()) return device.status();
  const std::string gi_text = "GI " + std::to_string(gpu_instance_id);
  const std::string not_found =
      "GPU instance " + std::to_string(gpu_instance_id) + " not found on GPU " +
      std::to_string(gpu_index);
  if (gpu_instance_id < 0) return Status::NotFound(not_found);

  nvmlGpuInstance_t gi = nullptr;
  nvmlReturn_t rc = api.nvmlDeviceGetGpuInstanceById(
      *device, static_cast<unsigned int>(gpu_instance_id), &gi);
  // An id that cannot exist answers INVALID_ARGUMENT ([H]); either way
  // there is no such instance.
  if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT) {
    return Status::NotFound(
        not_found + " (" +
        Err(api, rc, Ctx("nvmlDeviceGetGpuInstanceById", gpu_index, gi_text))
            .message() +
        ")");
  }
  if (rc != NVML_SUCCESS) {
    return Err(api, rc,
               Ctx("nvmlDeviceGetGpuInstanceById", gpu_index, gi_text));
  }

  // Compute instances first: NVML refuses to destroy a GPU instance that
  // still has any (NVML_ERROR_IN_USE).
  auto cis = ReadComputeInstances(api, gi, gpu_index,
                                  static_cast<unsigned int>(gpu_instance_id));
  if (!cis.ok()) return cis.status();
  for (const ComputeInstanceEntry& ci : *cis) {
    rc = api.nvmlComputeInstanceDestroy(ci.handle);
    if (rc != NVML_SUCCESS) {
      return Err(api, rc,
                 Ctx("nvmlComputeInstanceDestroy", gpu_index,
                     gi_text + ", CI " + std::to_string(ci.info.id)));
    }
  }
  rc = api.nvmlGpuInstanceDestroy(gi);
  if (rc != NVML_SUCCESS) {
    return Err(api, rc, Ctx("nvmlGpuInstanceDestroy", gpu_index, gi_text));
  }
  return Status::Ok();
}

StatusOr<std::vector<GpuProcess>> NvmlGpuDriver::ListProcesses(int gpu_index) {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  if (api.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) {
    return MissingSymbol("nvmlDeviceGetComputeRunningProcesses_v3",
                         "listing GPU processes");
  }
  StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu_index);
  if (!device.ok()) return device.status();
  const std::string context =
      Ctx("nvmlDeviceGetComputeRunningProcesses_v3", gpu_index);

  // Ask for the count first (infos may be NULL with a count of 0), then
  // read into a buffer with some headroom; processes that start between
  // the calls make NVML answer INSUFFICIENT_SIZE again, so grow and retry.
  std::vector<nvmlProcessInfo_t> buffer;
  unsigned int count = 0;
  nvmlReturn_t rc =
      api.nvmlDeviceGetComputeRunningProcesses_v3(*device, &count, nullptr);
  if (rc == NVML_SUCCESS) return std::vector<GpuProcess>{};
  if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return Err(api, rc, context);
  bool done = false;
  for (int attempt = 0; attempt < kMaxProcessListAttempts && !done; ++attempt) {
    const std::size_t wanted =
        std::max<std::size_t>(count, buffer.size()) * 2 + 8;
    buffer.assign(wanted, nvmlProcessInfo_t{});
    count = static_cast<unsigned int>(buffer.size());
    rc = api.nvmlDeviceGetComputeRunningProcesses_v3(*device, &count,
                                                     buffer.data());
    if (rc == NVML_SUCCESS) {
      buffer.resize(std::min<std::size_t>(count, buffer.size()));
      done = true;
    } else if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
      return Err(api, rc, context);
    }
  }
  if (!done) {
    return Status::Unavailable(context + ": the process list kept growing " +
                               "faster than it could be read (" +
                               std::to_string(kMaxProcessListAttempts) +
                               " attempts)");
  }

  std::vector<GpuProcess> processes;
  processes.reserve(buffer.size());
  for (const nvmlProcessInfo_t& info : buffer) {
    GpuProcess process;
    process.pid = static_cast<std::int64_t>(info.pid);
    if (info.usedGpuMemory != kNvmlValueNotAvailableUll) {
      process.used_memory_mib = BytesToMibCeil(info.usedGpuMemory);
    }
    if (info.gpuInstanceId != kNvmlNoInstanceId) {
      process.gpu_instance_id = static_cast<int>(info.gpuInstanceId);
    }
    processes.push_back(process);
  }
  return processes;
}

StatusOr<std::vector<ProcessUtilization>>
NvmlGpuDriver::SampleProcessUtilization(int gpu_index, std::uint64_t since_us) {
  if (!load_status_.ok()) return load_status_;
  const Api& api = *api_;
  if (api.nvmlDeviceGetProcessUtilization == nullptr) {
    return MissingSymbol("nvmlDeviceGetProcessUtilization",
                         "per-process GPU utilisation");
  }
  StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu_index);
  if (!device.ok()) return device.status();
  const std::string context = Ctx("nvmlDeviceGetProcessUtilization", gpu_index);
  // The count first (a NULL buffer), then the samples; NOT_FOUND means no
  // process ran since `since_us`. Samples that arrive between the calls
  // make it INSUFFICIENT_SIZE again: grow and retry, as ListProcesses does.
  std::vector<nvmlProcessUtilizationSample_t> buffer;
  unsigned int count = 0;
  nvmlReturn_t rc =
      api.nvmlDeviceGetProcessUtilization(*device, nullptr, &count, since_us);
  if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0)) {
    return std::vector<ProcessUtilization>{};
  }
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) {
    return Err(api, rc, context);
  }
  bool done = false;
  for (int attempt = 0; attempt < kMaxProcessListAttempts && !done; ++attempt) {
    buffer.assign(std::max<std::size_t>(count, buffer.size()) * 2 + 8,
                  nvmlProcessUtilizationSample_t{});
    count = static_cast<unsigned int>(buffer.size());
    rc = api.nvmlDeviceGetProcessUtilization(*device, buffer.data(), &count,
                                             since_us);
    if (rc == NVML_SUCCESS) {
      buffer.resize(std::min<std::size_t>(count, buffer.size()));
      done = true;
    } else if (rc == NVML_ERROR_NOT_FOUND) {
      return std::vector<ProcessUtilization>{};
    } else if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
      return Err(api, rc, context);
    }
  }
  if (!done) {
    return Status::Unavailable(context + ": the samples kept growing faster " +
                               "than they could be read");
  }
  // A process has one sample per sample period in the window: the mean of
  // its samples is its share of the window.
  struct Sum {
    double percent = 0;
    int samples = 0;
    std::uint64_t last_us = 0;
  };
  std::map<std::int64_t, Sum> by_pid;
  for (const nvmlProcessUtilizationSample_t& sample : buffer) {
    if (sample.timeStamp <= since_us) continue;
    Sum& sum = by_pid[static_cast<std::int64_t>(sample.pid)];
    sum.percent += std::min(sample.smUtil, 100U);
    sum.samples += 1;
    sum.last_us = std::max<std::uint64_t>(sum.last_us, sample.timeStamp);
  }
  std::vector<ProcessUtilization> out;
  out.reserve(by_pid.size());
  for (const auto& [pid, sum] : by_pid) {
    out.push_back({pid, sum.percent / sum.samples, sum.last_us});
  }
  return out;
}

}  // namespace hf::gpu
