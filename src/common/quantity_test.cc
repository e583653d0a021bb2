// Tests for the integer quantity conversions: RatioToPercent (half-up
// rounding of a compute ratio to whole percent, and the rejection of every
// out-of-range input naming the field) and MaxSliceMemoryMib (the exact
// 90%-of-the-largest-GPU limit).
#include "common/quantity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace hf {
namespace {

ComputePercent PercentOf(double ratio) {
  StatusOr<ComputePercent> p = RatioToPercent(ratio);
  EXPECT_TRUE(p.ok()) << ratio << ": " << p.status().ToString();
  return p.ok() ? *p : -1;
}

void ExpectRejected(double ratio, const char* field = "gpu_compute_ratio") {
  StatusOr<ComputePercent> p = RatioToPercent(ratio, field);
  ASSERT_FALSE(p.ok()) << ratio << " accepted as " << *p;
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << ratio;
  EXPECT_EQ(p.status().field(), field) << ratio;
  EXPECT_FALSE(p.status().message().empty()) << ratio;
}

TEST(RatioToPercentTest, ExactValues) {
  EXPECT_EQ(PercentOf(1.0), 100);
  EXPECT_EQ(PercentOf(0.5), 50);
  EXPECT_EQ(PercentOf(0.25), 25);
  EXPECT_EQ(PercentOf(0.01), 1);
  EXPECT_EQ(PercentOf(0.1), 10);
  EXPECT_EQ(PercentOf(0.3), 30);
  EXPECT_EQ(PercentOf(0.7), 70);
  EXPECT_EQ(PercentOf(0.99), 99);
}

TEST(RatioToPercentTest, RoundsHalfUp) {
  EXPECT_EQ(PercentOf(0.505), 51);  // 0.50499999... in binary
  EXPECT_EQ(PercentOf(0.515), 52);
  EXPECT_EQ(PercentOf(0.125), 13);
  EXPECT_EQ(PercentOf(0.995), 100);
  EXPECT_EQ(PercentOf(0.015), 2);
  EXPECT_EQ(PercentOf(0.295), 30);
}

TEST(RatioToPercentTest, RoundsBelowHalfDown) {
  EXPECT_EQ(PercentOf(0.504), 50);
  EXPECT_EQ(PercentOf(0.5049), 50);
  EXPECT_EQ(PercentOf(0.014), 1);
  EXPECT_EQ(PercentOf(0.994), 99);
}

TEST(RatioToPercentTest, SmallestAcceptedRatioIsHalfAPercent) {
  EXPECT_EQ(PercentOf(0.005), 1);
  EXPECT_EQ(PercentOf(0.006), 1);
}

TEST(RatioToPercentTest, RejectsRatioThatRoundsToZero) {
  ExpectRejected(0.004);
  ExpectRejected(0.0049);
  ExpectRejected(1e-9);
  ExpectRejected(std::numeric_limits<double>::denorm_min());
  StatusOr<ComputePercent> p = RatioToPercent(0.004);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("0%"), std::string::npos)
      << p.status().message();
}

TEST(RatioToPercentTest, RejectsZeroAndNegative) {
  ExpectRejected(0.0);
  ExpectRejected(-0.0);
  ExpectRejected(-0.5);
  ExpectRejected(-1.0);
}

TEST(RatioToPercentTest, RejectsAboveOne) {
  ExpectRejected(1.0000001);
  ExpectRejected(1.01);
  ExpectRejected(2.0);
  ExpectRejected(100.0);  // a percent passed where a ratio is expected
}

TEST(RatioToPercentTest, RejectsNonFinite) {
  ExpectRejected(std::numeric_limits<double>::quiet_NaN());
  ExpectRejected(std::numeric_limits<double>::infinity());
  ExpectRejected(-std::numeric_limits<double>::infinity());
}

TEST(RatioToPercentTest, DefaultFieldIsGpuComputeRatio) {
  StatusOr<ComputePercent> p = RatioToPercent(2.0);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().field(), "gpu_compute_ratio");
}

TEST(RatioToPercentTest, ErrorsNameTheGivenField) {
  ExpectRejected(0.0, "share");
  ExpectRejected(1.5, "quota.ratio");
  ExpectRejected(std::nan(""), "x");
  ExpectRejected(0.001, "y");
}

TEST(RatioToPercentTest, EveryWholePercentRoundTrips) {
  for (int p = 1; p <= 100; ++p) {
    EXPECT_EQ(PercentOf(p / 100.0), p) << p;
  }
}

TEST(RatioToPercentTest, ResultIsAlwaysInOneToHundred) {
  for (int i = 5; i <= 1000; ++i) {
    const double ratio = i / 1000.0;
    StatusOr<ComputePercent> p = RatioToPercent(ratio);
    ASSERT_TRUE(p.ok()) << ratio;
    EXPECT_GE(*p, 1) << ratio;
    EXPECT_LE(*p, 100) << ratio;
    EXPECT_EQ(*p, (i + 5) / 10) << ratio;  // half up on the decimal value
  }
}

TEST(MaxSliceMemoryMibTest, IsFloorOfNinetyPercentInIntegers) {
  EXPECT_EQ(MaxSliceMemoryMib(0), 0);
  EXPECT_EQ(MaxSliceMemoryMib(10), 9);
  EXPECT_EQ(MaxSliceMemoryMib(100), 90);
  EXPECT_EQ(MaxSliceMemoryMib(81920), 73728);
  EXPECT_EQ(MaxSliceMemoryMib(40960), 36864);
  EXPECT_EQ(MaxSliceMemoryMib(16384), 14745);  // 14745.6 floors
  EXPECT_EQ(MaxSliceMemoryMib(24576), 22118);  // 22118.4 floors
  EXPECT_EQ(MaxSliceMemoryMib(11), 9);         // 9.9 floors
  EXPECT_EQ(MaxSliceMemoryMib(1), 0);
}

TEST(MaxSliceMemoryMibTest, IsConstexprAndExactForLargeValues) {
  static_assert(MaxSliceMemoryMib(81920) == 73728);
  constexpr MemoryMib kBig = std::int64_t{1} << 40;
  EXPECT_EQ(MaxSliceMemoryMib(kBig), kBig / 10 * 9 + (kBig % 10) * 9 / 10);
}

}  // namespace
}  // namespace hf
