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
#include <unordered_map>
#include <utility>

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::GpuRecord;
using ledger::NodeRecord;
using ledger::PlacementRequest;
using ledger::RequestKind;
using ledger::SharingKey;

namespace {

// The simulator's GPU size: a slice's per-GPU milli is its share of it.
constexpr MemoryMib kSimGpuMemoryMib = 64000;

// What a request needs, derived once per call.
struct Need {
  const PlacementRequest* request = nullptr;
  RequestKind kind = RequestKind::kSlice;
  int gpu_count = 0;           // GPUs taken: 1 for a slice, 0 node-only
  MemoryMib memory = 0;        // slice
  ComputePercent compute = 0;  // slice, as accounted
  SharingKey tenant_key;       // slice
};

// nullopt when the request fits no GPU by its shape alone (the ledger's 90%
// rule for slices, a whole-GPU count below 1).
std::optional<Need> MakeNeed(const ClusterView& view,
                             const PlacementRequest& request) {
  Need need;
  need.request = &request;
  need.kind = request.kind;
  switch (request.kind) {
    case RequestKind::kSlice:
      need.memory = request.memory_mib.value_or(0);
      if (need.memory > MaxSliceMemoryMib(view.largest_gpu_memory_mib())) {
        return std::nullopt;
      }
      need.compute = view.AccountedCompute(request);
      need.gpu_count = 1;
      need.tenant_key = view.SharingKeyOf(request.tenant);
      break;
    case RequestKind::kWholeGpus:
      if (request.gpu_count < 1) return std::nullopt;
      need.gpu_count = request.gpu_count;
      break;
    case RequestKind::kNodeOnly:
      break;
  }
  return need;
}

// One live GPU of the node at hand.
struct GpuFacts {
  const GpuRecord* record = nullptr;
  int free_milli = 0;
  int after_milli = 0;  // a slice candidate's free milli once it is placed
  bool candidate = false;
};

int AfterSliceMilli(const GpuRecord& gpu, const Need& need) {
  if (!gpu.healthy() || gpu.whole_owned || gpu.spec.memory_mib <= 0) return 0;
  const std::int64_t by_memory = (gpu.free_memory_mib() - need.memory) *
                                 kMilliPerGpu / gpu.spec.memory_mib;
  const std::int64_t by_compute =
      std::int64_t{gpu.free_compute_percent() - need.compute} *
      (kMilliPerGpu / kFullComputePercent);
  return static_cast<int>(std::clamp<std::int64_t>(
      std::min(by_memory, by_compute), 0, kMilliPerGpu));
}

// Fills `gpus` (node.gpus order, live GPUs) for the node in `slot`; false
// when the node cannot take the request by the ledger's rules.
bool Gather(const ClusterView& view, std::size_t slot, const Need& need,
            std::vector<GpuFacts>& gpus) {
  const NodeRecord& node = view.node(NodeId(slot));
  if (!node.live) return false;
  const PlacementRequest& request = *need.request;
  if (view.CheckNodeResources(node, request)) return false;
  if (node.gpus.size() < static_cast<std::size_t>(need.gpu_count)) {
    return false;
  }
  if (need.kind == RequestKind::kWholeGpus) {
    int empty = 0;  // only empty GPUs can be handed out whole
    for (const GpuId id : node.gpus) {
      const GpuRecord& gpu = view.gpu(id);
      empty += gpu.live && gpu.empty();
    }
    if (empty < need.gpu_count) return false;
  }
  gpus.clear();
  int candidates = 0;
  for (const GpuId id : node.gpus) {
    const GpuRecord& gpu = view.gpu(id);
    if (!gpu.live) continue;
    GpuFacts f;
    f.record = &gpu;
    switch (need.kind) {
      case RequestKind::kSlice:
        // Cheap necessary conditions first; the ledger's check decides.
        f.candidate = !gpu.whole_owned &&
                      gpu.free_memory_mib() >= need.memory &&
                      gpu.free_compute_percent() >= need.compute &&
                      !view.CheckSlice(gpu, request, need.tenant_key);
        break;
      case RequestKind::kWholeGpus:
        f.candidate = gpu.empty() && !view.CheckWholeGpu(gpu, request);
        break;
      case RequestKind::kNodeOnly:
        break;
    }
    candidates += f.candidate;
    gpus.push_back(f);
  }
  if (candidates < need.gpu_count) return false;
  for (GpuFacts& f : gpus) {
    f.free_milli = GpuFreeMilli(*f.record);
    if (f.candidate && need.kind == RequestKind::kSlice) {
      f.after_milli = AfterSliceMilli(*f.record, need);
    }
  }
  return true;
}

// What the node's fragmentation and the results depend on, per GPU.
struct GpuSnap {
  GpuId id;
  MemoryMib free_memory = 0;
  ComputePercent free_compute = 0;
  int free_milli = 0;
  friend bool operator==(const GpuSnap&, const GpuSnap&) = default;
};

GpuSnap SnapOf(const GpuFacts& g) {
  return GpuSnap{g.record->id, g.record->free_memory_mib(),
                 g.record->free_compute_percent(), g.free_milli};
}

struct NodeMemo {
  std::uint64_t version = 0;  // 0: never seen; unique across nodes
  CpuMilli cpu_free = 0;
  std::vector<GpuSnap> gpus;
  NodeGpuState state;  // as NodeFragMilli reads it
  double frag = 0;
  std::int64_t idle = 0;
};

// A feasible node's evaluation: the higher `score` wins; for node-only
// tasks, ties go to the smaller `idle_after`, then `cpu_after`.
struct Eval {
  std::int64_t score = 0;
  std::int64_t idle_after = 0;
  CpuMilli cpu_after = 0;
  int pos = -1;  // the slice's GPU (position in the node's live GPUs)
};

struct ScoreMemo {
  std::uint64_t version = 0;
  std::uint64_t candidate_mask = 0;
  Eval eval;
};

struct ShapeKey {
  RequestKind kind = RequestKind::kSlice;
  CpuMilli cpu = 0;
  MemoryMib memory = 0;
  ComputePercent compute = 0;
  int count = 0;
  friend bool operator==(const ShapeKey&, const ShapeKey&) = default;
};

struct ShapeKeyHash {
  std::size_t operator()(const ShapeKey& k) const noexcept {
    std::uint64_t h = static_cast<std::uint64_t>(k.kind);
    for (const std::uint64_t v : {static_cast<std::uint64_t>(k.cpu),
                                  static_cast<std::uint64_t>(k.memory),
                                  static_cast<std::uint64_t>(k.compute),
                                  static_cast<std::uint64_t>(k.count)}) {
      h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
      h ^= h >> 29;
    }
    return static_cast<std::size_t>(h);
  }
};

constexpr std::size_t kMaxShapes = 512;

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

void Refresh(const NodeRecord& node, const std::vector<GpuFacts>& gpus,
             const TargetWorkload& workload, std::uint64_t& next_version,
             double cpu_per_milli, NodeMemo& memo) {
  const CpuMilli cpu_free = node.free_cpu_milli();
  bool same = memo.version != 0 && memo.cpu_free == cpu_free &&
              memo.gpus.size() == gpus.size();
  for (std::size_t i = 0; same && i < gpus.size(); ++i) {
    same = memo.gpus[i] == SnapOf(gpus[i]);
  }
  if (same) return;
  memo.cpu_free = cpu_free;
  memo.gpus.resize(gpus.size());
  memo.state.cpu_free = cpu_free;
  memo.state.gpu_free_milli.resize(gpus.size());
  memo.idle = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    memo.gpus[i] = SnapOf(gpus[i]);
    memo.state.gpu_free_milli[i] = gpus[i].free_milli;
    memo.idle += gpus[i].free_milli;
  }
  if (gpus.empty()) {
    memo.state.model.clear();
  } else if (memo.state.model != gpus.front().record->spec.model) {
    memo.state.model = gpus.front().record->spec.model;
  }
  memo.frag = Frag(memo.state, workload, cpu_per_milli);
  memo.version = ++next_version;
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
        bool seen = false;  // same before / after: same state
        for (std::size_t j = 0; j < i && !seen; ++j) {
          seen = gpus[j].candidate &&
                 gpus[j].free_milli == gpus[i].free_milli &&
                 gpus[j].after_milli == gpus[i].after_milli;
        }
        if (seen) continue;
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
      int taken = 0;
      std::int64_t freed = 0;
      for (std::size_t i = 0; i < gpus.size() && taken < need.gpu_count; ++i) {
        if (!gpus[i].candidate) continue;
        state.gpu_free_milli[i] = 0;
        freed += gpus[i].free_milli;
        ++taken;
      }
      eval.score = Score(memo.frag, Frag(state, workload, cpu_per_milli));
      eval.idle_after = memo.idle - freed;
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        state.gpu_free_milli[i] = gpus[i].free_milli;
      }
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

struct Choice {
  NodeId node;
  std::vector<GpuId> gpus;
};

}  // namespace

struct HfFragPolicy::Memo {
  std::vector<NodeMemo> nodes;  // by node slot
  std::unordered_map<ShapeKey, std::size_t, ShapeKeyHash> shapes;
  std::vector<std::vector<ScoreMemo>> scores;  // by shape, by node slot
  std::uint64_t next_version = 0;
  std::vector<GpuFacts> gpus;  // scratch for the node at hand
};

namespace {

std::optional<Choice> Pick(const ClusterView& view,
                           const PlacementRequest& request,
                           const TargetWorkload& workload, double cpu_per_milli,
                           HfFragPolicy::Memo& memo) {
  const std::optional<Need> need = MakeNeed(view, request);
  if (!need.has_value()) return std::nullopt;
  const std::size_t slots = view.node_slot_count();
  if (memo.nodes.size() < slots) memo.nodes.resize(slots);
  const ShapeKey key{need->kind, request.cpu_milli, need->memory, need->compute,
                     need->gpu_count};
  auto it = memo.shapes.find(key);
  if (it == memo.shapes.end()) {
    if (memo.shapes.size() >= kMaxShapes) {
      memo.shapes.clear();
      memo.scores.clear();
    }
    it = memo.shapes.emplace(key, memo.scores.size()).first;
    memo.scores.emplace_back();
  }
  std::vector<ScoreMemo>& scores = memo.scores[it->second];
  if (scores.size() < slots) scores.resize(slots);

  std::vector<GpuFacts>& gpus = memo.gpus;
  bool found = false;
  Eval best;
  std::uint64_t best_rank = 0;
  std::size_t best_slot = 0;
  for (std::size_t slot = 0; slot < slots; ++slot) {
    if (!Gather(view, slot, *need, gpus)) continue;
    const NodeRecord& node = view.node(NodeId(slot));
    NodeMemo& node_memo = memo.nodes[slot];
    Refresh(node, gpus, workload, memo.next_version, cpu_per_milli, node_memo);
    std::uint64_t mask = 0;
    const bool cacheable = gpus.size() <= 64;
    if (cacheable) {
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        mask |= std::uint64_t{gpus[i].candidate} << i;
      }
    }
    ScoreMemo& cached = scores[slot];
    Eval eval;
    if (cacheable && cached.version == node_memo.version &&
        cached.candidate_mask == mask) {
      eval = cached.eval;
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
  Gather(view, best_slot, *need, gpus);
  Choice choice{NodeId(best_slot), {}};
  if (need->kind == RequestKind::kSlice) {
    choice.gpus.push_back(gpus[static_cast<std::size_t>(best.pos)].record->id);
  } else if (need->kind == RequestKind::kWholeGpus) {
    for (const GpuFacts& g : gpus) {
      if (static_cast<int>(choice.gpus.size()) == need->gpu_count) break;
      if (g.candidate) choice.gpus.push_back(g.record->id);
    }
  }
  return choice;
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
