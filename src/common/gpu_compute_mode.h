// How the hook's compute throttle shares a GPU's time between the slices
// on it (a task's `gpu_compute_mode`, docs/API.md): the values, their
// names in the API, the store and the slice env, and the default.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

namespace hf {

enum class GpuComputeMode {
  // A slice may also use GPU time the other slices leave idle; a busy
  // slice still gets at least its share. The default.
  kWorkConserving,
  // A slice never gets more than its share; the windows of different
  // slices on one GPU do not overlap.
  kStrict,
};

inline constexpr GpuComputeMode kDefaultGpuComputeMode =
    GpuComputeMode::kWorkConserving;

// "work-conserving" or "strict".
std::string_view GpuComputeModeName(GpuComputeMode mode);
// The mode named exactly so (case-sensitive); nullopt for anything else.
std::optional<GpuComputeMode> ParseGpuComputeMode(std::string_view name);

}  // namespace hf
