// Template definitions for experiment.h.
#pragma once

#include <cmath>

namespace hf::sim {

template <typename Metric>
std::vector<double> Discretise(const std::vector<Sample>& samples,
                               std::int64_t capacity_milli, int max_x,
                               Metric metric) {
  std::vector<double> sum(static_cast<std::size_t>(max_x) + 1, 0.0);
  std::vector<int> count(sum.size(), 0);
  for (const Sample& s : samples) {
    // Round half to even, as Python's round() does in the reference.
    const double pct = 100.0 * static_cast<double>(s.arrived_milli) /
                       static_cast<double>(capacity_milli);
    const long bin = std::lrint(pct);
    if (bin < 0 || bin > max_x) continue;
    sum[static_cast<std::size_t>(bin)] += metric(s);
    ++count[static_cast<std::size_t>(bin)];
  }
  std::vector<double> out(sum.size(), 0.0);
  for (std::size_t x = 0; x < out.size(); ++x) {
    if (count[x] > 0) {
      out[x] = sum[x] / count[x];
      continue;
    }
    double s = 0;
    int c = 0;
    for (std::size_t y = x == 0 ? 0 : x - 1; y <= x + 1 && y < out.size();
         ++y) {
      s += sum[y];
      c += count[y];
    }
    out[x] = c > 0 ? s / c : (x > 0 ? out[x - 1] : 0.0);
  }
  return out;
}

}  // namespace hf::sim
