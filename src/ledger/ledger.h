// Ledger: the single owner of GPU accounting. It holds the nodes, GPUs,
// tenants, shared groups and live allocations, and it alone changes them.
//
// Every mutation re-checks the admission rules of docs/CONTRACT.md section 5,
// so no sequence of calls can oversell a GPU: memory and compute accounted on a
// GPU never exceed its capacity, and tenants outside one shared group never
// share a GPU. Placement asks a PlacementPolicy where to go; failures say why,
// with per-reason counts, and tell "never fits in this cluster" (kInfeasible)
// from "retry later" (kRetryLater).
//
// Thread-safety: all public methods are thread-safe (one internal mutex).
// ClusterViews handed to callbacks are valid only inside the callback.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "ledger/cluster_state.h"
#include "ledger/cluster_view.h"
#include "ledger/model.h"
#include "ledger/placement_policy.h"

namespace hf::ledger {

enum class PlacementOutcome {
  kPlaced,
  kRetryLater,  // fits the cluster, not its current state
  kInfeasible,  // would not fit even if every GPU were empty and healthy
  kInvalid,     // the request itself is malformed (see `status`)
};

const char* PlacementOutcomeName(PlacementOutcome outcome);

struct PlacementResult {
  PlacementOutcome outcome = PlacementOutcome::kInvalid;
  Allocation allocation;  // when kPlaced
  // When not placed: per live GPU, the first rule it failed. For whole-GPU
  // requests, the eligible GPUs of a node that fails node-level rules count
  // under kNodeCpu / kNodeHostMemory / kTooFewGpus (still per GPU).
  // Node-only requests count nodes (kNodeCpu / kNodeHostMemory).
  std::array<int, kRejectReasonCount> reject_counts{};
  int gpus_considered = 0;
  std::string message;  // for people: what happened and why
  Status status;        // kInvalid: what is wrong, naming the field

  bool placed() const { return outcome == PlacementOutcome::kPlaced; }
  int count(RejectReason r) const { return reject_counts[static_cast<int>(r)]; }
};

// Checks a request's own shape (not the cluster): the rules every entry
// point shares. InvalidArgument names the API field.
Status ValidatePlacementRequest(const PlacementRequest& request);

// Explains why `request` has no place now: per-reason counts, the
// infeasible/retry verdict and a message. Scans the cluster; called only on
// the failure path.
PlacementResult ExplainNoPlacement(const ClusterView& view,
                                   const PlacementRequest& request);

class Ledger {
 public:
  // Fails (InvalidArgument) on bad options; see LedgerOptions.
  static StatusOr<std::unique_ptr<Ledger>> Create(LedgerOptions options = {});

  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // --- inventory ---
  StatusOr<NodeId> AddNode(const NodeSpec& spec);
  // Removes a node and its GPUs. FailedPrecondition while any holds an
  // allocation (nothing is dropped silently).
  Status RemoveNode(NodeId node);
  // Adds a GPU to a live node. AlreadyExists for a UUID already present.
  StatusOr<GpuId> AddGpu(NodeId node, const GpuSpec& spec);
  // FailedPrecondition while the GPU holds allocations.
  Status RemoveGpu(GpuId gpu);
  // Lost GPUs take nothing new; their allocations stay until released.
  Status SetGpuHealth(GpuId gpu, GpuHealth health);
  // Capability bits as probed on each heartbeat.
  Status SetGpuCapabilities(GpuId gpu, bool mig_capable, bool mps_capable);
  // What the node's agent says of itself: inside a container, and what its
  // task runtime starts a task from.
  Status SetNodeTraits(NodeId node, bool containerized, TaskLaunch launch);

  // --- tenancy ---
  Status DefineGroup(GroupId group);
  // Members of a removed group share with nobody (fail-closed); GPUs they
  // share become closed to new slices until those slices go.
  Status RemoveGroup(GroupId group);
  // Puts a tenant into a defined group (NotFound otherwise), or takes it out
  // with nullopt.
  Status SetTenantGroup(TenantId tenant, std::optional<GroupId> group);
  // An admin approval lets two tenants outside one shared group share GPUs
  // (docs/CONTRACT.md section 7). Counted: approving a pair twice needs two
  // withdrawals. Withdrawing closes GPUs they share to new slices of
  // tenants without approval, like removing a group; nothing is released.
  // InvalidArgument for the same tenant twice; NotFound on withdrawing a
  // pair that is not approved.
  Status ApproveSharing(TenantId a, TenantId b);
  Status WithdrawSharing(TenantId a, TenantId b);

  // --- allocation ---
  // Validates, asks `policy`, re-checks its choice and commits it.
  PlacementResult Place(const PlacementRequest& request,
                        const PlacementPolicy& policy);
  // Returns exactly the allocation's quota. NotFound for an unknown id.
  Status Release(SliceId id);
  // Changes a live slice's accounted memory to `memory_mib` in place (the
  // dynamic quota of docs/CONTRACT.md section 13); returns the updated
  // allocation. Lowering always succeeds. Raising takes the difference from the
  // GPU's free memory and, like admission, needs a healthy GPU and a slice no
  // larger than 90% of the largest GPU; FailedPrecondition (naming the free
  // memory) otherwise, and nothing changes. InvalidArgument (field
  // "memory_mb") below kMinSliceMemoryMib; NotFound for an unknown id;
  // FailedPrecondition for whole GPUs and node-only grants.
  StatusOr<Allocation> ResizeSlice(SliceId id, MemoryMib memory_mib);
  // Records an allocation that already exists in the world (restart recovery,
  // the compensation path) with its own id, on the GPUs it names. Checks
  // capacity and (unless options.check_tenancy is false) tenancy, but not
  // health, models or the 90% rule (a lost GPU keeps its slices). Moves the
  // id counter past `allocation.id`. Without the tenancy check, a slice
  // whose tenant no longer shares with the GPU's others is recorded all the
  // same (it exists: a group removed since placed it there, as
  // RemoveGroup does), and the GPU takes no new slice of either (fail-closed).
  // A slice on a GPU in MIG mode is charged as its partition: the one its
  // `mig_profile` / `mig_start` name (legal and free, else refused), or
  // without them the one Place would give it now.
  struct RestoreOptions {
    bool check_tenancy = true;
  };
  StatusOr<Allocation> Restore(const Allocation& allocation,
                               RestoreOptions options);
  StatusOr<Allocation> Restore(const Allocation& allocation) {
    return Restore(allocation, RestoreOptions{});
  }
  // Hands out a fresh slice id for a `Restore` of an allocation that has
  // none yet (the compensation path); Place never reuses it.
  SliceId ReserveSliceId();
  // Moves the id counter past `id` (restart recovery: ids of released slices
  // in the store must never be handed out again).
  void AdvanceSliceIdPast(SliceId id);

  // --- snapshots ---
  // An independent copy of the whole ledger, taken under the lock: what-if
  // work (the defragmentation planner, src/scheduler/defrag.h) places and
  // releases on the copy, with every admission rule re-checked there, and
  // the original never changes.
  std::unique_ptr<Ledger> Snapshot() const;

  // --- reads ---
  std::optional<Allocation> GetAllocation(SliceId id) const;
  std::vector<Allocation> Allocations() const;  // ascending id
  std::size_t allocation_count() const;
  // Runs `fn` with a consistent read-only view, under the lock.
  void Read(const std::function<void(const ClusterView&)>& fn) const;
  // Verifies every invariant of cluster_state.h by brute force; Internal
  // with the first violation. For tests and debugging; O(cluster).
  Status CheckInvariants() const;

 private:
  explicit Ledger(LedgerOptions options);

  Status CheckGpuLocked(GpuId gpu) const HF_REQUIRES(mu_);
  // A slice restored onto a GPU in MIG mode: the partition it was charged
  // as (checked: legal, free), or the one it would get now; sets its
  // profile, slot and charge. Elsewhere clears them.
  Status RestoreMigLocked(const GpuRecord& gpu, Allocation& a) const
      HF_REQUIRES(mu_);
  // Whether `gpus` is an admissible choice for `request`; for a slice on a
  // GPU in MIG mode, `mig_fit` gets the partition it gets there.
  Status ValidateChoiceLocked(const PlacementRequest& request,
                              const std::vector<GpuId>& gpus,
                              gpu::MigFit* mig_fit) const HF_REQUIRES(mu_);
  // `node` is used only when `gpus` is empty (kNodeOnly); `mig_fit`, a
  // slice's partition on a GPU in MIG mode, as ValidateChoiceLocked found it.
  Allocation CommitLocked(const PlacementRequest& request, NodeId node,
                          const std::vector<GpuId>& gpus, SliceId id,
                          const gpu::MigFit& mig_fit) HF_REQUIRES(mu_);
  void ApplyLocked(const Allocation& allocation, int sign) HF_REQUIRES(mu_);
  void RecomputeDomainsLocked() HF_REQUIRES(mu_);

  mutable Mutex mu_;
  ClusterState state_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::ledger
