// The sampler's arithmetic (sampler.h), apart from CUDA so that it is
// tested on its own: how many launches pass between timed ones, and the
// class a launch is counted in.
//
// Compiled into libhfhook.so: header only, no libstdc++ runtime.
#ifndef HF_HOOK_SAMPLE_BUDGET_H_
#define HF_HOOK_SAMPLE_BUDGET_H_

#include <cstdint>

namespace hf::hook {

inline constexpr uint32_t kMinSamplePeriod = 16;
inline constexpr uint32_t kStartSamplePeriod = 128;
inline constexpr uint32_t kMaxSamplePeriod = 1U << 16;
// The most of the launch path's time sampling may take.
inline constexpr double kSampleBudget = 0.01;
// A timed launch whose call took longer than this is not kept (sampler.h).
inline constexpr int64_t kMaxTimedLaunchNs = 200'000;
// Event pairs a process may have in flight at once.
inline constexpr int kSamplePairs = 8;

// The period after one more measurement: `extra_ns` is what a timed launch
// costs on top of a launch, `interval_ns` the wall-clock time between two
// timed launches of the process at `period` (both running averages), so
// extra_ns / interval_ns is the share of the process's launching time that
// sampling takes, whatever else the process does between launches (its
// own work, waiting for the GPU). Over half the budget doubles the period
// (what the measure misses, the countdown on every launch and the clock
// reads, takes part of the rest), under an eighth halves it (not below
// kMinSamplePeriod); 0 when even kMaxSamplePeriod is over budget
// (sampling off).
inline uint32_t NextSamplePeriod(uint32_t period, uint64_t extra_ns,
                                 uint64_t interval_ns) {
  if (period == 0) return 0;
  if (interval_ns == 0) interval_ns = 1;
  const double cost =
      static_cast<double>(extra_ns) / static_cast<double>(interval_ns);
  if (cost > 0.5 * kSampleBudget) {
    return period >= kMaxSamplePeriod ? 0 : period * 2;
  }
  if (cost < 0.125 * kSampleBudget && period > kMinSamplePeriod) {
    return period / 2;
  }
  return period;
}

// The class of a launch: the kernel (or executable graph) and its grid and
// block shape. Never 0.
inline uint64_t KernelClassKey(const void* function, unsigned int gx,
                               unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by,
                               unsigned int bz) {
  const auto mix = [](uint64_t h, uint64_t v) {
    return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  };
  uint64_t h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(function));
  h = mix(h, (uint64_t{gx} << 32) | gy);
  h = mix(h, (uint64_t{gz} << 32) | bx);
  h = mix(h, (uint64_t{by} << 32) | bz);
  return h == 0 ? 1 : h;
}

}  // namespace hf::hook

#endif  // HF_HOOK_SAMPLE_BUDGET_H_
