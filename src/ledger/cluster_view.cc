#include "ledger/cluster_view.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "ledger/cluster_state.h"

namespace hf::ledger {

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kLost:
      return "gpu_lost";
    case RejectReason::kMigMode:
      return "mig_mode";
    case RejectReason::kModelMismatch:
      return "model_mismatch";
    case RejectReason::kTenantConstraint:
      return "tenant_constraint";
    case RejectReason::kBusy:
      return "gpu_busy";
    case RejectReason::kNoMemory:
      return "no_memory";
    case RejectReason::kNoCompute:
      return "no_compute";
    case RejectReason::kNodeCpu:
      return "node_cpu";
    case RejectReason::kNodeHostMemory:
      return "node_host_memory";
    case RejectReason::kTooFewGpus:
      return "too_few_gpus_on_node";
    case RejectReason::kMigGeometry:
      return "mig_geometry";
    case RejectReason::kExcluded:
      return "excluded";
    case RejectReason::kNotPinned:
      return "not_pinned";
    case RejectReason::kNodeRuntime:
      return "node_runtime";
    case RejectReason::kCount:
      break;
  }
  return "unknown";
}

ClusterView::ClusterView(const ClusterState& state)
    : state_(&state), nodes_(&state.nodes), gpus_(&state.gpus) {}

bool ClusterView::HasGpu(GpuId id) const {
  return id.valid() && id.value() < state_->gpus.size() &&
         state_->gpus[id.value()].live;
}
bool ClusterView::HasNode(NodeId id) const {
  return id.valid() && id.value() < state_->nodes.size() &&
         state_->nodes[id.value()].live;
}
std::size_t ClusterView::live_gpu_count() const {
  return state_->live_gpu_count;
}
MemoryMib ClusterView::largest_gpu_memory_mib() const {
  return state_->gpu_memory_counts.empty()
             ? 0
             : state_->gpu_memory_counts.rbegin()->first;
}
ComputePercent ClusterView::default_compute_percent() const {
  return state_->options.default_compute_percent;
}

SharingKey ClusterView::SharingKeyOf(TenantId tenant) const {
  auto it = state_->tenant_group.find(tenant);
  if (it != state_->tenant_group.end() && state_->groups.contains(it->second)) {
    return SharingKey::Group(it->second);
  }
  return SharingKey::Solo(tenant);
}

bool ClusterView::SharingApproved(TenantId a, TenantId b) const {
  if (state_->approved_pairs.empty()) return false;
  const auto pair = b < a ? std::make_pair(b, a) : std::make_pair(a, b);
  return state_->approved_pairs.contains(pair);
}

bool ClusterView::HasSharingApprovals(TenantId tenant) const {
  return state_->approval_pairs_of.contains(tenant);
}

bool ClusterView::MayJoin(const GpuRecord& g, TenantId tenant,
                          const SharingKey& tenant_key) const {
  if (g.empty() || g.domain == tenant_key) return true;
  if (!HasSharingApprovals(tenant)) return false;
  for (const auto& [other, count] : g.tenants) {
    if (!(SharingKeyOf(other) == tenant_key) &&
        !SharingApproved(other, tenant)) {
      return false;
    }
  }
  return true;
}

ComputePercent ClusterView::AccountedCompute(
    const PlacementRequest& request) const {
  if (request.kind == RequestKind::kWholeGpus) return kFullComputePercent;
  if (request.kind == RequestKind::kNodeOnly) return 0;
  return request.compute_percent.value_or(
      state_->options.default_compute_percent);
}

std::uint64_t ClusterView::ModelMaskOf(const PlacementRequest& request) const {
  if (request.allowed_models.empty()) return ~std::uint64_t{0};
  std::uint64_t mask = 0;
  for (const std::string& model : request.allowed_models) {
    auto it = state_->model_bits.find(model);
    if (it != state_->model_bits.end()) mask |= it->second;
  }
  return mask;
}

bool ClusterView::ModelAllowed(const PlacementRequest& request,
                               const GpuRecord& g) const {
  if (request.allowed_models.empty()) return true;
  return std::find(request.allowed_models.begin(), request.allowed_models.end(),
                   g.spec.model) != request.allowed_models.end();
}

std::optional<RejectReason> ClusterView::CheckSlice(
    const GpuRecord& g, const PlacementRequest& request) const {
  return CheckSlice(g, request, SharingKeyOf(request.tenant));
}

std::optional<RejectReason> ClusterView::CheckFilters(
    const GpuRecord& g, const PlacementRequest& request) const {
  if (request.pinned_node.has_value() && *request.pinned_node != g.node) {
    return RejectReason::kNotPinned;
  }
  if (request.pinned_gpu.has_value() && *request.pinned_gpu != g.id) {
    return RejectReason::kNotPinned;
  }
  if (!request.excluded_gpus.empty() &&
      std::find(request.excluded_gpus.begin(), request.excluded_gpus.end(),
                g.id) != request.excluded_gpus.end()) {
    return RejectReason::kExcluded;
  }
  return std::nullopt;
}

MemoryMib ClusterView::MigChargedMemory(const GpuRecord& g,
                                        const gpu::MigProfile& profile) {
  if (g.mig == nullptr || g.mig->memory_slices <= 0) return 0;
  return g.spec.memory_mib * profile.memory_slices / g.mig->memory_slices;
}

std::optional<gpu::MigFit> ClusterView::MigFitFor(
    const GpuRecord& g, const PlacementRequest& request) {
  if (g.mig == nullptr || request.kind != RequestKind::kSlice) {
    return std::nullopt;
  }
  // The instances on the GPU, in a buffer of this thread's: a scan checks
  // many GPUs in MIG mode, and the ledger may be read from several threads.
  thread_local std::vector<gpu::MigInstance> existing;
  existing.clear();
  for (const auto& [id, instance] : g.mig_instances) {
    existing.push_back(instance);
  }
  // A defaulted compute share asks for no particular partition size.
  return gpu::FitMigInstance(*g.mig, request.memory_mib,
                             request.compute_percent, existing,
                             g.spec.memory_mib);
}

std::optional<RejectReason> ClusterView::CheckSlice(
    const GpuRecord& g, const PlacementRequest& request,
    const SharingKey& tenant_key, gpu::MigFit* mig_fit) const {
  if (auto filtered = CheckFilters(g, request)) return filtered;
  if (!g.healthy()) return RejectReason::kLost;
  if (!ModelAllowed(request, g)) return RejectReason::kModelMismatch;
  // Tenancy, fail-closed: an occupied GPU takes only the same sharing key,
  // or tenants with an approval for everyone on it.
  if (!MayJoin(g, request.tenant, tenant_key)) {
    return RejectReason::kTenantConstraint;
  }
  if (g.whole_owned) return RejectReason::kBusy;
  if (g.mig != nullptr) {
    // Charged as the partition it gets: its memory slots and compute
    // slices must be free where it can legally sit.
    if (request.memory_mib.value_or(0) > g.free_memory_mib()) {
      return RejectReason::kNoMemory;
    }
    const std::optional<gpu::MigFit> fit = MigFitFor(g, request);
    if (!fit.has_value()) return RejectReason::kMigGeometry;
    const gpu::MigProfile& profile = *fit->profile;
    if (MigChargedMemory(g, profile) > g.free_memory_mib()) {
      return RejectReason::kMigGeometry;
    }
    if (gpu::MigComputePercent(*g.mig, profile) > g.free_compute_percent()) {
      return RejectReason::kNoCompute;
    }
    if (auto reason = CheckNodeResources(node(g.node), request)) return reason;
    if (mig_fit != nullptr) *mig_fit = *fit;
    return std::nullopt;
  }
  if (request.memory_mib.value_or(0) > g.free_memory_mib()) {
    return RejectReason::kNoMemory;
  }
  if (AccountedCompute(request) > g.free_compute_percent()) {
    return RejectReason::kNoCompute;
  }
  return CheckNodeResources(node(g.node), request);
}

std::optional<RejectReason> ClusterView::CheckOnceEmpty(
    const GpuRecord& g, const PlacementRequest& request) const {
  if (auto filtered = CheckFilters(g, request)) return filtered;
  if (!g.live || !g.healthy()) return RejectReason::kLost;
  if (!ModelAllowed(request, g)) return RejectReason::kModelMismatch;
  const NodeRecord& n = node(g.node);
  if (!CanLaunch(n, request)) return RejectReason::kNodeRuntime;
  if (request.cpu_milli > n.spec.cpu_milli) return RejectReason::kNodeCpu;
  if (request.host_memory_mib > n.spec.host_memory_mib) {
    return RejectReason::kNodeHostMemory;
  }
  switch (request.kind) {
    case RequestKind::kWholeGpus:
      if (g.spec.mig_capable) return RejectReason::kMigMode;
      return std::nullopt;
    case RequestKind::kNodeOnly:
      return std::nullopt;
    case RequestKind::kSlice:
      break;
  }
  const MemoryMib memory = request.memory_mib.value_or(0);
  if (memory > g.spec.memory_mib) return RejectReason::kNoMemory;
  if (g.mig != nullptr) {
    const std::optional<gpu::MigFit> fit =
        gpu::FitMigInstance(*g.mig, request.memory_mib, request.compute_percent,
                            {}, g.spec.memory_mib);
    if (!fit.has_value() ||
        MigChargedMemory(g, *fit->profile) > g.spec.memory_mib) {
      return RejectReason::kMigGeometry;
    }
    return std::nullopt;
  }
  if (AccountedCompute(request) > kFullComputePercent) {
    return RejectReason::kNoCompute;
  }
  return std::nullopt;
}

ClusterView::SliceAsk ClusterView::AskFor(
    const PlacementRequest& request) const {
  SliceAsk ask;
  ask.memory = request.memory_mib.value_or(0);
  ask.compute = AccountedCompute(request);
  ask.tenant_key = SharingKeyOf(request.tenant);
  ask.models_constrained = !request.allowed_models.empty();
  if (ask.models_constrained) ask.model_mask = ModelMaskOf(request);
  ask.needs_records =
      HasSharingApprovals(request.tenant) || request.pinned_node.has_value() ||
      request.pinned_gpu.has_value() || !request.excluded_gpus.empty();
  return ask;
}

std::optional<RejectReason> ClusterView::CheckWholeGpu(
    const GpuRecord& g, const PlacementRequest& request) const {
  if (auto filtered = CheckFilters(g, request)) return filtered;
  if (!g.healthy()) return RejectReason::kLost;
  if (g.spec.mig_capable) return RejectReason::kMigMode;
  if (!ModelAllowed(request, g)) return RejectReason::kModelMismatch;
  if (!g.empty()) {
    return g.domain == SharingKeyOf(request.tenant)
               ? RejectReason::kBusy
               : RejectReason::kTenantConstraint;
  }
  return std::nullopt;
}

std::vector<GpuId> ClusterView::EligibleWholeGpus(
    const NodeRecord& n, const PlacementRequest& request) const {
  std::vector<GpuId> out;
  for (GpuId id : n.gpus) {
    if (!CheckWholeGpu(gpu(id), request)) out.push_back(id);
  }
  return out;
}

namespace {

// The least compute any MIG partition is charged, over every known table.
ComputePercent SmallestMigComputePercent() {
  static const ComputePercent smallest = [] {
    ComputePercent least = kFullComputePercent;
    for (const gpu::MigModelTable& table : gpu::AllMigTables()) {
      for (const gpu::MigProfile& profile : table.profiles) {
        least = std::min(least, gpu::MigComputePercent(table, profile));
      }
    }
    return least;
  }();
  return smallest;
}

}  // namespace

ComputePercent ClusterView::LeastChargedCompute(
    const PlacementRequest& request) const {
  const ComputePercent accounted = AccountedCompute(request);
  if (request.kind != RequestKind::kSlice ||
      request.compute_percent.has_value()) {
    return accounted;
  }
  return std::min(accounted, SmallestMigComputePercent());
}

std::optional<GpuId> ClusterView::BestFitSliceGpu(
    const PlacementRequest& request) const {
  const MemoryMib memory = request.memory_mib.value_or(0);
  if (memory > MaxSliceMemoryMib(largest_gpu_memory_mib())) return std::nullopt;
  // The index prunes by what every admissible GPU must have free.
  const FitAttrs need{LeastChargedCompute(request), request.cpu_milli,
                      request.host_memory_mib, ModelMaskOf(request)};
  if (need.model_mask == 0) return std::nullopt;
  const SharingKey tenant_key = SharingKeyOf(request.tenant);
  if (HasSharingApprovals(request.tenant) || request.pinned_node ||
      request.pinned_gpu) {
    return ScanBestFitSliceGpu(request, tenant_key);
  }
  const auto accept = [&](FitIndex::Slot slot) {
    return !CheckSlice(state_->gpus[slot], request, tenant_key).has_value();
  };
  const FitIndex& index = state_->gpu_index;
  FitIndex::Slot best =
      index.FindFirst(state_->empty_gpus, memory, need, accept);
  auto domain = state_->domain_gpus.find(tenant_key);
  if (domain != state_->domain_gpus.end()) {
    FitIndex::Slot shared =
        index.FindFirst(domain->second, memory, need, accept);
    if (shared != FitIndex::kNil &&
        (best == FitIndex::kNil || index.KeyOf(shared) < index.KeyOf(best))) {
      best = shared;
    }
  }
  if (best == FitIndex::kNil) return std::nullopt;
  return GpuId(best);
}

std::tuple<MemoryMib, std::uint64_t, std::uint64_t> ClusterView::BestFitKey(
    const GpuRecord& g) const {
  return {g.free_memory_mib(), state_->nodes[g.node.value()].tie_rank,
          g.id.value()};
}

std::optional<GpuId> ClusterView::ScanBestFitSliceGpu(
    const PlacementRequest& request, const SharingKey& tenant_key) const {
  // The GPUs an approval opens are in other tenants' index trees or in none
  // (a GPU holding tenants of different keys), so approved tenants take a
  // scan. Approvals are rare exceptions; the order is the index's.
  // A pinned request looks only where it is pinned.
  std::optional<std::tuple<MemoryMib, std::uint64_t, std::uint64_t>> best;
  const auto consider = [&](const GpuRecord& g) {
    if (!g.live || CheckSlice(g, request, tenant_key)) return;
    const auto key = BestFitKey(g);
    if (!best || key < *best) best = key;
  };
  if (request.pinned_gpu.has_value()) {
    if (HasGpu(*request.pinned_gpu)) consider(gpu(*request.pinned_gpu));
  } else if (request.pinned_node.has_value()) {
    if (HasNode(*request.pinned_node)) {
      for (GpuId g : node(*request.pinned_node).gpus) consider(gpu(g));
    }
  } else {
    for (const GpuRecord& g : state_->gpus) consider(g);
  }
  if (!best) return std::nullopt;
  return GpuId(std::get<2>(*best));
}

std::optional<std::vector<GpuId>> ClusterView::BestFitWholeGpus(
    const PlacementRequest& request) const {
  if (request.gpu_count <= 0) return std::nullopt;
  const FitAttrs need{request.gpu_count, request.cpu_milli,
                      request.host_memory_mib, ModelMaskOf(request)};
  if (need.model_mask == 0) return std::nullopt;
  std::vector<GpuId> chosen;
  const auto accept = [&](FitIndex::Slot slot) {
    const NodeRecord& n = state_->nodes[slot];
    if (CheckNodeResources(n, request)) return false;
    chosen = EligibleWholeGpus(n, request);
    return chosen.size() >= static_cast<std::size_t>(request.gpu_count);
  };
  if (request.pinned_node.has_value()) {
    if (!HasNode(*request.pinned_node) ||
        !accept(request.pinned_node->value())) {
      return std::nullopt;
    }
    chosen.resize(static_cast<std::size_t>(request.gpu_count));
    return chosen;
  }
  const FitIndex::Slot found = state_->node_index.FindFirst(
      state_->whole_nodes, request.gpu_count, need, accept);
  if (found == FitIndex::kNil) return std::nullopt;
  chosen.resize(static_cast<std::size_t>(request.gpu_count));
  return chosen;
}

}  // namespace hf::ledger
