// The per-node scan shared by the simulator's node-scoring policies
// (node_scan.h): request needs, the ledger-rule filter of one node, the
// per-node memo and the shape key.
#include "scheduler/policy/node_scan.h"

#include <algorithm>

namespace hf::scheduler::node_scan {

using ledger::ClusterView;
using ledger::GpuRecord;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;

std::optional<Need> MakeNeed(const ClusterView& view,
                             const PlacementRequest& request) {
  Need need;
  need.request = &request;
  need.kind = request.kind;
  switch (request.kind) {
    case RequestKind::kSlice: {
      need.memory = request.memory_mib.value_or(0);
      if (need.memory > MaxSliceMemoryMib(view.largest_gpu_memory_mib())) {
        return std::nullopt;
      }
      need.compute = view.AccountedCompute(request);
      need.least_compute = view.LeastChargedCompute(request);
      const std::int64_t milli =
          request.memory_mib.has_value()
              ? need.memory * kMilliPerGpu / kSimGpuMemoryMib
              : std::int64_t{need.compute} *
                    (kMilliPerGpu / kFullComputePercent);
      need.milli =
          static_cast<int>(std::clamp<std::int64_t>(milli, 0, kMilliPerGpu));
      need.gpu_count = 1;
      break;
    }
    case RequestKind::kWholeGpus:
      if (request.gpu_count < 1) return std::nullopt;
      need.milli = kMilliPerGpu;
      need.gpu_count = request.gpu_count;
      break;
    case RequestKind::kNodeOnly:
      break;
  }
  need.total_milli = std::int64_t{need.milli} * need.gpu_count;
  need.ask = view.AskFor(request);
  return need;
}

int AfterSliceMilli(const GpuRecord& gpu, const Need& need) {
  return GpuFreeMilliAfter(gpu, need.memory, need.compute);
}

bool Gather(const ClusterView& view, std::size_t slot, const Need& need,
            std::vector<GpuFacts>& gpus, NodeFacts& facts, bool with_free,
            NodeGpuCopy* copy) {
  const NodeRecord& node = view.node(NodeId(slot));
  if (!node.live) return false;
  const PlacementRequest& request = *need.request;
  if (view.CheckNodeResources(node, request)) return false;
  if (node.gpus.size() < static_cast<std::size_t>(need.gpu_count)) {
    return false;
  }
  // The node's GPU summary passes over most nodes without reading their
  // GPUs: every candidate GPU is within it (the checks below still decide).
  switch (need.kind) {
    case RequestKind::kSlice:
      if (need.memory > node.max_free_memory_mib ||
          need.ComputeFloor(node.mig_slices) > node.max_free_compute_percent) {
        return false;
      }
      break;
    case RequestKind::kWholeGpus:
      if (node.whole_eligible_gpus < need.gpu_count) return false;
      break;
    case RequestKind::kNodeOnly:
      break;
  }
  if (need.kind != RequestKind::kNodeOnly && need.ask.models_constrained &&
      (node.gpu_model_mask & need.ask.model_mask) == 0) {
    return false;
  }
  gpus.clear();
  int candidates = 0;
  const std::size_t count = node.gpus.size();
  const bool briefed = node.gpu_briefs.size() == count;
  const GpuId* ids = node.gpus.data();
  const NodeRecord::GpuBrief* briefs = node.gpu_briefs.data();
  if (copy != nullptr && briefed && count <= kCopiedGpus) {
    if (!copy->made || copy->generation != node.generation ||
        copy->count != count) {
      std::copy(node.gpus.begin(), node.gpus.end(), copy->ids.begin());
      std::copy(node.gpu_briefs.begin(), node.gpu_briefs.end(),
                copy->briefs.begin());
      copy->mig = 0;
      for (std::size_t i = 0; i < count; ++i) {
        if (node.gpu_briefs[i].mig) copy->mig |= std::uint8_t(1U << i);
      }
      copy->generation = node.generation;
      copy->count = static_cast<std::uint32_t>(count);
      copy->made = true;
    }
    ids = copy->ids.data();
    briefs = copy->briefs.data();
  }
  for (std::size_t i = 0; i < count; ++i) {
    const GpuRecord& gpu = view.gpu(ids[i]);
    GpuFacts f;
    f.record = &gpu;
    switch (need.kind) {
      case RequestKind::kSlice: {
        // The node's brief of the GPU decides most GPUs without reading
        // their records; the record where it cannot.
        const ClusterView::BriefAnswer brief =
            briefed && !need.ask.needs_records
                ? ClusterView::CheckBrief(briefs[i], need.ask)
                : ClusterView::BriefAnswer::kUnknown;
        if (brief != ClusterView::BriefAnswer::kUnknown) {
          f.candidate = brief == ClusterView::BriefAnswer::kFits;
          if (f.candidate) f.brief = &briefs[i];
          break;
        }
        gpu::MigFit fit;
        f.candidate = gpu.live && !gpu.whole_owned &&
                      gpu.free_memory_mib() >= need.memory &&
                      gpu.free_compute_percent() >=
                          need.ComputeFloor(gpu.mig != nullptr) &&
                      !view.CheckSlice(gpu, request, need.ask.tenant_key, &fit);
        if (f.candidate && fit.profile != nullptr) {
          // In MIG mode: measured at the partition's charge, as the ledger
          // charges it.
          f.after_milli = GpuFreeMilliAfter(
              gpu, ClusterView::MigChargedMemory(gpu, *fit.profile),
              gpu::MigComputePercent(*gpu.mig, *fit.profile));
          f.after_known = true;
        }
        break;
      }
      case RequestKind::kWholeGpus:
        // CheckWholeGpu rejects every GPU that holds an allocation.
        f.candidate =
            gpu.live && gpu.empty() && !view.CheckWholeGpu(gpu, request);
        break;
      case RequestKind::kNodeOnly:
        break;
    }
    candidates += f.candidate;
    gpus.push_back(f);
  }
  if (candidates < need.gpu_count) return false;
  facts = NodeFacts{&node, slot, node.free_cpu_milli(), 0, 0, candidates};
  if (with_free) GatherFree(need, gpus, facts);
  return true;
}

void GatherFree(const Need& need, std::vector<GpuFacts>& gpus,
                NodeFacts& facts) {
  facts.idle_milli = 0;
  facts.fully_free = 0;
  for (GpuFacts& f : gpus) {
    f.free_milli = GpuFreeMilli(*f.record);
    if (f.candidate && need.kind == RequestKind::kSlice && !f.after_known) {
      f.after_milli = AfterSliceMilli(*f.record, need);
    }
    facts.idle_milli += f.free_milli;
    facts.fully_free += f.free_milli == kMilliPerGpu;
  }
}

std::vector<GpuId> LowestCandidates(const std::vector<GpuFacts>& gpus,
                                    int count) {
  std::vector<GpuId> out;
  out.reserve(static_cast<std::size_t>(count));
  for (const GpuFacts& g : gpus) {
    if (static_cast<int>(out.size()) == count) break;
    if (g.candidate) out.push_back(g.record->id);
  }
  return out;
}

Choice ChoiceOn(const Need& need, std::size_t slot,
                const std::vector<GpuFacts>& gpus, int slice_pos) {
  Choice choice{NodeId(slot), {}};
  if (need.kind == RequestKind::kSlice) {
    choice.gpus.push_back(gpus[static_cast<std::size_t>(slice_pos)].record->id);
  } else if (need.kind == RequestKind::kWholeGpus) {
    choice.gpus = LowestCandidates(gpus, need.gpu_count);
  }
  return choice;
}

bool UseNodeMemo(const NodeMemo& memo, const NodeFacts& facts, const Need& need,
                 std::vector<GpuFacts>& gpus) {
  if (memo.version == 0 || memo.generation != facts.node->generation ||
      memo.state.gpu_free_milli.size() != gpus.size()) {
    return false;
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    GpuFacts& f = gpus[i];
    f.free_milli = memo.state.gpu_free_milli[i];
    if (f.candidate && need.kind == RequestKind::kSlice && !f.after_known) {
      f.after_milli =
          f.brief != nullptr
              ? FreeMilliAfter(f.brief->memory_mib, f.brief->free_memory_mib,
                               f.brief->free_compute_percent,
                               f.brief->takes_slices, need.memory, need.compute)
              : AfterSliceMilli(*f.record, need);
    }
  }
  return true;
}

bool SyncNodeMemo(const NodeFacts& facts, const std::vector<GpuFacts>& gpus,
                  bool force, std::uint64_t& next_version, NodeMemo& memo) {
  bool same = !force && memo.version != 0 && memo.cpu_free == facts.cpu_free &&
              memo.gpus.size() == gpus.size();
  for (std::size_t i = 0; same && i < gpus.size(); ++i) {
    same = memo.gpus[i] == SnapOf(gpus[i]);
  }
  if (same) {
    memo.generation = facts.node->generation;  // changed and back: exact
    return false;
  }
  memo.cpu_free = facts.cpu_free;
  memo.gpus.resize(gpus.size());
  memo.state.cpu_free = facts.cpu_free;
  memo.state.gpu_free_milli.resize(gpus.size());
  memo.idle = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    memo.gpus[i] = SnapOf(gpus[i]);
    memo.state.gpu_free_milli[i] = gpus[i].free_milli;
    memo.idle += gpus[i].free_milli;
  }
  if (gpus.empty()) {
    memo.state.model.clear();
  } else if (memo.state.model != gpus.front().record->spec.model) {
    memo.state.model = gpus.front().record->spec.model;
  }
  memo.version = ++next_version;
  memo.generation = facts.node->generation;
  return true;
}

std::int64_t TakeLowestCandidates(const std::vector<GpuFacts>& gpus, int count,
                                  NodeGpuState& state) {
  int taken = 0;
  std::int64_t freed = 0;
  for (std::size_t i = 0; i < gpus.size() && taken < count; ++i) {
    if (!gpus[i].candidate) continue;
    state.gpu_free_milli[i] = 0;
    freed += gpus[i].free_milli;
    ++taken;
  }
  return freed;
}

void RestoreFreeMilli(const std::vector<GpuFacts>& gpus, NodeGpuState& state) {
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    state.gpu_free_milli[i] = gpus[i].free_milli;
  }
}

std::size_t ShapeKeyHash::operator()(const ShapeKey& k) const noexcept {
  std::uint64_t h = static_cast<std::uint64_t>(k.kind);
  for (const std::uint64_t v :
       {static_cast<std::uint64_t>(k.cpu), static_cast<std::uint64_t>(k.memory),
        static_cast<std::uint64_t>(k.compute),
        static_cast<std::uint64_t>(k.count),
        static_cast<std::uint64_t>(k.compute_defaulted)}) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
  }
  return static_cast<std::size_t>(h);
}

ShapeKey ShapeOf(const Need& need) {
  return ShapeKey{need.kind,
                  need.request->cpu_milli,
                  need.memory,
                  need.compute,
                  need.gpu_count,
                  need.kind == RequestKind::kSlice &&
                      !need.request->compute_percent.has_value()};
}

}  // namespace hf::scheduler::node_scan
