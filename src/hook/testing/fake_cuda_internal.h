// fake_cuda_internal.h: the state shared by the fake CUDA driver's source
// files (fake_cuda.cc, fake_cuda_memory.cc, fake_cuda_exec.cc,
// fake_cuda_proc.cc). Nothing here leaves the library: everything is hidden
// (-fvisibility=hidden) and the version script exports only cu* and
// hfFakeCuda*. See docs/FAKE_CUDA.md for the behaviour.
#ifndef HF_HOOK_TESTING_FAKE_CUDA_INTERNAL_H_
#define HF_HOOK_TESTING_FAKE_CUDA_INTERNAL_H_

// cuda.h in "internal" mode (__CUDA_API_VERSION_INTERNAL, defined for every
// source of the fake by testing/CMakeLists.txt, so that no include order can
// get the public mode first) declares every exported symbol under its real
// name (cuMemAlloc_v2, cuCtxDestroy and cuCtxDestroy_v2, cuLaunchKernel and
// cuLaunchKernel_ptsz, ...) instead of #defining the base names to the
// newest variant, so each definition is checked against NVIDIA's own
// prototype. __CUDA_API_PUSH_VISIBILITY_DEFAULT makes those declarations
// (and so the definitions) exported despite -fvisibility=hidden.
#if !defined(__CUDA_API_VERSION_INTERNAL) || \
    !defined(__CUDA_API_PUSH_VISIBILITY_DEFAULT)
#error \
    "build the fake with -D__CUDA_API_VERSION_INTERNAL -D__CUDA_API_PUSH_VISIBILITY_DEFAULT"
#endif
#include <cuda.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hook/testing/fake_gpu.h"

#define HF_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// Handles are pointers to these (cuda.h only forward-declares the structs).
// Objects are never deleted while the process runs, so a stale handle is
// recognised as dead rather than aliasing a newer object.
struct CUctx_st {
  int device = 0;
  bool primary = false;
  bool live = false;  // a primary context is live while retained
  unsigned int flags = 0;
  int channel = -1;  // its channel on the device's timeline (-1: none yet)
};
struct CUstream_st {
  CUctx_st* ctx = nullptr;
  bool live = true;
  unsigned int flags = 0;
};
// An event marks a point in its context's work: the channel's queued work
// (fake_gpu's mark) when it was recorded. It completes when the channel's
// executed work crosses the mark, at a simulated time the device remembers
// (SharedDevice::ReachedAt), which is what cuEventElapsedTime subtracts.
struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned int flags = 0;
  bool live = true;
  bool recorded = false;
  int channel = -1;  // the context's channel when recorded (-1: no work)
  uint64_t mark = 0;
  int64_t recorded_ns = 0;  // CLOCK_MONOTONIC
  bool done = false;        // completion seen; done_ns is when it happened
  int64_t done_ns = 0;
};
struct CUmod_st {
  CUctx_st* ctx = nullptr;
  bool live = true;
};
struct CUfunc_st {
  CUmod_st* module = nullptr;
};
struct CUarray_st {
  CUctx_st* ctx = nullptr;
  int device = 0;
  uint64_t charged = 0;
  bool live = true;
};
struct CUmipmappedArray_st {
  CUctx_st* ctx = nullptr;
  int device = 0;
  uint64_t charged = 0;
  bool live = true;
};
struct CUmemPoolHandle_st {
  int device = -1;  // -1: a host pool (charges no device memory)
  bool is_default = false;
  bool live = true;
  uint64_t max_size = 0;  // 0: no limit but the device's memory
  uint64_t used = 0;
  uint64_t used_high = 0;
  uint64_t reserved_high = 0;
  uint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
};
struct CUgraph_st {
  bool live = true;
};
struct CUgraphExec_st {
  bool live = true;
};

namespace hf::fake_cuda {

constexpr int kDriverVersion = 13000;
constexpr uint64_t kMiB = 1024ULL * 1024ULL;
constexpr uint64_t kGranularity = 2 * kMiB;  // VMM granularity (both kinds)
constexpr uint64_t kPitchAlignment = 512;    // cuMemAllocPitch row alignment
constexpr int kMaxDevices = 64;
constexpr const char* kDeviceName = "HeteroFlow Fake GPU";

struct Config {
  int devices = 1;
  uint64_t memory_bytes = 1024 * kMiB;
  uint64_t context_bytes = 0;
  uint64_t kernel_ns = 0;
  std::string gpu_dir;  // HF_FAKE_CUDA_GPU_DIR; empty: private devices
  uint64_t timeslice_ns = fake_gpu::kDefaultTimesliceNs;
};

// What an entry of the device-pointer table came from.
enum class AllocKind { kDevice, kPitch, kManaged, kAsync };

// A cuMemAlloc / cuMemAllocPitch / cuMemAllocManaged / cuMemAlloc*Async
// allocation: real host memory (mmap) at `base`.
struct DeviceAlloc {
  uint64_t size = 0;      // bytes asked for (what the device is charged)
  uint64_t map_size = 0;  // bytes mapped (size rounded up to a page)
  int device = 0;
  AllocKind kind = AllocKind::kDevice;
  CUctx_st* ctx = nullptr;             // context-bound kinds; else null
  CUmemPoolHandle_st* pool = nullptr;  // kAsync only
};

// A cuMemAllocHost / cuMemHostAlloc allocation (host memory, not charged).
struct HostAlloc {
  uint64_t map_size = 0;
  CUctx_st* ctx = nullptr;
};

// The memory behind cuMemCreate handles: a memfd, so every cuMemMap of it
// (and every handle imported from its exported fd) shares the same pages.
struct PhysAlloc {
  int fd = -1;
  uint64_t size = 0;
  int device = -1;  // -1: host location (charges no device memory)
  uint64_t charged = 0;
  int refs = 0;  // handles + mappings
  dev_t st_dev = 0;
  ino_t st_ino = 0;
  CUmemAllocationProp prop{};
};

struct HandleRec {
  PhysAlloc* phys = nullptr;
  int refs = 0;  // cuMemCreate/Import/RetainAllocationHandle minus releases
};

struct Mapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  PhysAlloc* phys = nullptr;
};

struct Device {
  // Bytes this process holds on it (contexts, allocations, pools, VMM); the
  // device's own total, all processes, is in `gpu`.
  uint64_t used = 0;
  CUctx_st* primary = nullptr;
  int primary_refs = 0;
  CUmemPoolHandle_st* default_pool = nullptr;
  CUmemPoolHandle_st* current_pool = nullptr;
  // The device itself: memory and timeline, shared with every process that
  // opened the same HF_FAKE_CUDA_GPU_DIR (fake_gpu.h).
  std::unique_ptr<fake_gpu::SharedDevice> gpu;
};

// All driver state. One mutex guards it; API functions lock it for their
// whole body except while sleeping in a synchronize.
struct State {
  std::mutex mu;
  // Set (once) under mu; read without it by the argument checks that must
  // still answer CUDA_ERROR_NOT_INITIALIZED first.
  std::atomic<bool> initialized{false};
  Config config;
  std::vector<Device> devices;

  // Owners of every handle object ever made (see the note on CUctx_st).
  std::unordered_map<CUctx_st*, std::unique_ptr<CUctx_st>> contexts;
  std::unordered_map<CUstream_st*, std::unique_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent_st*, std::unique_ptr<CUevent_st>> events;
  std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>> modules;
  std::unordered_map<CUfunc_st*, std::unique_ptr<CUfunc_st>> functions;
  std::unordered_map<CUarray_st*, std::unique_ptr<CUarray_st>> arrays;
  std::unordered_map<CUmipmappedArray_st*, std::unique_ptr<CUmipmappedArray_st>>
      mipmapped_arrays;
  std::unordered_map<CUmemPoolHandle_st*, std::unique_ptr<CUmemPoolHandle_st>>
      pools;
  std::unordered_map<CUgraph_st*, std::unique_ptr<CUgraph_st>> graphs;
  std::unordered_map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>
      graph_execs;

  std::map<uint64_t, DeviceAlloc> device_allocs;  // by base address
  std::map<uint64_t, HostAlloc> host_allocs;      // by base address

  std::vector<std::unique_ptr<PhysAlloc>> phys_allocs;  // never shrinks
  std::unordered_map<CUmemGenericAllocationHandle, HandleRec> handles;
  CUmemGenericAllocationHandle next_handle = 0x1000;
  std::map<uint64_t, uint64_t> reservations;  // base -> size
  std::map<uint64_t, Mapping> mappings;       // by base address

  uint64_t launch_count = 0;
};

State& S();

inline bool Initialized() { return S().initialized.load(); }

// Helpers; all expect S().mu held.

// The calling thread's current context: CUDA_ERROR_INVALID_CONTEXT when it
// has none, CUDA_ERROR_CONTEXT_IS_DESTROYED when it was destroyed (or is an
// inactive primary context).
CUresult CurrentContext(CUctx_st** out);
// A context handle passed in: null/unknown -> CUDA_ERROR_INVALID_CONTEXT,
// dead -> CUDA_ERROR_CONTEXT_IS_DESTROYED.
CUresult CheckContext(CUcontext ctx);
bool ValidDevice(CUdevice dev);
// The device a stream's work runs on; stream 0, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD mean the current context's.
CUresult StreamDevice(CUstream stream, int* device);

// Charge / return `bytes` of a device's memory (false: out of memory).
bool Charge(int device, uint64_t bytes);
void Uncharge(int device, uint64_t bytes);

// Anonymous, lazily backed memory (MAP_NORESERVE) for allocations.
void* MapAnonymous(uint64_t bytes);
void Unmap(void* base, uint64_t bytes);
uint64_t PageRound(uint64_t bytes);

// Frees what a context owns (context-bound allocations, arrays, modules,
// streams, events) when it is destroyed or its primary context is reset.
void ReleaseContextResources(CUctx_st* ctx);
void FreeDeviceAlloc(std::map<uint64_t, DeviceAlloc>::iterator it);

// Is [ptr, ptr + bytes) inside one device allocation or VMM mapping?
bool DeviceRangeValid(uint64_t ptr, uint64_t bytes);

// The context a stream's work runs in (stream 0, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD: the current context).
CUresult StreamContext(CUstream stream, CUctx_st** ctx);

// Queues one launch worth of simulated GPU time on a context's channel;
// may wait (without the lock) while the channel's queue is full.
void QueueKernel(std::unique_lock<std::mutex>& lock, CUctx_st* ctx);
int64_t NowNs();
// Sleeps (without the lock) until the work queued so far in `ctx` has run.
void WaitForContext(std::unique_lock<std::mutex>& lock, CUctx_st* ctx);
// Whether the work queued so far in `ctx` has run.
bool ContextIdle(CUctx_st* ctx);
// A context goes (destroyed, or a primary context reset): its queued work
// is dropped and the device stops listing it.
void CloseContextOnDevice(CUctx_st* ctx);

// The checks every entry point but the init-free ones starts with.
#define HF_FAKE_LOCK_INITIALIZED()                            \
  std::unique_lock<std::mutex> lock(::hf::fake_cuda::S().mu); \
  if (!::hf::fake_cuda::S().initialized) {                    \
    return CUDA_ERROR_NOT_INITIALIZED;                        \
  }                                                           \
  ::hf::fake_cuda::State& st = ::hf::fake_cuda::S();          \
  (void)st

}  // namespace hf::fake_cuda

#endif  // HF_HOOK_TESTING_FAKE_CUDA_INTERNAL_H_
