#include "ledger/placement_policy.h"

#include <tuple>

namespace hf::ledger {

std::optional<NodeId> PlacementPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  // A task without GPUs should not take the CPU that idle GPUs need: prefer
  // the node with the least idle GPU (in thousandths of a GPU, summed), then
  // Best-Fit on CPU (least free CPU that fits), then rank and id. A scan:
  // node-only tasks are rare in the product.
  std::optional<std::tuple<std::int64_t, CpuMilli, std::uint64_t, std::size_t>>
      best;
  for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
    const NodeRecord& node = view.node(NodeId(i));
    if (!node.live || view.CheckNodeResources(node, request)) continue;
    std::int64_t idle_gpu = 0;
    for (GpuId g : node.gpus) {
      const GpuRecord& gpu = view.gpu(g);
      if (gpu.healthy()) {
        idle_gpu += gpu.free_memory_mib() * 1000 / gpu.spec.memory_mib;
      }
    }
    const auto key =
        std::make_tuple(idle_gpu, node.free_cpu_milli(), node.tie_rank, i);
    if (!best || key < *best) best = key;
  }
  if (!best) return std::nullopt;
  return NodeId(std::get<3>(*best));
}

}  // namespace hf::ledger
