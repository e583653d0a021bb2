// A node's free resources as they would be once some of its running tasks
// left: what the replay's defragmentation planners reason with before they
// try a plan on a snapshot of the ledger. Counted by memory and compute per
// GPU and by the node's CPU and host memory; the ledger's finer rules (the
// slice limit, sharing domains, MIG geometry) are left to the snapshot, so
// GPUs in MIG mode are not counted at all.
//
// Thread-safety: a value; reads the ReplayControl and view it is given.
#pragma once

#include <optional>
#include <vector>

#include "ledger/cluster_view.h"
#include "sim/replay.h"

namespace hf::sim {

struct NodeRoom {
  struct Gpu {
    GpuId id;
    MemoryMib memory = 0;        // free
    ComputePercent compute = 0;  // free
    int tasks = 0;               // still on it
    bool usable = false;         // live, healthy, not in MIG mode
  };
  NodeId node;
  std::uint64_t rank = 0;  // the node's tie-break rank
  CpuMilli cpu = 0;
  MemoryMib host = 0;
  std::vector<Gpu> gpus;

  // The room on `node` once the running tasks `leave` (ids of tasks on it)
  // are gone.
  static NodeRoom After(const ReplayControl& control,
                        const ledger::ClusterView& view,
                        const ledger::NodeRecord& node,
                        const std::vector<std::size_t>& leave);

  // The GPUs `request` would take here (whole GPUs: the first empty ones;
  // a slice: the GPU with the least free memory that holds it), or nullopt
  // if it does not fit; empty for a CPU-only request.
  std::optional<std::vector<GpuId>> Fit(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const;
  bool Fits(const ledger::ClusterView& view,
            const ledger::PlacementRequest& request) const {
    return Fit(view, request).has_value();
  }
  // Fit, and takes that room.
  std::optional<std::vector<GpuId>> Take(
      const ledger::ClusterView& view, const ledger::PlacementRequest& request);
};

}  // namespace hf::sim
