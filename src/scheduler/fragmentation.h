// GPU fragmentation against a target workload (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23; definitions as in their simulator's
// pkg/utils/frag.go, reimplemented from its description).
//
// The target workload is the set of most popular task classes of a trace,
// each with a weight (its share of the tasks). For one node and one class,
// the *fragment* is the idle GPU capacity the class cannot use there:
// - a GPU class that fits the node (enough CPU, a GPU of an allowed model, and
//   at least num_gpu GPUs each with >= gpu_milli free): the idle milli of the
//   GPUs with less than gpu_milli free;
// - any other case (lacks CPU, lacks GPUs, wrong model, or a CPU-only class,
//   which never uses GPUs): all of the node's idle GPU milli.
// A node's fragmentation is the weighted sum over classes; the cluster's is
// the sum over nodes. Quantities are milli-GPUs (1000 = one GPU).
//
// Thread-safety: pure functions; TargetWorkload is immutable once built.
#pragma once

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/quantity.h"
#include "ledger/cluster_view.h"

namespace hf::scheduler {

// The memory of every GPU in the trace simulator (src/sim/sim_cluster.h):
// the trace asks for shares of any GPU, so the simulator gives all GPUs this
// size and the reference policies read a slice's share (milli) against it.
inline constexpr MemoryMib kSimGpuMemoryMib = MemoryMib{64} * kMilliPerGpu;

// One task class: tasks with exactly these requests.
struct TaskClass {
  CpuMilli cpu_milli = 0;
  int gpu_milli = 0;  // per GPU; 0 for CPU-only tasks
  int num_gpu = 0;
  std::vector<std::string> gpu_models;  // allowed models; empty = any

  friend bool operator==(const TaskClass&, const TaskClass&) = default;
};

struct WeightedClass {
  TaskClass task;
  double weight = 0;  // share of the target workload; weights sum to 1
  std::int64_t count = 0;
};

// The target workload: the most popular classes, by task count, in
// descending order of count, until their cumulative count reaches
// `coverage` (0..1] of all tasks (the class that crosses it is included);
// weights renormalised to sum to 1. Equal counts are ordered by larger CPU,
// then larger gpu_milli, then larger num_gpu, then the model list (larger
// first, lexicographically). Empty model names are ignored.
class TargetWorkload {
 public:
  static TargetWorkload FromTasks(const std::vector<TaskClass>& tasks,
                                  double coverage = 0.95);
  // The same over classes with weights (decayed counts, say) instead of one
  // entry per task; equal classes are summed, and `count` is the weight
  // rounded. Non-positive weights are ignored.
  static TargetWorkload FromWeighted(
      const std::vector<std::pair<TaskClass, double>>& classes,
      double coverage = 0.95);
  const std::vector<WeightedClass>& classes() const { return classes_; }

  // NodeFragMilli's view of the classes, built once with them: per class in
  // the same order, the CPU that the class needs to fit (kNeverFits for a
  // CPU-only class, whose fragment is all idle GPU), its share, GPU count,
  // weight, and its allowed models as bits of `model_names` (0: any model).
  // `models_fit` is false when the classes name more models than the bits
  // hold; NodeFragMilli then compares the names themselves.
  struct Columns {
    static constexpr CpuMilli kNeverFits = INT64_MAX;
    std::vector<CpuMilli> cpu;
    std::vector<int> share;
    std::vector<int> num;
    std::vector<double> weight;
    std::vector<std::uint64_t> models;
    std::vector<std::string> model_names;  // sorted; bit i: model_names[i]
    bool models_fit = true;
    // The bit of `model` (0: no class names it, or it is empty).
    std::uint64_t BitOf(const std::string& model) const;
  };
  const Columns& columns() const { return columns_; }

  // The classes that can fit a GPU (not CPU-only, a share of 1..1000) in
  // groups of one model set and GPU count, each a table of summed weights by
  // CPU and share, so that EstimateNodeFragMilli reads a few sums per group
  // instead of every class. Built once with the classes; `usable` is false
  // where the columns' models do not fit their bits.
  struct ClassGroups {
    // One group's table: weights[row * (share_count + 1) + j] is the summed
    // weight of the group's classes with CPU at most the row's and share at
    // most the j-th smallest share (j = 0: none). Rows are the group's
    // distinct CPUs, ascending; row_of[r] is the row for a node with free
    // CPU of rank r (the number of `cpus` at most it), -1 below the group's
    // least CPU.
    struct Group {
      std::uint64_t models = 0;  // as Columns::models (0: any model)
      int num = 0;
      std::vector<int> row_of;
      std::vector<double> weights;
    };
    bool usable = false;
    std::size_t class_count = 0;  // every class, for the error bound
    double weight_sum = 0;        // every class's weight, summed in order
    std::vector<CpuMilli> cpus;   // the groups' distinct CPUs, ascending
    std::size_t share_count = 0;
    // For a free milli x in 0..1000: how many distinct shares are <= x.
    std::vector<std::uint16_t> share_rank;
    std::vector<Group> groups;
  };
  const ClassGroups& class_groups() const { return groups_; }

 private:
  void BuildColumns();
  void BuildGroups();

  std::vector<WeightedClass> classes_;
  Columns columns_;
  ClassGroups groups_;
};

// What fragmentation needs to know of one node.
struct NodeGpuState {
  CpuMilli cpu_free = 0;
  // GPU model of the node's GPUs (its first GPU's: trace nodes are
  // homogeneous; a node of mixed models is measured as if all were this one).
  std::string model;
  std::vector<int> gpu_free_milli;  // per GPU, 0..1000
};

// The free milli of one GPU in the ledger: the smaller of its free memory
// and free compute shares, rounded down (in the simulator both are the
// same). A lost GPU, or one held whole, has 0.
int GpuFreeMilli(const ledger::GpuRecord& gpu);
// The same after a slice of `take_memory` MiB and `take_compute` percent
// would be placed on it (for scoring a placement before making it).
int GpuFreeMilliAfter(const ledger::GpuRecord& gpu, MemoryMib take_memory,
                      ComputePercent take_compute);

// The formula of both: a GPU of `memory_mib` with `free_memory` MiB and
// `free_compute` percent free, after `take_memory` and `take_compute` are
// taken; 0 when it takes no slice (`usable` false).
int FreeMilliAfter(MemoryMib memory_mib, MemoryMib free_memory,
                   ComputePercent free_compute, bool usable,
                   MemoryMib take_memory, ComputePercent take_compute);

// A node's state as fragmentation sees it.
NodeGpuState NodeStateOf(const ledger::ClusterView& view,
                         const ledger::NodeRecord& node);

// The fragment (milli-GPUs) of `node` for one class.
double ClassFragMilli(const NodeGpuState& node, const TaskClass& task);

// The node's fragmentation: sum over the workload's classes of weight x
// ClassFragMilli.
double NodeFragMilli(const NodeGpuState& node, const TargetWorkload& workload);

// NodeFragMilli by class groups (TargetWorkload::ClassGroups), with a bound
// on how far the estimate may be from NodeFragMilli's own value: the two
// add the same products in different orders, so they may differ in the last
// bits (never more than `error`). A caller that needs NodeFragMilli's exact
// value decides from the estimate only where `error` cannot change its
// decision. nullopt where the groups do not apply: over 16 GPUs, unusable
// groups, or free milli outside 0..1000.
struct FragEstimate {
  double milli = 0;
  double error = 0;  // |milli - NodeFragMilli(node, workload)| <= error
};
std::optional<FragEstimate> EstimateNodeFragMilli(
    const NodeGpuState& node, const TargetWorkload& workload);

// EstimateNodeFragMilli for states of one node that differ from a `base`
// state in one GPU's free milli (a slice placed on one GPU or another):
// what is the same for all of them (the base's free milli sorted, the
// groups that apply at its model, CPU and GPU count) is found once, in
// Reset, instead of once per state. With(i, v) is exactly
// EstimateNodeFragMilli of the base with gpu_free_milli[i] = v: the same
// sums in the same order. Reusable: Reset keeps its buffer.
class NodeFragEstimator {
 public:
  // `workload` must outlive the calls to With; `base` is copied.
  void Reset(const NodeGpuState& base, const TargetWorkload& workload);
  // REQUIRES: i < base's GPU count.
  std::optional<FragEstimate> With(std::size_t i, int free_milli) const;

 private:
  struct Row {
    const double* weights;  // a group's summed weights at the node's CPU
    std::size_t num;        // the group's GPU count
  };
  static constexpr std::size_t kMaxGpus = 16;  // EstimateNodeFragMilli's
  const TargetWorkload* workload_ = nullptr;
  bool usable_ = false;  // false: With gives nullopt, as the estimate would
  int invalid_ = 0;      // base's free milli outside 0..1000
  std::size_t k_ = 0;
  std::array<int, kMaxGpus> free_{};
  std::array<int, kMaxGpus> sorted_{};  // free_, ascending
  std::vector<Row> rows_;
};

// Sum of the node's idle GPU milli.
std::int64_t IdleMilli(const NodeGpuState& node);

}  // namespace hf::scheduler
