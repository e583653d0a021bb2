// ControlPlane's scrape-time series (docs/METRICS.md).
#include <algorithm>
#include <set>

#include "server/control_plane.h"
#include "server/internal.h"

namespace hf::server {

namespace {
constexpr double kMib = 1024.0 * 1024.0;
}

metrics::Families ControlPlane::CollectMetrics() {
  metrics::Families out = telemetry_->CollectState();
  if (!recovered_.load()) return out;  // a follower holds no ledger
  struct Gpu {
    RowId node_id = 0;
    int index = 0;
    double total_mib = 0;
    double accounted_mib = 0;
    double compute_percent = 0;
    double largest_mib = 0;
    bool healthy = true;
  };
  std::vector<Gpu> gpus;
  std::vector<std::pair<RowId, store::Millis>> seen;
  const store::Millis mono_now = monotonic_->NowMillis();
  {
    MutexLock lock(core_.mu());
    core_.ledger().Read([&](const ledger::ClusterView& view) {
      core_.mu().AssertHeld();  // runs here, under mu_
      const MemoryMib cap = MaxSliceMemoryMib(view.largest_gpu_memory_mib());
      gpus.reserve(view.gpu_slot_count());
      for (std::size_t slot = 0; slot < view.gpu_slot_count(); ++slot) {
        const GpuId id(slot);
        if (!view.HasGpu(id)) continue;
        const GpuKey* key = core_.inventory().FindKey(id);
        if (key == nullptr) continue;
        const ledger::GpuRecord& g = view.gpu(id);
        Gpu out_gpu;
        out_gpu.node_id = key->node_id;
        out_gpu.index = key->index;
        out_gpu.total_mib = static_cast<double>(g.spec.memory_mib);
        out_gpu.accounted_mib = static_cast<double>(g.used_memory_mib);
        out_gpu.compute_percent = g.used_compute_percent;
        out_gpu.healthy = g.healthy();
        if (g.healthy() && !g.whole_owned &&
            g.used_compute_percent < kFullComputePercent) {
          out_gpu.largest_mib = static_cast<double>(
              std::min<MemoryMib>(g.free_memory_mib(), cap));
        }
        gpus.push_back(out_gpu);
      }
    });
    seen = beats_.SeenTimes();
  }
  metrics::FamilyBuilder total("heteroflow_gpu_memory_total_bytes",
                               "Memory of each GPU as its node reports it.");
  metrics::FamilyBuilder accounted(
      "heteroflow_gpu_memory_accounted_bytes",
      "Memory of each GPU the ledger has given to slices.");
  metrics::FamilyBuilder compute_total(
      "heteroflow_gpu_compute_total_ratio",
      "Compute of each GPU the ledger may give out (1: the whole GPU; 0: "
      "the GPU is lost).");
  metrics::FamilyBuilder compute(
      "heteroflow_gpu_compute_accounted_ratio",
      "Compute of each GPU the ledger has given to slices (1: all of it).");
  metrics::FamilyBuilder largest(
      "heteroflow_gpu_largest_allocatable_slice_bytes",
      "The largest slice memory each GPU could take now (0: none).");
  double free_mib = 0;
  double largest_mib = 0;
  for (const Gpu& g : gpus) {
    const metrics::Labels labels{{"node", NodeName(g.node_id)},
                                 {"gpu", std::to_string(g.index)}};
    total.Add(labels, g.total_mib * kMib);
    accounted.Add(labels, g.accounted_mib * kMib);
    compute_total.Add(labels, g.healthy ? 1.0 : 0.0);
    compute.Add(labels, g.compute_percent / 100.0);
    largest.Add(labels, g.largest_mib * kMib);
    if (g.healthy) free_mib += std::max(0.0, g.total_mib - g.accounted_mib);
    largest_mib = std::max(largest_mib, g.largest_mib);
  }
  metrics::FamilyBuilder fragmentation(
      "heteroflow_cluster_fragmentation_ratio",
      "1 - (the largest slice any GPU could take / the free GPU memory of "
      "the cluster): 0 when the free memory is all in one place, near 1 "
      "when it is spread in pieces too small to use; 0 with none free.");
  fragmentation.Add({}, free_mib > 0 ? 1.0 - largest_mib / free_mib : 0.0);
  metrics::FamilyBuilder heartbeat(
      "heteroflow_node_heartbeat_age_seconds",
      "Since each node last registered or heartbeat (counted from this "
      "server's start for a node not heard from since).");
  for (const auto& [node_id, at] : seen) {
    heartbeat.Add(
        {{"node", NodeName(node_id)}},
        static_cast<double>(std::max<store::Millis>(0, mono_now - at)) / 1e3);
  }
  int stuck = 0;
  (void)store_->Read([&](store::Txn& txn) -> Status {
    stuck = 0;
    store::SliceRequestFilter f;
    f.state = store::SliceRequestState::kStuck;
    return ForEachSliceRequest(txn, f, [&](store::SliceRequestRow&) {
      ++stuck;
      return Status::Ok();
    });
  });
  metrics::FamilyBuilder stuck_family(
      "heteroflow_mig_commands_stuck",
      "MIG commands past their deadline with no result from the agent.");
  stuck_family.Add({}, stuck);
  for (metrics::FamilyBuilder* f :
       {&total, &accounted, &compute_total, &compute, &largest, &fragmentation,
        &heartbeat, &stuck_family}) {
    out.push_back(f->Take());
  }
  return out;
}

}  // namespace hf::server
