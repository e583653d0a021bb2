#include "common/quantity.h"

#include <cmath>
#include <string>

namespace hf {

StatusOr<ComputePercent> RatioToPercent(double ratio, const char* field) {
  if (!std::isfinite(ratio)) {
    return Status::InvalidArgument("must be a finite number in (0, 1]", field);
  }
  if (ratio <= 0.0 || ratio > 1.0) {
    return Status::InvalidArgument(
        "must be in (0, 1], got " + std::to_string(ratio), field);
  }
  // Half up on the decimal value: add a tiny epsilon so 0.505 (stored as
  // 0.50499999...) still rounds to 51 as a person reading "0.505" expects.
  const double scaled = ratio * 100.0;
  auto percent = static_cast<ComputePercent>(std::floor(scaled + 0.5 + 1e-9));
  if (percent < 1) {
    return Status::InvalidArgument(
        "rounds to 0%; the smallest compute share is 0.005 (1%)", field);
  }
  if (percent > kFullComputePercent) percent = kFullComputePercent;
  return percent;
}

}  // namespace hf
