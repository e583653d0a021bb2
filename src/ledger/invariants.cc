// Ledger::CheckInvariants: a brute-force audit of the ledger's state against
// its allocations, used by tests after every step.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ledger/ledger.h"

namespace hf::ledger {

Status Ledger::CheckInvariants() const {
  MutexLock lock(mu_);
  const ClusterView view(state_);
  struct Sum {
    MemoryMib memory = 0;
    ComputePercent compute = 0;
    int count = 0;
    bool whole = false;
    std::map<TenantId, int> tenants;
  };
  std::vector<Sum> per_gpu(state_.gpus.size());
  std::vector<CpuMilli> cpu(state_.nodes.size(), 0);
  std::vector<MemoryMib> host(state_.nodes.size(), 0);
  struct Shapes {
    int slices = 0;
    int node_only = 0;
    std::map<int, int> whole;
  };
  std::vector<Shapes> shapes(state_.nodes.size());
  for (const auto& [id, a] : state_.allocations) {
    if (!(a.id == id)) return Status::Internal("allocation keyed by wrong id");
    if (id.value() >= state_.next_slice_id) {
      return Status::Internal("slice id at or past the id counter");
    }
    Shapes& shape = shapes[a.node.value()];
    if (a.kind == RequestKind::kSlice) ++shape.slices;
    if (a.kind == RequestKind::kNodeOnly) ++shape.node_only;
    if (a.kind == RequestKind::kWholeGpus) {
      ++shape.whole[static_cast<int>(a.gpus.size())];
    }
    cpu[a.node.value()] += a.cpu_milli;
    host[a.node.value()] += a.host_memory_mib;
    for (GpuId g : a.gpus) {
      if (!view.HasGpu(g)) return Status::Internal("allocation on dead GPU");
      if (!(state_.gpus[g.value()].node == a.node)) {
        return Status::Internal("allocation GPU off its node");
      }
      Sum& s = per_gpu[g.value()];
      if (a.kind == RequestKind::kWholeGpus) {
        s.memory += state_.gpus[g.value()].spec.memory_mib;
        s.compute += kFullComputePercent;
        s.whole = true;
      } else {
        s.memory += a.memory_mib;
        s.compute += a.compute_percent;
      }
      ++s.count;
      ++s.tenants[a.tenant];
    }
  }
  std::map<SharingKey::Kind, std::size_t> tree_sizes;
  std::size_t empty_members = 0;
  std::unordered_map<SharingKey, std::size_t, SharingKeyHash> domain_members;
  std::size_t live = 0;
  for (const GpuRecord& gpu : state_.gpus) {
    const std::string where = "GPU " + gpu.spec.uuid + ": ";
    const Sum& s = per_gpu[gpu.id.value()];
    if (!gpu.live) {
      if (s.count != 0) return Status::Internal(where + "dead but allocated");
      continue;
    }
    ++live;
    if (gpu.used_memory_mib != s.memory ||
        gpu.used_compute_percent != s.compute ||
        gpu.allocation_count != s.count || gpu.whole_owned != s.whole) {
      return Status::Internal(where + "accounting differs from allocations");
    }
    if (gpu.used_memory_mib > gpu.spec.memory_mib || gpu.used_memory_mib < 0) {
      return Status::Internal(where + "memory oversold");
    }
    if (gpu.used_compute_percent > kFullComputePercent ||
        gpu.used_compute_percent < 0) {
      return Status::Internal(where + "compute oversold");
    }
    std::map<TenantId, int> tenants(gpu.tenants.begin(), gpu.tenants.end());
    if (tenants != s.tenants) return Status::Internal(where + "tenant list");
    // MIG partitions: one per live slice charged as a partition here, each
    // at a legal placement, none overlapping.
    std::size_t partitions = 0;
    for (const auto& [id, a] : state_.allocations) {
      if (a.kind == RequestKind::kSlice && a.gpus.front() == gpu.id &&
          !a.mig_profile.empty()) {
        ++partitions;
      }
    }
    if (partitions != gpu.mig_instances.size()) {
      return Status::Internal(where + "MIG partitions differ from slices");
    }
    for (std::size_t i = 0; i < gpu.mig_instances.size(); ++i) {
      const auto& [id, instance] = gpu.mig_instances[i];
      auto it = state_.allocations.find(id);
      if (it == state_.allocations.end() ||
          it->second.mig_profile != instance.profile ||
          it->second.mig_start != instance.placement.start) {
        return Status::Internal(where + "MIG partition of no such slice");
      }
      if (gpu.mig != nullptr &&
          !gpu::IsLegalPlacement(*gpu.mig, instance.profile,
                                 instance.placement)) {
        return Status::Internal(where + "MIG partition at an illegal slot");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (gpu.mig_instances[j].second.placement.Overlaps(
                instance.placement)) {
          return Status::Internal(where + "MIG partitions overlap");
        }
      }
    }
    // Fail-closed tenancy: every pair of tenants shares one key.
    if (!(gpu.domain == state_.ComputeDomain(gpu))) {
      return Status::Internal(where + "stale sharing domain");
    }
    const bool indexable = gpu.healthy() && !gpu.whole_owned &&
                           gpu.free_compute_percent() > 0 &&
                           gpu.domain.kind != SharingKey::Kind::kConflict;
    const auto& tree = state_.gpu_tree.size() > gpu.id.value()
                           ? state_.gpu_tree[gpu.id.value()]
                           : std::optional<SharingKey>{};
    if (indexable != tree.has_value() ||
        indexable != state_.gpu_index.Contains(
                         static_cast<FitIndex::Slot>(gpu.id.value()))) {
      return Status::Internal(where + "index membership wrong");
    }
    if (indexable) {
      const SharingKey want = gpu.empty() ? SharingKey{} : gpu.domain;
      if (!(*tree == want)) return Status::Internal(where + "in wrong tree");
      const FitKey& key =
          state_.gpu_index.KeyOf(static_cast<FitIndex::Slot>(gpu.id.value()));
      if (key.primary != gpu.free_memory_mib()) {
        return Status::Internal(where + "stale index key");
      }
      const FitAttrs& stored =
          state_.gpu_index.AttrsOf(static_cast<FitIndex::Slot>(gpu.id.value()));
      const FitAttrs actual = state_.GpuAttrs(gpu);
      if (stored.compute_free != actual.compute_free ||
          stored.model_mask != actual.model_mask ||
          stored.cpu_free < actual.cpu_free ||
          stored.host_memory_free < actual.host_memory_free) {
        return Status::Internal(
            where + "index attributes understate the GPU (compute " +
            std::to_string(stored.compute_free) + " vs " +
            std::to_string(actual.compute_free) + ", models " +
            std::to_string(stored.model_mask) + " vs " +
            std::to_string(actual.model_mask) + ", cpu " +
            std::to_string(stored.cpu_free) + " vs " +
            std::to_string(actual.cpu_free) + ", host memory " +
            std::to_string(stored.host_memory_free) + " vs " +
            std::to_string(actual.host_memory_free) + ")");
      }
      if (want.kind == SharingKey::Kind::kNone) {
        ++empty_members;
      } else {
        ++domain_members[want];
      }
    }
  }
  if (live != state_.live_gpu_count) return Status::Internal("live GPU count");
  if (state_.gpu_index.SizeOf(state_.empty_gpus) != empty_members) {
    return Status::Internal("empty-GPU tree size");
  }
  for (const auto& [key, root] : state_.domain_gpus) {
    if (state_.gpu_index.SizeOf(root) != domain_members[key]) {
      return Status::Internal(
          "domain tree size: " + std::to_string(state_.gpu_index.SizeOf(root)) +
          " entries, " + std::to_string(domain_members[key]) + " expected");
    }
  }
  for (const NodeRecord& node : state_.nodes) {
    if (!node.live) continue;
    if (node.used_cpu_milli != cpu[node.id.value()] ||
        node.used_host_memory_mib != host[node.id.value()]) {
      return Status::Internal("node " + node.spec.name +
                              " resource accounting");
    }
    const Shapes& shape = shapes[node.id.value()];
    if (node.slice_allocations != shape.slices ||
        node.node_only_allocations != shape.node_only ||
        std::map<int, int>(node.whole_allocations.begin(),
                           node.whole_allocations.end()) != shape.whole) {
      return Status::Internal("node " + node.spec.name +
                              " allocation shape counts");
    }
    if (node.free_cpu_milli() < 0 || node.free_host_memory_mib() < 0) {
      return Status::Internal("node " + node.spec.name + " oversold");
    }
    int eligible = 0;
    MemoryMib max_memory = 0;
    ComputePercent max_compute = 0;
    std::uint64_t models = 0;
    bool mig_slices = false;
    std::vector<NodeRecord::GpuBrief> briefs;
    for (GpuId g : node.gpus) {
      const GpuRecord& gpu = state_.gpus[g.value()];
      eligible += state_.WholeEligible(gpu);
      briefs.push_back(ClusterState::BriefOf(gpu));
      if (!gpu.live) continue;
      models |= gpu.model_bit;
      if (!gpu.healthy() || gpu.whole_owned) continue;
      mig_slices = mig_slices || gpu.mig != nullptr;
      max_memory = std::max(max_memory, gpu.free_memory_mib());
      max_compute = std::max(max_compute, gpu.free_compute_percent());
    }
    if (node.max_free_memory_mib != max_memory ||
        node.max_free_compute_percent != max_compute ||
        node.mig_slices != mig_slices || node.gpu_model_mask != models ||
        node.whole_eligible_gpus != eligible || node.gpu_briefs != briefs) {
      return Status::Internal("node " + node.spec.name + " GPU summary");
    }
    const auto slot = static_cast<FitIndex::Slot>(node.id.value());
    if ((eligible > 0) != state_.node_index.Contains(slot) ||
        (eligible > 0 && state_.node_index.KeyOf(slot).primary != eligible)) {
      return Status::Internal("node " + node.spec.name + " whole-GPU index");
    }
    if (eligible > 0) {
      const FitAttrs& stored = state_.node_index.AttrsOf(slot);
      if (stored.cpu_free < node.free_cpu_milli() ||
          stored.host_memory_free < node.free_host_memory_mib() ||
          stored.model_mask != state_.node_whole_mask[node.id.value()]) {
        return Status::Internal("node " + node.spec.name +
                                " index attributes understate the node");
      }
    }
  }
  return Status::Ok();
}

}  // namespace hf::ledger
