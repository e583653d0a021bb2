#include "ledger/ledger.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace hf::ledger {

namespace {

// The MIG profile table of the GPU's model (its spec's `mig_table` where
// set), in MIG mode or not; nullptr for a model without one.
const gpu::MigModelTable* ModelMigTable(const GpuSpec& spec) {
  return spec.mig_table.empty() ? gpu::FindMigTable(spec.model, spec.memory_mib)
                                : gpu::MigTableByKey(spec.mig_table);
}

// The MIG profile table a GPU's slices are partitions of: in MIG mode, of a
// model the tables know; nullptr otherwise (its slices are then charged as
// asked, and the server offers no gold tier there).
const gpu::MigModelTable* MigTableOf(const GpuSpec& spec) {
  return spec.mig_capable ? ModelMigTable(spec) : nullptr;
}

// The table a partition recorded on `gpu` belongs to: its MIG mode's, or its
// model's where MIG mode reads off now (a lost GPU reads so), since a
// partition keeps its slots, as on a live ledger, until released.
const gpu::MigModelTable* PartitionTable(const GpuRecord& gpu) {
  return gpu.mig != nullptr ? gpu.mig : ModelMigTable(gpu.spec);
}

}  // namespace
namespace {

// A node's Best-Fit tie-break rank: its id, or with a seed a pseudo-random
// 32-bit value (ranks are 32-bit in the indexes).
std::uint64_t TieRank(std::uint64_t seed, NodeId node) {
  if (seed == 0) return node.value();
  std::uint64_t z = seed ^ (node.value() * 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 32;
}

void AddTenant(GpuRecord& gpu, TenantId tenant, int delta) {
  auto it = std::find_if(gpu.tenants.begin(), gpu.tenants.end(),
                         [&](const auto& p) { return p.first == tenant; });
  if (it == gpu.tenants.end()) {
    gpu.tenants.emplace_back(tenant, delta);
    return;
  }
  it->second += delta;
  if (it->second == 0) gpu.tenants.erase(it);
}

}  // namespace

const char* PlacementOutcomeName(PlacementOutcome outcome) {
  switch (outcome) {
    case PlacementOutcome::kPlaced:
      return "placed";
    case PlacementOutcome::kRetryLater:
      return "retry_later";
    case PlacementOutcome::kInfeasible:
      return "infeasible";
    case PlacementOutcome::kInvalid:
      return "invalid";
  }
  return "unknown";
}

Status ValidatePlacementRequest(const PlacementRequest& r) {
  if (!r.tenant.valid())
    return Status::InvalidArgument("is required", "tenant");
  if (r.cpu_milli < 0) {
    return Status::InvalidArgument("must be >= 0", "cpu_milli");
  }
  if (r.host_memory_mib < 0) {
    return Status::InvalidArgument("must be >= 0", "host_memory_mb");
  }
  for (const std::string& model : r.allowed_models) {
    if (model.empty()) {
      return Status::InvalidArgument("must not contain empty model names",
                                     "gpu_models");
    }
  }
  if (r.kind == RequestKind::kNodeOnly) {
    if (r.gpu_count != 0 || r.memory_mib.has_value() ||
        r.compute_percent.has_value()) {
      return Status::InvalidArgument("a task without GPUs takes no GPU fields",
                                     r.gpu_count != 0 ? "gpu_required"
                                     : r.memory_mib.has_value()
                                         ? "gpu_memory_mb"
                                         : "gpu_compute_ratio");
    }
    if (r.cpu_milli == 0 && r.host_memory_mib == 0) {
      return Status::InvalidArgument(
          "a task without GPUs needs cpu_milli or host_memory_mb", "cpu_milli");
    }
    return Status::Ok();
  }
  if (r.kind == RequestKind::kWholeGpus) {
    if (r.gpu_count < 1) {
      return Status::InvalidArgument("must be >= 1 for whole GPUs",
                                     "gpu_required");
    }
    if (r.memory_mib.has_value() || r.compute_percent.has_value()) {
      return Status::InvalidArgument(
          "must not be combined with gpu_required (whole GPUs are not sliced)",
          r.memory_mib.has_value() ? "gpu_memory_mb" : "gpu_compute_ratio");
    }
    return Status::Ok();
  }
  if (r.gpu_count != 0) {
    return Status::InvalidArgument(
        "must not be combined with gpu_memory_mb or gpu_compute_ratio",
        "gpu_required");
  }
  if (!r.memory_mib.has_value() && !r.compute_percent.has_value()) {
    return Status::InvalidArgument(
        "a slice needs gpu_memory_mb or gpu_compute_ratio", "gpu_memory_mb");
  }
  if (r.memory_mib.has_value() && *r.memory_mib < kMinSliceMemoryMib) {
    return Status::InvalidArgument(
        "must be >= " + std::to_string(kMinSliceMemoryMib) + " MB, got " +
            std::to_string(*r.memory_mib),
        "gpu_memory_mb");
  }
  if (r.compute_percent.has_value() &&
      (*r.compute_percent < 1 || *r.compute_percent > kFullComputePercent)) {
    return Status::InvalidArgument("must be in (0, 1] (1..100 percent), got " +
                                       std::to_string(*r.compute_percent) + "%",
                                   "gpu_compute_ratio");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Ledger>> Ledger::Create(LedgerOptions options) {
  if (options.default_compute_percent < 1 ||
      options.default_compute_percent > kFullComputePercent) {
    return Status::InvalidArgument("must be in 1..100",
                                   "default_compute_percent");
  }
  return std::unique_ptr<Ledger>(new Ledger(options));
}

Ledger::Ledger(LedgerOptions options) { state_.options = options; }

std::unique_ptr<Ledger> Ledger::Snapshot() const {
  MutexLock lock(mu_);
  std::unique_ptr<Ledger> copy(new Ledger(state_.options));
  // Uncontended (no one else can see `copy` yet), but it is what makes
  // writing its state a locked write.
  MutexLock copy_lock(copy->mu_);
  copy->state_ = state_;
  return copy;
}

// ---------------------------------------------------------------- inventory

StatusOr<NodeId> Ledger::AddNode(const NodeSpec& spec) {
  if (spec.name.empty()) return Status::InvalidArgument("is required", "name");
  if (spec.cpu_milli < 0 || spec.cpu_milli > kMaxNodeCpuMilli) {
    return Status::InvalidArgument(
        "must be 0.." + std::to_string(kMaxNodeCpuMilli), "cpu_milli");
  }
  if (spec.host_memory_mib < 0 ||
      spec.host_memory_mib > kMaxNodeHostMemoryMib) {
    return Status::InvalidArgument(
        "must be 0.." + std::to_string(kMaxNodeHostMemoryMib),
        "host_memory_mib");
  }
  MutexLock lock(mu_);
  const NodeId id(state_.nodes.size());
  NodeRecord& node = state_.nodes.emplace_back();
  node.id = id;
  node.spec = spec;
  node.live = true;
  node.tie_rank = TieRank(state_.options.tie_break_seed, id);
  state_.ReindexNode(id);
  return id;
}

Status Ledger::RemoveNode(NodeId id) {
  MutexLock lock(mu_);
  if (!ClusterView(state_).HasNode(id)) {
    return Status::NotFound("node " + std::to_string(id.value()));
  }
  NodeRecord& node = state_.nodes[id.value()];
  for (GpuId g : node.gpus) {
    if (!state_.gpus[g.value()].empty()) {
      return Status::FailedPrecondition(
          "node " + node.spec.name + " still holds allocations on GPU " +
          state_.gpus[g.value()].spec.uuid + "; release them first");
    }
  }
  if (node.used_cpu_milli != 0 || node.used_host_memory_mib != 0) {
    return Status::Internal("node resources accounted without allocations");
  }
  const std::vector<GpuId> gpus = node.gpus;
  for (GpuId g : gpus) HF_RETURN_IF_ERROR(CheckGpuLocked(g));
  for (GpuId g : gpus) {
    GpuRecord& gpu = state_.gpus[g.value()];
    gpu.live = false;
    state_.gpu_by_uuid.erase(gpu.spec.uuid);
    if (--state_.gpu_memory_counts[gpu.spec.memory_mib] == 0) {
      state_.gpu_memory_counts.erase(gpu.spec.memory_mib);
    }
    --state_.live_gpu_count;
    state_.Reindex(g);
  }
  node.gpus.clear();
  node.live = false;
  state_.ReindexNode(id);
  return Status::Ok();
}

Status Ledger::CheckGpuLocked(GpuId id) const {
  if (!ClusterView(state_).HasGpu(id)) {
    return Status::NotFound("GPU " + std::to_string(id.value()));
  }
  return Status::Ok();
}

StatusOr<GpuId> Ledger::AddGpu(NodeId node_id, const GpuSpec& spec) {
  if (spec.uuid.empty()) return Status::InvalidArgument("is required", "uuid");
  if (spec.model.empty())
    return Status::InvalidArgument("is required", "model");
  if (spec.vendor.empty()) {
    return Status::InvalidArgument("is required", "vendor");
  }
  if (spec.memory_mib <= 0) {
    return Status::InvalidArgument("must be > 0", "memory_mib");
  }
  if (spec.index < 0) return Status::InvalidArgument("must be >= 0", "index");
  if (!spec.mig_table.empty() &&
      gpu::MigTableByKey(spec.mig_table) == nullptr) {
    return Status::InvalidArgument(
        "no MIG profile table '" + spec.mig_table + "'", "mig_table");
  }
  MutexLock lock(mu_);
  if (!ClusterView(state_).HasNode(node_id)) {
    return Status::NotFound("node " + std::to_string(node_id.value()));
  }
  if (state_.gpu_by_uuid.contains(spec.uuid)) {
    return Status::AlreadyExists("GPU " + spec.uuid + " is already registered");
  }
  NodeRecord& node = state_.nodes[node_id.value()];
  for (GpuId g : node.gpus) {
    if (state_.gpus[g.value()].spec.index == spec.index) {
      return Status::AlreadyExists("node " + node.spec.name +
                                   " already has a GPU at index " +
                                   std::to_string(spec.index));
    }
  }
  const GpuId id(state_.gpus.size());
  GpuRecord& gpu = state_.gpus.emplace_back();
  gpu.id = id;
  gpu.node = node_id;
  gpu.spec = spec;
  gpu.live = true;
  gpu.model_bit = state_.ModelBit(spec.model);
  gpu.mig = MigTableOf(spec);
  node.gpus.push_back(id);
  state_.gpu_by_uuid.emplace(spec.uuid, id);
  ++state_.gpu_memory_counts[spec.memory_mib];
  ++state_.live_gpu_count;
  state_.Reindex(id);
  return id;
}

Status Ledger::RemoveGpu(GpuId id) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckGpuLocked(id));
  GpuRecord& gpu = state_.gpus[id.value()];
  if (!gpu.empty()) {
    return Status::FailedPrecondition("GPU " + gpu.spec.uuid + " still holds " +
                                      std::to_string(gpu.allocation_count) +
                                      " allocation(s); release first");
  }
  gpu.live = false;
  state_.gpu_by_uuid.erase(gpu.spec.uuid);
  if (--state_.gpu_memory_counts[gpu.spec.memory_mib] == 0) {
    state_.gpu_memory_counts.erase(gpu.spec.memory_mib);
  }
  --state_.live_gpu_count;
  auto& gpus = state_.nodes[gpu.node.value()].gpus;
  gpus.erase(std::remove(gpus.begin(), gpus.end(), id), gpus.end());
  state_.Reindex(id);
  return Status::Ok();
}

Status Ledger::SetGpuHealth(GpuId id, GpuHealth health) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckGpuLocked(id));
  GpuRecord& gpu = state_.gpus[id.value()];
  if (gpu.spec.health == health) return Status::Ok();
  gpu.spec.health = health;
  state_.Reindex(id);
  return Status::Ok();
}

Status Ledger::SetGpuCapabilities(GpuId id, bool mig_capable,
                                  bool mps_capable) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckGpuLocked(id));
  GpuRecord& gpu = state_.gpus[id.value()];
  const bool mig_changed = gpu.spec.mig_capable != mig_capable;
  gpu.spec.mig_capable = mig_capable;
  gpu.spec.mps_capable = mps_capable;
  // The partitions of slices already here stay recorded until released.
  gpu.mig = MigTableOf(gpu.spec);
  if (mig_changed) state_.Reindex(id);
  return Status::Ok();
}

Status Ledger::SetNodeTraits(NodeId id, bool containerized, TaskLaunch launch) {
  MutexLock lock(mu_);
  if (!ClusterView(state_).HasNode(id)) {
    return Status::NotFound("node " + std::to_string(id.value()));
  }
  NodeSpec& spec = state_.nodes[id.value()].spec;
  if (spec.containerized == containerized && spec.launch == launch) {
    return Status::Ok();  // a heartbeat repeating them moves nothing
  }
  spec.containerized = containerized;
  spec.launch = launch;
  state_.SummariseNodeGpus(id);  // a new generation: what it takes changed
  return Status::Ok();
}

// ------------------------------------------------------------------ tenancy

void Ledger::RecomputeDomainsLocked() {
  // Group changes are rare admin operations; a full pass keeps this simple.
  for (GpuRecord& gpu : state_.gpus) {
    if (!gpu.live || gpu.tenants.empty()) continue;
    const SharingKey domain = state_.ComputeDomain(gpu);
    if (domain == gpu.domain) continue;
    gpu.domain = domain;
    state_.Reindex(gpu.id);
  }
}

Status Ledger::DefineGroup(GroupId group) {
  if (!group.valid()) return Status::InvalidArgument("is required", "group");
  MutexLock lock(mu_);
  if (state_.groups.contains(group)) {
    return Status::AlreadyExists("group " + std::to_string(group.value()));
  }
  state_.groups.emplace(group, 0);
  return Status::Ok();
}

Status Ledger::RemoveGroup(GroupId group) {
  MutexLock lock(mu_);
  if (!state_.groups.contains(group)) {
    return Status::NotFound("group " + std::to_string(group.value()));
  }
  state_.groups.erase(group);
  std::erase_if(state_.tenant_group,
                [&](const auto& entry) { return entry.second == group; });
  RecomputeDomainsLocked();
  return Status::Ok();
}

Status Ledger::SetTenantGroup(TenantId tenant, std::optional<GroupId> group) {
  if (!tenant.valid()) return Status::InvalidArgument("is required", "tenant");
  MutexLock lock(mu_);
  if (group.has_value() && !state_.groups.contains(*group)) {
    return Status::NotFound("group " + std::to_string(group->value()) +
                            " is not defined");
  }
  auto it = state_.tenant_group.find(tenant);
  if (it != state_.tenant_group.end()) {
    --state_.groups[it->second];
    state_.tenant_group.erase(it);
  }
  if (group.has_value()) {
    state_.tenant_group.emplace(tenant, *group);
    ++state_.groups[*group];
  }
  RecomputeDomainsLocked();
  return Status::Ok();
}

Status Ledger::ApproveSharing(TenantId a, TenantId b) {
  if (!a.valid() || !b.valid()) {
    return Status::InvalidArgument("is required", "tenant");
  }
  if (a == b) {
    return Status::InvalidArgument("a tenant always shares with itself",
                                   "tenant");
  }
  const auto pair = b < a ? std::make_pair(b, a) : std::make_pair(a, b);
  MutexLock lock(mu_);
  if (state_.approved_pairs[pair]++ == 0) {
    ++state_.approval_pairs_of[a];
    ++state_.approval_pairs_of[b];
  }
  return Status::Ok();
}

Status Ledger::WithdrawSharing(TenantId a, TenantId b) {
  const auto pair = b < a ? std::make_pair(b, a) : std::make_pair(a, b);
  MutexLock lock(mu_);
  auto it = state_.approved_pairs.find(pair);
  if (it == state_.approved_pairs.end()) {
    return Status::NotFound("no sharing approval between tenants " +
                            std::to_string(a.value()) + " and " +
                            std::to_string(b.value()));
  }
  if (--it->second > 0) return Status::Ok();
  state_.approved_pairs.erase(it);
  for (TenantId t : {a, b}) {
    auto count = state_.approval_pairs_of.find(t);
    if (--count->second == 0) state_.approval_pairs_of.erase(count);
  }
  return Status::Ok();
}

// --------------------------------------------------------------- allocation

Status Ledger::ValidateChoiceLocked(const PlacementRequest& request,
                                    const std::vector<GpuId>& gpus,
                                    gpu::MigFit* mig_fit) const {
  const ClusterView view(state_);
  if (request.kind == RequestKind::kSlice) {
    if (gpus.size() != 1) {
      return Status::Internal("a slice needs exactly one GPU, policy gave " +
                              std::to_string(gpus.size()));
    }
    if (!view.HasGpu(gpus[0])) return Status::Internal("unknown GPU chosen");
    if (request.memory_mib.value_or(0) >
        MaxSliceMemoryMib(view.largest_gpu_memory_mib())) {
      return Status::Internal("slice above 90% of the largest GPU chosen");
    }
    const GpuRecord& gpu = view.gpu(gpus[0]);
    if (auto reason = view.CheckSlice(
            gpu, request, view.SharingKeyOf(request.tenant), mig_fit)) {
      return Status::Internal(std::string("chosen GPU fails rule ") +
                              RejectReasonName(*reason));
    }
    return Status::Ok();
  }
  if (gpus.size() != static_cast<std::size_t>(request.gpu_count)) {
    return Status::Internal("policy chose the wrong number of GPUs");
  }
  std::set<GpuId> distinct(gpus.begin(), gpus.end());
  if (distinct.size() != gpus.size()) {
    return Status::Internal("policy chose one GPU twice");
  }
  NodeId node;
  for (GpuId g : gpus) {
    if (!view.HasGpu(g)) return Status::Internal("unknown GPU chosen");
    const GpuRecord& gpu = view.gpu(g);
    if (node.valid() && gpu.node != node) {
      return Status::Internal("whole GPUs chosen on more than one node");
    }
    node = gpu.node;
    if (auto reason = view.CheckWholeGpu(gpu, request)) {
      return Status::Internal(std::string("chosen GPU fails rule ") +
                              RejectReasonName(*reason));
    }
  }
  if (auto reason = view.CheckNodeResources(view.node(node), request)) {
    return Status::Internal(std::string("chosen node fails rule ") +
                            RejectReasonName(*reason));
  }
  return Status::Ok();
}

void Ledger::ApplyLocked(const Allocation& a, int sign) {
  NodeRecord& node = state_.nodes[a.node.value()];
  node.used_cpu_milli += sign * a.cpu_milli;
  node.used_host_memory_mib += sign * a.host_memory_mib;
  switch (a.kind) {
    case RequestKind::kSlice:
      node.slice_allocations += sign;
      break;
    case RequestKind::kNodeOnly:
      node.node_only_allocations += sign;
      break;
    case RequestKind::kWholeGpus: {
      const int size = static_cast<int>(a.gpus.size());
      auto& shapes = node.whole_allocations;
      auto it = std::lower_bound(shapes.begin(), shapes.end(),
                                 std::make_pair(size, 0));
      if (it == shapes.end() || it->first != size) {
        it = shapes.insert(it, {size, 0});
      }
      it->second += sign;
      if (it->second == 0) shapes.erase(it);
      break;
    }
  }
  bool whole_eligibility_changed = false;
  for (GpuId g : a.gpus) {
    GpuRecord& gpu = state_.gpus[g.value()];
    const bool was_whole_eligible = state_.WholeEligible(gpu);
    if (a.kind == RequestKind::kWholeGpus) {
      gpu.used_memory_mib += sign * gpu.spec.memory_mib;
      gpu.used_compute_percent += sign * kFullComputePercent;
      gpu.whole_owned = sign > 0;
    } else {
      gpu.used_memory_mib += sign * a.memory_mib;
      gpu.used_compute_percent += sign * a.compute_percent;
      if (!a.mig_profile.empty()) {
        auto& instances = gpu.mig_instances;
        if (sign > 0) {
          const gpu::MigModelTable* table = PartitionTable(gpu);
          const gpu::MigProfile* profile =
              table != nullptr ? gpu::FindProfile(*table, a.mig_profile)
                               : nullptr;
          const int size = profile != nullptr ? profile->memory_slices : 0;
          instances.emplace_back(
              a.id, gpu::MigInstance{a.mig_profile, {a.mig_start, size}});
        } else {
          std::erase_if(instances,
                        [&](const auto& i) { return i.first == a.id; });
        }
      }
    }
    gpu.allocation_count += sign;
    AddTenant(gpu, a.tenant, sign);
    gpu.domain = state_.ComputeDomain(gpu);
    state_.Reindex(g, /*reindex_node=*/false);
    whole_eligibility_changed |=
        was_whole_eligible != state_.WholeEligible(gpu);
  }
  // Once per allocation, and only when a GPU became (un)available whole
  // (ReindexNode summarises the node's GPUs too).
  if (whole_eligibility_changed) {
    state_.ReindexNode(a.node);
  } else {
    state_.SummariseNodeGpus(a.node);
  }
  if (a.cpu_milli != 0 || a.host_memory_mib != 0) {
    state_.RefreshNodeResources(a.node);
  }
}

Allocation Ledger::CommitLocked(const PlacementRequest& request, NodeId node,
                                const std::vector<GpuId>& gpus, SliceId id,
                                const gpu::MigFit& mig_fit) {
  const ClusterView view(state_);
  Allocation a;
  a.id = id;
  a.tenant = request.tenant;
  a.kind = request.kind;
  a.node = gpus.empty() ? node : view.gpu(gpus.front()).node;
  a.gpus = gpus;
  a.cpu_milli = request.cpu_milli;
  a.host_memory_mib = request.host_memory_mib;
  if (request.kind == RequestKind::kSlice) {
    a.memory_mib = request.memory_mib.value_or(0);
    a.compute_percent = view.AccountedCompute(request);
    a.compute_defaulted = !request.compute_percent.has_value();
    const GpuRecord& gpu = view.gpu(gpus.front());
    if (gpu.mig != nullptr && mig_fit.profile != nullptr) {
      // A MIG partition: charged as its profile, where it sits (the one
      // ValidateChoiceLocked found).
      a.memory_mib = ClusterView::MigChargedMemory(gpu, *mig_fit.profile);
      a.compute_percent = gpu::MigComputePercent(*gpu.mig, *mig_fit.profile);
      a.compute_defaulted = false;
      a.mig_profile = mig_fit.profile->name;
      a.mig_start = mig_fit.placement.start;
    }
  } else if (request.kind == RequestKind::kWholeGpus) {
    for (GpuId g : gpus) a.memory_mib += view.gpu(g).spec.memory_mib;
    a.compute_percent = kFullComputePercent;
  }
  ApplyLocked(a, +1);
  state_.allocations.emplace(id, a);
  return a;
}

namespace {

PlacementResult InvalidResult(Status status) {
  PlacementResult result;
  result.outcome = PlacementOutcome::kInvalid;
  result.message = status.message();
  result.status = std::move(status);
  return result;
}

}  // namespace

PlacementResult Ledger::Place(const PlacementRequest& request,
                              const PlacementPolicy& policy) {
  if (Status s = ValidatePlacementRequest(request); !s.ok()) {
    return InvalidResult(std::move(s));
  }
  MutexLock lock(mu_);
  const ClusterView view(state_);
  NodeId node;  // node-only requests: the policy's node
  std::vector<GpuId> gpus;
  gpu::MigFit mig_fit;  // a slice's partition on a GPU in MIG mode
  if (request.kind == RequestKind::kNodeOnly) {
    const std::optional<NodeId> chosen = policy.ChooseNode(view, request);
    if (!chosen.has_value()) return ExplainNoPlacement(view, request);
    if (!view.HasNode(*chosen) ||
        view.CheckNodeResources(view.node(*chosen), request)) {
      return InvalidResult(Status::Internal(
          "placement policy " + std::string(policy.name()) +
          ": chose a node that is unknown or lacks the resources"));
    }
    node = *chosen;
  } else {
    std::optional<std::vector<GpuId>> chosen = policy.Choose(view, request);
    if (!chosen.has_value()) return ExplainNoPlacement(view, request);
    if (Status s = ValidateChoiceLocked(request, *chosen, &mig_fit); !s.ok()) {
      return InvalidResult(
          s.WithContext("placement policy " + std::string(policy.name())));
    }
    gpus = std::move(*chosen);
  }
  PlacementResult result;
  result.outcome = PlacementOutcome::kPlaced;
  result.allocation = CommitLocked(request, node, gpus,
                                   SliceId(state_.next_slice_id++), mig_fit);
  result.message = "placed";
  return result;
}

Status Ledger::Release(SliceId id) {
  MutexLock lock(mu_);
  auto it = state_.allocations.find(id);
  if (it == state_.allocations.end()) {
    return Status::NotFound("slice " + std::to_string(id.value()) +
                            " is not allocated");
  }
  const Allocation a = std::move(it->second);
  state_.allocations.erase(it);
  ApplyLocked(a, -1);
  return Status::Ok();
}

StatusOr<Allocation> Ledger::ResizeSlice(SliceId id, MemoryMib memory_mib) {
  if (memory_mib < kMinSliceMemoryMib) {
    return Status::InvalidArgument(
        "must be >= " + std::to_string(kMinSliceMemoryMib) + " MB, got " +
            std::to_string(memory_mib),
        "memory_mb");
  }
  MutexLock lock(mu_);
  auto it = state_.allocations.find(id);
  if (it == state_.allocations.end()) {
    return Status::NotFound("slice " + std::to_string(id.value()) +
                            " is not allocated");
  }
  const Allocation old = it->second;
  if (old.kind != RequestKind::kSlice) {
    return Status::FailedPrecondition(
        "slice " + std::to_string(id.value()) +
        (old.kind == RequestKind::kWholeGpus
             ? " holds whole GPUs, which have no memory quota to change"
             : " holds no GPU"));
  }
  if (!old.mig_profile.empty()) {
    return Status::FailedPrecondition(
        "slice " + std::to_string(id.value()) + " is the MIG partition " +
        old.mig_profile +
        ", whose memory is fixed by the hardware; delete it and ask for a "
        "new slice instead");
  }
  if (memory_mib == old.memory_mib) return old;
  const ClusterView view(state_);
  const GpuRecord& gpu = view.gpu(old.gpus.front());
  if (memory_mib > old.memory_mib) {
    const MemoryMib more = memory_mib - old.memory_mib;
    if (!gpu.healthy()) {
      return Status::FailedPrecondition("GPU " + gpu.spec.uuid +
                                        " is lost: its slices cannot grow");
    }
    const MemoryMib cap = MaxSliceMemoryMib(view.largest_gpu_memory_mib());
    if (memory_mib > cap) {
      return Status::FailedPrecondition(
          "a slice may hold at most " + std::to_string(cap) +
          " MB (90% of the largest GPU in the cluster), asked for " +
          std::to_string(memory_mib) + " MB");
    }
    if (more > gpu.free_memory_mib()) {
      return Status::FailedPrecondition(
          "GPU " + gpu.spec.uuid + " has " +
          std::to_string(gpu.free_memory_mib()) + " MB free; raising slice " +
          std::to_string(id.value()) + " from " +
          std::to_string(old.memory_mib) + " to " + std::to_string(memory_mib) +
          " MB needs " + std::to_string(more) + " MB more");
    }
  }
  Allocation resized = old;
  resized.memory_mib = memory_mib;
  // Out and in again: every derived record (indexes, domains) follows.
  ApplyLocked(old, -1);
  ApplyLocked(resized, +1);
  it->second = resized;
  return resized;
}

Status Ledger::RestoreMigLocked(const GpuRecord& gpu, Allocation& a) const {
  const gpu::MigModelTable* table = PartitionTable(gpu);
  if (a.mig_profile.empty() && gpu.mig == nullptr) return Status::Ok();
  if (table == nullptr) {
    return Status::InvalidArgument(
        "GPU " + gpu.spec.uuid + " (" + gpu.spec.model +
            ") has no MIG profile table, so no partition \"" + a.mig_profile +
            "\"",
        "mig_profile");
  }
  std::vector<gpu::MigInstance> existing;
  for (const auto& [id, instance] : gpu.mig_instances) {
    existing.push_back(instance);
  }
  gpu::MigInstance instance;
  if (!a.mig_profile.empty()) {
    // Where the partition was charged before (the store keeps it).
    const gpu::MigProfile* profile = gpu::FindProfile(*table, a.mig_profile);
    if (profile == nullptr) {
      return Status::InvalidArgument(
          "no MIG profile \"" + a.mig_profile + "\" on " + table->model_key,
          "mig_profile");
    }
    instance = {profile->name, {a.mig_start, profile->memory_slices}};
    if (!gpu::IsLegalPlacement(*table, profile->name, instance.placement)) {
      return Status::InvalidArgument(
          profile->name + " cannot start at memory slot " +
              std::to_string(a.mig_start) + " on " + table->model_key,
          "mig_start");
    }
    for (const gpu::MigInstance& other : existing) {
      if (other.placement.Overlaps(instance.placement)) {
        return Status::FailedPrecondition(
            "GPU " + gpu.spec.uuid + ": the " + profile->name +
            " partition at slot " + std::to_string(a.mig_start) +
            " overlaps the " + other.profile + " at slot " +
            std::to_string(other.placement.start));
      }
    }
  } else {
    // In MIG mode but recorded without a partition (a slice kept from
    // before the ledger charged partitions): the one it would get now.
    std::optional<ComputePercent> compute;
    if (!a.compute_defaulted) compute = a.compute_percent;
    std::optional<MemoryMib> memory;
    if (a.memory_mib > 0) memory = a.memory_mib;
    auto chosen = gpu::ChooseMigInstance(*table, memory, compute, existing,
                                         gpu.spec.memory_mib);
    if (!chosen.ok()) {
      return Status::FailedPrecondition("GPU " + gpu.spec.uuid + ": " +
                                        chosen.status().message());
    }
    instance = *chosen;
  }
  const gpu::MigProfile* profile = gpu::FindProfile(*table, instance.profile);
  a.mig_profile = instance.profile;
  a.mig_start = instance.placement.start;
  a.memory_mib =
      gpu.spec.memory_mib * profile->memory_slices / table->memory_slices;
  a.compute_percent = gpu::MigComputePercent(*table, *profile);
  a.compute_defaulted = false;
  if (a.memory_mib > gpu.free_memory_mib() ||
      a.compute_percent > gpu.free_compute_percent()) {
    return Status::FailedPrecondition(
        "GPU " + gpu.spec.uuid + " has " +
        std::to_string(gpu.free_memory_mib()) + " MB and " +
        std::to_string(gpu.free_compute_percent()) + "% free; the " +
        instance.profile + " partition would oversell it");
  }
  return Status::Ok();
}

StatusOr<Allocation> Ledger::Restore(const Allocation& allocation,
                                     RestoreOptions options) {
  if (!allocation.id.valid())
    return Status::InvalidArgument("is required", "id");
  if (!allocation.tenant.valid()) {
    return Status::InvalidArgument("is required", "tenant");
  }
  if (allocation.kind == RequestKind::kNodeOnly) {
    if (!allocation.gpus.empty() || allocation.memory_mib != 0 ||
        allocation.compute_percent != 0) {
      return Status::InvalidArgument("a task without GPUs holds no GPU",
                                     "gpus");
    }
  } else if (allocation.gpus.empty()) {
    return Status::InvalidArgument("must name at least one GPU", "gpus");
  }
  if (allocation.kind == RequestKind::kSlice && allocation.gpus.size() != 1) {
    return Status::InvalidArgument("a slice sits on exactly one GPU", "gpus");
  }
  if (allocation.memory_mib < 0 || allocation.compute_percent < 0 ||
      allocation.compute_percent > kFullComputePercent ||
      allocation.cpu_milli < 0 || allocation.host_memory_mib < 0) {
    return Status::InvalidArgument("quantities out of range", "allocation");
  }
  MutexLock lock(mu_);
  if (state_.allocations.contains(allocation.id)) {
    return Status::AlreadyExists("slice " +
                                 std::to_string(allocation.id.value()));
  }
  const ClusterView view(state_);
  std::set<GpuId> distinct(allocation.gpus.begin(), allocation.gpus.end());
  if (distinct.size() != allocation.gpus.size()) {
    return Status::InvalidArgument("names one GPU twice", "gpus");
  }
  NodeId node = allocation.node;  // kNodeOnly: the node it names
  if (allocation.kind == RequestKind::kNodeOnly) {
    if (!view.HasNode(node)) {
      return Status::NotFound("node " + std::to_string(node.value()));
    }
  } else {
    node = view.HasGpu(allocation.gpus[0]) ? view.gpu(allocation.gpus[0]).node
                                           : NodeId();
  }
  const SharingKey key = view.SharingKeyOf(allocation.tenant);
  for (GpuId g : allocation.gpus) {
    if (!view.HasGpu(g)) {
      return Status::NotFound("GPU " + std::to_string(g.value()));
    }
    const GpuRecord& gpu = view.gpu(g);
    if (gpu.node != node) {
      return Status::InvalidArgument("GPUs on more than one node", "gpus");
    }
    if (options.check_tenancy && !view.MayJoin(gpu, allocation.tenant, key)) {
      return Status::FailedPrecondition(
          "GPU " + gpu.spec.uuid +
          " holds another tenant outside this tenant's shared group and "
          "without a sharing approval");
    }
    if (allocation.kind == RequestKind::kWholeGpus ? !gpu.empty()
                                                   : gpu.whole_owned) {
      return Status::FailedPrecondition("GPU " + gpu.spec.uuid +
                                        " is already held");
    }
    if (allocation.kind == RequestKind::kSlice &&
        (allocation.memory_mib > gpu.free_memory_mib() ||
         allocation.compute_percent > gpu.free_compute_percent())) {
      return Status::FailedPrecondition(
          "GPU " + gpu.spec.uuid + " has " +
          std::to_string(gpu.free_memory_mib()) + " MB and " +
          std::to_string(gpu.free_compute_percent()) +
          "% free; restoring would oversell it");
    }
  }
  PlacementRequest as_request;
  as_request.cpu_milli = allocation.cpu_milli;
  as_request.host_memory_mib = allocation.host_memory_mib;
  if (auto reason = view.CheckNodeResources(view.node(node), as_request)) {
    return Status::FailedPrecondition(
        std::string("node lacks the resources: ") + RejectReasonName(*reason));
  }
  Allocation a = allocation;
  a.node = node;
  if (a.kind == RequestKind::kWholeGpus) {
    a.memory_mib = 0;
    for (GpuId g : a.gpus) a.memory_mib += view.gpu(g).spec.memory_mib;
    a.compute_percent = kFullComputePercent;
  }
  if (a.kind == RequestKind::kSlice) {
    HF_RETURN_IF_ERROR(RestoreMigLocked(view.gpu(a.gpus.front()), a));
  } else {
    a.mig_profile.clear();
    a.mig_start = -1;
  }
  ApplyLocked(a, +1);
  state_.allocations.emplace(a.id, a);
  state_.next_slice_id = std::max(state_.next_slice_id, a.id.value() + 1);
  return a;
}

SliceId Ledger::ReserveSliceId() {
  MutexLock lock(mu_);
  return SliceId(state_.next_slice_id++);
}

void Ledger::AdvanceSliceIdPast(SliceId id) {
  if (!id.valid()) return;
  MutexLock lock(mu_);
  state_.next_slice_id = std::max(state_.next_slice_id, id.value() + 1);
}

// -------------------------------------------------------------------- reads

std::optional<Allocation> Ledger::GetAllocation(SliceId id) const {
  MutexLock lock(mu_);
  auto it = state_.allocations.find(id);
  if (it == state_.allocations.end()) return std::nullopt;
  return it->second;
}

std::vector<Allocation> Ledger::Allocations() const {
  MutexLock lock(mu_);
  std::vector<Allocation> out;
  out.reserve(state_.allocations.size());
  for (const auto& [id, a] : state_.allocations) out.push_back(a);
  std::sort(
      out.begin(), out.end(),
      [](const Allocation& x, const Allocation& y) { return x.id < y.id; });
  return out;
}

std::size_t Ledger::allocation_count() const {
  MutexLock lock(mu_);
  return state_.allocations.size();
}

void Ledger::Read(const std::function<void(const ClusterView&)>& fn) const {
  MutexLock lock(mu_);
  fn(ClusterView(state_));
}

}  // namespace hf::ledger
