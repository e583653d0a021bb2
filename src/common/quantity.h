// Integer quantities and the conversions into them.
//
// The ledger counts in integers only: memory in MiB, GPU compute in whole
// percent (1..100), CPU in milli-cores. Doubles exist only at the edges (JSON
// ratios such as 0.5); they are converted here, rounding half up, so no float
// drift can accumulate in the ledger.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace hf {

using MemoryMib = std::int64_t;
using ComputePercent = std::int32_t;
using CpuMilli = std::int64_t;

inline constexpr ComputePercent kFullComputePercent = 100;
// Traces and the fragmentation measure count GPU shares in thousandths.
inline constexpr int kMilliPerGpu = 1000;

// Converts a compute ratio in (0, 1] to an integer percent 1..100, rounding
// half up (0.505 -> 51, 0.004 -> 0 is rejected as out of range after
// rounding). Fails with InvalidArgument naming `field` when the ratio is not
// finite, <= 0, > 1, or rounds to 0.
StatusOr<ComputePercent> RatioToPercent(
    double ratio, const char* field = "gpu_compute_ratio");

// The largest slice the 90%-of-the-largest-GPU rule admits on a cluster whose
// largest GPU has `largest_gpu_mib`: floor(0.9 * largest), in exact integers.
constexpr MemoryMib MaxSliceMemoryMib(MemoryMib largest_gpu_mib) {
  return largest_gpu_mib * 9 / 10;
}

}  // namespace hf
