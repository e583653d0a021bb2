// The hook's process-wide state: the real driver entry points, the
// configuration, the slice region and the allocation table. Built on the
// first intercepted call (never at load time), torn down never: a program's
// threads may call the driver while it exits.
//
// Thread-safety: Hook() is safe from any thread; the state it returns is
// immutable after initialisation except the region and table, which are
// thread-safe themselves.
#ifndef HF_HOOK_HOOK_STATE_H_
#define HF_HOOK_HOOK_STATE_H_

#include <atomic>
#include <cstdint>

#include "hook/alloc_table.h"
#include "hook/config.h"
#include "hook/cuda_api.h"
#include "hook/gpu_region.h"
#include "hook/region.h"
#include "hook/sampler.h"

namespace hf::hook {

// Every real driver entry point the hook calls. WRAPPED: the hook exports a
// wrapper of the same name and substitutes it in dlsym and cuGetProcAddress
// answers. USED: called by the hook, not wrapped.
#define HF_HOOK_WRAPPED(X)          \
  X(cuMemAlloc_v2)                  \
  X(cuMemAllocPitch_v2)             \
  X(cuMemAllocManaged)              \
  X(cuMemFree_v2)                   \
  X(cuMemAllocAsync)                \
  X(cuMemAllocAsync_ptsz)           \
  X(cuMemAllocFromPoolAsync)        \
  X(cuMemAllocFromPoolAsync_ptsz)   \
  X(cuMemFreeAsync)                 \
  X(cuMemFreeAsync_ptsz)            \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemRetainAllocationHandle)    \
  X(cuArrayCreate_v2)               \
  X(cuArray3DCreate_v2)             \
  X(cuArrayDestroy)                 \
  X(cuMipmappedArrayCreate)         \
  X(cuMipmappedArrayDestroy)        \
  X(cuMemGetInfo_v2)                \
  X(cuDeviceTotalMem_v2)            \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuDevicePrimaryCtxRelease_v2)   \
  X(cuDevicePrimaryCtxReset_v2)     \
  X(cuCtxCreate_v2)                 \
  X(cuCtxCreate_v3)                 \
  X(cuCtxCreate_v4)                 \
  X(cuCtxDestroy_v2)                \
  X(cuLaunchKernel)                 \
  X(cuLaunchKernel_ptsz)            \
  X(cuLaunchKernelEx)               \
  X(cuLaunchKernelEx_ptsz)          \
  X(cuLaunchCooperativeKernel)      \
  X(cuLaunchCooperativeKernel_ptsz) \
  X(cuGraphLaunch)                  \
  X(cuGraphLaunch_ptsz)             \
  X(cuCtxSynchronize)               \
  X(cuCtxSynchronize_v2)            \
  X(cuStreamSynchronize)            \
  X(cuStreamSynchronize_ptsz)       \
  X(cuEventSynchronize)             \
  X(cuGetProcAddress)               \
  X(cuGetProcAddress_v2)

#define HF_HOOK_USED(X)         \
  X(cuCtxGetCurrent)            \
  X(cuDevicePrimaryCtxGetState) \
  X(cuEventCreate)              \
  X(cuEventDestroy_v2)          \
  X(cuEventRecord)              \
  X(cuEventQuery)               \
  X(cuEventElapsedTime_v2)      \
  X(cuStreamIsCapturing)

struct RealCuda {
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is a declarator.
#define HF_REAL_FIELD(name) decltype(&::name) name = nullptr;
  HF_HOOK_WRAPPED(HF_REAL_FIELD)
  HF_HOOK_USED(HF_REAL_FIELD)
#undef HF_REAL_FIELD
};

enum class State : int { kNew = 0, kInitialising = 1, kReady = 2 };

struct HookState {
  std::atomic<int> state{0};
  RealCuda real;
  HookConfig config;
  // Whether allocations are counted in `region` (the hook is active and
  // the region could be opened).
  bool counting = false;
  // Whether launches go through the compute throttle.
  std::atomic<bool> throttling{false};
  Region region;
  // The GPU's region, shared by the slices on the GPU (gpu_region.h), and
  // this process's entry in it (-1: not joined; throttling is then off).
  GpuRegion gpu;
  std::atomic<int> gpu_process{-1};
  // Times a sample of the launches for the interference measure.
  KernelSampler sampler;
  AllocTable table;
  void* libcuda = nullptr;
};

// The state, initialised on first use. Never null.
HookState& Hook();

// The table key of device `dev`'s primary context.
inline uint64_t PrimaryKey(CUdevice dev) {
  return 0xffff000000000000ULL | static_cast<uint32_t>(dev);
}

// The libc dlsym (resolution.cc), for the hook's own lookups.
void* RealDlsym(void* handle, const char* name);

// The NVML wrapper to hand out for `name` (nvml_hook.cc), or `real`.
void* NvmlWrapperFor(const char* name, void* real);

// The compute throttle (launch.cc): joins the GPU region when the slice has
// a share. Called once the slice region is open, and in a forked child.
void JoinGpu(HookState& s);

}  // namespace hf::hook

#endif  // HF_HOOK_HOOK_STATE_H_
