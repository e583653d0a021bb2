// NVML's memory view of the slice's GPU: nvmlDeviceGetMemoryInfo and
// nvmlDeviceGetMemoryInfo_v2 report the quota as the total and the slice's
// usage as used, like cuMemGetInfo. Only the slice's GPU (by UUID,
// HETEROFLOW_GPU_UUID) is rewritten; other GPUs NVML lists are untouched.
// The real NVML is resolved from libnvidia-ml.so.1 on first use.
#include <dlfcn.h>

#include <cstring>

#include "gpu/nvml/nvml_api.h"
#include "hook/hook_state.h"

namespace hf::hook {
namespace {

using GetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using GetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using GetUuidFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);

struct RealNvml {
  GetMemoryInfoFn get_memory_info = nullptr;
  GetMemoryInfoV2Fn get_memory_info_v2 = nullptr;
  GetUuidFn get_uuid = nullptr;
};

std::atomic<int> g_nvml_state{0};  // 0 new, 1 resolving, 2 ready
RealNvml g_nvml;

const RealNvml& Nvml() {
  if (g_nvml_state.load(std::memory_order_acquire) == 2) return g_nvml;
  int expected = 0;
  if (g_nvml_state.compare_exchange_strong(expected, 1)) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib != nullptr) {
      g_nvml.get_memory_info = reinterpret_cast<GetMemoryInfoFn>(
          RealDlsym(lib, "nvmlDeviceGetMemoryInfo"));
      g_nvml.get_memory_info_v2 = reinterpret_cast<GetMemoryInfoV2Fn>(
          RealDlsym(lib, "nvmlDeviceGetMemoryInfo_v2"));
      g_nvml.get_uuid =
          reinterpret_cast<GetUuidFn>(RealDlsym(lib, "nvmlDeviceGetUUID"));
    }
    g_nvml_state.store(2, std::memory_order_release);
  }
  while (g_nvml_state.load(std::memory_order_acquire) != 2) {
  }
  return g_nvml;
}

// The quota and usage to report for `device`, or false to report the real
// numbers (no quota, or another GPU than the slice's).
bool SliceView(nvmlDevice_t device, uint64_t* quota, uint64_t* used) {
  HookState& s = Hook();
  if (!s.counting) return false;
  const uint64_t q = s.region.quota();
  if (q == kUnlimited) return false;
  if (s.config.gpu_uuid[0] != '\0' && Nvml().get_uuid != nullptr) {
    char uuid[96] = {};
    if (Nvml().get_uuid(device, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      return false;
    }
    // HETEROFLOW_GPU_UUID may list several (comma separated).
    const char* list = s.config.gpu_uuid;
    const size_t n = std::strlen(uuid);
    bool match = false;
    for (const char* p = std::strstr(list, uuid); p != nullptr;
         p = std::strstr(p + 1, uuid)) {
      if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) {
        match = true;
        break;
      }
    }
    if (!match) return false;
  }
  *quota = q;
  *used = s.region.used();
  return true;
}

}  // namespace
}  // namespace hf::hook

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(
    nvmlDevice_t device, nvmlMemory_t* memory) {
  const auto& real = hf::hook::Nvml();
  if (real.get_memory_info == nullptr) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t r = real.get_memory_info(device, memory);
  uint64_t quota = 0;
  uint64_t used = 0;
  if (r == NVML_SUCCESS && memory != nullptr &&
      hf::hook::SliceView(device, &quota, &used)) {
    memory->total = quota < memory->total ? quota : memory->total;
    memory->used = used < memory->total ? used : memory->total;
    memory->free = memory->total - memory->used;
  }
  return r;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(
    nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  const auto& real = hf::hook::Nvml();
  if (real.get_memory_info_v2 == nullptr) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t r = real.get_memory_info_v2(device, memory);
  uint64_t quota = 0;
  uint64_t used = 0;
  if (r == NVML_SUCCESS && memory != nullptr &&
      hf::hook::SliceView(device, &quota, &used)) {
    memory->total = quota < memory->total ? quota : memory->total;
    memory->reserved = 0;
    memory->used = used < memory->total ? used : memory->total;
    memory->free = memory->total - memory->used;
  }
  return r;
}

}  // extern "C"

namespace hf::hook {

void* NvmlWrapperFor(const char* name, void* real) {
  if (std::strcmp(name, "nvmlDeviceGetMemoryInfo") == 0) {
    return reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo);
  }
  if (std::strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0) {
    return reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo_v2);
  }
  return real;
}

}  // namespace hf::hook
