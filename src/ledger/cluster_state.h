// ClusterState: the ledger's data and indexes, owned by Ledger and read
// through ClusterView. Internal to src/ledger; other libraries use Ledger and
// ClusterView.
//
// Invariants (checked by Ledger::CheckInvariants and the property tests):
// - per GPU, used memory <= memory and used compute <= 100;
// - used memory / compute / allocation_count equal the sums over live
//   allocations;
// - a GPU is in exactly one index tree iff it is live, healthy, not held
//   whole, and has free compute: `empty_gpus` when it holds no allocation,
//   `domain_gpus[domain]` otherwise (never for a kConflict domain);
// - index attributes: free compute and model bits are exact; a node's free
//   CPU and host memory are upper bounds of the truth (refreshed lazily, see
//   RefreshNodeResources), which only weakens pruning, never exactness;
// - a node is in `whole_nodes` iff it is live and has >= 1 GPU eligible for
//   whole-GPU grants (live, healthy, empty, not in MIG mode).
//
// Thread-safety: none; Ledger's mutex guards it.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ledger/cluster_view.h"
#include "ledger/fit_index.h"
#include "ledger/model.h"

namespace hf::ledger {

struct LedgerOptions {
  // Compute accounted for a slice without a compute ratio (docs/CONTRACT.md
  // section 5, rule 2).
  ComputePercent default_compute_percent = 50;
  // 0: ties among equal GPUs go to the lowest node id. Otherwise nodes get a
  // pseudo-random tie-break rank derived from the seed (the simulator's
  // per-seed randomised tie-breaks).
  std::uint64_t tie_break_seed = 0;
};

struct ClusterState {
  LedgerOptions options;

  std::vector<NodeRecord> nodes;  // by NodeId
  std::vector<GpuRecord> gpus;    // by GpuId
  std::size_t live_gpu_count = 0;
  std::map<MemoryMib, int> gpu_memory_counts;  // live GPUs per memory size
  std::unordered_map<std::string, std::uint64_t> model_bits;
  std::unordered_map<std::string, GpuId> gpu_by_uuid;  // live GPUs

  std::unordered_map<TenantId, GroupId> tenant_group;
  std::unordered_map<GroupId, int> groups;  // defined groups -> member count
  // Cross-tenant sharing approvals (docs/CONTRACT.md section 7): per unordered
  // pair (lower id first), how many approvals are active; per tenant, how many
  // pairs it is in (a tenant with none never leaves the indexed fast path).
  std::map<std::pair<TenantId, TenantId>, int> approved_pairs;
  std::unordered_map<TenantId, int> approval_pairs_of;

  std::unordered_map<SliceId, Allocation> allocations;
  std::uint64_t next_slice_id = 1;

  // Indexes (see the invariants above).
  FitIndex gpu_index;
  FitIndex::Root empty_gpus = FitIndex::kNil;
  std::unordered_map<SharingKey, FitIndex::Root, SharingKeyHash> domain_gpus;
  std::vector<std::optional<SharingKey>> gpu_tree;  // tree each GPU is in
  FitIndex node_index;
  FitIndex::Root whole_nodes = FitIndex::kNil;
  std::vector<int> node_whole_count;  // eligible whole GPUs per node
  std::vector<std::uint64_t> node_whole_mask;
  // Per node, bounds on the free CPU / host memory stored in its index
  // entries (GPU entries and its whole-GPU entry): lo <= every stored value
  // <= hi. Lets RefreshNodeResources skip its pass when nothing is stale.
  struct StoredResourceBounds {
    CpuMilli cpu_lo = std::numeric_limits<CpuMilli>::max();
    CpuMilli cpu_hi = std::numeric_limits<CpuMilli>::min();
    MemoryMib host_lo = std::numeric_limits<MemoryMib>::max();
    MemoryMib host_hi = std::numeric_limits<MemoryMib>::min();
  };
  std::vector<StoredResourceBounds> node_stored_bounds;

  // --- index maintenance ---
  // Puts `gpu` into the tree its state calls for (or none), and (unless the
  // caller will do it once for several GPUs) keeps its node's whole-GPU entry
  // in step.
  void Reindex(GpuId gpu, bool reindex_node = true);
  // After a node's free CPU / host memory changed: refresh the attributes of
  // its GPUs' and its own index entries where they are no longer an upper
  // bound, or overstate the truth by more than 2x.
  void RefreshNodeResources(NodeId node);
  // Recomputes the node's whole-GPU count and mask and its index entry, and
  // its GPU summary.
  void ReindexNode(NodeId node);
  // Recomputes NodeRecord's summary of its GPUs (max_free_memory_mib ...)
  // and gives the node a new generation: call it on every change to the
  // node or its GPUs.
  void SummariseNodeGpus(NodeId node);
  static NodeRecord::GpuBrief BriefOf(const GpuRecord& gpu);
  std::uint64_t next_node_generation = 0;
  // Recomputes a GPU's sharing domain from its tenants.
  SharingKey ComputeDomain(const GpuRecord& gpu) const;
  std::uint64_t ModelBit(const std::string& model);  // interns the model

  FitAttrs GpuAttrs(const GpuRecord& gpu) const;
  // Widens the node's stored-resource bounds for an entry stored with
  // `attrs`.
  void NoteStored(NodeId node, const FitAttrs& attrs);
  bool WholeEligible(const GpuRecord& gpu) const;
};

}  // namespace hf::ledger
