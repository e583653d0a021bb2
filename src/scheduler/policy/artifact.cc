// The FGD artifact's placement policies (artifact.h): one scan over the
// nodes that filters with the ledger's rules and scores each feasible node,
// then the artifact's GPU choice inside the winner.
//
// The scan allocates nothing per node: each call reuses one buffer for the
// GPUs of the node at hand. FGD memoises node fragmentation and scores per
// node (see FgdPolicy::Memo), checked against the node's exact state.
#include "scheduler/policy/artifact.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <tuple>
#include <utility>

#include "scheduler/policy/node_scan.h"

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;
using node_scan::Choice;
using node_scan::Gather;
using node_scan::GpuFacts;
using node_scan::LowestCandidates;
using node_scan::MakeNeed;
using node_scan::Need;
using node_scan::NodeFacts;
using node_scan::NodeMemo;

namespace {

constexpr double kMaxSpecCpu = static_cast<double>(kArtifactMaxSpecCpu);
constexpr double kMaxSpecGpu = static_cast<double>(kArtifactMaxSpecGpuMilli);
constexpr std::int64_t kMaxNodeScore = 100;  // Kubernetes' MaxNodeScore

// The highest score; ties: the smallest tie rank, then the smallest slot.
class BestNode {
 public:
  bool Offer(std::int64_t score, const NodeFacts& facts) {
    const std::uint64_t rank = facts.node->tie_rank;
    if (found_ &&
        (score < score_ || (score == score_ && std::tie(rank, facts.slot) >=
                                                   std::tie(rank_, slot_)))) {
      return false;
    }
    found_ = true;
    score_ = score;
    rank_ = rank;
    slot_ = facts.slot;
    return true;
  }
  bool found() const { return found_; }
  std::size_t slot() const { return slot_; }

 private:
  bool found_ = false;
  std::int64_t score_ = 0;
  std::uint64_t rank_ = 0;
  std::size_t slot_ = 0;
};

// The artifact's "best" GPU choice: a slice takes the candidate with the
// least free milli (lowest index on ties); whole GPUs the lowest-index
// eligible ones; a node-only task none.
std::vector<GpuId> PickBestGpus(const Need& need,
                                const std::vector<GpuFacts>& gpus) {
  if (need.kind == RequestKind::kWholeGpus) {
    return LowestCandidates(gpus, need.gpu_count);
  }
  if (need.kind == RequestKind::kNodeOnly) return {};
  const GpuFacts* best = nullptr;
  for (const GpuFacts& g : gpus) {
    if (g.candidate && (best == nullptr || g.free_milli < best->free_milli)) {
      best = &g;
    }
  }
  return {best->record->id};  // Gather admitted the node: one exists
}

// Filter, score with `score(need, facts, gpus)`, select, then "best" GPUs.
template <typename ScoreFn>
std::optional<Choice> ScoreAndPick(const ClusterView& view,
                                   const PlacementRequest& request,
                                   const ScoreFn& score) {
  const std::optional<Need> need = MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  std::vector<GpuFacts> gpus;
  gpus.reserve(16);
  NodeFacts facts;
  BestNode best;
  for (std::size_t slot = 0; slot < view.node_slot_count(); ++slot) {
    if (!Gather(view, slot, *need, gpus, facts)) continue;
    best.Offer(score(*need, facts, gpus), facts);
  }
  if (!best.found()) return std::nullopt;
  Gather(view, best.slot(), *need, gpus, facts);  // the winner's GPUs
  return Choice{NodeId(best.slot()), PickBestGpus(*need, gpus)};
}

std::optional<std::vector<GpuId>> GpusOf(const PlacementRequest& request,
                                         std::optional<Choice> choice) {
  if (request.kind == RequestKind::kNodeOnly || !choice.has_value()) {
    return std::nullopt;
  }
  return std::move(choice->gpus);
}

std::optional<NodeId> NodeOf(const std::optional<Choice>& choice) {
  if (!choice.has_value()) return std::nullopt;
  return choice->node;
}

// --- scores ---

// dot_product_score.go with dimext "merge", norm "max".
std::int64_t DotProdScore(const Need& need, const NodeFacts& f,
                          const std::vector<GpuFacts>& /*gpus*/) {
  const PlacementRequest& r = *need.request;
  if (f.cpu_free < r.cpu_milli) return 0;  // no vector: MinNodeScore
  const double node_cpu = static_cast<double>(f.cpu_free) / kMaxSpecCpu;
  const double node_gpu = static_cast<double>(f.idle_milli) / kMaxSpecGpu;
  const double pod_cpu = static_cast<double>(r.cpu_milli) / kMaxSpecCpu;
  const double pod_gpu = static_cast<double>(need.total_milli) / kMaxSpecGpu;
  double dot = 0;
  dot += node_cpu * pod_cpu;
  dot += node_gpu * pod_gpu;
  dot /= 2;  // normalised by the vector length
  const double score = 1 - dot;
  return static_cast<std::int64_t>(static_cast<double>(kMaxNodeScore) * score);
}

// gpu_clustering_score.go.
std::int64_t GpuClusteringScore(const Need& need, const NodeFacts& f,
                                const std::vector<GpuFacts>& /*gpus*/) {
  if (need.kind == RequestKind::kNodeOnly) return 0;  // "no-gpu"
  const NodeRecord& node = *f.node;
  // The node's tags: "share-gpu" for slices, "<n>-gpu" per whole size.
  int tags = node.slice_allocations > 0 ? 1 : 0;
  bool own = need.kind == RequestKind::kSlice && node.slice_allocations > 0;
  for (const auto& [size, count] : node.whole_allocations) {
    if (count <= 0) continue;
    ++tags;
    if (need.kind == RequestKind::kWholeGpus && size == need.gpu_count) {
      own = true;
    }
  }
  const std::int64_t t = kMaxNodeScore / 4 *
                         (kArtifactMaxSpecGpuMilli - f.idle_milli) /
                         kArtifactMaxSpecGpuMilli;
  if (own) {
    return t + (tags == 1 ? kMaxNodeScore * 3 / 4 : kMaxNodeScore * 2 / 4);
  }
  return t + (tags == 0 ? kMaxNodeScore / 4 : 0);
}

// gpu_packing_score.go.
std::int64_t GpuPackingScore(const Need& need, const NodeFacts& f,
                             const std::vector<GpuFacts>& gpus) {
  if (need.kind == RequestKind::kNodeOnly) return 0;
  // Case 3: every GPU of the node is free; smaller nodes first.
  const std::int64_t fully_free = f.fully_free;
  if (f.fully_free == static_cast<int>(gpus.size())) {
    return std::max(kMaxNodeScore / 3 - fully_free, fully_free);
  }
  // The artifact's pick: candidates by ascending free milli (stable), the
  // first gpu_count of them; each round takes the next (free, index).
  int fully_free_used = 0;
  std::int64_t free_ratio_sum = 0;
  std::pair<int, std::size_t> previous{-1, 0};
  for (int round = 0; round < need.gpu_count; ++round) {
    std::optional<std::pair<int, std::size_t>> next;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      if (!gpus[i].candidate) continue;
      const std::pair<int, std::size_t> key{gpus[i].free_milli, i};
      if (key > previous && (!next.has_value() || key < *next)) next = key;
    }
    if (!next.has_value()) return 0;  // not reached: Gather counted them
    previous = *next;
    fully_free_used += next->first == kMilliPerGpu;
    free_ratio_sum += std::int64_t{next->first} * 100 / kMilliPerGpu;
  }
  // Case 2: a fully free GPU is needed.
  if (fully_free_used > 0) {
    return std::max(kMaxNodeScore / 2 - fully_free_used, kMaxNodeScore / 3);
  }
  // Case 1: partially used GPUs only; the less they have left the better.
  return std::max(kMaxNodeScore - free_ratio_sum / 10, kMaxNodeScore / 2);
}

// best_fit_score.go (its min-max NormalizeScore keeps the argmax set).
std::int64_t BestFitScore(const Need& need, const NodeFacts& f,
                          const std::vector<GpuFacts>& /*gpus*/) {
  const PlacementRequest& r = *need.request;
  double score = 0;
  score +=
      (static_cast<double>(f.cpu_free) - static_cast<double>(r.cpu_milli)) /
      kMaxSpecCpu * 0.5;
  score += (static_cast<double>(f.idle_milli) -
            static_cast<double>(need.total_milli)) /
           kMaxSpecGpu * 0.5;
  score = (1.0 - score) * static_cast<double>(kMaxNodeScore);
  return static_cast<std::int64_t>(score);
}

// An unbiased draw from [0, n), n > 0, the same on every platform.
std::size_t UniformIndex(std::mt19937_64& rng, std::size_t n) {
  const std::uint64_t bound = n;
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % bound;
  std::uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return static_cast<std::size_t>(x % bound);
}

std::optional<Choice> PickRandom(const ClusterView& view,
                                 const PlacementRequest& request,
                                 std::mt19937_64& rng) {
  const std::optional<Need> need = MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  std::vector<GpuFacts> gpus;
  gpus.reserve(16);
  NodeFacts facts;
  std::vector<std::size_t> feasible;
  feasible.reserve(view.node_slot_count());
  for (std::size_t slot = 0; slot < view.node_slot_count(); ++slot) {
    if (Gather(view, slot, *need, gpus, facts, /*with_free=*/false)) {
      feasible.push_back(slot);
    }
  }
  if (feasible.empty()) return std::nullopt;
  const std::size_t slot = feasible[UniformIndex(rng, feasible.size())];
  Gather(view, slot, *need, gpus, facts, /*with_free=*/false);
  Choice choice{NodeId(slot), {}};
  if (need->kind == RequestKind::kSlice) {
    std::size_t k =
        UniformIndex(rng, static_cast<std::size_t>(facts.candidates));
    for (const GpuFacts& g : gpus) {
      if (g.candidate && k-- == 0) {
        choice.gpus.push_back(g.record->id);
        break;
      }
    }
  } else if (need->kind == RequestKind::kWholeGpus) {
    choice.gpus = LowestCandidates(gpus, need->gpu_count);
  }
  return choice;
}

// --- FGD ---

std::int64_t FgdScore(double frag_before, double frag_after) {
  const double x = (frag_before - frag_after) / 1000;
  const double sigmoid = 1.0 / (1.0 + std::exp(-x));
  return static_cast<std::int64_t>(sigmoid *
                                   static_cast<double>(kMaxNodeScore));
}

}  // namespace

// FGD's memoised result on a node: its score and, for a slice, the chosen
// GPU's position.
struct FgdPolicy::Memo : node_scan::ScanMemo<std::pair<std::int64_t, int>> {};

namespace {

// FGD's score of a feasible node whose memo is current, and for a slice the
// position of the GPU it picks (the first reaching the best score).
std::pair<std::int64_t, int> FgdNodeScore(const Need& need,
                                          const std::vector<GpuFacts>& gpus,
                                          const TargetWorkload& workload,
                                          NodeMemo& memo) {
  NodeGpuState& state = memo.state;  // changed below, restored before return
  const CpuMilli cpu = need.request->cpu_milli;
  state.cpu_free -= cpu;
  std::int64_t best = 0;
  int pos = -1;
  switch (need.kind) {
    case RequestKind::kSlice:
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        if (!gpus[i].candidate) continue;
        // A candidate with the same before / after milli as an earlier one
        // leaves the same node state: same score, and the earlier one wins.
        if (node_scan::RepeatsEarlierCandidate(gpus, i)) continue;
        state.gpu_free_milli[i] = gpus[i].after_milli;
        const std::int64_t score =
            FgdScore(memo.frag, NodeFragMilli(state, workload));
        state.gpu_free_milli[i] = gpus[i].free_milli;
        if (pos < 0 || score > best) {
          best = score;
          pos = static_cast<int>(i);
        }
      }
      break;
    case RequestKind::kWholeGpus: {
      // The lowest-index eligible GPUs, held whole (0 free).
      node_scan::TakeLowestCandidates(gpus, need.gpu_count, state);
      best = FgdScore(memo.frag, NodeFragMilli(state, workload));
      node_scan::RestoreFreeMilli(gpus, state);
      break;
    }
    case RequestKind::kNodeOnly:
      best = FgdScore(memo.frag, NodeFragMilli(state, workload));
      break;
  }
  state.cpu_free += cpu;
  return {best, pos};
}

}  // namespace

// --- the policies ---

std::optional<std::vector<GpuId>> RandomPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return GpusOf(request, PickRandom(view, request, rng_));
}

std::optional<NodeId> RandomPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return NodeOf(PickRandom(view, request, rng_));
}

std::optional<std::vector<GpuId>> DotProdPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  return GpusOf(request, ScoreAndPick(view, request, DotProdScore));
}

std::optional<NodeId> DotProdPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  return NodeOf(ScoreAndPick(view, request, DotProdScore));
}

std::optional<std::vector<GpuId>> GpuClusteringPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  return GpusOf(request, ScoreAndPick(view, request, GpuClusteringScore));
}

std::optional<NodeId> GpuClusteringPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  return NodeOf(ScoreAndPick(view, request, GpuClusteringScore));
}

std::optional<std::vector<GpuId>> GpuPackingPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  return GpusOf(request, ScoreAndPick(view, request, GpuPackingScore));
}

std::optional<NodeId> GpuPackingPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  return NodeOf(ScoreAndPick(view, request, GpuPackingScore));
}

std::optional<std::vector<GpuId>> ArtifactBestFitPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  return GpusOf(request, ScoreAndPick(view, request, BestFitScore));
}

std::optional<NodeId> ArtifactBestFitPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  return NodeOf(ScoreAndPick(view, request, BestFitScore));
}

FgdPolicy::FgdPolicy(TargetWorkload workload, bool memoize)
    : workload_(std::move(workload)),
      memoize_(memoize),
      memo_(std::make_unique<Memo>()) {}

FgdPolicy::~FgdPolicy() = default;

namespace {

std::optional<Choice> PickFgd(const ClusterView& view,
                              const PlacementRequest& request,
                              const TargetWorkload& workload, bool memoize,
                              FgdPolicy::Memo& memo) {
  const std::optional<Need> need = MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  using Cached = node_scan::ScoreMemo<std::pair<std::int64_t, int>>;
  const std::size_t slots = view.node_slot_count();
  memo.Reserve(slots);
  std::vector<Cached>* scores = nullptr;
  if (memoize) scores = &memo.ScoresFor(node_scan::ShapeOf(*need), slots);

  std::vector<GpuFacts>& gpus = memo.gpus;
  NodeFacts facts;
  BestNode best;
  int best_pos = -1;
  for (std::size_t slot = 0; slot < slots; ++slot) {
    if (!Gather(view, slot, *need, gpus, facts)) continue;
    NodeMemo& node_memo = memo.nodes[slot];
    if (node_scan::SyncNodeMemo(facts, gpus, /*force=*/!memoize,
                                memo.next_version, node_memo)) {
      node_memo.frag = NodeFragMilli(node_memo.state, workload);
    }
    Cached* cached = nullptr;
    std::uint64_t mask = 0;
    if (scores != nullptr && node_scan::CandidateMask(gpus, mask)) {
      cached = &(*scores)[slot];
    }
    std::int64_t score;
    int pos;
    if (cached != nullptr && cached->version == node_memo.version &&
        cached->candidate_mask == mask) {
      std::tie(score, pos) = cached->value;
    } else {
      std::tie(score, pos) = FgdNodeScore(*need, gpus, workload, node_memo);
      if (cached != nullptr) *cached = {node_memo.version, mask, {score, pos}};
    }
    if (best.Offer(score, facts)) best_pos = pos;
  }
  if (!best.found()) return std::nullopt;
  Gather(view, best.slot(), *need, gpus, facts);
  return node_scan::ChoiceOn(*need, best.slot(), gpus, best_pos);
}

}  // namespace

std::optional<std::vector<GpuId>> FgdPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return GpusOf(request, PickFgd(view, request, workload_, memoize_, *memo_));
}

std::optional<NodeId> FgdPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return NodeOf(PickFgd(view, request, workload_, memoize_, *memo_));
}

}  // namespace hf::scheduler
