// HfFragPolicy (hf_frag.h): one scan over the nodes that filters with the
// ledger's rules and scores each feasible node by the drop of its
// fragmentation plus CPU-stranded GPU; node measures and per-shape results
// are memoised per node and checked against the node's exact state.
#include "scheduler/policy/hf_frag.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
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

// The measure's terms for one node.
struct Terms {
  double cpu_per_milli = 0;
  double price = 0;  // of the node's GPU model
};

// Fragmentation, plus the GPU milli stranded for lack of CPU (of the node's
// idle milli, what its free CPU cannot feed at `cpu_per_milli`), minus the
// idle milli at the model's price (idle GPU that constrained tasks need is
// worth keeping, so using it raises the measure).
// `node_frag` is the state's NodeFragMilli (or an estimate of it) and
// `idle` its idle milli.
double WithTerms(double node_frag, const NodeGpuState& state, std::int64_t idle,
                 const Terms& terms) {
  double frag = node_frag;
  if (terms.cpu_per_milli > 0) {
    const double fed =
        static_cast<double>(state.cpu_free) / terms.cpu_per_milli;
    frag += std::max(0.0, static_cast<double>(idle) - fed);
  }
  frag -= terms.price * static_cast<double>(idle);
  return frag;
}

double Frag(const NodeGpuState& state, const TargetWorkload& workload,
            const Terms& terms) {
  return WithTerms(NodeFragMilli(state, workload), state, IdleMilli(state),
                   terms);
}

// FGD's score of a drop, before truncation: 100 x sigmoid(drop / 1000).
double ScoreValue(double before, double after) {
  const double x = (before - after) / 1000;
  return 100.0 / (1.0 + std::exp(-x));
}

// FGD's integer score of a drop: int(100 x sigmoid(drop / 1000)).
std::int64_t Score(double before, double after) {
  return static_cast<std::int64_t>(ScoreValue(before, after));
}

// The score of leaving a node measured `before` in `state`: Score(before,
// Frag(state)), from the measure's estimate by class groups where its error
// cannot move the score to another integer (nearly always), else from the
// measure itself. The estimate's `after` is within `bound` of Frag's; the
// sigmoid's slope is at most 1/4, so the score's value moves at most
// 100 / 4 / 1000 per milli, and 1e-9 more covers the rounding of the score's
// own arithmetic (below 1e-12 from 0 to 100).
// `estimate` is EstimateNodeFragMilli(state) (or nullopt) and `idle` the
// state's idle milli.
std::int64_t ScoreFrom(double before,
                       const std::optional<FragEstimate>& estimate,
                       const NodeGpuState& state, std::int64_t idle,
                       const TargetWorkload& workload, const Terms& terms) {
  if (estimate.has_value()) {
    const double after = WithTerms(estimate->milli, state, idle, terms);
    // WithTerms adds the same two terms to both, rounding each sum once.
    const double eps = std::numeric_limits<double>::epsilon();
    const double magnitude =
        std::abs(estimate->milli) + std::abs(after) +
        static_cast<double>(idle) * (2 + std::abs(terms.price));
    const double bound = 2 * estimate->error + 16 * eps * magnitude;
    const double value = ScoreValue(before, after);
    const double slack = bound * (100.0 / 4 / 1000) + 1e-9;
    const double low = std::max(0.0, value - slack);
    const double high = std::min(100.0, value + slack);
    if (std::floor(low) == std::floor(high)) {
      return static_cast<std::int64_t>(low);
    }
  }
  return Score(before,
               WithTerms(NodeFragMilli(state, workload), state, idle, terms));
}

std::int64_t ScoreAfter(double before, const NodeGpuState& state,
                        const TargetWorkload& workload, const Terms& terms) {
  return ScoreFrom(before, EstimateNodeFragMilli(state, workload), state,
                   IdleMilli(state), workload, terms);
}

// What one (request shape, node) memo entry keeps. For a slice: the score
// of each GPU position evaluated at the node's memo `version` (bit i of
// `known`: gpu_score[i] is known; the candidate GPUs differ between tenants
// of the same shape, their scores do not). Half a cache line, so that at
// 100,000 GPUs the ~300 slice shapes' entries for every node take half the
// memory and page walks that a whole line each did (the entry of the other
// kinds below is twice that).
constexpr std::size_t kCachedGpus = 16;
struct SliceScores {
  std::uint64_t version = 0;  // 0: none known
  std::uint16_t known = 0;
  std::array<std::uint8_t, kCachedGpus> gpu_score{};
};
static_assert(sizeof(SliceScores) == 32);
static_assert(kCachedGpus <= 16, "`known` has a bit per GPU position");
// For whole GPUs and node-only tasks: the node's evaluation, for its
// candidate GPUs.
using CachedMemo = node_scan::ScoreMemo<Eval>;

// A slice's evaluation of a feasible node whose memo is current. `cached`
// (scores of GPU positions at the memo's version) is read and extended;
// null when the node has too many GPUs to keep scores for. The candidates
// it scores differ from the node's state in one GPU each, so their
// estimates come from one NodeFragEstimator (`estimator`, scratch).
Eval EvaluateSlice(const Need& need, const std::vector<GpuFacts>& gpus,
                   const TargetWorkload& workload, const Terms& terms,
                   NodeMemo& memo, SliceScores* cached,
                   NodeFragEstimator& estimator) {
  NodeGpuState& state = memo.state;  // changed below, restored before return
  state.cpu_free -= need.request->cpu_milli;
  Eval eval;
  eval.cpu_after = state.cpu_free;
  bool found = false;
  bool estimator_ready = false;
  int best_after = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].candidate) continue;
    const auto bit = static_cast<std::uint16_t>(1U << i);
    std::int64_t score = 0;
    if (cached != nullptr && (cached->known & bit) != 0) {
      score = cached->gpu_score[i];
    } else {
      if (!estimator_ready) {
        estimator.Reset(state, workload);
        estimator_ready = true;
      }
      state.gpu_free_milli[i] = gpus[i].after_milli;
      score = ScoreFrom(memo.frag, estimator.With(i, gpus[i].after_milli),
                        state, IdleMilli(state), workload, terms);
      state.gpu_free_milli[i] = gpus[i].free_milli;
      if (cached != nullptr) {
        cached->known |= bit;
        cached->gpu_score[i] = static_cast<std::uint8_t>(score);
      }
    }
    const int after = gpus[i].after_milli;
    // The best score; ties: the tightest GPU, then the lowest index.
    if (!found || score > eval.score ||
        (score == eval.score && after < best_after)) {
      found = true;
      eval.score = score;
      eval.pos = static_cast<int>(i);
      eval.idle_after = memo.idle - gpus[i].free_milli + gpus[i].after_milli;
      best_after = after;
    }
  }
  state.cpu_free += need.request->cpu_milli;
  return eval;
}

// The evaluation of a feasible node whose memo is current, for whole GPUs
// or a node-only task.
Eval EvaluateNode(const Need& need, const std::vector<GpuFacts>& gpus,
                  const TargetWorkload& workload, const Terms& terms,
                  NodeMemo& memo) {
  NodeGpuState& state = memo.state;  // changed below, restored before return
  const CpuMilli cpu = need.request->cpu_milli;
  state.cpu_free -= cpu;
  Eval eval;
  eval.cpu_after = state.cpu_free;
  if (need.kind == RequestKind::kWholeGpus) {
    const std::int64_t freed =
        node_scan::TakeLowestCandidates(gpus, need.gpu_count, state);
    eval.score = ScoreAfter(memo.frag, state, workload, terms);
    eval.idle_after = memo.idle - freed;
    node_scan::RestoreFreeMilli(gpus, state);
  } else {
    eval.score = ScoreAfter(memo.frag, state, workload, terms);
    eval.idle_after = memo.idle;
  }
  state.cpu_free += cpu;
  return eval;
}

// A slice's evaluation of a feasible node whose memo is current, through
// the node's entry of the shape's memo.
Eval EvaluateSliceCached(const Need& need, const std::vector<GpuFacts>& gpus,
                         const TargetWorkload& workload, const Terms& terms,
                         NodeMemo& memo, SliceScores& cached,
                         NodeFragEstimator& estimator) {
  if (gpus.size() > kCachedGpus) {
    return EvaluateSlice(need, gpus, workload, terms, memo, nullptr, estimator);
  }
  if (cached.version != memo.version) {
    cached.version = memo.version;
    cached.known = 0;  // no GPU's score known yet
  }
  return EvaluateSlice(need, gpus, workload, terms, memo, &cached, estimator);
}

// The evaluation of a feasible node whose memo is current, for whole GPUs
// or a node-only task, through the node's entry of the shape's memo.
Eval EvaluateNodeCached(const Need& need, const std::vector<GpuFacts>& gpus,
                        const TargetWorkload& workload, const Terms& terms,
                        NodeMemo& memo, CachedMemo& cached) {
  std::uint64_t mask = 0;
  const bool cacheable = node_scan::CandidateMask(gpus, mask);
  if (cacheable && cached.version == memo.version &&
      cached.candidate_mask == mask) {
    return cached.value;
  }
  const Eval eval = EvaluateNode(need, gpus, workload, terms, memo);
  if (cacheable) {
    cached.version = memo.version;
    cached.candidate_mask = mask;
    cached.value = eval;
  }
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

struct HfFragPolicy::Memo : node_scan::ScanMemo<Eval> {
  // Slices' results, in entries of their own (SliceScores); `scores` holds
  // the other kinds'.
  node_scan::ShapeTable<SliceScores> slice_scores;
  NodeFragEstimator estimator;  // scratch for the node at hand
  // Prices, for the cluster of `priced_gpus` live GPUs; per node slot.
  std::size_t priced_gpus = 0;
  double cpu_per_milli = 0;  // the CPU term's c for this cluster
  std::vector<double> slot_price;
  std::size_t scan_start = 0;  // the next bounded scan's first slot
};

namespace {

// Prices the cluster when its GPUs changed (the first call included),
// starting the memo afresh, since every node's measure changes with them.
void EnsurePrices(const ClusterView& view, const WorkloadDemand& demand,
                  double cpu_per_milli,
                  std::unique_ptr<HfFragPolicy::Memo>& memo) {
  const std::size_t gpus = view.live_gpu_count();
  if (memo->priced_gpus == gpus &&
      memo->slot_price.size() == view.node_slot_count()) {
    return;
  }
  const ClusterPrices prices = PricesFor(view, demand);
  memo = std::make_unique<HfFragPolicy::Memo>();
  memo->priced_gpus = gpus;
  // The CPU that a GPU milli must leave room for: the GPU classes' own CPU,
  // or, when the workload is CPU-bound, the whole workload's CPU per GPU
  // milli (CPU-only tasks included), so that CPU-only tasks do not eat the
  // CPU that idle GPUs will need.
  memo->cpu_per_milli =
      cpu_per_milli + std::max(0.0, prices.cpu_per_milli_all - cpu_per_milli) *
                          prices.cpu_bound;
  memo->slot_price.assign(view.node_slot_count(), 0.0);
  for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
    const NodeRecord& node = view.node(NodeId(n));
    if (!node.live || node.gpus.empty()) continue;
    const auto it = prices.price.find(view.gpu(node.gpus.front()).spec.model);
    if (it != prices.price.end()) memo->slot_price[n] = it->second;
  }
}

std::optional<Choice> Pick(const ClusterView& view,
                           const PlacementRequest& request,
                           const TargetWorkload& workload,
                           std::size_t max_scored, HfFragPolicy::Memo& memo) {
  const std::optional<Need> need = node_scan::MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  const std::size_t slots = view.node_slot_count();
  memo.Reserve(slots);
  const bool slice = need->kind == RequestKind::kSlice;
  // One of the two is the shape's results, by the request's kind.
  std::vector<SliceScores>* slice_scores = nullptr;
  std::vector<CachedMemo>* node_scores = nullptr;
  if (slice) {
    slice_scores = &memo.slice_scores.For(node_scan::ShapeOf(*need), slots);
  } else {
    node_scores = &memo.ScoresFor(node_scan::ShapeOf(*need), slots);
  }

  std::vector<GpuFacts>& gpus = memo.gpus;
  NodeFacts facts;
  bool found = false;
  Eval best;
  std::uint64_t best_rank = 0;
  std::size_t best_slot = 0;
  // Every node, or up to `max_scored` feasible ones from where the last
  // bounded scan stopped.
  const std::size_t start =
      max_scored == 0 || slots == 0 ? 0 : memo.scan_start % slots;
  std::size_t scored = 0;
  std::size_t last = start;
  // The slot `ahead` slots after `slot` in scan order (slots when none).
  const auto after = [slots](std::size_t slot, std::size_t ahead) {
    const std::size_t s = slot + ahead;
    return s < slots ? s : s - slots < slots ? s - slots : slots;
  };
  for (std::size_t i = 0; i < slots; ++i) {
    if (max_scored != 0 && scored >= max_scored) break;
    const std::size_t slot = start + i < slots ? start + i : start + i - slots;
    last = slot;
    // Ask for what the scan reads next (node_scan.h): the record kFar slots
    // ahead and, for a slice, the memos and the copy of its GPU ids and
    // briefs too, and the memo's state kNear slots ahead. (A whole-GPU scan
    // passes over many more nodes on their summary alone, which would waste the
    // rest.)
    constexpr std::size_t kFar = 16;
    constexpr std::size_t kNear = 8;
    if (const std::size_t far = after(slot, kFar); far < slots) {
      node_scan::PrefetchNodeRecord(view.node(NodeId(far)));
      if (slice) {
        node_scan::PrefetchNodeMemo(memo.nodes[far]);
        node_scan::PrefetchNodeGpuCopy(memo.copies[far]);
        __builtin_prefetch(&(*slice_scores)[far]);
      }
    }
    if (const std::size_t near = after(slot, kNear); slice && near < slots) {
      node_scan::PrefetchNodeMemoState(memo.nodes[near]);
      node_scan::PrefetchMigRecords(view, view.node(NodeId(near)),
                                    memo.copies[near]);
    }
    if (!node_scan::Gather(view, slot, *need, gpus, facts,
                           /*with_free=*/false, &memo.copies[slot])) {
      continue;
    }
    ++scored;
    const NodeRecord& node = *facts.node;
    NodeMemo& node_memo = memo.nodes[slot];
    const Terms terms{memo.cpu_per_milli, memo.slot_price[slot]};
    if (!node_scan::UseNodeMemo(node_memo, facts, *need, gpus)) {
      node_scan::GatherFree(*need, gpus, facts);
      if (node_scan::SyncNodeMemo(facts, gpus, /*force=*/false,
                                  memo.next_version, node_memo)) {
        node_memo.frag = Frag(node_memo.state, workload, terms);
      }
    }
    const Eval eval =
        slice ? EvaluateSliceCached(*need, gpus, workload, terms, node_memo,
                                    (*slice_scores)[slot], memo.estimator)
              : EvaluateNodeCached(*need, gpus, workload, terms, node_memo,
                                   (*node_scores)[slot]);
    if (!found || Better(need->kind, eval, node.tie_rank, slot, best, best_rank,
                         best_slot)) {
      found = true;
      best = eval;
      best_rank = node.tie_rank;
      best_slot = slot;
    }
  }
  if (max_scored != 0) memo.scan_start = last + 1;
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
  return Frag(node, workload, Terms{cpu_per_milli, 0});
}

WorkloadDemand WorkloadDemand::FromTasks(const std::vector<TaskClass>& tasks) {
  std::vector<std::pair<TaskClass, double>> weighted;
  weighted.reserve(tasks.size());
  for (const TaskClass& t : tasks) weighted.emplace_back(t, 1.0);
  return FromWeighted(weighted);
}

WorkloadDemand WorkloadDemand::FromWeighted(
    const std::vector<std::pair<TaskClass, double>>& classes) {
  WorkloadDemand d;
  for (const auto& [t, weight] : classes) {
    if (weight <= 0) continue;
    const double milli = static_cast<double>(t.gpu_milli) * t.num_gpu * weight;
    d.gpu_milli += milli;
    d.cpu_milli += static_cast<double>(t.cpu_milli) * weight;
    if (milli > 0 && !t.gpu_models.empty()) {
      std::vector<std::string> models = t.gpu_models;
      std::sort(models.begin(), models.end());
      models.erase(std::unique(models.begin(), models.end()), models.end());
      d.constrained_milli[models] += milli;
    }
  }
  return d;
}

ClusterPrices PricesFor(const ClusterView& view, const WorkloadDemand& demand) {
  ClusterPrices out;
  std::map<std::string, double> capacity;  // GPU milli per model
  double gpu_capacity = 0, cpu_capacity = 0;
  for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
    const NodeRecord& node = view.node(NodeId(n));
    if (!node.live) continue;
    cpu_capacity += static_cast<double>(node.spec.cpu_milli);
    for (const GpuId g : node.gpus) {
      const ledger::GpuRecord& gpu = view.gpu(g);
      if (!gpu.live) continue;
      capacity[gpu.spec.model] += kMilliPerGpu;
      gpu_capacity += kMilliPerGpu;
    }
  }
  if (gpu_capacity <= 0 || demand.gpu_milli <= 0) return out;
  const double load = demand.gpu_milli / gpu_capacity;
  std::map<std::string, double> wanted;
  for (const auto& [models, milli] : demand.constrained_milli) {
    double cap = 0;
    for (const std::string& m : models) {
      const auto it = capacity.find(m);
      if (it != capacity.end()) cap += it->second;
    }
    if (cap <= 0) continue;  // no such model here
    for (const std::string& m : models) {
      const auto it = capacity.find(m);
      if (it != capacity.end()) wanted[m] += milli * it->second / cap;
    }
  }
  for (const auto& [model, milli] : wanted) {
    out.price[model] = milli / capacity[model] / load;
  }
  // What the workload asks per GPU milli, but no more than the cluster has.
  out.cpu_per_milli_all = std::min(demand.cpu_milli / demand.gpu_milli,
                                   cpu_capacity / gpu_capacity);
  if (cpu_capacity > 0 && demand.cpu_milli / cpu_capacity >= load) {
    out.cpu_bound = 1;
  }
  return out;
}

HfFragPolicy::HfFragPolicy(TargetWorkload workload, WorkloadDemand demand,
                           std::size_t max_scored_nodes)
    : workload_(std::move(workload)),
      demand_(std::move(demand)),
      cpu_per_milli_(CpuPerGpuMilli(workload_)),
      max_scored_nodes_(max_scored_nodes),
      memo_(std::make_unique<Memo>()) {}

HfFragPolicy::~HfFragPolicy() = default;

std::optional<std::vector<GpuId>> HfFragPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind == RequestKind::kNodeOnly) return std::nullopt;
  MutexLock lock(mu_);
  EnsurePrices(view, demand_, cpu_per_milli_, memo_);
  std::optional<Choice> choice =
      Pick(view, request, workload_, max_scored_nodes_, *memo_);
  if (!choice.has_value()) return std::nullopt;
  return std::move(choice->gpus);
}

std::optional<NodeId> HfFragPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  if (request.kind != RequestKind::kNodeOnly) return std::nullopt;
  MutexLock lock(mu_);
  EnsurePrices(view, demand_, cpu_per_milli_, memo_);
  std::optional<Choice> choice =
      Pick(view, request, workload_, max_scored_nodes_, *memo_);
  if (!choice.has_value()) return std::nullopt;
  return choice->node;
}

}  // namespace hf::scheduler
