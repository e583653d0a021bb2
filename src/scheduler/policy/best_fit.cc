#include "scheduler/policy/best_fit.h"

#include <tuple>

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::GpuRecord;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;

std::optional<std::vector<GpuId>> BestFitPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind == RequestKind::kWholeGpus) {
    return view.BestFitWholeGpus(request);
  }
  std::optional<GpuId> gpu = view.BestFitSliceGpu(request);
  if (!gpu.has_value()) return std::nullopt;
  return std::vector<GpuId>{*gpu};
}

std::optional<std::vector<GpuId>> LinearScanBestFitPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind == RequestKind::kWholeGpus) {
    std::optional<std::tuple<int, std::uint64_t, std::uint64_t>> best_key;
    std::vector<GpuId> best;
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const NodeRecord& node = view.node(NodeId(n));
      if (!node.live || view.CheckNodeResources(node, request)) continue;
      int whole_free = 0;  // eligible of any model: the Best-Fit key
      for (GpuId g : node.gpus) {
        const GpuRecord& gpu = view.gpu(g);
        whole_free += gpu.healthy() && gpu.empty() && !gpu.spec.mig_capable;
      }
      std::vector<GpuId> eligible = view.EligibleWholeGpus(node, request);
      if (eligible.size() < static_cast<std::size_t>(request.gpu_count)) {
        continue;
      }
      const auto key = std::make_tuple(whole_free, node.tie_rank, n);
      if (!best_key || key < *best_key) {
        best_key = key;
        eligible.resize(static_cast<std::size_t>(request.gpu_count));
        best = std::move(eligible);
      }
    }
    if (!best_key) return std::nullopt;
    return best;
  }
  const MemoryMib memory = request.memory_mib.value_or(0);
  if (memory > MaxSliceMemoryMib(view.largest_gpu_memory_mib())) {
    return std::nullopt;
  }
  std::optional<std::tuple<MemoryMib, std::uint64_t, std::uint64_t>> best_key;
  GpuId best;
  for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
    const GpuRecord& gpu = view.gpu(GpuId(i));
    if (!gpu.live || view.CheckSlice(gpu, request)) continue;
    const auto key =
        std::make_tuple(gpu.free_memory_mib(), view.node(gpu.node).tie_rank, i);
    if (!best_key || key < *best_key) {
      best_key = key;
      best = GpuId(i);
    }
  }
  if (!best_key) return std::nullopt;
  return std::vector<GpuId>{best};
}

}  // namespace hf::scheduler
