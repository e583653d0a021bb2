// Best-Fit placement (docs/CONTRACT.md section 5), the default policy: of all
// GPUs that admit a slice, the one with the least free memory (ties: node rank,
// then GPU id), found through the ledger's indexes without scanning the
// cluster. Whole-GPU requests go to the admissible node with the fewest free
// whole GPUs, keeping empty nodes for large requests.
//
// Thread-safety: stateless.
#pragma once

#include "ledger/placement_policy.h"

namespace hf::scheduler {

class BestFitPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "best-fit"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

// The same choice as BestFitPolicy by a plain scan over every GPU and node.
// The baseline the benchmarks compare the indexes against, and a second
// implementation the tests check the first with.
class LinearScanBestFitPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "best-fit-scan"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

}  // namespace hf::scheduler
