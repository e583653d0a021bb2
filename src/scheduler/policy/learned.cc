// LearnedFragPolicy (learned.h): decayed counts of task shapes, turned into
// hf-frag's target workload and demand for the cluster at hand.
#include "scheduler/policy/learned.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

namespace hf::scheduler {

using ledger::ClusterView;
using ledger::PlacementRequest;
using ledger::RequestKind;

namespace {

// Raw weights grow as 2^(age / half-life); rebased well before overflow.
constexpr double kRebaseExponent = 64;
// Shapes lighter than this (in tasks) are dropped when rebasing.
constexpr double kNegligibleWeight = 1e-6;

// The models of the cluster's live GPUs, sorted.
std::vector<std::string> LiveModels(const ClusterView& view) {
  std::set<std::string> models;
  for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
    const ledger::NodeRecord& node = view.node(NodeId(n));
    if (!node.live) continue;
    for (const GpuId g : node.gpus) {
      const ledger::GpuRecord& gpu = view.gpu(g);
      if (gpu.live) models.insert(gpu.spec.model);
    }
  }
  return {models.begin(), models.end()};
}

// The class of one shape on `view`; `reference` is the largest GPU memory.
TaskClass ClassOf(const TaskShape& shape, const ClusterView& view,
                  MemoryMib reference,
                  const std::vector<std::string>& live_models) {
  TaskClass c;
  c.cpu_milli = shape.cpu_milli;
  // A list naming every model of the cluster constrains nothing.
  if (!std::includes(shape.models.begin(), shape.models.end(),
                     live_models.begin(), live_models.end())) {
    c.gpu_models = shape.models;
  }
  switch (shape.kind) {
    case RequestKind::kSlice: {
      PlacementRequest r = PlacementRequest::Slice(
          TenantId(0), shape.memory_mib, shape.compute_percent);
      const std::int64_t by_compute = std::int64_t{view.AccountedCompute(r)} *
                                      (kMilliPerGpu / kFullComputePercent);
      std::int64_t by_memory = 0;
      if (shape.memory_mib.has_value() && reference > 0) {
        by_memory = (*shape.memory_mib * kMilliPerGpu + reference - 1) /
                    reference;  // rounded up: the class needs at least this
      }
      c.gpu_milli = static_cast<int>(std::clamp<std::int64_t>(
          std::max(by_memory, by_compute), 1, kMilliPerGpu));
      c.num_gpu = 1;
      break;
    }
    case RequestKind::kWholeGpus:
      c.gpu_milli = kMilliPerGpu;
      c.num_gpu = shape.gpu_count;
      break;
    case RequestKind::kNodeOnly:
      break;
  }
  return c;
}

}  // namespace

TaskShape TaskShape::Of(const PlacementRequest& request) {
  TaskShape s;
  s.kind = request.kind;
  s.cpu_milli = request.cpu_milli;
  switch (request.kind) {
    case RequestKind::kSlice:
      s.memory_mib = request.memory_mib;
      s.compute_percent = request.compute_percent;
      break;
    case RequestKind::kWholeGpus:
      s.gpu_count = request.gpu_count;
      break;
    case RequestKind::kNodeOnly:
      break;
  }
  for (const std::string& m : request.allowed_models) {
    if (!m.empty()) s.models.push_back(m);
  }
  std::sort(s.models.begin(), s.models.end());
  s.models.erase(std::unique(s.models.begin(), s.models.end()), s.models.end());
  return s;
}

WorkloadHistory::WorkloadHistory(double half_life_tasks)
    : half_life_(half_life_tasks > 0 ? half_life_tasks : 1) {}

void WorkloadHistory::Add(const TaskShape& shape) {
  if (static_cast<double>(tasks_ - base_) / half_life_ >= kRebaseExponent) {
    Rebase();
  }
  const double w = std::exp2(static_cast<double>(tasks_ - base_) / half_life_);
  raw_[shape] += w;
  raw_total_ += w;
  ++tasks_;
}

void WorkloadHistory::Rebase() {
  const double factor =
      std::exp2(-static_cast<double>(tasks_ - base_) / half_life_);
  raw_total_ = 0;
  for (auto it = raw_.begin(); it != raw_.end();) {
    it->second *= factor;
    if (it->second < kNegligibleWeight) {
      it = raw_.erase(it);
    } else {
      raw_total_ += it->second;
      ++it;
    }
  }
  base_ = tasks_;
}

void WorkloadHistory::Clear() {
  raw_.clear();
  raw_total_ = 0;
  tasks_ = base_ = 0;
}

double WorkloadHistory::weight() const {
  // The newest task weighs 1; each older one 2^(-age / half-life).
  return raw_total_ *
         std::exp2(-static_cast<double>(tasks_ - 1 - base_) / half_life_);
}

std::vector<std::pair<TaskShape, double>> WorkloadHistory::Shapes() const {
  const double factor =
      std::exp2(-static_cast<double>(tasks_ - 1 - base_) / half_life_);
  std::vector<std::pair<TaskShape, double>> out;
  out.reserve(raw_.size());
  for (const auto& [shape, raw] : raw_) out.emplace_back(shape, raw * factor);
  return out;
}

LearnedWorkload LearnWorkload(
    const std::vector<std::pair<TaskShape, double>>& shapes,
    const ClusterView& view) {
  const MemoryMib reference = view.largest_gpu_memory_mib();
  const std::vector<std::string> live_models = LiveModels(view);
  std::vector<std::pair<TaskClass, double>> classes;
  classes.reserve(shapes.size());
  for (const auto& [shape, weight] : shapes) {
    classes.emplace_back(ClassOf(shape, view, reference, live_models), weight);
  }
  LearnedWorkload out;
  out.target = TargetWorkload::FromWeighted(classes);
  out.demand = WorkloadDemand::FromWeighted(classes);
  return out;
}

LearnedFragPolicy::LearnedFragPolicy(LearnedOptions options)
    : options_(options), history_(options.half_life_tasks) {}

LearnedFragPolicy::~LearnedFragPolicy() = default;

void LearnedFragPolicy::Observe(const PlacementRequest& request) {
  MutexLock lock(mu_);
  history_.Add(TaskShape::Of(request));
}

void LearnedFragPolicy::Forget() {
  MutexLock lock(mu_);
  history_.Clear();
  built_.reset();
  built_at_ = -1;
}

bool LearnedFragPolicy::ColdStart() const {
  MutexLock lock(mu_);
  return history_.tasks() < options_.cold_start_tasks;
}

std::int64_t LearnedFragPolicy::tasks_observed() const {
  MutexLock lock(mu_);
  return history_.tasks();
}

const ledger::PlacementPolicy& LearnedFragPolicy::CurrentLocked(
    const ClusterView& view) const {
  if (history_.tasks() < options_.cold_start_tasks) return best_fit_;
  const MemoryMib reference = view.largest_gpu_memory_mib();
  // GPUs that come or go change the reference memory or the GPU count (and
  // with them, maybe, the models that count as a constraint).
  const std::size_t gpus = view.live_gpu_count();
  if (built_ == nullptr ||
      history_.tasks() - built_at_ >= options_.rebuild_every ||
      reference != built_reference_ || gpus != built_gpus_) {
    LearnedWorkload learned = LearnWorkload(history_.Shapes(), view);
    built_ = std::make_unique<HfFragPolicy>(std::move(learned.target),
                                            std::move(learned.demand),
                                            options_.max_scored_nodes);
    built_at_ = history_.tasks();
    built_reference_ = reference;
    built_gpus_ = gpus;
  }
  return *built_;
}

std::optional<std::vector<GpuId>> LearnedFragPolicy::Choose(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return CurrentLocked(view).Choose(view, request);
}

std::optional<NodeId> LearnedFragPolicy::ChooseNode(
    const ClusterView& view, const PlacementRequest& request) const {
  MutexLock lock(mu_);
  return CurrentLocked(view).ChooseNode(view, request);
}

}  // namespace hf::scheduler
