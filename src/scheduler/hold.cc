// ChooseHold and HoldBook (hold.h).
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

// The order of hold candidates: on a node whose free CPU and host memory
// cover the task now, then the least memory in use, the fewest
// allocations, the node's tie rank, the (first) GPU's id.
using DrainKey = std::tuple<bool, MemoryMib, int, std::uint64_t, std::uint64_t>;

// Whether `node` lacks the CPU or host memory `request` needs now. A hold
// keeps GPUs, not the node's CPU: on such a node the GPUs drain while
// other tasks keep the CPU, and the hold would end without helping.
bool NodeShort(const NodeRecord& node, const PlacementRequest& request) {
  return request.cpu_milli > node.free_cpu_milli() ||
         request.host_memory_mib > node.free_host_memory_mib();
}

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
        const NodeRecord& node = view.node(g.node);
        const DrainKey key{NodeShort(node, request), g.used_memory_mib,
                           g.allocation_count, node.tie_rank, g.id.value()};
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
    const DrainKey key{NodeShort(node, request), used, allocations,
                       node.tie_rank, eligible.front()->id.value()};
    if (!best || key < *best) {
      best = key;
      chosen.clear();
      for (const GpuRecord* g : eligible) chosen.push_back(g->id);
      std::sort(chosen.begin(), chosen.end());
    }
  }
  return chosen;
}

const Hold* HoldBook::HoldOf(std::int64_t task_id) const {
  for (const Hold& hold : holds_) {
    if (hold.task_id == task_id) return &hold;
  }
  return nullptr;
}

int HoldBook::HeldGpuCount() const {
  std::size_t n = 0;
  for (const Hold& hold : holds_) n += hold.gpus.size();
  return static_cast<int>(n);
}

void HoldBook::ExcludeOthers(std::int64_t task_id,
                             PlacementRequest& request) const {
  for (const Hold& hold : holds_) {
    if (hold.task_id == task_id) continue;
    request.excluded_gpus.insert(request.excluded_gpus.end(), hold.gpus.begin(),
                                 hold.gpus.end());
  }
}

void HoldBook::AddHeldGpus(std::set<GpuId>& out) const {
  for (const Hold& hold : holds_) {
    out.insert(hold.gpus.begin(), hold.gpus.end());
  }
}

bool HoldBook::End(std::int64_t task_id) {
  return std::erase_if(holds_, [task_id](const Hold& hold) {
           return hold.task_id == task_id;
         }) > 0;
}

void HoldBook::ForgetIf(const std::function<bool(std::int64_t)>& gone) {
  std::erase_if(no_hold_, gone);
}

bool HoldBook::MayBegin(const HoldRules& rules, std::int64_t task_id,
                        bool for_room, std::int64_t waited_ms) const {
  return rules.hold_after_ms > 0 && for_room &&
         waited_ms >= rules.hold_after_ms &&
         static_cast<int>(holds_.size()) < rules.max_holds &&
         HoldOf(task_id) == nullptr && !no_hold_.contains(task_id);
}

HoldChange HoldBook::AfterWaiting(const ClusterView& view,
                                  const HoldRules& rules, std::int64_t task_id,
                                  const PlacementRequest& request,
                                  bool for_room, std::int64_t waited_ms,
                                  std::int64_t now,
                                  const std::set<GpuId>& excluded) {
  if (const Hold* hold = HoldOf(task_id); hold != nullptr) {
    bool drained = true;
    bool can_take = true;
    for (const GpuId g : hold->gpus) {
      const bool here = view.HasGpu(g);
      drained = drained && here && view.gpu(g).empty();
      can_take = can_take && here && !view.CheckOnceEmpty(view.gpu(g), request);
    }
    if (!drained && can_take) return HoldChange::kNone;
    End(task_id);
    no_hold_.insert(task_id);
    return drained ? HoldChange::kEndedDrained : HoldChange::kEndedChanged;
  }
  if (!MayBegin(rules, task_id, for_room, waited_ms)) return HoldChange::kNone;
  PlacementRequest asked = request;
  std::set<GpuId> out = excluded;
  AddHeldGpus(out);
  asked.excluded_gpus.insert(asked.excluded_gpus.end(), out.begin(), out.end());
  std::vector<GpuId> gpus = ChooseHold(view, asked);
  if (gpus.empty()) {
    no_hold_.insert(task_id);
    return HoldChange::kNone;
  }
  holds_.push_back(Hold{task_id, std::move(gpus), now});
  return HoldChange::kBegan;
}

}  // namespace hf::scheduler
