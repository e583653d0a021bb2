// PlacementPolicy: the pluggable choice of where a request goes.
//
// A policy is a pure function of a read-only ClusterView and a request
// (STYLE.md, Ray): it returns the GPUs it picks or nothing, and never changes
// state. The Ledger re-checks every admission rule on the policy's choice
// before it commits, so a faulty policy can never oversell a GPU.
//
// Thread-safety: implementations must be stateless or internally
// synchronised; Ledger calls Choose under its lock, possibly from several
// threads over time.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "ledger/cluster_view.h"
#include "ledger/model.h"

namespace hf::ledger {

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // For a slice request: exactly one GPU. For whole GPUs: request.gpu_count
  // distinct GPUs on one node. nullopt when the policy finds no place.
  virtual std::optional<std::vector<GpuId>> Choose(
      const ClusterView& view, const PlacementRequest& request) const = 0;
  // For a node-only request (RequestKind::kNodeOnly): the node, or nullopt.
  // The default prefers the node with the least idle GPU, then the least
  // free CPU that fits (by scan).
  virtual std::optional<NodeId> ChooseNode(
      const ClusterView& view, const PlacementRequest& request) const;
};

}  // namespace hf::ledger
