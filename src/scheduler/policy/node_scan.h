// The per-node scan shared by the simulator's node-scoring policies (the FGD
// artifact's policies in artifact.h and HfFragPolicy in hf_frag.h): what a
// request needs (Need), the ledger-rule filter of one node with its GPUs'
// free milli (Gather), the per-node memo that FGD-style policies validate
// against the node's exact state (NodeMemo, SyncNodeMemo), the per-(request
// shape, node) score memo (ScanMemo), and building the chosen GPUs.
//
// Internal to src/scheduler/policy; not part of the scheduler's interface.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ledger/cluster_view.h"
#include "ledger/placement_policy.h"
#include "scheduler/fragmentation.h"

namespace hf::scheduler::node_scan {

// What a request needs, derived once per call.
struct Need {
  const ledger::PlacementRequest* request = nullptr;
  ledger::RequestKind kind = ledger::RequestKind::kSlice;
  int milli = 0;      // per GPU
  int gpu_count = 0;  // GPUs taken: 1 for a slice, 0 for a node-only task
  std::int64_t total_milli = 0;
  MemoryMib memory = 0;        // slice
  ComputePercent compute = 0;  // slice, as accounted
  // Slice: the least compute a GPU in MIG mode may charge it
  // (ClusterView::LeastChargedCompute), what a MIG GPU must have free.
  ComputePercent least_compute = 0;
  // The compute a slice needs free on a GPU (or a node's best GPU), in MIG
  // mode or not.
  ComputePercent ComputeFloor(bool mig) const {
    return mig ? least_compute : compute;
  }
  // The requester's sharing key and the request's model bits (a node whose
  // GPUs have none of them is passed over); for a slice, what
  // CheckSliceBrief reads.
  ledger::ClusterView::SliceAsk ask;
};

// nullopt when the request fits no GPU by its shape alone (the ledger's 90%
// rule for slices, a whole-GPU count below 1).
std::optional<Need> MakeNeed(const ledger::ClusterView& view,
                             const ledger::PlacementRequest& request);

// One live GPU of the node at hand.
struct GpuFacts {
  const ledger::GpuRecord* record = nullptr;
  // The node's brief of the GPU, where it decided the GPU is a candidate
  // (then `record` has not been read).
  const ledger::NodeRecord::GpuBrief* brief = nullptr;
  int free_milli = 0;
  // A slice candidate's free milli once the slice is placed on it (the
  // formula of GpuFreeMilli on the changed record; on a GPU in MIG mode,
  // charged the partition it gets, as the ledger charges it).
  int after_milli = 0;
  // Takes the request: passes CheckSlice (slice) or is eligible whole.
  bool candidate = false;
  // `after_milli` was set by Gather (a slice on a GPU in MIG mode).
  bool after_known = false;
};

// The node at hand.
struct NodeFacts {
  const ledger::NodeRecord* node = nullptr;
  std::size_t slot = 0;
  CpuMilli cpu_free = 0;
  std::int64_t idle_milli = 0;  // sum of free milli
  int fully_free = 0;           // GPUs with 1000 milli free
  int candidates = 0;
};

// A slice candidate's free milli once the slice in `need` is placed on it,
// charged its memory and accounted compute (out of MIG mode: Gather
// measures a GPU in MIG mode at its partition's charge).
int AfterSliceMilli(const ledger::GpuRecord& gpu, const Need& need);

// Fills `facts` and `gpus` (node.gpus order, live GPUs) for the node in
// `slot`; false when the node cannot take the request by the ledger's rules
// (CheckNodeResources, CheckSlice, CheckWholeGpu on empty GPUs).
// Candidates come first, so an infeasible node costs no more than its rule
// checks; cheap necessary conditions (free memory and compute, not held
// whole, empty) skip the ledger's full check where it must fail. Without
// `with_free`, free milli and the sums stay 0 (Random needs only
// candidates).
//
// With `copy` (the policy's NodeGpuCopy of this slot), the node's GPU ids
// and briefs are read from the copy, brought up to the node first when the
// node's generation moved; the same facts as without it.
struct NodeGpuCopy;
bool Gather(const ledger::ClusterView& view, std::size_t slot, const Need& need,
            std::vector<GpuFacts>& gpus, NodeFacts& facts,
            bool with_free = true, NodeGpuCopy* copy = nullptr);
// The free milli part of Gather (for a Gather without it).
void GatherFree(const Need& need, std::vector<GpuFacts>& gpus,
                NodeFacts& facts);

// Whether candidate `i` has the same before / after milli as an earlier
// candidate: it leaves the same node state, so the same score.
inline bool RepeatsEarlierCandidate(const std::vector<GpuFacts>& gpus,
                                    std::size_t i) {
  for (std::size_t j = 0; j < i; ++j) {
    if (gpus[j].candidate && gpus[j].free_milli == gpus[i].free_milli &&
        gpus[j].after_milli == gpus[i].after_milli) {
      return true;
    }
  }
  return false;
}

// The candidate GPUs as a bit mask (bit i: gpus[i]); false, with `mask`
// untouched, for more than 64 GPUs.
inline bool CandidateMask(const std::vector<GpuFacts>& gpus,
                          std::uint64_t& mask) {
  if (gpus.size() > 64) return false;
  mask = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    mask |= std::uint64_t{gpus[i].candidate} << i;
  }
  return true;
}

// A copy of one node's GPU ids and briefs (NodeRecord::gpus, gpu_briefs),
// made at the node's generation, so exact while that is unchanged. The
// ledger keeps each node's ids and briefs in two heap arrays of their own;
// at 100,000 GPUs a scan finds them scattered over the heap, a cache miss
// and a page walk each. A policy keeps the copies in one array in slot
// order (ScanMemo::copies), so that a scan in slot order reads them in
// sequence. Nodes with more GPUs than it holds are read from the ledger.
inline constexpr std::size_t kCopiedGpus = 8;
struct NodeGpuCopy {
  std::uint64_t generation = 0;
  std::uint32_t count = 0;
  bool made = false;
  std::uint8_t mig = 0;  // bit i: GPU i is in MIG mode (its brief's `mig`)
  std::array<GpuId, kCopiedGpus> ids{};
  std::array<ledger::NodeRecord::GpuBrief, kCopiedGpus> briefs{};
};

static_assert(kCopiedGpus <= 8, "NodeGpuCopy::mig has a bit per GPU");

// Whether `copy` is of the node's generation (then Gather reads only it).
inline bool CopyCurrent(const ledger::NodeRecord& node,
                        const NodeGpuCopy& copy) {
  return copy.made && copy.generation == node.generation;
}

// For a copy that is current, asks for the records of its GPUs in MIG
// mode: their briefs cannot answer for a slice (ClusterView::CheckBrief),
// so Gather reads the records, and at 100,000 GPUs each is a miss.
inline void PrefetchMigRecords(const ledger::ClusterView& view,
                               const ledger::NodeRecord& node,
                               const NodeGpuCopy& copy) {
  if (copy.mig == 0 || !CopyCurrent(node, copy)) return;
  for (std::size_t i = 0; i < copy.count; ++i) {
    if ((copy.mig & (1U << i)) == 0) continue;
    const char* first = reinterpret_cast<const char*>(&view.gpu(copy.ids[i]));
    for (std::size_t b = 0; b < sizeof(ledger::GpuRecord); b += 64) {
      __builtin_prefetch(first + b);
    }
  }
}

// Asks for the copy's lines (reads nothing).
inline void PrefetchNodeGpuCopy(const NodeGpuCopy& copy) {
  const char* first = reinterpret_cast<const char*>(&copy);
  for (std::size_t b = 0; b < sizeof(NodeGpuCopy); b += 64) {
    __builtin_prefetch(first + b);
  }
}

// A policy's pick: the node, and the GPUs for slices and whole GPUs.
struct Choice {
  NodeId node;
  std::vector<GpuId> gpus;
};

// The lowest-index candidate GPUs, `count` of them (whole GPUs).
std::vector<GpuId> LowestCandidates(const std::vector<GpuFacts>& gpus,
                                    int count);

// The choice on the node in `slot` (`gpus` gathered for it): a slice takes
// gpus[slice_pos], whole GPUs the lowest-index candidates, a node-only task
// none.
Choice ChoiceOn(const Need& need, std::size_t slot,
                const std::vector<GpuFacts>& gpus, int slice_pos);

// Prefetching for a scan in slot order. At 100,000 GPUs what a scan reads
// of a node (its record, the policy's copy of its GPU ids and briefs, its
// memos) misses the caches, and a scan would wait for each, node after
// node; asking for them some nodes ahead lets those waits overlap. Hints
// only: nothing is read but the memo (PrefetchNodeMemoState).
//
// The fields of `node` that a scan reads first.
inline void PrefetchNodeRecord(const ledger::NodeRecord& node) {
  const char* first = reinterpret_cast<const char*>(&node.spec.cpu_milli);
  const char* last = reinterpret_cast<const char*>(&node.tie_rank);
  for (const char* p = first; p < last; p += 64) __builtin_prefetch(p);
  __builtin_prefetch(last);
}

// What a node's measures depend on, per GPU.
struct GpuSnap {
  GpuId id;
  MemoryMib free_memory = 0;
  ComputePercent free_compute = 0;
  int free_milli = 0;
  friend bool operator==(const GpuSnap&, const GpuSnap&) = default;
};

inline GpuSnap SnapOf(const GpuFacts& g) {
  return GpuSnap{g.record->id, g.record->free_memory_mib(),
                 g.record->free_compute_percent(), g.free_milli};
}

// One node's memo: its state when last seen, and a measure of it then.
struct NodeMemo {
  // The node's NodeRecord::generation when `state` was last found exact:
  // while it is unchanged, the state needs no comparing (UseNodeMemo).
  std::uint64_t generation = 0;
  std::uint64_t version = 0;  // 0: never seen; unique across nodes
  CpuMilli cpu_free = 0;
  std::vector<GpuSnap> gpus;
  NodeGpuState state;     // the same state, as NodeFragMilli reads it
  double frag = 0;        // the policy's measure of `state`
  std::int64_t idle = 0;  // sum of the GPUs' free milli
};

// The memo's fields, and its state's free milli (reads the memo), as the
// records above.
inline void PrefetchNodeMemo(const NodeMemo& memo) {
  __builtin_prefetch(&memo);
  __builtin_prefetch(&memo.idle);
}
inline void PrefetchNodeMemoState(const NodeMemo& memo) {
  __builtin_prefetch(memo.state.gpu_free_milli.data());
}

// Brings `memo`'s snapshot, state and idle up to the node's state (`facts`,
// `gpus`) and gives it a new version from `next_version`; true then, and the
// caller recomputes `memo.frag`. False (nothing touched) when nothing
// changed and not `force`.
// When the node is at the generation `memo` was made at (and `memo` was
// made): fills the free milli of `gpus` (a Gather without them) from
// `memo`, and a slice candidate's milli after placement, and returns true;
// otherwise false, and the caller gathers the free milli and syncs.
bool UseNodeMemo(const NodeMemo& memo, const NodeFacts& facts, const Need& need,
                 std::vector<GpuFacts>& gpus);

bool SyncNodeMemo(const NodeFacts& facts, const std::vector<GpuFacts>& gpus,
                  bool force, std::uint64_t& next_version, NodeMemo& memo);

// Sets the first `count` candidates' free milli in `state` to 0 (held
// whole); returns the free milli they had.
std::int64_t TakeLowestCandidates(const std::vector<GpuFacts>& gpus, int count,
                                  NodeGpuState& state);

// Puts every GPU's free milli back into `state`.
void RestoreFreeMilli(const std::vector<GpuFacts>& gpus, NodeGpuState& state);

// What an FGD-style score depends on in a request: the kind, CPU, the
// slice's memory and compute (its after_milli) and the GPU count, and
// whether a slice's compute is defaulted (a GPU in MIG mode charges an asked
// 50% as a 4g partition, a defaulted one as the partition its memory
// needs). Models, tenant and host memory only change the candidates (the
// memo's mask).
struct ShapeKey {
  ledger::RequestKind kind = ledger::RequestKind::kSlice;
  CpuMilli cpu = 0;
  MemoryMib memory = 0;
  ComputePercent compute = 0;
  int count = 0;
  bool compute_defaulted = false;
  friend bool operator==(const ShapeKey&, const ShapeKey&) = default;
};

struct ShapeKeyHash {
  std::size_t operator()(const ShapeKey& k) const noexcept;
};

// The shape of `need` (its request's CPU included).
ShapeKey ShapeOf(const Need& need);

// One (request shape, node) result, valid for the node's memo version and
// the same candidate GPUs.
template <typename Value>
struct ScoreMemo {
  std::uint64_t version = 0;
  std::uint64_t candidate_mask = 0;
  Value value{};
};

// Bounds the score memo at kMaxShapes x nodes entries; past it, it restarts.
inline constexpr std::size_t kMaxShapes = 512;

// Results per (request shape, node slot), one `Entry` each.
template <typename Entry>
struct ShapeTable {
  std::unordered_map<ShapeKey, std::size_t, ShapeKeyHash> shapes;
  std::vector<std::vector<Entry>> entries;  // by shape, node slot

  // The entries for `key`, sized for `slots` node slots.
  std::vector<Entry>& For(const ShapeKey& key, std::size_t slots) {
    auto it = shapes.find(key);
    if (it == shapes.end()) {
      if (shapes.size() >= kMaxShapes) {
        shapes.clear();
        entries.clear();
      }
      it = shapes.emplace(key, entries.size()).first;
      entries.emplace_back();
    }
    std::vector<Entry>& out = entries[it->second];
    if (out.size() < slots) out.resize(slots);
    return out;
  }
};

// A memoising policy's state: node memos, results per (shape, node), and a
// scratch buffer for the node at hand.
template <typename Value>
struct ScanMemo {
  std::vector<NodeMemo> nodes;      // by node slot
  std::vector<NodeGpuCopy> copies;  // by node slot
  ShapeTable<ScoreMemo<Value>> scores;
  std::uint64_t next_version = 0;
  std::vector<GpuFacts> gpus;  // scratch for the node at hand

  // Sizes `nodes` for `slots` node slots.
  void Reserve(std::size_t slots) {
    if (nodes.size() < slots) nodes.resize(slots);
    if (copies.size() < slots) copies.resize(slots);
  }

  // The results for `key`, sized for `slots` node slots.
  std::vector<ScoreMemo<Value>>& ScoresFor(const ShapeKey& key,
                                           std::size_t slots) {
    return scores.For(key, slots);
  }
};

}  // namespace hf::scheduler::node_scan
