// The server's hf-frag: HfFragPolicy (hf_frag.h) measured against a target
// workload learned from the tasks the server has seen, with Best-Fit until
// there is enough history to learn from.
//
// The simulator gives hf-frag the trace's whole task list. A server has no
// such list, so LearnedFragPolicy keeps one: every task it is told of
// (Observe) adds its shape (kind, GPU count, memory, compute, CPU, models) to
// a history of decayed counts. A task's weight halves with every
// `half_life_tasks` newer tasks, so the target follows a workload that
// changes. Placement:
// - until it has seen `cold_start_tasks` tasks, Best-Fit
//   (BestFitPolicy): with a handful of tasks the popular classes are noise;
// - then hf-frag, with the target workload (TargetWorkload::FromWeighted
//   over the history) and the demand (WorkloadDemand::FromWeighted) rebuilt
//   when `rebuild_every` tasks have been observed since the last build, or
//   when the cluster's reference GPU memory changed.
//
// A slice's class is its share of the cluster's largest GPU: milli =
// max(memory / largest GPU memory, accounted compute / 100) x 1000. On a
// cluster of one GPU size that is exact; on a mixed one a class is measured
// against the largest card (the ledger still checks each GPU's real room).
// A task's model list that names every model of the live cluster is no
// constraint and is dropped.
//
// Thread-safety: every method takes an internal mutex; safe from any thread.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_annotations.h"
#include "ledger/placement_policy.h"
#include "scheduler/fragmentation.h"
#include "scheduler/policy/best_fit.h"
#include "scheduler/policy/hf_frag.h"

namespace hf::scheduler {

// What the target workload keeps of one task: its request without tenant or
// placement filters.
struct TaskShape {
  ledger::RequestKind kind = ledger::RequestKind::kSlice;
  int gpu_count = 0;
  std::optional<MemoryMib> memory_mib;
  std::optional<ComputePercent> compute_percent;
  CpuMilli cpu_milli = 0;
  std::vector<std::string> models;  // sorted, unique; empty = any

  static TaskShape Of(const ledger::PlacementRequest& request);
  // clang-tidy reads the defaulted <=> as a comparison with literal 0.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend auto operator<=>(const TaskShape&, const TaskShape&) = default;
  friend bool operator==(const TaskShape&, const TaskShape&) = default;
};

// Decayed counts of task shapes. Not thread-safe on its own.
class WorkloadHistory {
 public:
  explicit WorkloadHistory(double half_life_tasks);
  void Add(const TaskShape& shape);  // the newest task
  void Clear();
  std::int64_t tasks() const { return tasks_; }  // added since Clear
  double weight() const;                         // decayed task count
  // Every shape with its decayed weight.
  std::vector<std::pair<TaskShape, double>> Shapes() const;

 private:
  void Rebase();
  double half_life_;
  std::int64_t tasks_ = 0;
  std::int64_t base_ = 0;  // raw weights are relative to 2^(base_/half_life)
  std::map<TaskShape, double> raw_;
  double raw_total_ = 0;
};

// A policy that learns from the tasks it is told of.
class WorkloadObserver {
 public:
  virtual ~WorkloadObserver() = default;
  // A task was created (or found in the store's history, oldest first).
  virtual void Observe(const ledger::PlacementRequest& request) = 0;
  // Forgets the history (before it is read again, e.g. on promotion).
  virtual void Forget() = 0;
  // Whether it still places as it does before it has learned enough.
  virtual bool ColdStart() const = 0;
  // Tasks it was told of since the last Forget.
  virtual std::int64_t tasks_observed() const = 0;
};

struct LearnedOptions {
  double half_life_tasks = 5000;
  std::int64_t cold_start_tasks = 100;  // tasks seen before hf-frag
  std::int64_t rebuild_every = 100;
  // Nodes scored per decision (HfFragPolicy's bound; 0: every node).
  std::size_t max_scored_nodes = 64;
};

// The learned target's classes for `view` (exposed for tests and explain).
struct LearnedWorkload {
  TargetWorkload target;
  WorkloadDemand demand;
};
LearnedWorkload LearnWorkload(
    const std::vector<std::pair<TaskShape, double>>& shapes,
    const ledger::ClusterView& view);

class LearnedFragPolicy final : public ledger::PlacementPolicy,
                                public WorkloadObserver {
 public:
  explicit LearnedFragPolicy(LearnedOptions options = {});
  ~LearnedFragPolicy() override;
  std::string_view name() const override { return "hf-frag"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;

  void Observe(const ledger::PlacementRequest& request) override;
  void Forget() override;

  // Best-Fit while it has seen fewer than cold_start_tasks tasks.
  bool ColdStart() const override;
  std::int64_t tasks_observed() const override;

 private:
  // The policy to place with now.
  const ledger::PlacementPolicy& CurrentLocked(
      const ledger::ClusterView& view) const HF_REQUIRES(mu_);

  const LearnedOptions options_;
  const BestFitPolicy best_fit_;
  mutable Mutex mu_;
  WorkloadHistory history_ HF_GUARDED_BY(mu_);
  mutable std::unique_ptr<HfFragPolicy> built_ HF_GUARDED_BY(mu_);
  mutable std::int64_t built_at_ HF_GUARDED_BY(mu_) = -1;
  mutable MemoryMib built_reference_ HF_GUARDED_BY(mu_) = 0;
  mutable std::size_t built_gpus_ HF_GUARDED_BY(mu_) = 0;
};

}  // namespace hf::scheduler
