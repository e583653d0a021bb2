// The ledger's state records and ClusterView, the read-only window that
// placement policies and explainers see.
//
// Policies are pure functions of (ClusterView, PlacementRequest) (STYLE.md,
// Ray's scheduling policies); only Ledger changes state. A view is valid only
// while the Ledger lock that produced it is held (Ledger::Read / Ledger::Place
// hand one to a callback), so a policy can never act on a stale snapshot.
//
// Thread-safety: a ClusterView must not outlive the callback it was given to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/quantity.h"
#include "gpu/mig_profiles.h"
#include "ledger/fit_index.h"
#include "ledger/model.h"

namespace hf::ledger {

// Which tenants may share a GPU with each other: tenants of one defined
// shared group share the group's key; any other tenant has a key of its own.
// A GPU's domain is the common key of the tenants on it.
struct SharingKey {
  enum class Kind : std::uint8_t { kNone, kSolo, kGroup, kConflict };
  Kind kind = Kind::kNone;  // kNone: an empty GPU
  std::uint64_t id = 0;     // tenant id (kSolo) or group id (kGroup)

  static SharingKey Solo(TenantId t) { return {Kind::kSolo, t.value()}; }
  static SharingKey Group(GroupId g) { return {Kind::kGroup, g.value()}; }
  static SharingKey Conflict() { return {Kind::kConflict, 0}; }
  friend bool operator==(const SharingKey&, const SharingKey&) = default;
};

struct SharingKeyHash {
  std::size_t operator()(const SharingKey& k) const noexcept {
    return std::hash<std::uint64_t>{}(k.id * 4 + static_cast<int>(k.kind));
  }
};

struct NodeRecord {
  // The fields a node scan reads first come first, so that passing over a
  // node costs few cache lines.
  NodeSpec spec;
  bool live = false;
  CpuMilli used_cpu_milli = 0;
  MemoryMib used_host_memory_mib = 0;
  // A summary of the node's live GPUs, exact after every change to them, so
  // that a policy scanning nodes can pass over one without reading its GPUs:
  // the most free memory and compute on one GPU that is healthy and not held
  // whole (0 when none), how many of its GPUs could be granted whole (live,
  // healthy, empty, not in MIG mode), and the model bits of its GPUs
  // (GpuRecord::model_bit). `mig_slices`: one of the GPUs that may take a
  // slice is in MIG mode, where a slice may be charged less compute than it
  // is accounted at (ClusterView::LeastChargedCompute).
  MemoryMib max_free_memory_mib = 0;
  ComputePercent max_free_compute_percent = 0;
  int whole_eligible_gpus = 0;
  std::uint64_t gpu_model_mask = 0;
  bool mig_slices = false;
  // Changes whenever the node or one of its GPUs changes (taken from a
  // ledger-wide counter, so a value never comes back): a policy's memo of
  // the node made at this generation is still exact.
  std::uint64_t generation = 0;
  std::vector<GpuId> gpus;  // live GPUs, ascending id
  // Per GPU of `gpus`, in order, what CheckSlice reads of it: its memory,
  // free memory and compute, whether it may take a slice at all (live,
  // healthy, not held whole), whether it is in MIG mode, empty, its model
  // bit and sharing domain. Kept beside the node so a scan reads one small
  // array instead of every GPU record (ClusterView::CheckSliceBrief).
  struct GpuBrief {
    MemoryMib memory_mib = 0;
    MemoryMib free_memory_mib = 0;
    ComputePercent free_compute_percent = 0;
    bool takes_slices = false;
    bool mig = false;
    bool empty = true;
    std::uint64_t model_bit = 0;
    SharingKey domain;
    friend bool operator==(const GpuBrief&, const GpuBrief&) = default;
  };
  std::vector<GpuBrief> gpu_briefs;
  NodeId id;
  std::uint64_t tie_rank = 0;  // Best-Fit tie-break among equal GPUs
  // What runs here, by shape (policies that cluster similar tasks read it):
  int slice_allocations = 0;
  // (GPU count, number of whole-GPU allocations of that size), sorted.
  std::vector<std::pair<int, int>> whole_allocations;
  int node_only_allocations = 0;

  CpuMilli free_cpu_milli() const { return spec.cpu_milli - used_cpu_milli; }
  MemoryMib free_host_memory_mib() const {
    return spec.host_memory_mib - used_host_memory_mib;
  }
};

struct GpuRecord {
  GpuId id;
  NodeId node;
  GpuSpec spec;
  bool live = false;
  std::uint64_t model_bit = 0;  // this model's bit in request model masks
  MemoryMib used_memory_mib = 0;
  ComputePercent used_compute_percent = 0;
  int allocation_count = 0;  // live allocations touching this GPU
  bool whole_owned = false;  // held by a whole-GPU allocation
  // Tenants with allocations here and how many each (small: usually 1).
  std::vector<std::pair<TenantId, int>> tenants;
  SharingKey domain;  // common sharing key of `tenants`
  // In MIG mode with a known profile table: every slice here is a partition
  // of that table, charged as its profile, and `mig_instances` are the
  // partitions of the live slices (where they sit). nullptr otherwise.
  const gpu::MigModelTable* mig = nullptr;
  std::vector<std::pair<SliceId, gpu::MigInstance>> mig_instances;

  MemoryMib free_memory_mib() const {
    return spec.memory_mib - used_memory_mib;
  }
  ComputePercent free_compute_percent() const {
    return kFullComputePercent - used_compute_percent;
  }
  bool healthy() const { return spec.health == GpuHealth::kOk; }
  bool empty() const { return allocation_count == 0; }
};

// Why one GPU (or node) cannot take a request. CheckSlice applies the
// placement filters first (kNotPinned, kExcluded), then the rest in this
// order; a GPU in MIG mode answers kMigGeometry where another answers
// kNoMemory / kNoCompute.
enum class RejectReason : int {
  kLost = 0,          // GPU marked lost
  kMigMode,           // whole-GPU request on a GPU in MIG mode
  kModelMismatch,     // model not in the request's allowed list
  kTenantConstraint,  // another tenant outside the caller's shared group
  kBusy,              // whole-GPU request: GPU already holds allocations
  kNoMemory,          // free memory below the request
  kNoCompute,         // free compute below the request
  kNodeCpu,           // the node's free CPU below the request
  kNodeHostMemory,    // the node's free host memory below the request
  kTooFewGpus,        // whole-GPU request: node has too few eligible GPUs
  kMigGeometry,       // MIG mode: no partition covering the request fits
                      // the free memory slots (or its instances are used)
  kExcluded,          // the request excludes this GPU
  kNotPinned,         // outside the node / GPU the request is pinned to
  kNodeRuntime,       // the node's task runtime needs a command or an image
                      // the task does not have (checked with the node's
                      // CPU, before it)
  kCount,
};
inline constexpr int kRejectReasonCount =
    static_cast<int>(RejectReason::kCount);

const char* RejectReasonName(RejectReason reason);

struct ClusterState;  // defined in ledger/cluster_state.h

class ClusterView {
 public:
  explicit ClusterView(const ClusterState& state);

  // --- plain reads ---
  // Slots are dense; check `live` on each record. Inline: node scans read
  // them for every node and GPU.
  std::size_t gpu_slot_count() const { return gpus_->size(); }
  std::size_t node_slot_count() const { return nodes_->size(); }
  // REQUIRES: id < gpu_slot_count()
  const GpuRecord& gpu(GpuId id) const { return (*gpus_)[id.value()]; }
  const NodeRecord& node(NodeId id) const { return (*nodes_)[id.value()]; }
  bool HasGpu(GpuId id) const;  // live
  bool HasNode(NodeId id) const;
  std::size_t live_gpu_count() const;
  MemoryMib largest_gpu_memory_mib() const;  // 0 with no GPUs
  ComputePercent default_compute_percent() const;

  // The key under which `tenant` may share GPUs (fail-closed: a tenant in an
  // undefined group, or unknown, shares with nobody but itself).
  SharingKey SharingKeyOf(TenantId tenant) const;
  // True when an active admin approval lets `a` and `b` share GPUs although
  // they are not in one shared group (docs/CONTRACT.md section 7). Pairwise: an
  // approval of a-b and one of b-c do not let a and c share.
  bool SharingApproved(TenantId a, TenantId b) const;
  // True when `tenant` has at least one active approval.
  bool HasSharingApprovals(TenantId tenant) const;
  // The tenancy rule for an occupied GPU: every tenant on it has the
  // requester's key or an approval with the requester.
  bool MayJoin(const GpuRecord& gpu, TenantId tenant,
               const SharingKey& tenant_key) const;

  // The compute a slice request is accounted at (its percent, or the default).
  ComputePercent AccountedCompute(const PlacementRequest& request) const;
  // The least compute a GPU that takes the slice `request` may be charged:
  // AccountedCompute, except that a GPU in MIG mode charges the partition it
  // gets, which for a defaulted share may be less (a 1g partition is 14%).
  // What a filter may demand of every GPU it passes over.
  ComputePercent LeastChargedCompute(const PlacementRequest& request) const;
  // Bit mask of the request's allowed models (all bits when the list is
  // empty; 0 when none of them exists in the cluster).
  std::uint64_t ModelMaskOf(const PlacementRequest& request) const;
  bool ModelAllowed(const PlacementRequest& request, const GpuRecord& g) const;

  // The partition a slice `request` would get on `gpu` (a GPU in MIG mode:
  // gpu.mig set), as the table's profile and the placement: the smallest
  // profile covering its memory and compute (an explicitly asked percent
  // only) at the lowest free legal placement (gpu::FitMigInstance over
  // gpu.mig_instances). nullopt when none fits or the GPU is not in MIG
  // mode.
  static std::optional<gpu::MigFit> MigFitFor(const GpuRecord& gpu,
                                              const PlacementRequest& request);
  // What a partition of `profile` on `gpu` is charged: its memory slots'
  // share of the card's memory, and its compute slices' share of compute.
  static MemoryMib MigChargedMemory(const GpuRecord& gpu,
                                    const gpu::MigProfile& profile);

  // --- the placement filters of the request (pinning, exclusion) ---
  std::optional<RejectReason> CheckFilters(
      const GpuRecord& gpu, const PlacementRequest& request) const;
  // Whether `node` is outside the request's pinned node.
  static bool OutsidePin(const NodeRecord& node,
                         const PlacementRequest& request) {
    return request.pinned_node.has_value() && *request.pinned_node != node.id;
  }

  // --- the admission rules, one place for each (docs/CONTRACT.md section 5)
  // --- The first reason `gpu` cannot take the slice `request` now, or nullopt.
  std::optional<RejectReason> CheckSlice(const GpuRecord& gpu,
                                         const PlacementRequest& request) const;
  // The same, with the requester's SharingKeyOf(request.tenant) computed once
  // by the caller (the hot path checks many candidates per request). Where
  // it admits the slice on a GPU in MIG mode and `mig_fit` is given, that
  // gets the partition it would get (MigFitFor), so a caller that measures
  // the charge does not choose it again.
  std::optional<RejectReason> CheckSlice(const GpuRecord& gpu,
                                         const PlacementRequest& request,
                                         const SharingKey& tenant_key,
                                         gpu::MigFit* mig_fit = nullptr) const;
  // The first reason `gpu` could not take `request` (a slice, or one GPU of
  // a whole-GPU request) even once every allocation on it has ended: the
  // filters, health, models, the card's own memory and compute (in MIG
  // mode: a partition of the empty card), MIG mode for whole GPUs, and the
  // node's total CPU and host memory. What a hold for a waiting task
  // (scheduler/hold.h) asks of the GPUs it holds.
  std::optional<RejectReason> CheckOnceEmpty(
      const GpuRecord& gpu, const PlacementRequest& request) const;
  // What CheckSliceBrief needs of a slice request (and a node scan of any
  // request: the sharing key, the model bits), worked out once per request.
  struct SliceAsk {
    MemoryMib memory = 0;
    ComputePercent compute = 0;  // as accounted
    SharingKey tenant_key;       // SharingKeyOf(request.tenant)
    bool models_constrained = false;
    std::uint64_t model_mask = 0;  // ModelMaskOf(request)
    // The brief cannot answer: the requester has sharing approvals, or the
    // request is pinned or excludes GPUs.
    bool needs_records = false;
  };
  SliceAsk AskFor(const PlacementRequest& request) const;
  // CheckSlice's answer for the `i`-th GPU of `node` read from the node's
  // brief of it (NodeRecord::gpu_briefs) alone, where the brief decides:
  // kFits or kRejected; kUnknown where only CheckSlice on the record can
  // tell (a GPU in MIG mode, a model on the shared model bit, and every GPU
  // for an `ask` that needs records). The caller has checked `node`'s
  // resources (CheckNodeResources). Agrees with CheckSlice wherever it
  // answers (a property test holds it to that).
  enum class BriefAnswer { kFits, kRejected, kUnknown };
  BriefAnswer CheckSliceBrief(const NodeRecord& node, std::size_t i,
                              const SliceAsk& ask) const;
  // The same answer from a copy of the brief (`ask.needs_records` is the
  // caller's to check).
  static BriefAnswer CheckBrief(const NodeRecord::GpuBrief& b,
                                const SliceAsk& ask);
  // The first reason `gpu` cannot be handed out whole to `request` now,
  // ignoring node resources and GPU count (checked per node).
  std::optional<RejectReason> CheckWholeGpu(
      const GpuRecord& gpu, const PlacementRequest& request) const;
  // Whether `node`'s task runtime can start `request`'s task (TaskLaunch).
  static bool CanLaunch(const NodeRecord& node,
                        const PlacementRequest& request) {
    switch (node.spec.launch) {
      case TaskLaunch::kCommand:
        return request.has_command;
      case TaskLaunch::kImage:
        return request.has_image;
      case TaskLaunch::kAny:
        break;
    }
    return true;
  }
  // The node-level checks for `request`: its runtime can start the task
  // (CanLaunch), then its free CPU and host memory.
  std::optional<RejectReason> CheckNodeResources(
      const NodeRecord& node, const PlacementRequest& request) const;
  // The GPUs of `node` that `request` may take whole, ascending id.
  std::vector<GpuId> EligibleWholeGpus(const NodeRecord& node,
                                       const PlacementRequest& request) const;

  // --- Best-Fit, the one definition of it ---
  // The Best-Fit order of GPUs for a slice: least free memory, then node
  // rank, then GPU id (the smallest key wins). The GPU index is ordered by
  // it; every Best-Fit choice, indexed or scanned, follows it.
  std::tuple<MemoryMib, std::uint64_t, std::uint64_t> BestFitKey(
      const GpuRecord& gpu) const;

  // --- indexed Best-Fit queries (no cluster scan, except for a tenant with
  // sharing approvals or a pinned request: see ScanBestFitSliceGpu) ---
  // The admissible GPU with the least free memory (ties: node rank, then GPU
  // id) for a slice request, or nullopt.
  std::optional<GpuId> BestFitSliceGpu(const PlacementRequest& request) const;
  // The admissible node with the fewest free whole GPUs (ties: rank, id)
  // that can take `request.gpu_count` GPUs, and the GPUs chosen there.
  std::optional<std::vector<GpuId>> BestFitWholeGpus(
      const PlacementRequest& request) const;

 private:
  // BestFitSliceGpu by a scan of every GPU, in the index's order.
  std::optional<GpuId> ScanBestFitSliceGpu(const PlacementRequest& request,
                                           const SharingKey& tenant_key) const;

  const ClusterState* state_;
  // The state's record vectors themselves (not their elements, which move
  // as they grow), for the inline reads above.
  const std::vector<NodeRecord>* nodes_;
  const std::vector<GpuRecord>* gpus_;
};

// In the header: node scans call these for every node and GPU they read.
inline std::optional<RejectReason> ClusterView::CheckNodeResources(
    const NodeRecord& n, const PlacementRequest& request) const {
  if (!CanLaunch(n, request)) return RejectReason::kNodeRuntime;
  if (request.cpu_milli > n.free_cpu_milli()) return RejectReason::kNodeCpu;
  if (request.host_memory_mib > n.free_host_memory_mib()) {
    return RejectReason::kNodeHostMemory;
  }
  return std::nullopt;
}

inline ClusterView::BriefAnswer ClusterView::CheckSliceBrief(
    const NodeRecord& node, std::size_t i, const SliceAsk& ask) const {
  if (ask.needs_records || i >= node.gpu_briefs.size()) {
    return BriefAnswer::kUnknown;
  }
  return CheckBrief(node.gpu_briefs[i], ask);
}

inline ClusterView::BriefAnswer ClusterView::CheckBrief(
    const NodeRecord::GpuBrief& b, const SliceAsk& ask) {
  // CheckSlice's order; a reason found here is one CheckSlice finds too
  // (perhaps after another: only fits / does not fit is answered).
  if (!b.takes_slices) return BriefAnswer::kRejected;  // lost, held whole
  if (ask.models_constrained) {
    constexpr std::uint64_t kSharedBit = std::uint64_t{1} << 63;
    if ((b.model_bit & kSharedBit) != 0) return BriefAnswer::kUnknown;
    if ((b.model_bit & ask.model_mask) == 0) return BriefAnswer::kRejected;
  }
  // Tenancy (MayJoin without approvals).
  if (!b.empty && !(b.domain == ask.tenant_key)) return BriefAnswer::kRejected;
  if (b.mig) return BriefAnswer::kUnknown;
  if (ask.memory > b.free_memory_mib || ask.compute > b.free_compute_percent) {
    return BriefAnswer::kRejected;
  }
  return BriefAnswer::kFits;
}

}  // namespace hf::ledger
