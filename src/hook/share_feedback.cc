#include "hook/share_feedback.h"

#include <algorithm>

namespace hf::hook {

std::vector<SliceFeedback> ShareFeedback::Apply(
    GpuRegion& gpu, int64_t window_ns,
    const std::vector<SliceObservation>& seen) {
  std::vector<SliceFeedback> out;
  if (!gpu.is_open() || window_ns <= 0) return out;
  GpuSliceStats slices[kGpuSlices];
  const int n = gpu.Slices(slices, kGpuSlices);
  std::map<uint64_t, Baseline> now;
  for (int i = 0; i < n; ++i) {
    now[slices[i].key] = {slices[i].charged_ns + slices[i].free_ns,
                          slices[i].waited_ns};
  }
  // Whether each slice waited for the GPU in the window.
  std::map<uint64_t, bool> waited;
  for (const auto& [key, b] : now) {
    auto was = last_.find(key);
    waited[key] = was != last_.end() && b.waited_ns > was->second.waited_ns;
  }
  for (int i = 0; i < n; ++i) {
    const GpuSliceStats& s = slices[i];
    auto was = last_.find(s.key);
    if (was == last_.end()) continue;  // the baseline is taken below
    SliceFeedback f;
    f.key = s.key;
    f.percent = s.percent;
    f.mode = s.mode;
    f.window_ns = window_ns;
    f.turn_ns = static_cast<int64_t>(now[s.key].turn_ns - was->second.turn_ns);
    int processes = 0;
    for (const SliceObservation& o : seen) {
      if (o.key != s.key) continue;
      f.busy_ns += o.busy_ns;
      processes += o.processes;
    }
    f.achieved_percent =
        100.0 * static_cast<double>(f.busy_ns) / static_cast<double>(window_ns);
    const double allowance_percent =
        options_.tolerance_percent + 0.5 * processes;
    const auto allowance = static_cast<int64_t>(static_cast<double>(window_ns) *
                                                allowance_percent / 100.0);
    const int64_t excess = f.busy_ns - f.turn_ns;
    bool other_waited = false;
    for (const auto& [key, w] : waited) {
      if (key != s.key && w) other_waited = true;
    }
    const bool chargeable = s.mode == ComputeMode::kStrict || other_waited;
    if (excess > allowance && chargeable && s.percent > 0 && s.percent < 100) {
      f.escaped_ns = excess;
      gpu.ChargeEscaped(s.key, excess);
    }
    out.push_back(f);
  }
  last_ = std::move(now);
  return out;
}

}  // namespace hf::hook
