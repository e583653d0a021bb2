// Interference sampling (docs/HOOK.md, "Interference"): the hook times a
// small sample of the process's kernel launches on the GPU with a pair of
// CUDA events around the launch, and adds each measured time to the
// slice's region under the launch's kernel class (the kernel and its grid
// and block shape). The agent compares a class's time while other slices
// use the GPU with its time while the slice had the GPU alone.
//
// The cost is bounded: the sampler measures what a timed launch costs on
// top of the launch itself (two event records, a capture check and the
// collection of earlier samples) and how long a launch call takes, and
// keeps the timed share of launches such that the extra cost stays under
// kSampleBudget of the launch path's time, lengthening the period (fewer
// timed launches) when it would cost more and turning sampling off for the
// process when even kMaxSamplePeriod would.
//
// What is never timed: a launch into a stream being captured into a graph
// (recording an event there would change the graph), a launch in another
// context than the one the process's events were made in (they are then
// made again in it), a launch while every pending pair is still in flight.
//
// Compiled into libhfhook.so: no exceptions, no allocation, no libstdc++
// runtime. Thread-safety: every method may be called from any thread.
#ifndef HF_HOOK_SAMPLER_H_
#define HF_HOOK_SAMPLER_H_

#include <atomic>
#include <cstdint>

#include "hook/cuda_api.h"
#include "hook/sample_budget.h"

namespace hf::hook {

struct HookState;

class KernelSampler {
 public:
  // Starts (or stops) sampling for this process. REQUIRES: the region is
  // open and the event entry points were resolved.
  void Start(HookState& s, bool enabled);
  // In a forked child: the parent's events belong to its contexts.
  void ResetAfterFork();

  // Whether this launch is to be timed: one relaxed load and a
  // thread-local countdown.
  bool Due() {
    const uint32_t period = period_.load(std::memory_order_relaxed);
    if (period == 0) return false;
    if (--countdown_ > 0) return false;
    countdown_ = Jittered(period);
    return true;
  }

  // Times `launch` (a callable returning CUresult) on `stream`.
  template <typename Launch>
  CUresult Time(HookState& s, uint64_t key, CUstream stream, Launch&& launch) {
    const int64_t t0 = NowNs();
    Collect(s);
    const int64_t t1 = NowNs();
    const int pair = Begin(s, stream);
    const int64_t began = NowNs();
    const CUresult rc = launch();
    const int64_t t2 = NowNs();
    End(s, pair, key, rc, stream);
    const int64_t t3 = NowNs();
    // When the stream was idle, any delay between the two event records
    // (the thread descheduled, a queue full) lands between the events: such
    // a sample says nothing about the kernel and is not kept.
    if (t3 - t1 > kMaxTimedLaunchNs) Abandon(pair);
    // Sampling's cost: everything but the launch itself.
    Account(s, static_cast<uint64_t>((began - t0) + (t3 - t2)), t3);
    return rc;
  }

  // After a synchronising call: the timed launches it waited for are done,
  // so their times are read now rather than at the next timed launch (a
  // program that waits for each step is read while its events are fresh).
  // One relaxed load when nothing is in flight.
  void AfterSync(HookState& s) {
    if (in_flight_.load(std::memory_order_relaxed) > 0) Collect(s);
  }

  uint32_t period() const { return period_.load(std::memory_order_relaxed); }

 private:
  enum PairState : int { kFree = 0, kRecording = 1, kInFlight = 2, kReading };
  struct Pair {
    std::atomic<int> state{kFree};
    CUevent start = nullptr;
    CUevent end = nullptr;
    CUcontext context = nullptr;
    uint64_t key = 0;
  };

  static int64_t NowNs();
  // The launches until the next timed one: `period` on average, drawn from
  // [period/2, 3*period/2) so that the sample never locks onto a cycle in
  // the program (a step of N launches) or in the GPU's time slices.
  static int Jittered(uint32_t period) {
    uint32_t x = rng_;
    if (x == 0)
      x = 0x9e3779b9U ^
          static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&rng_));
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    rng_ = x;
    return static_cast<int>(period / 2 + x % period) + 1;
  }
  // Claims a pair and records its start event; -1 when the launch is not
  // to be timed after all.
  int Begin(HookState& s, CUstream stream);
  void End(HookState& s, int pair, uint64_t key, CUresult launched,
           CUstream stream);
  // Drops a pair End put in flight (its sample is not kept).
  void Abandon(int pair);
  // Adds the finished pairs' times to the region.
  void Collect(HookState& s);
  // One more timed launch that cost `extra_ns`, ending at `now_ns`.
  void Account(HookState& s, uint64_t extra_ns, int64_t now_ns);
  bool MakeEvents(HookState& s, Pair& p, CUcontext context);

  std::atomic<uint32_t> period_{0};
  std::atomic<uint64_t> extra_avg_ns_{0};
  std::atomic<uint64_t> interval_avg_ns_{0};  // between timed launches
  std::atomic<int64_t> last_timed_ns_{0};
  std::atomic<bool> off_logged_{false};
  std::atomic<int> in_flight_{0};  // pairs in kInFlight
  Pair pairs_[kSamplePairs];
  // Initial-exec: a plain load off the thread pointer, no __tls_get_addr
  // call on every launch (the library is preloaded, and one int fits the
  // static TLS a dlopen may still take). Both are zero-initialised
  // (constant initialisation: no guard, no initialiser runs).
  // NOLINTNEXTLINE(bugprone-dynamic-static-initializers)
  static thread_local int countdown_ __attribute__((tls_model("initial-exec")));
  // NOLINTNEXTLINE(bugprone-dynamic-static-initializers)
  static thread_local uint32_t rng_ __attribute__((tls_model("initial-exec")));
};

}  // namespace hf::hook

#endif  // HF_HOOK_SAMPLER_H_
