// ExplainNoPlacement: why a request has no place, for the people who wait on
// it. Runs only on the failure path, so it may scan the cluster.
#include <algorithm>
#include <string>

#include "ledger/ledger.h"

namespace hf::ledger {
namespace {

std::string Plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Which nodes cannot start the request's task, and why (TaskLaunch).
std::string UnlaunchableNodes(const PlacementRequest& request) {
  if (!request.has_command && !request.has_image) {
    return "nodes that cannot start it (it has neither a command nor an "
           "image)";
  }
  if (!request.has_command) {
    return "nodes that run tasks as processes, which need a command it does "
           "not have";
  }
  return "nodes that run containers, which need an image it does not name";
}

// The clause for one reason in a failure message, or "" when its count is 0.
std::string ReasonClause(RejectReason reason, int n,
                         const PlacementRequest& request,
                         ComputePercent compute) {
  if (n == 0) return {};
  const std::string gpus = Plural(n, "GPU", "GPUs");
  switch (reason) {
    case RejectReason::kLost:
      return gpus + " lost (GPU_LOST; allocatable again once healthy)";
    case RejectReason::kMigMode:
      return gpus + " in MIG mode (whole-GPU requests never go there)";
    case RejectReason::kModelMismatch:
      return gpus + " of a model the request does not allow";
    case RejectReason::kTenantConstraint:
      return gpus +
             " excluded by the tenant-sharing constraint (adding memory will "
             "not help)";
    case RejectReason::kBusy:
      return gpus + " already holding allocations";
    case RejectReason::kNoMemory:
      return gpus + " without " +
             std::to_string(request.memory_mib.value_or(0)) +
             " MB of free memory";
    case RejectReason::kNoCompute:
      return gpus + " without " + std::to_string(compute) + "% free compute";
    case RejectReason::kNodeCpu:
      return gpus + " on nodes without " + std::to_string(request.cpu_milli) +
             " free milli-CPU";
    case RejectReason::kNodeHostMemory:
      return gpus + " on nodes without " +
             std::to_string(request.host_memory_mib) + " MB free host memory";
    case RejectReason::kTooFewGpus:
      return gpus + " free on nodes with fewer than " +
             std::to_string(request.gpu_count) + " free";
    case RejectReason::kMigGeometry:
      return gpus +
             " in MIG mode where no partition covering the request fits the "
             "free memory slots (MIG geometry)";
    case RejectReason::kExcluded:
      return gpus + " excluded for now";
    case RejectReason::kNotPinned:
      return {};  // outside the pin: not considered at all
    case RejectReason::kNodeRuntime:
      return gpus + " on " + UnlaunchableNodes(request);
    case RejectReason::kCount:
      break;
  }
  return {};
}

}  // namespace

PlacementResult ExplainNoPlacement(const ClusterView& view,
                                   const PlacementRequest& request) {
  PlacementResult result;
  auto& counts = result.reject_counts;
  const auto bump = [&](RejectReason r, int n = 1) {
    counts[static_cast<int>(r)] += n;
  };
  if (request.kind == RequestKind::kNodeOnly) {
    // Counted per node: no GPU is involved.
    int nodes = 0;
    int fitting = 0;
    bool capable = false;
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      ++nodes;
      if (auto reason = view.CheckNodeResources(node, request)) {
        bump(*reason);
      } else {
        ++fitting;
      }
      capable |= ClusterView::CanLaunch(node, request) &&
                 request.cpu_milli <= node.spec.cpu_milli &&
                 request.host_memory_mib <= node.spec.host_memory_mib;
    }
    const std::string what =
        std::to_string(request.cpu_milli) + " milli-CPU and " +
        std::to_string(request.host_memory_mib) + " MB host memory";
    result.outcome =
        capable ? PlacementOutcome::kRetryLater : PlacementOutcome::kInfeasible;
    result.message =
        (capable ? "no node has " + what + " free now: "
                 : "never fits in this cluster: no node has " + what + ": ") +
        std::to_string(fitting) + " of " + std::to_string(nodes) +
        " nodes fit; " +
        std::to_string(counts[static_cast<int>(RejectReason::kNodeCpu)]) +
        " short of CPU, " +
        std::to_string(
            counts[static_cast<int>(RejectReason::kNodeHostMemory)]) +
        " short of host memory" +
        (counts[static_cast<int>(RejectReason::kNodeRuntime)] > 0
             ? ", " +
                   std::to_string(
                       counts[static_cast<int>(RejectReason::kNodeRuntime)]) +
                   " " + UnlaunchableNodes(request)
             : std::string()) +
        (capable ? "; retrying later" : "");
    return result;
  }
  const bool slice = request.kind == RequestKind::kSlice;
  const MemoryMib memory = request.memory_mib.value_or(0);
  const MemoryMib slice_limit =
      MaxSliceMemoryMib(view.largest_gpu_memory_mib());
  const bool over_largest = slice && memory > slice_limit;
  // "Capable": could hold the request if the cluster were empty and healthy.
  bool capable_anywhere = false;
  int admissible = 0;
  int unlaunchable = 0;  // nodes whose runtime cannot start the task

  for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
    const NodeRecord& node = view.node(NodeId(n));
    if (!node.live || ClusterView::OutsidePin(node, request)) continue;
    const bool launches = ClusterView::CanLaunch(node, request);
    if (!launches) ++unlaunchable;
    const bool node_capable =
        launches && request.cpu_milli <= node.spec.cpu_milli &&
        request.host_memory_mib <= node.spec.host_memory_mib;
    int capable_on_node = 0;
    int eligible_on_node = 0;
    for (GpuId g : node.gpus) {
      const GpuRecord& gpu = view.gpu(g);
      if (request.pinned_gpu.has_value() && *request.pinned_gpu != g) continue;
      ++result.gpus_considered;
      const bool model_ok = view.ModelAllowed(request, gpu);
      if (slice) {
        bool fits_idle = gpu.spec.memory_mib >= memory;
        if (gpu.mig != nullptr) {
          // Some partition of the idle card covers it.
          fits_idle = gpu::ChooseMigInstance(*gpu.mig, request.memory_mib,
                                             request.compute_percent, {},
                                             gpu.spec.memory_mib)
                          .ok();
        }
        if (model_ok && fits_idle) ++capable_on_node;
        if (auto reason = view.CheckSlice(gpu, request)) {
          bump(*reason);
        } else {
          ++admissible;
        }
      } else {
        if (model_ok && !gpu.spec.mig_capable) ++capable_on_node;
        if (auto reason = view.CheckWholeGpu(gpu, request)) {
          bump(*reason);
        } else {
          ++eligible_on_node;
        }
      }
    }
    if (!slice && eligible_on_node > 0) {
      if (auto reason = view.CheckNodeResources(node, request)) {
        bump(*reason, eligible_on_node);
      } else if (eligible_on_node < request.gpu_count) {
        bump(RejectReason::kTooFewGpus, eligible_on_node);
      } else {
        admissible += eligible_on_node;
      }
    }
    const int needed = slice ? 1 : request.gpu_count;
    if (node_capable && capable_on_node >= needed) capable_anywhere = true;
  }

  const ComputePercent compute = view.AccountedCompute(request);
  std::string what;
  if (slice) {
    what = memory > 0 ? std::to_string(memory) + " MB" : std::string();
    if (request.compute_percent.has_value()) {
      what +=
          (what.empty() ? "" : " / ") + std::to_string(compute) + "% compute";
    }
  } else {
    what =
        Plural(request.gpu_count, "whole GPU", "whole GPUs") + " on one node";
  }

  if (view.live_gpu_count() == 0) {
    result.outcome = PlacementOutcome::kInfeasible;
    result.message = "never fits in this cluster: it has no GPUs";
    return result;
  }
  if (over_largest) {
    result.outcome = PlacementOutcome::kInfeasible;
    result.message =
        "never fits in this cluster: gpu_memory_mb " + std::to_string(memory) +
        " exceeds 90% of the largest GPU (" + std::to_string(slice_limit) +
        " of " + std::to_string(view.largest_gpu_memory_mib()) + " MB)";
    return result;
  }

  std::string clauses;
  for (int r = 0; r < kRejectReasonCount; ++r) {
    const std::string clause =
        ReasonClause(static_cast<RejectReason>(r), counts[r], request, compute);
    if (clause.empty()) continue;
    clauses += "; " + clause;
  }
  const std::string tally = std::to_string(admissible) + " of " +
                            std::to_string(result.gpus_considered) +
                            " GPUs fit " + what;
  if (!capable_anywhere) {
    result.outcome = PlacementOutcome::kInfeasible;
    std::string limits;
    if (!request.allowed_models.empty()) limits = " of the allowed models";
    if (request.cpu_milli > 0 || request.host_memory_mib > 0) {
      limits += " on a node with enough CPU / host memory";
    }
    if (unlaunchable > 0) limits += " on a node whose runtime can start it";
    result.message = "never fits in this cluster: no " +
                     std::string(slice ? "GPU" : "node") + limits +
                     " could hold " + what + " even when idle" + "; " + tally +
                     clauses;
    return result;
  }
  result.outcome = PlacementOutcome::kRetryLater;
  std::string headline = "no GPU can take it now";
  const int memory_short = counts[static_cast<int>(RejectReason::kNoMemory)];
  const int compute_short = counts[static_cast<int>(RejectReason::kNoCompute)];
  const int mig_short = counts[static_cast<int>(RejectReason::kMigGeometry)];
  if (!slice) {
    headline = "not enough free whole GPUs on one node";
  } else if (mig_short > 0 && mig_short >= memory_short &&
             mig_short >= compute_short) {
    headline = "no MIG partition covering it fits";
  } else if (memory_short > 0 && memory_short >= compute_short) {
    headline = "insufficient GPU memory";
  } else if (compute_short > 0) {
    headline = "insufficient GPU compute";
  }
  if (admissible > 0) {
    // The policy declined although rules admit some GPU (a policy choice,
    // not a capacity limit).
    headline = "the placement policy chose no GPU";
  }
  result.message = headline + ": " + tally + clauses + "; retrying later";
  return result;
}

}  // namespace hf::ledger
