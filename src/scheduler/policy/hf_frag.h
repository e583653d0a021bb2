// HfFragPolicy ("hf-frag"): HeteroFlow's fragmentation-aware placement
// (the simulator's, with the trace's workload; the server's default through
// LearnedFragPolicy in learned.h), a refinement of FGD (Weng et al., ATC'23;
// FgdPolicy in artifact.h) that also sees CPU stranding.
//
// FGD places each request where the node's fragmentation against the target
// workload (NodeFragMilli) drops the most. That measure sees CPU only as a
// cliff: a class is blocked once the node's free CPU is below the class's
// request. In the openb traces the dense nodes (8 GPUs, 96 CPUs) run out of
// CPU long before GPU, and most idle GPU left at the end sits on them. So
// hf-frag measures a node by
//
//   HfFragMilli(n) = NodeFragMilli(n) + max(0, idle(n) - cpu_free(n) / c)
//
// where idle(n) is the node's idle GPU milli and c the target workload's CPU
// per GPU milli (CpuPerGpuMilli): the second term is the idle GPU that the
// node's free CPU cannot feed at the workload's typical ratio. CPU-heavy
// tasks (and CPU-only ones) then go to nodes with CPU to spare, keeping the
// dense nodes' CPU for their GPUs.
//
// Otherwise it works like FGD:
// 1. filter: only the ledger's own rules (CheckSlice, CheckWholeGpu on empty
//    GPUs as EligibleWholeGpus lists them, CheckNodeResources), so tenancy,
//    lost GPUs, GPU models, MIG mode and node resources are respected
//    exactly; the ledger re-checks every choice;
// 2. score: int(100 x sigmoid((HfFragMilli(before) - HfFragMilli(after)) /
//    1000)), FGD's integer score (measured: ranking by the exact drop
//    concentrates load and does worse, notably with GPU-model constraints);
// 3. select: the highest score; ties among node-only tasks go to the node
//    left with the least idle GPU milli, then the least free CPU; all ties
//    then go to the smallest NodeRecord::tie_rank, then node id;
// 4. inside the node a slice takes the candidate GPU with the best score,
//    ties to the least free milli after placement (best fit), then the
//    lowest index; whole GPUs take the lowest-index eligible GPUs.
//
// Quantities are as in artifact.h: a slice's per-GPU milli is its memory
// share of a 64000-MiB GPU; a GPU's free milli is GpuFreeMilli.
//
// Node measures and per-(request shape, node) results are memoised: a
// node's memo holds while its NodeRecord::generation is unchanged, and when
// that changed, while its exact state is the same; a slice keeps the score
// of each GPU, whichever tenant asked, so tenants of one shape share it.
// The memo never changes a choice. Nodes are filtered on the ledger's node
// summaries and GPU briefs (ClusterView::CheckSliceBrief) before any GPU
// record is read.
//
// A placement's measure is estimated by class groups (EstimateNodeFragMilli,
// a few sums per group of classes instead of one step per class), and the
// estimate is used only where its error bound cannot move the integer score;
// elsewhere the measure is taken class by class. Scores, so choices, are
// exactly those of the class-by-class measure.
//
// Thread-safety: the memo is guarded by an internal mutex; safe to call
// from any thread.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_annotations.h"
#include "ledger/placement_policy.h"
#include "scheduler/fragmentation.h"

namespace hf::scheduler {

// The workload's CPU (milli-CPU) per GPU milli over its GPU classes,
// weighted by class share; 0 when it has no GPU class.
double CpuPerGpuMilli(const TargetWorkload& workload);

// hf-frag's node measure (milli-GPUs): NodeFragMilli plus the idle GPU milli
// that the node's free CPU cannot feed at `cpu_per_milli` (none when
// `cpu_per_milli` is 0).
double HfFragMilli(const NodeGpuState& node, const TargetWorkload& workload,
                   double cpu_per_milli);

// What hf-frag knows of the whole workload beyond its popular classes: the
// GPU milli that model-constrained tasks ask for, split over their allowed
// models (in proportion to each model's GPUs when the cluster is seen), and
// the workload's total CPU and GPU. The simulator builds it from the trace;
// a server would from its task history.
struct WorkloadDemand {
  // Key: the constrained task's allowed models, sorted; value: GPU milli.
  std::map<std::vector<std::string>, double> constrained_milli;
  double gpu_milli = 0;  // every task's GPU
  double cpu_milli = 0;  // every task's CPU, CPU-only tasks included
  static WorkloadDemand FromTasks(const std::vector<TaskClass>& tasks);
  // The same over weighted classes (a class of weight w counts w times).
  static WorkloadDemand FromWeighted(
      const std::vector<std::pair<TaskClass, double>>& classes);
};

// Per-model prices and CPU facts for a cluster: price(model) is the
// constrained demand on the model per GPU milli of the model, over the
// workload's GPU demand per GPU milli of the cluster (0 for a model no
// constrained task needs); cpu_per_milli_all is the workload's CPU (CPU-only
// tasks included) per GPU milli, at most the cluster's CPU per GPU milli;
// cpu_bound is 1 when the workload is
// CPU-bound (CPU demand / CPU capacity >= GPU demand / GPU capacity), else
// 0: how far hf-frag's c moves from the GPU classes' CPU per GPU milli to
// cpu_per_milli_all.
struct ClusterPrices {
  std::map<std::string, double> price;
  double cpu_per_milli_all = 0;
  double cpu_bound = 0;
};
ClusterPrices PricesFor(const ledger::ClusterView& view,
                        const WorkloadDemand& demand);

class HfFragPolicy final : public ledger::PlacementPolicy {
 public:
  // `max_scored_nodes` bounds the nodes scored per decision (0: every
  // node): the scan starts where the previous one stopped, goes round the
  // node slots, and stops once that many feasible nodes are scored, as the
  // Kubernetes scheduler's percentageOfNodesToScore does. A decision then
  // costs about the same at any cluster size.
  explicit HfFragPolicy(TargetWorkload workload, WorkloadDemand demand = {},
                        std::size_t max_scored_nodes = 0);
  ~HfFragPolicy() override;
  std::string_view name() const override { return "hf-frag"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;

  struct Memo;  // defined in hf_frag.cc

 private:
  const TargetWorkload workload_;
  const WorkloadDemand demand_;
  const double cpu_per_milli_;
  const std::size_t max_scored_nodes_;
  mutable Mutex mu_;
  mutable std::unique_ptr<Memo> memo_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::scheduler
