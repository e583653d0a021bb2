#include "common/gpu_compute_mode.h"

#include <array>
#include <utility>

namespace hf {
namespace {

// The one place each name is spelled, read in both directions.
constexpr std::array<std::pair<GpuComputeMode, std::string_view>, 2> kNames = {{
    {GpuComputeMode::kWorkConserving, "work-conserving"},
    {GpuComputeMode::kStrict, "strict"},
}};

}  // namespace

std::string_view GpuComputeModeName(GpuComputeMode mode) {
  for (const auto& [value, name] : kNames) {
    if (value == mode) return name;
  }
  return "unknown";
}

std::optional<GpuComputeMode> ParseGpuComputeMode(std::string_view name) {
  for (const auto& [value, spelled] : kNames) {
    if (spelled == name) return value;
  }
  return std::nullopt;
}

}  // namespace hf
