// Kernel launches: every launch path (plain, extended, cooperative, graph,
// and their per-thread-stream variants) passes through the GPU's turn
// (gpu_region.h) when the slice has a compute share. Without one, the
// wrapper is two relaxed loads, a thread-local countdown and the call: no
// lock, no syscall. One launch in the sampler's period (sampler.h) is
// timed with a pair of events for the interference measure.
//
// With a share, a launch first waits for this process to hold the GPU's
// turn; the turn is shared with the other slices on the GPU by their
// shares, and handed over only after this process's queued work has
// finished (cuCtxSynchronize), so the share is of the GPU's time, not the
// process's. The synchronising calls (cuCtxSynchronize, cuStreamSynchronize,
// cuEventSynchronize) are wrapped too, so that a process waiting for its
// own kernels is seen as busy and keeps its turn.
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "hook/hook_state.h"
#include "hook/log.h"

namespace hf::hook {
namespace {

// FNV-1a of the region path: a slice key when no slice id is given.
uint64_t PathKey(const char* path) {
  uint64_t h = 1469598103934665603ULL;
  for (const char* p = path; *p != '\0'; ++p) {
    h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ULL;
  }
  return h | 1;
}

void Drain(void* ctx) {
  auto* s = static_cast<HookState*>(ctx);
  if (s->real.cuCtxSynchronize != nullptr) {
    s->real.cuCtxSynchronize();
  } else if (s->real.cuCtxSynchronize_v2 != nullptr) {
    s->real.cuCtxSynchronize_v2(nullptr);
  }
}

// Holds the process busy for the GPU region while a launch or a
// synchronise is in the driver.
class BusyCall {
 public:
  explicit BusyCall(HookState& s)
      : s_(s), process_(s.gpu_process.load(std::memory_order_relaxed)) {
    if (process_ >= 0) s_.gpu.EnterCall(process_);
  }
  ~BusyCall() {
    if (process_ >= 0) s_.gpu.ExitCall(process_);
  }
  BusyCall(const BusyCall&) = delete;
  BusyCall& operator=(const BusyCall&) = delete;
  int process() const { return process_; }

 private:
  HookState& s_;
  int process_;
};

}  // namespace

void JoinGpu(HookState& s) {
  const uint32_t percent = s.region.compute_percent();
  s.gpu_process.store(-1, std::memory_order_relaxed);
  if (percent == 0 || percent >= 100) {
    s.throttling.store(false, std::memory_order_relaxed);
    return;
  }
  if (!s.gpu.is_open()) {
    const char* error = nullptr;
    bool opened = false;
    if (s.config.gpu_region_path[0] != '\0') {
      opened = s.gpu.Open(s.config.gpu_region_path, &error);
      if (!opened) {
        Log(LogLevel::kError, nullptr,
            "%s (%s): the compute share is kept against this process's own "
            "time only, not against the other slices on the GPU",
            error, s.config.gpu_region_path);
      }
    }
    if (!opened && !s.gpu.OpenPrivate(&error)) {
      Log(LogLevel::kError, nullptr, "%s: the compute share is NOT enforced",
          error);
      s.throttling.store(false, std::memory_order_relaxed);
      return;
    }
  }
  const int pid = static_cast<int>(getpid());
  const uint64_t key = s.config.slice_id != 0 ? s.config.slice_id
                       : s.config.region_path[0] != '\0'
                           ? PathKey(s.config.region_path)
                           : static_cast<uint64_t>(pid);
  const int process = s.gpu.Join(key, percent, s.config.compute_mode, pid,
                                 Region::ProcessStartTicks(pid));
  if (process < 0) {
    Log(LogLevel::kError, nullptr,
        "the GPU region is full: the compute share is NOT enforced in this "
        "process");
    s.throttling.store(false, std::memory_order_relaxed);
    return;
  }
  s.gpu_process.store(process, std::memory_order_relaxed);
  s.throttling.store(true, std::memory_order_relaxed);
  Log(LogLevel::kInfo, nullptr, "compute share %u%% (%s) on %s", percent,
      s.config.compute_mode == ComputeMode::kStrict ? "strict"
                                                    : "work-conserving",
      s.config.gpu_region_path[0] != '\0' ? s.config.gpu_region_path
                                          : "a private GPU region");
}

namespace {

// Before a throttled launch: waits for the turn (the share set live by the
// agent is picked up here too).
inline void AwaitTurn(HookState& s, const BusyCall& call) {
  if (call.process() < 0) return;
  s.gpu.AwaitTurn(call.process(), &Drain, &s);
}

// A launch, timed when the sampler says so (sampler.h).
template <typename Key, typename Launch>
inline CUresult MaybeTimed(HookState& s, CUstream stream, const Key& key,
                           const Launch& launch) {
  if (!s.sampler.Due()) return launch();
  return s.sampler.Time(s, key(), stream, launch);
}

}  // namespace
}  // namespace hf::hook

using hf::hook::AwaitTurn;
using hf::hook::BusyCall;
using hf::hook::Hook;
using hf::hook::HookState;
using hf::hook::KernelClassKey;
using hf::hook::MaybeTimed;

extern "C" {

#define HF_LAUNCH_KERNEL(name)                                               \
  __attribute__((visibility("default"))) CUresult name(                      \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY,            \
      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, \
      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, \
      void** kernelParams, void** extra) {                                   \
    HookState& s = Hook();                                                   \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;           \
    const auto launch = [&] {                                                \
      return s.real.name(f, gridDimX, gridDimY, gridDimZ, blockDimX,         \
                         blockDimY, blockDimZ, sharedMemBytes, hStream,      \
                         kernelParams, extra);                               \
    };                                                                       \
    const auto key = [&] {                                                   \
      return KernelClassKey(f, gridDimX, gridDimY, gridDimZ, blockDimX,      \
                            blockDimY, blockDimZ);                           \
    };                                                                       \
    if (!s.throttling.load(std::memory_order_relaxed)) {                     \
      return MaybeTimed(s, hStream, key, launch);                            \
    }                                                                        \
    BusyCall call(s);                                                        \
    AwaitTurn(s, call);                                                      \
    return MaybeTimed(s, hStream, key, launch);                              \
  }
HF_LAUNCH_KERNEL(cuLaunchKernel)
HF_LAUNCH_KERNEL(cuLaunchKernel_ptsz)
#undef HF_LAUNCH_KERNEL

#define HF_LAUNCH_KERNEL_EX(name)                                      \
  __attribute__((visibility("default"))) CUresult name(                \
      const CUlaunchConfig* config, CUfunction f, void** kernelParams, \
      void** extra) {                                                  \
    HookState& s = Hook();                                             \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;     \
    const auto launch = [&] {                                          \
      return s.real.name(config, f, kernelParams, extra);              \
    };                                                                 \
    const auto key = [&] {                                             \
      return KernelClassKey(f, config->gridDimX, config->gridDimY,     \
                            config->gridDimZ, config->blockDimX,       \
                            config->blockDimY, config->blockDimZ);     \
    };                                                                 \
    if (config == nullptr) return launch();                            \
    if (!s.throttling.load(std::memory_order_relaxed)) {               \
      return MaybeTimed(s, config->hStream, key, launch);              \
    }                                                                  \
    BusyCall call(s);                                                  \
    AwaitTurn(s, call);                                                \
    return MaybeTimed(s, config->hStream, key, launch);                \
  }
HF_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
HF_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)
#undef HF_LAUNCH_KERNEL_EX

#define HF_LAUNCH_COOPERATIVE(name)                                          \
  __attribute__((visibility("default"))) CUresult name(                      \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY,            \
      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, \
      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, \
      void** kernelParams) {                                                 \
    HookState& s = Hook();                                                   \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;           \
    const auto launch = [&] {                                                \
      return s.real.name(f, gridDimX, gridDimY, gridDimZ, blockDimX,         \
                         blockDimY, blockDimZ, sharedMemBytes, hStream,      \
                         kernelParams);                                      \
    };                                                                       \
    const auto key = [&] {                                                   \
      return KernelClassKey(f, gridDimX, gridDimY, gridDimZ, blockDimX,      \
                            blockDimY, blockDimZ);                           \
    };                                                                       \
    if (!s.throttling.load(std::memory_order_relaxed)) {                     \
      return MaybeTimed(s, hStream, key, launch);                            \
    }                                                                        \
    BusyCall call(s);                                                        \
    AwaitTurn(s, call);                                                      \
    return MaybeTimed(s, hStream, key, launch);                              \
  }
HF_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
HF_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)
#undef HF_LAUNCH_COOPERATIVE

// A graph launch is timed as a whole, its class the executable graph.
#define HF_GRAPH_LAUNCH(name)                                                  \
  __attribute__((visibility("default"))) CUresult name(CUgraphExec hGraphExec, \
                                                       CUstream hStream) {     \
    HookState& s = Hook();                                                     \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;             \
    const auto launch = [&] { return s.real.name(hGraphExec, hStream); };      \
    const auto key = [&] {                                                     \
      return KernelClassKey(hGraphExec, 0, 0, 0, 0, 0, 0);                     \
    };                                                                         \
    if (!s.throttling.load(std::memory_order_relaxed)) {                       \
      return MaybeTimed(s, hStream, key, launch);                              \
    }                                                                          \
    BusyCall call(s);                                                          \
    AwaitTurn(s, call);                                                        \
    return MaybeTimed(s, hStream, key, launch);                                \
  }
HF_GRAPH_LAUNCH(cuGraphLaunch)
HF_GRAPH_LAUNCH(cuGraphLaunch_ptsz)
#undef HF_GRAPH_LAUNCH

// Synchronising calls: the process is busy (its kernels run) while in them,
// and afterwards the sampler reads the timed launches they waited for.
#define HF_SYNC(name, type, arg)                                   \
  __attribute__((visibility("default"))) CUresult name(type arg) { \
    HookState& s = Hook();                                         \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED; \
    CUresult rc;                                                   \
    if (!s.throttling.load(std::memory_order_relaxed)) {           \
      rc = s.real.name(arg);                                       \
    } else {                                                       \
      BusyCall call(s);                                            \
      rc = s.real.name(arg);                                       \
    }                                                              \
    s.sampler.AfterSync(s);                                        \
    return rc;                                                     \
  }
HF_SYNC(cuCtxSynchronize_v2, CUcontext, ctx)
HF_SYNC(cuStreamSynchronize, CUstream, hStream)
HF_SYNC(cuStreamSynchronize_ptsz, CUstream, hStream)
HF_SYNC(cuEventSynchronize, CUevent, hEvent)
#undef HF_SYNC

__attribute__((visibility("default"))) CUresult cuCtxSynchronize(void) {
  HookState& s = Hook();
  if (s.real.cuCtxSynchronize == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc;
  if (!s.throttling.load(std::memory_order_relaxed)) {
    rc = s.real.cuCtxSynchronize();
  } else {
    BusyCall call(s);
    rc = s.real.cuCtxSynchronize();
  }
  s.sampler.AfterSync(s);
  return rc;
}

}  // extern "C"
