#include "hook/hook_state.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <new>

#include "hook/log.h"

namespace hf::hook {
namespace {

// The state lives in static storage built with placement new on first use:
// no constructor runs at load time and no destructor at exit (threads may
// still be calling the driver while the program exits).
alignas(HookState) unsigned char g_storage[sizeof(HookState)];
std::atomic<HookState*> g_hook{nullptr};
std::atomic<int> g_state{static_cast<int>(State::kNew)};
thread_local bool t_initialising = false;

const char* GetEnv(const char* name, void* /*ctx*/) { return getenv(name); }

void ResolveReal(HookState& s) {
  s.libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (s.libcuda == nullptr) return;
#define HF_RESOLVE(name) \
  s.real.name =          \
      reinterpret_cast<decltype(s.real.name)>(RealDlsym(s.libcuda, #name));
  HF_HOOK_WRAPPED(HF_RESOLVE)
  HF_HOOK_USED(HF_RESOLVE)
#undef HF_RESOLVE
  // Drivers before CUDA 12.8 export the first version only (same
  // signature).
  if (s.real.cuEventElapsedTime_v2 == nullptr) {
    s.real.cuEventElapsedTime_v2 =
        reinterpret_cast<decltype(s.real.cuEventElapsedTime_v2)>(
            RealDlsym(s.libcuda, "cuEventElapsedTime"));
  }
}

// Interference sampling needs the event entry points.
bool CanSample(const HookState& s) {
  return s.real.cuCtxGetCurrent != nullptr && s.real.cuEventCreate != nullptr &&
         s.real.cuEventDestroy_v2 != nullptr &&
         s.real.cuEventRecord != nullptr && s.real.cuEventQuery != nullptr &&
         s.real.cuEventElapsedTime_v2 != nullptr &&
         s.real.cuStreamIsCapturing != nullptr;
}

void AttachSelf(HookState& s) {
  const int pid = static_cast<int>(getpid());
  s.region.Attach(pid, Region::ProcessStartTicks(pid));
}

// A forked child is a new process of the slice: it gets its own slot and
// none of its parent's allocations (CUDA does not carry a context across
// fork).
void AfterForkInChild() {
  HookState* s = g_hook.load(std::memory_order_acquire);
  if (s == nullptr) return;
  s->table.ResetAfterFork();
  if (s->counting) {
    s->region.ResetAfterFork();
    s->sampler.ResetAfterFork();
    AttachSelf(*s);
    JoinGpu(*s);
  }
}

void Initialise(HookState& s) {
  ResolveReal(s);
  s.config = ReadConfig(&GetEnv, nullptr);
  SetLogLevel(s.config.log_level);
  if (s.config.bad_variable != nullptr) {
    Log(LogLevel::kError, nullptr, "%s %s; %s", s.config.bad_variable,
        s.config.bad_reason,
        s.config.quota_bytes == 0 ? "every allocation will be refused"
                                  : "the value is ignored");
  }
  if (!s.config.active) return;
  if (s.libcuda == nullptr) {
    Log(LogLevel::kWarn, nullptr,
        "libcuda.so.1 cannot be loaded (%s); nothing to enforce", dlerror());
  }
  const char* error = nullptr;
  const bool shared_wanted = s.config.region_path[0] != '\0';
  bool opened = s.config.region_path[0] != '\0'
                    ? s.region.Open(s.config.region_path, s.config.quota_bytes,
                                    s.config.compute_percent, &error)
                    : s.region.OpenPrivate(s.config.quota_bytes,
                                           s.config.compute_percent, &error);
  if (!opened && shared_wanted) {
    // Never fail open: without the slice's shared region (a file this
    // user may not open, say), this process still gets the slice's quota,
    // only not shared with the slice's other processes.
    Log(LogLevel::kError, nullptr,
        "%s (%s): this process enforces the slice's quota on its own, not "
        "shared with the slice's other processes",
        error, s.config.region_path);
    s.config.region_path[0] = '\0';
    opened = s.region.OpenPrivate(s.config.quota_bytes,
                                  s.config.compute_percent, &error);
  }
  if (!opened) {
    Log(LogLevel::kError, nullptr,
        "%s: memory and compute are NOT enforced in this process", error);
    return;
  }
  if (!shared_wanted) {
    Log(LogLevel::kInfo, nullptr,
        "no %s or %s: this process and its forked children share a quota "
        "of their own",
        kEnvRegion, kEnvSliceId);
  }
  AttachSelf(s);
  s.counting = true;
  JoinGpu(s);
  s.sampler.Start(s, s.config.sampling && CanSample(s));
  pthread_atfork(nullptr, nullptr, &AfterForkInChild);
  Log(LogLevel::kInfo, nullptr,
      "enforcing: quota %llu bytes, compute %u%%, region %s",
      static_cast<unsigned long long>(s.region.quota()),
      s.region.compute_percent(),
      s.config.region_path[0] != '\0' ? s.config.region_path : "private");
}

}  // namespace

HookState& Hook() {
  if (g_state.load(std::memory_order_acquire) ==
      static_cast<int>(State::kReady)) {
    return *g_hook.load(std::memory_order_relaxed);
  }
  if (t_initialising) {
    // A call made by the initialisation itself (dlopen running the
    // driver's constructors): the real entry points are resolved first and
    // nothing is counted yet, so it passes straight through.
    return *g_hook.load(std::memory_order_relaxed);
  }
  int expected = static_cast<int>(State::kNew);
  if (g_state.compare_exchange_strong(expected,
                                      static_cast<int>(State::kInitialising),
                                      std::memory_order_acq_rel)) {
    t_initialising = true;
    auto* s = new (g_storage) HookState();
    g_hook.store(s, std::memory_order_release);
    Initialise(*s);
    t_initialising = false;
    g_state.store(static_cast<int>(State::kReady), std::memory_order_release);
    return *s;
  }
  while (g_state.load(std::memory_order_acquire) !=
         static_cast<int>(State::kReady)) {
    sched_yield();
  }
  return *g_hook.load(std::memory_order_relaxed);
}

}  // namespace hf::hook
