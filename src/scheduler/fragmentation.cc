#include "scheduler/fragmentation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace hf::scheduler {
namespace {

// Nodes with up to this many GPUs take NodeFragMilli's sorted fast path.
constexpr std::size_t kMaxSortedGpus = 16;

// The node's free milli, sorted on the stack, with prefix sums: below[i] is
// the sum of the i smallest, below[k] the node's idle milli. Only [0, k) of
// each is written (no zeroing: it shows).
struct SortedFree {
  std::size_t k = 0;
  std::array<int, kMaxSortedGpus> sorted;
  std::array<std::int64_t, kMaxSortedGpus + 1> below;
};

// REQUIRES: free.size() <= kMaxSortedGpus.
void SortFree(const std::vector<int>& free, SortedFree& out) {
  const std::size_t k = free.size();
  out.k = k;
  for (std::size_t i = 0; i < k; ++i) {  // insertion sort: k is small
    const int v = free[i];
    std::size_t j = i;
    for (; j > 0 && out.sorted[j - 1] > v; --j) {
      out.sorted[j] = out.sorted[j - 1];
    }
    out.sorted[j] = v;
  }
  out.below[0] = 0;
  for (std::size_t i = 0; i < k; ++i) {
    out.below[i + 1] = out.below[i] + out.sorted[i];
  }
}

// Grouping order: any total order on the class key works; this one is the
// reverse of the documented tie order, so equal keys end up adjacent.
bool KeyLess(const TaskClass& a, const TaskClass& b) {
  if (a.cpu_milli != b.cpu_milli) return a.cpu_milli < b.cpu_milli;
  if (a.gpu_milli != b.gpu_milli) return a.gpu_milli < b.gpu_milli;
  if (a.num_gpu != b.num_gpu) return a.num_gpu < b.num_gpu;
  return a.gpu_models < b.gpu_models;
}

// A class that uses no GPU. The artifact keys this on gpu_milli == 0; a class
// with GPUs of 0 count uses none either.
bool IsCpuOnly(const TaskClass& task) {
  return task.gpu_milli <= 0 || task.num_gpu <= 0;
}

// Whether a node of `model` may host the class: an empty list (or one with
// only empty names) allows any model; otherwise one of the non-empty names
// must equal the node's model, so a node with no model hosts no typed class.
bool ModelAllowed(const std::string& model, const TaskClass& task) {
  bool any_named = false;
  for (const std::string& allowed : task.gpu_models) {
    if (allowed.empty()) continue;
    if (allowed == model) return true;
    any_named = true;
  }
  return !any_named;
}

// ClassFragMilli with the node's idle milli already summed.
std::int64_t ClassFrag(const NodeGpuState& node, const TaskClass& task,
                       std::int64_t idle) {
  // CPU-only (XL / XR), lacking CPU (Q4 / Q1 / XR) and NoAccess: every idle
  // GPU milli is fragment, whatever the GPUs hold.
  if (IsCpuOnly(task) || node.cpu_free < task.cpu_milli ||
      !ModelAllowed(node.model, task)) {
    return idle;
  }
  // CPU fits: Q3 if at least num_gpu GPUs have gpu_milli free, else Q2.
  // Branch-free: free values are arbitrary, so branches would mispredict.
  const int share = task.gpu_milli;
  int fitting = 0;
  int too_small = 0;  // at most GPUs x 1000
  for (const int free : node.gpu_free_milli) {
    const bool fits = free >= share;
    fitting += static_cast<int>(fits);
    too_small += fits ? 0 : free;
  }
  return fitting >= task.num_gpu ? too_small : idle;
}

}  // namespace

TargetWorkload TargetWorkload::FromTasks(const std::vector<TaskClass>& tasks,
                                         double coverage) {
  TargetWorkload workload;
  if (tasks.empty()) return workload;

  // Group identical classes: sort pointers by key, then count runs.
  std::vector<const TaskClass*> sorted;
  sorted.reserve(tasks.size());
  for (const TaskClass& t : tasks) sorted.push_back(&t);
  std::sort(
      sorted.begin(), sorted.end(),
      [](const TaskClass* a, const TaskClass* b) { return KeyLess(*a, *b); });
  std::vector<WeightedClass> groups;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i + 1;
    while (j < sorted.size() && *sorted[j] == *sorted[i]) ++j;
    groups.push_back(
        WeightedClass{*sorted[i], 0.0, static_cast<std::int64_t>(j - i)});
    i = j;
  }

  // Most popular first; equal counts by the larger key (keys are distinct,
  // so the order is total).
  std::sort(groups.begin(), groups.end(),
            [](const WeightedClass& a, const WeightedClass& b) {
              if (a.count != b.count) return a.count > b.count;
              return KeyLess(b.task, a.task);
            });

  // Take classes while the cumulative count is below coverage x total; the
  // class that reaches or crosses it is taken too. The relative slack keeps
  // an exact boundary (e.g. 0.95 x 100 = 95) from moving with rounding.
  const auto total = static_cast<double>(tasks.size());
  const double expected = coverage * total * (1.0 - 1e-12);
  std::int64_t cumulative = 0;
  std::size_t taken = 0;
  while (taken < groups.size() && static_cast<double>(cumulative) < expected) {
    cumulative += groups[taken].count;
    ++taken;
  }
  groups.resize(taken);
  for (WeightedClass& c : groups) {
    c.weight = static_cast<double>(c.count) / static_cast<double>(cumulative);
  }
  workload.classes_ = std::move(groups);
  workload.BuildColumns();
  workload.BuildGroups();
  return workload;
}

TargetWorkload TargetWorkload::FromWeighted(
    const std::vector<std::pair<TaskClass, double>>& classes, double coverage) {
  TargetWorkload workload;
  std::vector<std::pair<TaskClass, double>> sorted;
  sorted.reserve(classes.size());
  for (const auto& c : classes) {
    if (c.second > 0) sorted.push_back(c);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return KeyLess(a.first, b.first);
  });
  struct Group {
    TaskClass task;
    double weight = 0;
  };
  std::vector<Group> groups;
  for (const auto& [task, weight] : sorted) {
    if (!groups.empty() && groups.back().task == task) {
      groups.back().weight += weight;
    } else {
      groups.push_back(Group{task, weight});
    }
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.weight != b.weight) return a.weight > b.weight;
    return KeyLess(b.task, a.task);
  });
  double total = 0;
  for (const Group& g : groups) total += g.weight;
  const double expected = coverage * total * (1.0 - 1e-12);
  double cumulative = 0;
  std::size_t taken = 0;
  while (taken < groups.size() && cumulative < expected) {
    cumulative += groups[taken].weight;
    ++taken;
  }
  for (std::size_t i = 0; i < taken; ++i) {
    workload.classes_.push_back(WeightedClass{
        groups[i].task, groups[i].weight / cumulative,
        static_cast<std::int64_t>(std::llround(groups[i].weight))});
  }
  workload.BuildColumns();
  workload.BuildGroups();
  return workload;
}

void TargetWorkload::BuildColumns() {
  Columns c;
  for (const WeightedClass& w : classes_) {
    for (const std::string& m : w.task.gpu_models) {
      if (!m.empty()) c.model_names.push_back(m);
    }
  }
  std::sort(c.model_names.begin(), c.model_names.end());
  c.model_names.erase(std::unique(c.model_names.begin(), c.model_names.end()),
                      c.model_names.end());
  c.models_fit = c.model_names.size() <= 64;
  for (const WeightedClass& w : classes_) {
    const TaskClass& t = w.task;
    c.cpu.push_back(IsCpuOnly(t) ? Columns::kNeverFits : t.cpu_milli);
    c.share.push_back(t.gpu_milli);
    c.num.push_back(t.num_gpu);
    c.weight.push_back(w.weight);
    std::uint64_t bits = 0;
    if (c.models_fit) {
      for (const std::string& m : t.gpu_models) bits |= c.BitOf(m);
    }
    c.models.push_back(bits);
  }
  columns_ = std::move(c);
}

void TargetWorkload::BuildGroups() {
  const Columns& c = columns_;
  ClassGroups g;
  g.class_count = c.cpu.size();
  for (const double w : c.weight) g.weight_sum += w;
  g.usable = c.models_fit;
  if (!g.usable) {
    groups_ = std::move(g);
    return;
  }
  // The classes that can fit some node: the rest always count all idle GPU.
  std::vector<std::size_t> fitting;
  for (std::size_t i = 0; i < g.class_count; ++i) {
    if (c.cpu[i] != Columns::kNeverFits && c.num[i] >= 1 && c.share[i] >= 1 &&
        c.share[i] <= kMilliPerGpu) {
      fitting.push_back(i);
    }
  }
  std::vector<int> shares;
  for (const std::size_t i : fitting) {
    g.cpus.push_back(c.cpu[i]);
    shares.push_back(c.share[i]);
  }
  std::sort(g.cpus.begin(), g.cpus.end());
  g.cpus.erase(std::unique(g.cpus.begin(), g.cpus.end()), g.cpus.end());
  std::sort(shares.begin(), shares.end());
  shares.erase(std::unique(shares.begin(), shares.end()), shares.end());
  g.share_count = shares.size();
  g.share_rank.resize(kMilliPerGpu + 1);
  for (int x = 0; x <= kMilliPerGpu; ++x) {
    g.share_rank[static_cast<std::size_t>(x)] = static_cast<std::uint16_t>(
        std::upper_bound(shares.begin(), shares.end(), x) - shares.begin());
  }
  const auto rank_of = [](const auto& sorted, const auto& value) {
    return static_cast<std::size_t>(
        std::upper_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  };

  // Group by (models, num); within a group, (CPU, share) pairs are distinct,
  // since classes are.
  std::sort(fitting.begin(), fitting.end(), [&c](std::size_t a, std::size_t b) {
    return std::tie(c.models[a], c.num[a], c.cpu[a]) <
           std::tie(c.models[b], c.num[b], c.cpu[b]);
  });
  const std::size_t width = g.share_count + 1;
  for (std::size_t first = 0; first < fitting.size();) {
    const std::size_t head = fitting[first];
    std::size_t end = first;
    while (end < fitting.size() && c.models[fitting[end]] == c.models[head] &&
           c.num[fitting[end]] == c.num[head]) {
      ++end;
    }
    ClassGroups::Group group;
    group.models = c.models[head];
    group.num = c.num[head];
    // Rows: the group's distinct CPUs (its classes are sorted by CPU).
    std::vector<CpuMilli> rows;
    for (std::size_t i = first; i < end; ++i) {
      if (rows.empty() || rows.back() != c.cpu[fitting[i]]) {
        rows.push_back(c.cpu[fitting[i]]);
      }
    }
    group.weights.assign(rows.size() * width, 0.0);
    for (std::size_t i = first; i < end; ++i) {
      const std::size_t cls = fitting[i];
      const std::size_t row = rank_of(rows, c.cpu[cls]) - 1;
      const std::size_t col = rank_of(shares, c.share[cls]);
      group.weights[row * width + col] += c.weight[cls];
    }
    // Cumulative over shares in each row, then over rows.
    for (std::size_t r = 0; r < rows.size(); ++r) {
      double* w = group.weights.data() + r * width;
      for (std::size_t j = 1; j < width; ++j) w[j] += w[j - 1];
      if (r > 0) {
        const double* above = w - width;  // the previous row
        for (std::size_t j = 0; j < width; ++j) w[j] += above[j];
      }
    }
    group.row_of.resize(g.cpus.size() + 1);
    for (std::size_t r = 0; r <= g.cpus.size(); ++r) {
      // Rank r: the node's CPU is at least cpus[r - 1] and below cpus[r].
      group.row_of[r] =
          r == 0 ? -1 : static_cast<int>(rank_of(rows, g.cpus[r - 1])) - 1;
    }
    g.groups.push_back(std::move(group));
    first = end;
  }
  groups_ = std::move(g);
}

std::uint64_t TargetWorkload::Columns::BitOf(const std::string& model) const {
  if (model.empty()) return 0;
  const auto it =
      std::lower_bound(model_names.begin(), model_names.end(), model);
  if (it == model_names.end() || *it != model) return 0;
  const auto i = static_cast<std::size_t>(it - model_names.begin());
  return i < 64 ? std::uint64_t{1} << i : 0;
}

int GpuFreeMilli(const ledger::GpuRecord& gpu) {
  return GpuFreeMilliAfter(gpu, 0, 0);
}

int GpuFreeMilliAfter(const ledger::GpuRecord& gpu, MemoryMib take_memory,
                      ComputePercent take_compute) {
  return FreeMilliAfter(
      gpu.spec.memory_mib, gpu.free_memory_mib(), gpu.free_compute_percent(),
      gpu.healthy() && !gpu.whole_owned, take_memory, take_compute);
}

int FreeMilliAfter(MemoryMib memory_mib, MemoryMib free_memory,
                   ComputePercent free_compute, bool usable,
                   MemoryMib take_memory, ComputePercent take_compute) {
  if (!usable || memory_mib <= 0) return 0;
  const std::int64_t by_memory =
      (free_memory - take_memory) * kMilliPerGpu / memory_mib;
  const std::int64_t by_compute =
      static_cast<std::int64_t>(free_compute - take_compute) *
      (kMilliPerGpu / kFullComputePercent);
  const std::int64_t free = std::min(by_memory, by_compute);
  return static_cast<int>(std::clamp<std::int64_t>(free, 0, kMilliPerGpu));
}

NodeGpuState NodeStateOf(const ledger::ClusterView& view,
                         const ledger::NodeRecord& node) {
  NodeGpuState state;
  state.cpu_free = node.free_cpu_milli();
  state.gpu_free_milli.reserve(node.gpus.size());
  for (const GpuId id : node.gpus) {
    const ledger::GpuRecord& gpu = view.gpu(id);
    if (!gpu.live) continue;  // node.gpus holds live GPUs; be safe anyway
    if (state.gpu_free_milli.empty()) state.model = gpu.spec.model;
    state.gpu_free_milli.push_back(GpuFreeMilli(gpu));
  }
  return state;
}

double ClassFragMilli(const NodeGpuState& node, const TaskClass& task) {
  return static_cast<double>(ClassFrag(node, task, IdleMilli(node)));
}

double NodeFragMilli(const NodeGpuState& node, const TargetWorkload& workload) {
  const std::vector<int>& free = node.gpu_free_milli;
  const std::size_t k = free.size();
  if (k > kMaxSortedGpus) {
    const std::int64_t idle = IdleMilli(node);
    if (idle == 0) return 0.0;
    double frag = 0.0;
    for (const WeightedClass& c : workload.classes()) {
      frag += c.weight * static_cast<double>(ClassFrag(node, c.task, idle));
    }
    return frag;
  }
  // The hot path (FGD evaluates this per candidate GPU of every node): sort
  // the node's free milli once, with prefix sums. For a class with share s,
  // the GPUs below s are a prefix of length p (lower_bound), their sum is
  // below[p], and k - p GPUs fit. Same numbers as ClassFrag, summed in the
  // same order.
  SortedFree sf;
  SortFree(free, sf);
  const std::array<std::int64_t, kMaxSortedGpus + 1>& below = sf.below;
  const std::int64_t idle = below[k];
  if (idle == 0) return 0.0;  // every class's fragment is part of idle

  const auto begin = sf.sorted.begin();
  const auto end = begin + static_cast<std::ptrdiff_t>(k);
  double frag = 0.0;
  const TargetWorkload::Columns& col = workload.columns();
  if (col.models_fit) {
    // Columns, model bits instead of names: the same numbers in the same
    // order, without a string compare per class.
    const std::uint64_t node_bit = col.BitOf(node.model);
    const std::size_t n = col.cpu.size();
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t amount = idle;
      if (node.cpu_free >= col.cpu[i] &&
          (col.models[i] == 0 || (col.models[i] & node_bit) != 0)) {
        const auto p = static_cast<std::size_t>(
            std::lower_bound(begin, end, col.share[i]) - begin);
        if (static_cast<std::int64_t>(k - p) >= col.num[i]) amount = below[p];
      }
      frag += col.weight[i] * static_cast<double>(amount);
    }
    return frag;
  }
  for (const WeightedClass& c : workload.classes()) {
    const TaskClass& task = c.task;
    std::int64_t amount = idle;
    if (!IsCpuOnly(task) && node.cpu_free >= task.cpu_milli &&
        (task.gpu_models.empty() || ModelAllowed(node.model, task))) {
      const auto p = static_cast<std::size_t>(
          std::lower_bound(begin, end, task.gpu_milli) - begin);
      if (static_cast<std::int64_t>(k - p) >= task.num_gpu) amount = below[p];
    }
    frag += c.weight * static_cast<double>(amount);
  }
  return frag;
}

namespace {

bool InMilliRange(int v) { return v >= 0 && v <= kMilliPerGpu; }

// The rank of a node's free CPU among the groups' CPUs.
std::size_t CpuRank(const TargetWorkload::ClassGroups& g, CpuMilli cpu_free) {
  return static_cast<std::size_t>(
      std::upper_bound(g.cpus.begin(), g.cpus.end(), cpu_free) -
      g.cpus.begin());
}

// Calls `f(weights, num)` for each group that applies to a node of model
// bit `node_bit`, free CPU `cpu_free` and `k` GPUs, in the groups' order:
// `weights` is the group's row of summed weights at that CPU.
template <typename F>
void ForEachRow(const TargetWorkload::ClassGroups& g, std::uint64_t node_bit,
                CpuMilli cpu_free, std::size_t k, const F& f) {
  const std::size_t cpu_rank = CpuRank(g, cpu_free);
  const std::size_t width = g.share_count + 1;
  for (const TargetWorkload::ClassGroups::Group& group : g.groups) {
    if (group.models != 0 && (group.models & node_bit) == 0) continue;
    if (static_cast<std::size_t>(group.num) > k) continue;
    const int row = group.row_of[cpu_rank];
    if (row < 0) continue;
    f(group.weights.data() + static_cast<std::size_t>(row) * width,
      static_cast<std::size_t>(group.num));
  }
}

// The estimate from the node's sorted free milli (idle above 0), summed
// over the rows that `for_each_row` gives (ForEachRow's).
//
// A class of share s fits where the node has CPU and model for it and its
// num-th largest free milli (sorted[k - num]) is at least s; it saves
// idle - below[p] of the node's idle milli, p being the GPUs below s. Per
// group and node CPU, with F(x) the weight of the classes of share <= x,
// the saving summed by parts is
//   (idle - below[P]) F(sorted[P]) + sum_{p < P} sorted[p] F(sorted[p])
// for P = k - num: P + 1 table reads instead of one step per class.
template <typename Rows>
FragEstimate EstimateSorted(const TargetWorkload::ClassGroups& g,
                            const SortedFree& sf, const Rows& for_each_row) {
  const std::size_t k = sf.k;
  const std::int64_t idle = sf.below[k];
  std::array<std::size_t, kMaxSortedGpus> rank;
  for (std::size_t p = 0; p < k; ++p) {
    rank[p] = g.share_rank[static_cast<std::size_t>(sf.sorted[p])];
  }
  double saved = 0;
  std::size_t terms = 0;
  for_each_row([&](const double* w, std::size_t num) {
    const std::size_t last = k - num;
    for (std::size_t p = 0; p < last; ++p) {
      saved += static_cast<double>(sf.sorted[p]) * w[rank[p]];
    }
    saved += static_cast<double>(idle - sf.below[last]) * w[rank[last]];
    terms += last + 1;
  });
  FragEstimate out;
  out.milli = static_cast<double>(idle) * g.weight_sum - saved;
  // Both sums are of non-negative products of at most idle x weight; each
  // table entry adds at most 2n weights, `saved` `terms` products, and
  // NodeFragMilli n products in order, so each result is within
  // (2n + terms + few) x eps x idle x weights of the exact sum (Higham's
  // bound for recursive summation). Twice that, to spare.
  const double n = static_cast<double>(g.class_count);
  const double eps = std::numeric_limits<double>::epsilon();
  out.error = 2 * (4 * n + static_cast<double>(terms) + 16) * eps *
              static_cast<double>(idle) * g.weight_sum;
  return out;
}

}  // namespace

std::optional<FragEstimate> EstimateNodeFragMilli(
    const NodeGpuState& node, const TargetWorkload& workload) {
  const TargetWorkload::ClassGroups& g = workload.class_groups();
  const std::vector<int>& free = node.gpu_free_milli;
  if (!g.usable || free.size() > kMaxSortedGpus) return std::nullopt;
  for (const int v : free) {
    if (!InMilliRange(v)) return std::nullopt;
  }
  SortedFree sf;
  SortFree(free, sf);
  if (sf.below[sf.k] == 0) return FragEstimate{0.0, 0.0};  // exactly 0
  const std::uint64_t node_bit = workload.columns().BitOf(node.model);
  return EstimateSorted(g, sf, [&](const auto& f) {
    ForEachRow(g, node_bit, node.cpu_free, sf.k, f);
  });
}

void NodeFragEstimator::Reset(const NodeGpuState& base,
                              const TargetWorkload& workload) {
  static_assert(kMaxGpus == kMaxSortedGpus);
  workload_ = &workload;
  usable_ = false;
  rows_.clear();
  const TargetWorkload::ClassGroups& g = workload.class_groups();
  const std::vector<int>& free = base.gpu_free_milli;
  if (!g.usable || free.size() > kMaxSortedGpus) return;
  invalid_ = 0;
  for (const int v : free) invalid_ += InMilliRange(v) ? 0 : 1;
  if (invalid_ > 1) return;  // no one change brings every GPU in range
  k_ = free.size();
  std::copy(free.begin(), free.end(), free_.begin());
  std::copy(free.begin(), free.end(), sorted_.begin());
  std::sort(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(k_));
  ForEachRow(g, workload.columns().BitOf(base.model), base.cpu_free, k_,
             [this](const double* weights, std::size_t num) {
               rows_.push_back(Row{weights, num});
             });
  usable_ = true;
}

std::optional<FragEstimate> NodeFragEstimator::With(std::size_t i,
                                                    int free_milli) const {
  if (!usable_) return std::nullopt;
  const int old = free_[i];
  if (invalid_ - (InMilliRange(old) ? 0 : 1) +
          (InMilliRange(free_milli) ? 0 : 1) >
      0) {
    return std::nullopt;
  }
  // The base's sorted free milli with one `old` taken out and `free_milli`
  // put in: the same values, so the same array, as sorting the changed
  // state afresh.
  SortedFree sf;
  sf.k = k_;
  std::size_t out = 0;
  bool removed = false;
  bool inserted = false;
  for (std::size_t j = 0; j < k_; ++j) {
    const int v = sorted_[j];
    if (!removed && v == old) {
      removed = true;
      continue;
    }
    if (!inserted && free_milli <= v) {
      sf.sorted[out++] = free_milli;
      inserted = true;
    }
    sf.sorted[out++] = v;
  }
  if (!inserted) sf.sorted[out] = free_milli;
  sf.below[0] = 0;
  for (std::size_t j = 0; j < k_; ++j) {
    sf.below[j + 1] = sf.below[j] + sf.sorted[j];
  }
  if (sf.below[k_] == 0) return FragEstimate{0.0, 0.0};  // exactly 0
  return EstimateSorted(workload_->class_groups(), sf, [this](const auto& f) {
    for (const Row& row : rows_) f(row.weights, row.num);
  });
}

std::int64_t IdleMilli(const NodeGpuState& node) {
  std::int64_t idle = 0;
  for (const int free : node.gpu_free_milli) idle += free;
  return idle;
}

}  // namespace hf::scheduler
