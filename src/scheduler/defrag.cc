#include "scheduler/defrag.h"

#include <algorithm>
#include <utility>

#include "gpu/mig_profiles.h"

namespace hf::scheduler {
namespace {

using ledger::ClusterView;
using ledger::GpuRecord;

// The best plan found for one GPU to free.
struct Candidate {
  std::vector<DefragMove> moves;
  MemoryMib largest_after = 0;
  std::unique_ptr<ledger::Ledger> after;
};

}  // namespace

MemoryMib LargestSliceMib(const GpuRecord& g) {
  if (!g.live || !g.healthy() || g.whole_owned) return 0;
  if (g.free_compute_percent() <= 0) return 0;
  if (g.mig == nullptr) return std::max<MemoryMib>(0, g.free_memory_mib());
  MemoryMib best = 0;
  for (const gpu::MigProfile& p : g.mig->profiles) {
    if (p.media_extensions) continue;
    const MemoryMib charged = ClusterView::MigChargedMemory(g, p);
    if (charged <= best || charged > g.free_memory_mib()) continue;
    if (gpu::MigComputePercent(*g.mig, p) > g.free_compute_percent()) continue;
    for (const gpu::MigPlacement& at : p.placements) {
      const bool taken = std::any_of(
          g.mig_instances.begin(), g.mig_instances.end(),
          [&](const auto& inst) { return inst.second.placement.Overlaps(at); });
      if (!taken) {
        best = charged;
        break;
      }
    }
  }
  return best;
}

RoomSummary MeasureRoom(const ClusterView& view, std::optional<NodeId> node) {
  RoomSummary out;
  for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
    const GpuRecord& g = view.gpu(GpuId(i));
    if (!g.live) continue;
    if (node && g.node != *node) continue;
    GpuRoom room;
    room.gpu = g.id;
    room.node = g.node;
    room.total_memory_mib = g.spec.memory_mib;
    room.free_memory_mib = g.healthy() && !g.whole_owned
                               ? std::max<MemoryMib>(0, g.free_memory_mib())
                               : 0;
    room.largest_slice_mib = LargestSliceMib(g);
    out.free_memory_mib += room.free_memory_mib;
    out.largest_slice_mib =
        std::max(out.largest_slice_mib, room.largest_slice_mib);
    out.gpus.push_back(room);
  }
  if (out.free_memory_mib > 0) {
    out.fragmentation = 1.0 - static_cast<double>(out.largest_slice_mib) /
                                  static_cast<double>(out.free_memory_mib);
    out.fragmentation = std::clamp(out.fragmentation, 0.0, 1.0);
  }
  return out;
}

StatusOr<DefragPlan> PlanDefrag(const ledger::Ledger& ledger,
                                const DefragRequest& request,
                                const ledger::PlacementPolicy& policy) {
  if (request.max_moves < 1 || request.max_moves > 64) {
    return Status::InvalidArgument("must be 1..64", "max_moves");
  }
  if (request.goal_memory_mib && *request.goal_memory_mib < 1) {
    return Status::InvalidArgument("must be a positive number of MiB",
                                   "goal_memory_mb");
  }
  std::unique_ptr<ledger::Ledger> base = ledger.Snapshot();
  RoomSummary before;
  std::vector<GpuId> candidates;
  bool node_known = !request.node.has_value();
  base->Read([&](const ClusterView& view) {
    if (request.node && view.HasNode(*request.node)) node_known = true;
    before = MeasureRoom(view, request.node);
    for (const GpuRoom& room : before.gpus) {
      const GpuRecord& g = view.gpu(room.gpu);
      if (g.healthy() && !g.whole_owned) candidates.push_back(room.gpu);
    }
  });
  if (!node_known) return Status::NotFound("no such node");
  if (request.goal_memory_mib &&
      before.largest_slice_mib >= *request.goal_memory_mib) {
    return Status::FailedPrecondition(
        "a slice of " + std::to_string(*request.goal_memory_mib) +
        " MiB fits already (largest allocatable: " +
        std::to_string(before.largest_slice_mib) + " MiB); nothing to move");
  }

  std::optional<Candidate> best;
  GpuId best_gpu;
  for (GpuId freed : candidates) {
    // The movable slices on `freed`, largest first: the fewest moves that
    // free the most memory.
    std::vector<std::pair<MemoryMib, SliceId>> here;
    MemoryMib total = 0;
    base->Read([&](const ClusterView& view) {
      total = view.gpu(freed).spec.memory_mib;
    });
    for (const ledger::Allocation& a : base->Allocations()) {
      if (a.kind != ledger::RequestKind::kSlice || a.gpus.size() != 1 ||
          a.gpus[0] != freed || !request.movable.contains(a.id)) {
        continue;
      }
      here.emplace_back(a.memory_mib, a.id);
    }
    if (here.empty()) continue;
    std::sort(here.begin(), here.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    const MemoryMib target = request.goal_memory_mib.value_or(total);
    Candidate c;
    c.after = base->Snapshot();
    bool stranded = false;
    for (const auto& [memory, slice] : here) {
      MemoryMib largest = 0;
      c.after->Read([&](const ClusterView& view) {
        largest = LargestSliceMib(view.gpu(freed));
      });
      if (largest >= target) break;
      if (static_cast<int>(c.moves.size()) >= request.max_moves) break;
      const MovableSlice& m = request.movable.at(slice);
      auto a = c.after->GetAllocation(slice);
      if (!a) continue;
      if (!c.after->Release(slice).ok()) {
        stranded = true;
        break;
      }
      ledger::PlacementRequest r = m.request;
      r.kind = ledger::RequestKind::kSlice;
      r.tenant = a->tenant;
      r.excluded_gpus.push_back(freed);
      for (GpuId g : request.excluded_targets) r.excluded_gpus.push_back(g);
      ledger::PlacementResult placed = c.after->Place(r, policy);
      if (!placed.placed()) {
        stranded = true;  // no permanent evictions: not this GPU
        break;
      }
      DefragMove move;
      move.slice = slice;
      move.task_id = m.task_id;
      move.from_node = a->node;
      move.from_gpu = freed;
      move.to_node = placed.allocation.node;
      move.to_gpu = placed.allocation.gpus.at(0);
      c.moves.push_back(move);
      // The copy charges the moved slice under its new id; the move keeps
      // the slice id of the live cluster.
    }
    if (stranded || c.moves.empty()) continue;
    c.after->Read([&](const ClusterView& view) {
      c.largest_after = MeasureRoom(view, request.node).largest_slice_mib;
    });
    if (request.goal_memory_mib && c.largest_after < *request.goal_memory_mib) {
      continue;
    }
    if (c.largest_after <= before.largest_slice_mib) continue;
    const bool better =
        !best || (request.goal_memory_mib
                      ? c.moves.size() < best->moves.size() ||
                            (c.moves.size() == best->moves.size() &&
                             c.largest_after > best->largest_after)
                      : c.largest_after > best->largest_after ||
                            (c.largest_after == best->largest_after &&
                             c.moves.size() < best->moves.size()));
    if (better) {
      best = std::move(c);
      best_gpu = freed;
    }
  }
  if (!best) {
    std::string what =
        request.goal_memory_mib
            ? "room for a slice of " +
                  std::to_string(*request.goal_memory_mib) + " MiB"
            : std::string("a larger allocatable slice than ") +
                  std::to_string(before.largest_slice_mib) + " MiB";
    return Status::FailedPrecondition(
        "no plan of at most " + std::to_string(request.max_moves) +
        " move(s) of preemptible tasks' slices makes " + what +
        " (every moved slice needs a target elsewhere)");
  }
  DefragPlan plan;
  plan.moves = std::move(best->moves);
  plan.freed_gpu = best_gpu;
  plan.before = std::move(before);
  best->after->Read([&](const ClusterView& view) {
    plan.after = MeasureRoom(view, request.node);
  });
  return plan;
}

}  // namespace hf::scheduler
