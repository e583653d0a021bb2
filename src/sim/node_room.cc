#include "sim/node_room.h"

#include <algorithm>

namespace hf::sim {

using ledger::PlacementRequest;
using ledger::RequestKind;

NodeRoom NodeRoom::After(const ReplayControl& c,
                         const ledger::ClusterView& view,
                         const ledger::NodeRecord& node,
                         const std::vector<std::size_t>& leave) {
  NodeRoom room;
  room.node = node.id;
  room.rank = node.tie_rank;
  room.cpu = node.free_cpu_milli();
  room.host = node.free_host_memory_mib();
  const auto leaving = [&](std::size_t id) {
    return std::find(leave.begin(), leave.end(), id) != leave.end();
  };
  for (const std::size_t id : leave) {
    room.cpu += c.task(id).request.cpu_milli;
    room.host += c.task(id).request.host_memory_mib;
  }
  for (const GpuId g : node.gpus) {
    const ledger::GpuRecord& gpu = view.gpu(g);
    Gpu out;
    out.id = g;
    out.usable = gpu.live && gpu.healthy() && !gpu.spec.mig_capable;
    out.memory = gpu.free_memory_mib();
    out.compute = gpu.free_compute_percent();
    for (const std::size_t id : c.tasks_on_gpu(g)) {
      if (!leaving(id)) {
        ++out.tasks;
        continue;
      }
      const PlacementRequest& r = c.task(id).request;
      if (r.kind == RequestKind::kSlice) {
        out.memory += r.memory_mib.value_or(0);
        out.compute += view.AccountedCompute(r);
      }
    }
    // A GPU left empty is whole again, whatever held it.
    if (out.tasks == 0) {
      out.memory = gpu.spec.memory_mib;
      out.compute = kFullComputePercent;
    }
    room.gpus.push_back(out);
  }
  return room;
}

std::optional<std::vector<GpuId>> NodeRoom::Fit(
    const ledger::ClusterView& view, const PlacementRequest& r) const {
  if (cpu < r.cpu_milli || host < r.host_memory_mib) return std::nullopt;
  std::vector<GpuId> out;
  if (r.kind == RequestKind::kNodeOnly) return out;
  const auto allowed = [&](const Gpu& g) {
    return g.usable && view.ModelAllowed(r, view.gpu(g.id));
  };
  if (r.kind == RequestKind::kWholeGpus) {
    for (const Gpu& g : gpus) {
      if (static_cast<int>(out.size()) == r.gpu_count) break;
      if (allowed(g) && g.tasks == 0) out.push_back(g.id);
    }
    if (static_cast<int>(out.size()) < r.gpu_count) return std::nullopt;
    return out;
  }
  const MemoryMib memory = r.memory_mib.value_or(0);
  const ComputePercent compute = view.AccountedCompute(r);
  const Gpu* best = nullptr;
  for (const Gpu& g : gpus) {
    if (!allowed(g) || g.memory < memory || g.compute < compute) continue;
    if (best == nullptr || g.memory < best->memory) best = &g;
  }
  if (best == nullptr) return std::nullopt;
  out.push_back(best->id);
  return out;
}

std::optional<std::vector<GpuId>> NodeRoom::Take(
    const ledger::ClusterView& view, const PlacementRequest& r) {
  std::optional<std::vector<GpuId>> fit = Fit(view, r);
  if (!fit.has_value()) return fit;
  cpu -= r.cpu_milli;
  host -= r.host_memory_mib;
  for (Gpu& g : gpus) {
    if (std::find(fit->begin(), fit->end(), g.id) == fit->end()) continue;
    ++g.tasks;
    if (r.kind == RequestKind::kWholeGpus) {
      g.memory = 0;
      g.compute = 0;
    } else {
      g.memory -= r.memory_mib.value_or(0);
      g.compute -= view.AccountedCompute(r);
    }
  }
  return fit;
}

}  // namespace hf::sim
