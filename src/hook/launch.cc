// Kernel launches: every launch path (plain, extended, cooperative, graph,
// and their per-thread-stream variants) passes through ThrottleLaunch when
// the slice has a compute share. Without one, the wrapper is one relaxed
// load and a tail call: no lock, no syscall.
//
// The throttle is a duty cycle in wall-clock windows. Time is cut into
// 100 ms periods aligned to CLOCK_MONOTONIC, the same for every process on
// the machine, so all processes of a slice open and close their window
// together. In each period the slice may launch during the first
// `percent`% of it. The first launch after the window closes waits for the
// process's queued work (cuCtxSynchronize), then sleeps to the next
// period; GPU time its queued work used past the window's end is a debt
// taken off the next windows. So a GPU-bound slice gets about its share of
// the GPU's time whatever its kernels' lengths (docs/HOOK.md says where
// that holds and where it does not).
#include <pthread.h>
#include <time.h>

#include "hook/hook_state.h"

namespace hf::hook {
namespace {

constexpr int64_t kPeriodNs = 100'000'000;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no syscall
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t deadline_ns) {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

// The debt owed by the window of period `debt_period` (ns of GPU time used
// outside the slice's windows).
std::atomic<int64_t> g_debt_ns{0};
std::atomic<int64_t> g_debt_period{-1};
pthread_mutex_t g_slow_path = PTHREAD_MUTEX_INITIALIZER;

int64_t OnTime(uint32_t percent) {
  return kPeriodNs * static_cast<int64_t>(percent) / 100;
}

}  // namespace

void ThrottleLaunch(HookState& s) {
  const uint32_t percent = s.region.compute_percent();
  if (percent == 0 || percent >= 100) return;
  const int64_t on = OnTime(percent);
  for (;;) {
    const int64_t now = NowNs();
    const int64_t period = now / kPeriodNs;
    const int64_t phase = now % kPeriodNs;
    const int64_t debt = g_debt_period.load(std::memory_order_relaxed) == period
                             ? g_debt_ns.load(std::memory_order_relaxed)
                             : 0;
    if (phase < on - debt) return;  // the window is open

    pthread_mutex_lock(&g_slow_path);
    // Another thread may have paid for this window already.
    const int64_t again = NowNs();
    if (again / kPeriodNs != period) {
      pthread_mutex_unlock(&g_slow_path);
      continue;
    }
    // Let the queued work finish: what runs past the window is owed.
    if (s.real.cuCtxSynchronize != nullptr) s.real.cuCtxSynchronize();
    const int64_t after = NowNs();
    const int64_t window_end = period * kPeriodNs + (debt < on ? on - debt : 0);
    const int64_t next = (period + 1) * kPeriodNs;
    int64_t owed = (after < next ? after : next) - window_end;
    if (owed < 0) owed = 0;
    // Debt beyond a whole window rolls on to the windows after it.
    const int64_t carried = debt > on ? debt - on : 0;
    g_debt_ns.store(owed + carried, std::memory_order_relaxed);
    g_debt_period.store(period + 1, std::memory_order_relaxed);
    pthread_mutex_unlock(&g_slow_path);
    if (after < next) SleepUntil(next);
  }
}

namespace {

inline HookState& LaunchState() {
  HookState& s = Hook();
  if (s.throttling.load(std::memory_order_relaxed)) ThrottleLaunch(s);
  return s;
}

}  // namespace
}  // namespace hf::hook

using hf::hook::HookState;
using hf::hook::LaunchState;

extern "C" {

#define HF_LAUNCH_KERNEL(name)                                                \
  __attribute__((visibility("default"))) CUresult name(                       \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY,             \
      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,  \
      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,  \
      void** kernelParams, void** extra) {                                    \
    HookState& s = LaunchState();                                             \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;            \
    return s.real.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, \
                       blockDimZ, sharedMemBytes, hStream, kernelParams,      \
                       extra);                                                \
  }
HF_LAUNCH_KERNEL(cuLaunchKernel)
HF_LAUNCH_KERNEL(cuLaunchKernel_ptsz)
#undef HF_LAUNCH_KERNEL

#define HF_LAUNCH_KERNEL_EX(name)                                      \
  __attribute__((visibility("default"))) CUresult name(                \
      const CUlaunchConfig* config, CUfunction f, void** kernelParams, \
      void** extra) {                                                  \
    HookState& s = LaunchState();                                      \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;     \
    return s.real.name(config, f, kernelParams, extra);                \
  }
HF_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
HF_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)
#undef HF_LAUNCH_KERNEL_EX

#define HF_LAUNCH_COOPERATIVE(name)                                           \
  __attribute__((visibility("default"))) CUresult name(                       \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY,             \
      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,  \
      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,  \
      void** kernelParams) {                                                  \
    HookState& s = LaunchState();                                             \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;            \
    return s.real.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, \
                       blockDimZ, sharedMemBytes, hStream, kernelParams);     \
  }
HF_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
HF_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)
#undef HF_LAUNCH_COOPERATIVE

#define HF_GRAPH_LAUNCH(name)                                                  \
  __attribute__((visibility("default"))) CUresult name(CUgraphExec hGraphExec, \
                                                       CUstream hStream) {     \
    HookState& s = LaunchState();                                              \
    if (s.real.name == nullptr) return CUDA_ERROR_NOT_INITIALIZED;             \
    return s.real.name(hGraphExec, hStream);                                   \
  }
HF_GRAPH_LAUNCH(cuGraphLaunch)
HF_GRAPH_LAUNCH(cuGraphLaunch_ptsz)
#undef HF_GRAPH_LAUNCH

}  // extern "C"
