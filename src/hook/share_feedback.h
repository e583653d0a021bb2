// ShareFeedback: corrects the compute shares of one GPU's slices with what
// the driver measured (docs/HOOK.md, "NVML feedback").
//
// The turns of the GPU region (gpu_region.h) measure a slice's GPU time by
// the clock while it holds the turn. Work a slice gets onto the GPU outside
// its turns is not seen there: a process of the slice that runs without the
// hook (its loader refused the library, a launcher cleared LD_PRELOAD),
// work queued past a hand-over. NVML's per-process utilisation sees it.
// Every round the agent attributes NVML's processes to their slices and
// hands the slice's measured GPU time over the window to Apply, which
// compares it with the slice's turn time over the same window; what the
// slice used beyond its turns, past a tolerance for NVML's rounding, is
// charged against its credit (GpuRegion::ChargeEscaped), so the slice as a
// whole comes back to its share. A work-conserving slice is charged only
// when another slice waited for the GPU in the window: time nobody else
// wanted is free, as it is for its turns.
//
// Not part of libhfhook.so: the agent (and the share benchmark, standing in
// for it) runs it. Thread-safety: none; one instance per GPU, one caller.
#ifndef HF_HOOK_SHARE_FEEDBACK_H_
#define HF_HOOK_SHARE_FEEDBACK_H_

#include <cstdint>
#include <map>
#include <vector>

#include "hook/gpu_region.h"

namespace hf::hook {

// A slice's GPU time over the window, as the driver measured it (the sum
// over its processes).
struct SliceObservation {
  uint64_t key = 0;  // the slice's GPU-region key (its slice id)
  int64_t busy_ns = 0;
  int processes = 1;  // how many processes' figures were summed
};

// What a round found for one slice.
struct SliceFeedback {
  uint64_t key = 0;
  uint32_t percent = 0;
  ComputeMode mode = ComputeMode::kWorkConserving;
  int64_t window_ns = 0;
  int64_t busy_ns = 0;     // measured by the driver
  int64_t turn_ns = 0;     // held the GPU's turn
  int64_t escaped_ns = 0;  // charged this round (0: within tolerance)
  // busy_ns as a percent of the window: the share the slice achieved.
  double achieved_percent = 0;
};

class ShareFeedback {
 public:
  struct Options {
    // Excess under this percent of the window (plus half a percent per
    // process the driver rounded) is taken for measurement noise.
    double tolerance_percent = 2.0;
  };

  ShareFeedback() = default;
  explicit ShareFeedback(Options options) : options_(options) {}

  // One round on `gpu`: `seen` is each slice's measured GPU time over the
  // `window_ns` that ends now. Slices not in `seen` used no GPU time. The
  // first round for a slice only takes its turn counters as the baseline.
  // Returns the findings for every slice of the GPU that has a baseline.
  std::vector<SliceFeedback> Apply(GpuRegion& gpu, int64_t window_ns,
                                   const std::vector<SliceObservation>& seen);

 private:
  struct Baseline {
    uint64_t turn_ns = 0;
    uint64_t waited_ns = 0;
  };

  Options options_;
  std::map<uint64_t, Baseline> last_;
};

}  // namespace hf::hook

#endif  // HF_HOOK_SHARE_FEEDBACK_H_
