// The agent's Prometheus series (docs/METRICS.md).
#include <algorithm>

#include "agent/agent.h"

namespace hf::agent {

namespace {
constexpr double kMib = 1024.0 * 1024.0;
}

void Agent::SnapshotMetrics() {
  std::vector<SliceMetrics> slices;
  for (const auto& [task_id, t] : tasks_) {
    if (t.slice_id <= 0 || t.finished) continue;
    SliceMetrics m;
    m.slice_id = t.slice_id;
    m.region = t.region;
    if (t.region) {
      m.share_set = t.region->compute_percent() / 100.0;
      m.interference = interference_.Read(t.slice_id).ratio.value_or(0);
    }
    if (t.gpu_indices.size() == 1) {
      auto g = gpu_shares_.find(t.gpu_indices[0]);
      if (g != gpu_shares_.end()) {
        const auto key = static_cast<std::uint64_t>(t.slice_id);
        for (const hook::SliceFeedback& f : g->second.last) {
          if (f.key == key) m.share_achieved = f.achieved_percent / 100.0;
        }
        if (g->second.region) {
          m.waited_seconds =
              static_cast<double>(g->second.region->SliceStats(key).waited_ns) /
              1e9;
        }
      }
    }
    slices.push_back(std::move(m));
  }
  std::vector<GpuMetrics> gpus;
  for (const wire::GpuReport& r : report_.gpus) {
    GpuMetrics m;
    m.index = r.index;
    m.healthy = !r.lost;
    m.total_bytes = static_cast<double>(r.memory_mib) * kMib;
    if (const gpu::GpuInfo* info = GpuAt(r.index);
        info != nullptr && info->used_memory_mib) {
      m.used_bytes = static_cast<double>(*info->used_memory_mib) * kMib;
    }
    m.mig_instances =
        r.mig_devices ? static_cast<int>(r.mig_devices->size()) : 0;
    auto g = gpu_shares_.find(r.index);
    if (g != gpu_shares_.end()) {
      double busy = 0;
      for (const hook::SliceFeedback& f : g->second.last) {
        busy += f.achieved_percent / 100.0;
      }
      m.utilization = std::min(1.0, busy);
    }
    gpus.push_back(m);
  }
  MutexLock lock(metrics_mu_);
  slice_metrics_ = std::move(slices);
  gpu_metrics_ = std::move(gpus);
  metrics_mps_present_ = mps_ != nullptr;
  metrics_mps_up_ = mps_alive_;
  ++cycles_;
}

metrics::Families Agent::CollectMetrics() const {
  using metrics::FamilyBuilder;
  using prometheus::MetricType;
  FamilyBuilder used("heteroflow_slice_memory_used_bytes",
                     "GPU memory a slice's processes hold (the hook's count "
                     "plus what the agent measured through NVML).");
  FamilyBuilder peak("heteroflow_slice_memory_peak_bytes",
                     "The most GPU memory the slice has held.");
  FamilyBuilder quota("heteroflow_slice_memory_quota_bytes",
                      "The slice's memory quota (0: no cap).");
  FamilyBuilder quota_ooms("heteroflow_slice_quota_oom_total",
                           "Allocations the slice's quota refused.",
                           MetricType::Counter);
  FamilyBuilder physical_ooms(
      "heteroflow_slice_physical_oom_total",
      "Allocations the driver refused (the GPU itself was out of memory).",
      MetricType::Counter);
  FamilyBuilder processes("heteroflow_slice_processes",
                          "Processes attached to the slice's hook region now.");
  FamilyBuilder waited("heteroflow_slice_throttle_wait_seconds_total",
                       "Time the slice's processes waited for their turn on "
                       "the GPU (the compute share).",
                       MetricType::Counter);
  FamilyBuilder share_set("heteroflow_slice_compute_share_ratio",
                          "The compute share set for the slice (0: none).");
  FamilyBuilder share_achieved(
      "heteroflow_slice_compute_achieved_ratio",
      "The GPU time the slice's processes used over the last sampling "
      "window, as a fraction of the GPU (NVML).");
  FamilyBuilder interference(
      "heteroflow_slice_interference_ratio",
      "The slice's sampled kernels' time while other slices used its GPU, "
      "divided by their time while it had the GPU alone (0: not measured "
      "yet).");
  FamilyBuilder kernel_samples("heteroflow_slice_kernel_samples_total",
                               "Kernel launches of the slice the hook timed "
                               "for the interference measure.",
                               MetricType::Counter);
  FamilyBuilder gpu_util("heteroflow_node_gpu_utilization_ratio",
                         "GPU time used by the slices' processes over the "
                         "last sampling window (NVML), 0..1.");
  FamilyBuilder gpu_total("heteroflow_node_gpu_memory_total_bytes",
                          "Memory of each GPU as the driver reports it.");
  FamilyBuilder gpu_used("heteroflow_node_gpu_memory_used_bytes",
                         "Memory in use on each GPU as the driver measures "
                         "it.");
  FamilyBuilder gpu_up("heteroflow_node_gpu_healthy",
                       "1 while the driver reaches the GPU, 0 when lost.");
  FamilyBuilder mig("heteroflow_node_gpu_mig_instances",
                    "MIG instances on each GPU now.");
  FamilyBuilder mps("heteroflow_node_mps_daemon_up",
                    "1 while the MPS control daemon answers; 0 when it is "
                    "down or the node runs none.");
  FamilyBuilder cycles("heteroflow_agent_cycles_total",
                       "Agent cycles (probe, heartbeat, assignments) run.",
                       MetricType::Counter);
  MutexLock lock(metrics_mu_);
  for (const SliceMetrics& s : slice_metrics_) {
    const metrics::Labels l{{"slice", std::to_string(s.slice_id)}};
    hook::RegionStats r;
    if (s.region) r = s.region->Stats();
    const bool capped = s.region && r.quota_bytes != hook::kUnlimited;
    used.Add(l, static_cast<double>(r.used_bytes));
    peak.Add(l, static_cast<double>(r.peak_bytes));
    quota.Add(l, capped ? static_cast<double>(r.quota_bytes) : 0.0);
    quota_ooms.Add(l, static_cast<double>(r.quota_ooms));
    physical_ooms.Add(l, static_cast<double>(r.physical_ooms));
    processes.Add(l, static_cast<double>(r.live_processes));
    waited.Add(l, s.waited_seconds);
    share_set.Add(l, s.share_set);
    share_achieved.Add(l, s.share_achieved);
    interference.Add(l, s.interference);
    kernel_samples.Add(l, static_cast<double>(r.kernel_samples));
  }
  for (const GpuMetrics& g : gpu_metrics_) {
    const metrics::Labels l{{"gpu", std::to_string(g.index)}};
    gpu_total.Add(l, g.total_bytes);
    if (g.used_bytes) gpu_used.Add(l, *g.used_bytes);
    gpu_util.Add(l, g.utilization);
    gpu_up.Add(l, g.healthy ? 1 : 0);
    mig.Add(l, g.mig_instances);
  }
  mps.Add({}, metrics_mps_present_ && metrics_mps_up_ ? 1 : 0);
  cycles.Add({}, static_cast<double>(cycles_));
  metrics::Families out;
  for (FamilyBuilder* f :
       {&used, &peak, &quota, &quota_ooms, &physical_ooms, &processes, &waited,
        &share_set, &share_achieved, &interference, &kernel_samples, &gpu_util,
        &gpu_total, &gpu_used, &gpu_up, &mig, &mps, &cycles}) {
    out.push_back(f->Take());
  }
  return out;
}

}  // namespace hf::agent
