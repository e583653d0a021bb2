// hf-sim's outputs: the JSON document (a contract other tools read) and an
// SVG plot a person can look at.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/experiment.h"

namespace hf::sim {

struct ExperimentResult {
  std::string policy;
  std::string nodes_file;
  std::string pods_file;
  std::vector<std::uint64_t> seeds;
  double inflate = 1.3;
  std::int64_t capacity_milli = 0;
  std::vector<Point> points;
  double decisions_per_second = 0;
  std::int64_t attempts = 0;
  std::int64_t placed = 0;
};

// {"policy", "seeds", "points": [{"x", "unallocated_pct": {"median", "p25",
// "p75"}, "frag_amount_pct", "frag_ratio_pct"}], "decisions_per_second", ...}
std::string ToJson(const ExperimentResult& result);

// Three panels (unallocated GPU %, fragment amount %, fragment ratio %)
// against arrived GPU %, one median line with a 25-75% band per result (one
// colour per policy), x from `min_x`.
std::string ToSvg(const std::vector<ExperimentResult>& results, int min_x = 0);
std::string ToSvg(const ExperimentResult& result);

// Reads a document written by ToJson back (for comparison plots).
StatusOr<ExperimentResult> FromJson(const std::string& text,
                                    const std::string& source);

}  // namespace hf::sim
