// ChooseHold (hold.h).
#include "scheduler/hold.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/quantity.h"

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::GpuRecord;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;

namespace {

// The order of hold candidates: the least memory in use, the fewest
// allocations, the node's tie rank, the (first) GPU's id.
using DrainKey = std::tuple<MemoryMib, int, std::uint64_t, std::uint64_t>;

}  // namespace

std::vector<GpuId> ChooseHold(const ClusterView& view,
                              const PlacementRequest& request) {
  std::optional<DrainKey> best;
  std::vector<GpuId> chosen;
  switch (request.kind) {
    case RequestKind::kNodeOnly:
      return {};
    case RequestKind::kSlice:
      if (request.memory_mib.value_or(0) >
          MaxSliceMemoryMib(view.largest_gpu_memory_mib())) {
        return {};  // never fits anywhere: the 90% rule
      }
      for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
        const GpuRecord& g = view.gpu(GpuId(i));
        if (!g.live || view.CheckOnceEmpty(g, request)) continue;
        const DrainKey key{g.used_memory_mib, g.allocation_count,
                           view.node(g.node).tie_rank, g.id.value()};
        if (!best || key < *best) {
          best = key;
          chosen = {g.id};
        }
      }
      return chosen;
    case RequestKind::kWholeGpus:
      break;
  }
  if (request.gpu_count < 1) return {};
  const auto count = static_cast<std::size_t>(request.gpu_count);
  std::vector<const GpuRecord*> eligible;
  for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
    const NodeRecord& node = view.node(NodeId(n));
    if (!node.live || node.gpus.size() < count) continue;
    eligible.clear();
    for (const GpuId id : node.gpus) {
      const GpuRecord& g = view.gpu(id);
      if (g.live && !view.CheckOnceEmpty(g, request)) eligible.push_back(&g);
    }
    if (eligible.size() < count) continue;
    // The node's GPUs that drain soonest.
    std::sort(eligible.begin(), eligible.end(),
              [](const GpuRecord* a, const GpuRecord* b) {
                return std::tie(a->used_memory_mib, a->allocation_count,
                                a->id) <
                       std::tie(b->used_memory_mib, b->allocation_count, b->id);
              });
    eligible.resize(count);
    MemoryMib used = 0;
    int allocations = 0;
    for (const GpuRecord* g : eligible) {
      used += g->used_memory_mib;
      allocations += g->allocation_count;
    }
    const DrainKey key{used, allocations, node.tie_rank,
                       eligible.front()->id.value()};
    if (!best || key < *best) {
      best = key;
      chosen.clear();
      for (const GpuRecord* g : eligible) chosen.push_back(g->id);
      std::sort(chosen.begin(), chosen.end());
    }
  }
  return chosen;
}

}  // namespace hf::scheduler
