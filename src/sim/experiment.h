// The fragmentation experiment of Weng et al. (ATC'23), run through the
// ledger and a placement policy:
//   for each seed: sort the tasks by name and shuffle them; inflate the list
//   by drawing tasks uniformly with replacement until the next draw would
//   push the total GPU request above `inflate` x capacity; place the tasks in
//   order with no departures (a task that does not fit is dropped); after
//   every attempt record the arrived GPU request, the allocated GPU and the
//   cluster's fragmentation F (maintained incrementally: only the node that
//   changed is recomputed).
// Then for each integer x = arrived % of capacity, the unallocated GPU %,
// fragment amount % (of capacity) and fragment ratio % (of idle GPU), as
// median and 25-75% range over the seeds.
//
// Thread-safety: functions are pure; runs share nothing.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/fragmentation.h"
#include "scheduler/policy/learned.h"
#include "sim/sim_cluster.h"
#include "sim/trace.h"

namespace hf::sim {

struct ExperimentOptions {
  std::vector<std::uint64_t> seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  double inflate = 1.3;    // stop before the request exceeds this x capacity
  double coverage = 0.95;  // target-workload coverage for fragmentation
  int max_x = 130;         // last arrived-% point reported
  // The MIG variant (sim_cluster.h): a sharing task tries a MIG instance
  // first, then a GPU out of MIG mode. Allocated GPU counts what the
  // instances hold (a profile's rounding is allocated, not idle).
  SimMig mig;
  // hf-frag: nodes scored per decision (0: every node); by default the
  // server's bound, so hf-sim's hf-frag decides as the server's does.
  std::size_t max_scored_nodes = scheduler::LearnedOptions{}.max_scored_nodes;
};

// One attempt's record.
struct Sample {
  std::int64_t arrived_milli = 0;    // GPU requested by all tasks so far
  std::int64_t allocated_milli = 0;  // GPU held by placed tasks
  double frag_milli = 0;             // cluster fragmentation F
  std::int64_t idle_milli = 0;       // unallocated GPU
};

struct SeedRun {
  std::uint64_t seed = 0;
  std::vector<Sample> samples;  // the empty cluster, then one per attempt
  int placed = 0;
  int failed = 0;
  double placement_seconds = 0;  // time inside the ledger's Place
};

struct Stat {
  double median = 0;
  double p25 = 0;
  double p75 = 0;
};

struct Point {
  int x = 0;  // arrived GPU request, % of capacity
  Stat unallocated_pct;
  Stat frag_amount_pct;
  Stat frag_ratio_pct;
};

// The task order of one seed: `pods` sorted by name, shuffled with `rng`,
// then clones drawn uniformly with replacement (from the name-sorted list)
// appended while the total GPU request stays <= inflate x capacity_milli.
// Returns indices into `pods`.
std::vector<std::size_t> TaskOrder(const std::vector<TracePod>& pods,
                                   std::int64_t capacity_milli, double inflate,
                                   std::mt19937_64& rng);

// Runs one seed with the named policy (see scheduler::SimPolicyNames).
StatusOr<SeedRun> RunSeed(const std::vector<TraceNode>& nodes,
                          const std::vector<TracePod>& pods,
                          const std::string& policy, std::uint64_t seed,
                          const scheduler::TargetWorkload& workload,
                          const ExperimentOptions& options);

// The value of `metric` at each x in 0..max_x for one run: the mean over
// samples whose arrived % rounds (half to even) to x; if none, over x-1..x+1;
// if still none, the previous point's value.
template <typename Metric>
std::vector<double> Discretise(const std::vector<Sample>& samples,
                               std::int64_t capacity_milli, int max_x,
                               Metric metric);

// Median and 25/75 percentiles (linear interpolation) of `values`.
Stat Summarise(std::vector<double> values);

// Aggregates the runs of every seed into points x = 0..max_x.
std::vector<Point> Aggregate(const std::vector<SeedRun>& runs,
                             std::int64_t capacity_milli, int max_x);

}  // namespace hf::sim

#include "sim/experiment_inl.h"
