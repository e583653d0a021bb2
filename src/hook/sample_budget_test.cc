// The sampler's budget: the period settles where sampling costs under 1% of
// the launch path, and sampling turns off when no period is cheap enough.
#include "hook/sample_budget.h"

#include <gtest/gtest.h>

#include <utility>

namespace hf::hook {
namespace {

// The period the rule settles on for a process that spends `launch_ns` of
// wall time per launch (the call, its own work, waiting for the GPU).
uint32_t Settle(uint64_t extra_ns, uint64_t launch_ns) {
  uint32_t period = kStartSamplePeriod;
  for (int i = 0; i < 64 && period != 0; ++i) {
    period = NextSamplePeriod(period, extra_ns, uint64_t{period} * launch_ns);
  }
  return period;
}

double Cost(uint32_t period, uint64_t extra_ns, uint64_t launch_ns) {
  return static_cast<double>(extra_ns) /
         (period * static_cast<double>(launch_ns));
}

TEST(SampleBudgetTest, SettlesUnderTheBudget) {
  // A real GPU: ~4 us a launch, ~8 us for two event records and a query.
  for (const auto& [extra, launch] : {std::pair<uint64_t, uint64_t>{8000, 4000},
                                      {300, 1000},
                                      {50, 5000},
                                      {20000, 2000}}) {
    const uint32_t p = Settle(extra, launch);
    ASSERT_GE(p, kMinSamplePeriod) << extra << "/" << launch;
    EXPECT_LE(Cost(p, extra, launch), kSampleBudget)
        << extra << "/" << launch << " at period " << p;
  }
}

TEST(SampleBudgetTest, SamplesOftenWhenTheProcessWaitsForTheGpu) {
  // 2 us a timed launch, 1 ms of kernel per launch: cheap at any period.
  EXPECT_EQ(Settle(2000, 1000 * 1000), kMinSamplePeriod);
}

TEST(SampleBudgetTest, TurnsOffWhenNoPeriodIsCheapEnough) {
  // A timed launch costing more than 655 launches cannot fit 1% of 65536.
  EXPECT_EQ(Settle(1000 * 1000, 1000), 0u);
  EXPECT_EQ(NextSamplePeriod(kMaxSamplePeriod, 1000, 1000), 0u);
  EXPECT_EQ(NextSamplePeriod(0, 1, 1000), 0u);  // off stays off
}

TEST(SampleBudgetTest, ClassesTellShapesApart) {
  int a = 0;
  int b = 0;
  const uint64_t k = KernelClassKey(&a, 128, 1, 1, 256, 1, 1);
  EXPECT_NE(k, 0u);
  EXPECT_EQ(k, KernelClassKey(&a, 128, 1, 1, 256, 1, 1));
  EXPECT_NE(k, KernelClassKey(&b, 128, 1, 1, 256, 1, 1));
  EXPECT_NE(k, KernelClassKey(&a, 256, 1, 1, 128, 1, 1));
  EXPECT_NE(k, KernelClassKey(&a, 128, 1, 1, 256, 2, 1));
}

}  // namespace
}  // namespace hf::hook
