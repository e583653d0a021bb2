// HfFragPolicy (hf_frag.h): one scan over the nodes that filters with the
// ledger's rules and scores each feasible node by the drop of its
// fragmentation plus CPU-stranded GPU; node measures and per-shape results
// are memoised per node and checked against the node's exact state.
#include "scheduler/policy/hf_frag.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "scheduler/policy/node_scan.h"

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;
using node_scan::Choice;
using node_scan::GpuFacts;
using node_scan::Need;
using node_scan::NodeFacts;
using node_scan::NodeMemo;

namespace {

// A feasible node's evaluation: the higher `score` wins; for node-only
// tasks, ties go to the smaller `idle_after`, then `cpu_after`.
struct Eval {
  std::int64_t score = 0;
  std::int64_t idle_after = 0;
  CpuMilli cpu_after = 0;
  int pos = -1;  // the slice's GPU (position in the node's live GPUs)
};

// Fragmentation plus the GPU milli stranded for lack of CPU: of the node's
// idle milli, what its free CPU cannot feed at the workload's CPU per GPU
// milli.
double Frag(const NodeGpuState& state, const TargetWorkload& workload,
            double cpu_per_milli) {
  double frag = NodeFragMilli(state, workload);
  if (cpu_per_milli > 0) {
    std::int64_t idle = 0;
    for (const int free : state.gpu_free_milli) idle += free;
    const double fed = static_cast<double>(state.cpu_free) / cpu_per_milli;
    frag += std::max(0.0, static_cast<double>(idle) - fed);
  }
  return frag;
}

// FGD's score of a drop: int(100 x sigmoid(drop / 1000)).
std::int64_t Score(double before, double after) {
  const double x = (before - after) / 1000;
  return static_cast<std::int64_t>(100.0 / (1.0 + std::exp(-x)));
}

// The evaluation of a feasible node whose memo is current.
Eval Evaluate(const Need& need, const std::vector<GpuFacts>& gpus,
              const TargetWorkload& workload, double cpu_per_milli,
              NodeMemo& memo) {
  NodeGpuState& state = memo.state;  // changed below, restored before return
  const CpuMilli cpu = need.request->cpu_milli;
  state.cpu_free -= cpu;
  Eval eval;
  eval.cpu_after = state.cpu_free;
  switch (need.kind) {
    case RequestKind::kSlice: {
      bool found = false;
      int best_after = 0;
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        if (!gpus[i].candidate) continue;
        // Same before / after as an earlier candidate: same state.
        if (node_scan::RepeatsEarlierCandidate(gpus, i)) continue;
        state.gpu_free_milli[i] = gpus[i].after_milli;
        const std::int64_t score =
            Score(memo.frag, Frag(state, workload, cpu_per_milli));
        state.gpu_free_milli[i] = gpus[i].free_milli;
        const int after = gpus[i].after_milli;
        // The best score; ties: the tightest GPU, then the lowest index.
        if (!found || score > eval.score ||
            (score == eval.score && after < best_after)) {
          found = true;
          eval.score = score;
          eval.pos = static_cast<int>(i);
          eval.idle_after =
              memo.idle - gpus[i].free_milli + gpus[i].after_milli;
          best_after = after;
        }
      }
      break;
    }
    case RequestKind::kWholeGpus: {
      const std::int64_t freed =
          node_scan::TakeLowestCandidates(gpus, need.gpu_count, state);
      eval.score = Score(memo.frag, Frag(state, workload, cpu_per_milli));
      eval.idle_after = memo.idle - freed;
      node_scan::RestoreFreeMilli(gpus, state);
      break;
    }
    case RequestKind::kNodeOnly:
      eval.score = Score(memo.frag, Frag(state, workload, cpu_per_milli));
      eval.idle_after = memo.idle;
      break;
  }
  state.cpu_free += cpu;
  return eval;
}

// Whether `a` (on a node of tie rank `rank_a`, slot `slot_a`) beats `b`.
bool Better(RequestKind kind, const Eval& a, std::uint64_t rank_a,
            std::size_t slot_a, const Eval& b, std::uint64_t rank_b,
            std::size_t slot_b) {
  if (a.score != b.score) return a.score > b.score;
  if (kind == RequestKind::kNodeOnly) {
    // Strand the least GPU: the node left with the least idle GPU, then the
    // least free CPU.
    if (a.idle_after != b.idle_after) return a.idle_after < b.idle_after;
    if (a.cpu_after != b.cpu_after) return a.cpu_after < b.cpu_after;
  }
  return std::tie(rank_a, slot_a) < std::tie(rank_b, slot_b);
}

}  // namespace

struct HfFragPolicy::Memo : node_scan::ScanMemo<Eval> {};

namespace {

std::optional<Choice> Pick(const ClusterView& view,
                           const PlacementRequest& request,
                           const TargetWorkload& workload, double cpu_per_milli,
                           HfFragPolicy::Memo& memo) {
  const std::optional<Need> need = node_scan::MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  const std::size_t slots = view.node_slot_count();
  memo.Reserve(slots);
  std::vector<node_scan::ScoreMemo<Eval>>& scores =
      memo.ScoresFor(node_scan::ShapeOf(*need), slots);

  std::vector<GpuFacts>& gpus = memo.gpus;
  NodeFacts facts;
  bool found = false;
  Eval best;
  std::uint64_t best_rank = 0;
  std::size_t best_slot = 0;
  for (std::size_t slot = 0; slot < slots; ++slot) {
    if (!node_scan::Gather(view, slot, *need, gpus, facts)) continue;
    const NodeRecord& node = *facts.node;
    NodeMemo& node_memo = memo.nodes[slot];
    if (node_scan::SyncNodeMemo(facts, gpus, /*force=*/false, memo.next_version,
                                node_memo)) {
      node_memo.frag = Frag(node_memo.state, workload, cpu_per_milli);
    }
    std::uint64_t mask = 0;
    const bool cacheable = node_scan::CandidateMask(gpus, mask);
    node_scan::ScoreMemo<Eval>& cached = scores[slot];
    Eval eval;
    if (cacheable && cached.version == node_memo.version &&
        cached.candidate_mask == mask) {
      eval = cached.value;
    } else {
      eval = Evaluate(*need, gpus, workload, cpu_per_milli, node_memo);
      if (cacheable) cached = {node_memo.version, mask, eval};
    }
    if (!found || Better(need->kind, eval, node.tie_rank, slot, best, best_rank,
                         best_slot)) {
      found = true;
      best = eval;
      best_rank = node.tie_rank;
      best_slot = slot;
    }
  }
  if (!found) return std::nullopt;
  node_scan::Gather(view, best_slot, *need, gpus, facts);
  return node_scan::ChoiceOn(*need, best_slot, gpus, best.pos);
}

}  // namespace

double CpuPerGpuMilli(const TargetWorkload& workload) {
  double cpu = 0;
  double milli = 0;
  for (const WeightedClass& c : workload.classes()) {
    if (c.task.gpu_milli <= 0 || c.task.num_gpu <= 0) continue;
    cpu += c.weight * static_cast<double>(c.task.cpu_milli);
    milli += c.weight * c.task.gpu_milli * c.task.num_gpu;
  }
  return milli > 0 ? cpu / milli : 0;
}

double HfFragMilli(const NodeGpuState& node, const TargetWorkload& workload,
                   double cpu_per_milli) {
  return Frag(node, workload, cpu_per_milli);
}

HfFragPolicy::HfFragPolicy(TargetWorkload workload)
    : workload_(std::move(workload)),
      cpu_per_milli_(CpuPerGpuMilli(workload_)),
      memo_(std::make_unique<Memo>()) {}

HfFragPolicy::~HfFragPolicy() = default;

std::optional<std::vector<GpuId>> HfFragPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind == RequestKind::kNodeOnly) return std::nullopt;
  std::lock_guard lock(mu_);
  std::optional<Choice> choice =
      Pick(view, request, workload_, cpu_per_milli_, *memo_);
  if (!choice.has_value()) return std::nullopt;
  return std::move(choice->gpus);
}

std::optional<NodeId> HfFragPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind != RequestKind::kNodeOnly) return std::nullopt;
  std::lock_guard lock(mu_);
  std::optional<Choice> choice =
      Pick(view, request, workload_, cpu_per_milli_, *memo_);
  if (!choice.has_value()) return std::nullopt;
  return choice->node;
}

}  // namespace hf::scheduler
