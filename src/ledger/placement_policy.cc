#include "ledger/placement_policy.h"

#include <tuple>

namespace hf::ledger {

std::optional<NodeId> PlacementPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  // Best-Fit on CPU: the node with the least free CPU that takes the task
  // (ties: rank, id). A scan: node-only tasks are rare in the product.
  std::optional<std::tuple<CpuMilli, std::uint64_t, std::size_t>> best;
  for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
    const NodeRecord& node = view.node(NodeId(i));
    if (!node.live || view.CheckNodeResources(node, request)) continue;
    const auto key = std::make_tuple(node.free_cpu_milli(), node.tie_rank, i);
    if (!best || key < *best) best = key;
  }
  if (!best) return std::nullopt;
  return NodeId(std::get<2>(*best));
}

}  // namespace hf::ledger
