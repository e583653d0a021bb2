#include "hook/sampler.h"

#include <time.h>

#include "hook/hook_state.h"
#include "hook/log.h"

namespace hf::hook {

thread_local int KernelSampler::countdown_
    __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint32_t KernelSampler::rng_
    __attribute__((tls_model("initial-exec"))) = 0;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// A running average that moves an eighth of the way to each new value.
void Average(std::atomic<uint64_t>& avg, uint64_t value) {
  const uint64_t have = avg.load(kRelaxed);
  avg.store(have == 0 ? value : have - have / 8 + value / 8, kRelaxed);
}

}  // namespace

int64_t KernelSampler::NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void KernelSampler::Start(HookState& s, bool enabled) {
  const uint32_t period = enabled ? kStartSamplePeriod : 0;
  period_.store(period, kRelaxed);
  s.region.NoteSamplePeriod(period);
}

void KernelSampler::ResetAfterFork() {
  for (Pair& p : pairs_) {
    p.start = nullptr;
    p.end = nullptr;
    p.context = nullptr;
    p.state.store(kFree, kRelaxed);
  }
  in_flight_.store(0, kRelaxed);
  countdown_ = 0;
}

bool KernelSampler::MakeEvents(HookState& s, Pair& p, CUcontext context) {
  if (p.context == context && p.start != nullptr && p.end != nullptr) {
    return true;
  }
  if (p.start != nullptr) s.real.cuEventDestroy_v2(p.start);
  if (p.end != nullptr) s.real.cuEventDestroy_v2(p.end);
  p.start = nullptr;
  p.end = nullptr;
  p.context = nullptr;
  if (s.real.cuEventCreate(&p.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    p.start = nullptr;
    return false;
  }
  if (s.real.cuEventCreate(&p.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    s.real.cuEventDestroy_v2(p.start);
    p.start = nullptr;
    p.end = nullptr;
    return false;
  }
  p.context = context;
  return true;
}

int KernelSampler::Begin(HookState& s, CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (s.real.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return -1;
  }
  CUcontext context = nullptr;
  if (s.real.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) {
    return -1;
  }
  for (int i = 0; i < kSamplePairs; ++i) {
    Pair& p = pairs_[i];
    int expected = kFree;
    if (!p.state.compare_exchange_strong(expected, kRecording,
                                         std::memory_order_acquire)) {
      continue;
    }
    if (!MakeEvents(s, p, context) ||
        s.real.cuEventRecord(p.start, stream) != CUDA_SUCCESS) {
      p.state.store(kFree, std::memory_order_release);
      return -1;
    }
    return i;
  }
  return -1;  // every pair in flight
}

void KernelSampler::End(HookState& s, int pair, uint64_t key, CUresult launched,
                        CUstream stream) {
  if (pair < 0) return;
  Pair& p = pairs_[pair];
  if (launched != CUDA_SUCCESS ||
      s.real.cuEventRecord(p.end, stream) != CUDA_SUCCESS) {
    p.state.store(kFree, std::memory_order_release);
    return;
  }
  p.key = key;
  in_flight_.fetch_add(1, kRelaxed);
  p.state.store(kInFlight, std::memory_order_release);
}

void KernelSampler::Abandon(int pair) {
  if (pair < 0) return;
  int expected = kInFlight;
  if (pairs_[pair].state.compare_exchange_strong(expected, kFree,
                                                 std::memory_order_acq_rel)) {
    in_flight_.fetch_sub(1, kRelaxed);
  }
}

void KernelSampler::Collect(HookState& s) {
  for (Pair& p : pairs_) {
    int expected = kInFlight;
    if (!p.state.compare_exchange_strong(expected, kReading,
                                         std::memory_order_acquire)) {
      continue;
    }
    const CUresult done = s.real.cuEventQuery(p.end);
    if (done == CUDA_ERROR_NOT_READY) {
      p.state.store(kInFlight, std::memory_order_release);
      continue;
    }
    float ms = 0;
    if (done == CUDA_SUCCESS &&
        s.real.cuEventElapsedTime_v2(&ms, p.start, p.end) == CUDA_SUCCESS &&
        ms >= 0) {
      // Whole nanoseconds, truncated: the events resolve about 0.5 us.
      s.region.RecordKernel(
          p.key, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
    }
    p.state.store(kFree, std::memory_order_release);
  }
}

void KernelSampler::Account(HookState& s, uint64_t extra_ns, int64_t now_ns) {
  const int64_t last = last_timed_ns_.exchange(now_ns, kRelaxed);
  Average(extra_avg_ns_, extra_ns);
  if (last == 0 || now_ns <= last) return;  // the first: no interval yet
  // A gap far longer than usual is time the process did not launch at all
  // (idle, or another phase): not the launching time sampling slows down.
  uint64_t gap = static_cast<uint64_t>(now_ns - last);
  const uint64_t usual = interval_avg_ns_.load(kRelaxed);
  if (usual != 0 && gap > 4 * usual) gap = 4 * usual;
  Average(interval_avg_ns_, gap);
  const uint32_t period = period_.load(kRelaxed);
  const uint64_t interval = interval_avg_ns_.load(kRelaxed);
  const uint32_t next =
      NextSamplePeriod(period, extra_avg_ns_.load(kRelaxed), interval);
  if (next == period) return;
  period_.store(next, kRelaxed);
  // The interval scales with the period: start the new one's average
  // there rather than wait for it to drift.
  if (next != 0) {
    interval_avg_ns_.store(interval / period * next, kRelaxed);
  }
  s.region.NoteSamplePeriod(next);
  if (next == 0 && !off_logged_.exchange(true)) {
    Log(LogLevel::kWarn, nullptr,
        "kernel sampling costs %llu ns a timed launch, over %.1f%% of the "
        "time between launches even at one launch in %u: interference is "
        "not measured in this process",
        static_cast<unsigned long long>(extra_avg_ns_.load(kRelaxed)),
        kSampleBudget * 100, kMaxSamplePeriod);
  }
}

}  // namespace hf::hook
