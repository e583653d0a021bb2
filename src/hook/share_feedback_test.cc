#include "hook/share_feedback.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "hook/region.h"

namespace hf::hook {
namespace {

constexpr int64_t kMs = 1'000'000;

class ShareFeedbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* error = "";
    ASSERT_TRUE(gpu_.OpenPrivate(&error)) << error;
  }
  int Join(uint64_t key, ComputeMode mode) {
    return gpu_.Join(key, 25, mode, getpid(),
                     Region::ProcessStartTicks(getpid()));
  }
  GpuRegion gpu_;
  ShareFeedback feedback_;
};

TEST_F(ShareFeedbackTest, TheFirstRoundOnlyTakesTheBaseline) {
  ASSERT_GE(Join(1, ComputeMode::kStrict), 0);
  EXPECT_TRUE(feedback_.Apply(gpu_, 1000 * kMs, {{1, 900 * kMs, 1}}).empty());
  EXPECT_GE(gpu_.SliceStats(1).credit_ns, 0);
}

TEST_F(ShareFeedbackTest, TimeOutsideTheTurnsIsChargedToAStrictSlice) {
  ASSERT_GE(Join(1, ComputeMode::kStrict), 0);
  feedback_.Apply(gpu_, 1, {});
  const auto found = feedback_.Apply(gpu_, 1000 * kMs, {{1, 400 * kMs, 2}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].key, 1u);
  EXPECT_EQ(found[0].turn_ns, 0);
  EXPECT_EQ(found[0].escaped_ns, 400 * kMs);
  EXPECT_DOUBLE_EQ(found[0].achieved_percent, 40.0);
  // At most its cap (25 ms) before, 400 ms less after.
  EXPECT_LE(gpu_.SliceStats(1).credit_ns, -370 * kMs);
}

TEST_F(ShareFeedbackTest, RoundingNoiseIsNotCharged) {
  ASSERT_GE(Join(1, ComputeMode::kStrict), 0);
  feedback_.Apply(gpu_, 1, {});
  // 2% + half a percent for the one process: 25 ms of a second.
  const auto found = feedback_.Apply(gpu_, 1000 * kMs, {{1, 24 * kMs, 1}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].escaped_ns, 0);
  EXPECT_GE(gpu_.SliceStats(1).credit_ns, 0);
}

TEST_F(ShareFeedbackTest, ADebtIsBounded) {
  ASSERT_GE(Join(1, ComputeMode::kStrict), 0);
  feedback_.Apply(gpu_, 1, {});
  feedback_.Apply(gpu_, 60'000 * kMs, {{1, 50'000 * kMs, 1}});
  EXPECT_GE(gpu_.SliceStats(1).credit_ns, -kMaxDebtNs);
  EXPECT_LT(gpu_.SliceStats(1).credit_ns, -kMaxDebtNs + 10 * kMs);
}

TEST_F(ShareFeedbackTest, AWorkConservingSliceIsChargedOnlyWhenOthersWaited) {
  ASSERT_GE(Join(1, ComputeMode::kWorkConserving), 0);
  feedback_.Apply(gpu_, 1, {});
  const auto found = feedback_.Apply(gpu_, 1000 * kMs, {{1, 400 * kMs, 1}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].escaped_ns, 0);  // nobody else wanted the GPU
  EXPECT_GE(gpu_.SliceStats(1).credit_ns, 0);
}

TEST_F(ShareFeedbackTest, SlicesTheDriverDidNotSeeUsedNothing) {
  ASSERT_GE(Join(1, ComputeMode::kStrict), 0);
  feedback_.Apply(gpu_, 1, {});
  const auto found = feedback_.Apply(gpu_, 1000 * kMs, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].busy_ns, 0);
  EXPECT_EQ(found[0].escaped_ns, 0);
}

}  // namespace
}  // namespace hf::hook
