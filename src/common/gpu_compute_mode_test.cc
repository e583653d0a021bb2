// Tests for the GPU compute mode's names: both values read back, the
// default, and that near misses are not taken.
#include "common/gpu_compute_mode.h"

#include <gtest/gtest.h>

namespace hf {
namespace {

TEST(GpuComputeModeTest, NamesRoundTrip) {
  for (GpuComputeMode mode :
       {GpuComputeMode::kWorkConserving, GpuComputeMode::kStrict}) {
    EXPECT_EQ(ParseGpuComputeMode(GpuComputeModeName(mode)), mode);
  }
  EXPECT_EQ(GpuComputeModeName(GpuComputeMode::kStrict), "strict");
  EXPECT_EQ(GpuComputeModeName(GpuComputeMode::kWorkConserving),
            "work-conserving");
}

TEST(GpuComputeModeTest, DefaultIsWorkConserving) {
  EXPECT_EQ(kDefaultGpuComputeMode, GpuComputeMode::kWorkConserving);
}

TEST(GpuComputeModeTest, NearMissesAreRefused) {
  for (const char* name : {"", "Strict", "STRICT", " strict", "strict ",
                           "work_conserving", "workconserving", "fair"}) {
    EXPECT_EQ(ParseGpuComputeMode(name), std::nullopt) << "'" << name << "'";
  }
}

}  // namespace
}  // namespace hf
