// Time replay of a trace with departures (hf-sim --replay): tasks arrive at
// their creation time, run for (deletion - creation) seconds once started,
// and leave. Tasks that do not fit wait in a FIFO queue with backfill: on
// every change the queue is tried in arrival order and any task that fits
// starts, even when an earlier one cannot. Tasks whose trace qos is "BE"
// are preemptible (ReplayOptions::be_preemptible): a DefragHook may evict
// them to let a waiting task fit; an evicted task goes back to the queue in
// its arrival order and, when it starts again, runs for the work it had
// left (checkpoint and restart).
//
// Reported over time (every `sample_every_s` of trace time): the share of
// the requested GPU that waits, the GPU allocation ratio and the cluster's
// fragmentation (NodeFragMilli against the trace's target workload); and in
// total: the waiting GPU-time, the median and p99 wait per task (tasks that
// never waited count as 0; a task still waiting at the end counts its wait
// so far), evictions per 100 tasks.
//
// Holds (ReplayOptions::hold_after_s) are the server's (scheduler/hold.h):
// a task that waited long enough for room gets GPUs that no other task may
// take, by any path (the queue's passes and a DefragHook's Start alike),
// until they drain and it starts.
//
// `load` compresses (or stretches) the arrival times, keeping durations, so
// that the peak GPU demand (every task running from its arrival for its
// duration, as if the cluster were unbounded) is `load` x the cluster's GPU
// capacity. The openb traces as recorded peak under 1% of their cluster's
// GPU (their durations are heavy-tailed: 100 of the 8152 tasks hold 93% of
// the GPU-time), so only a compressed replay makes tasks wait.
//
// Thread-safety: a Replay runs on one thread; runs share nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "ledger/ledger.h"
#include "scheduler/fragmentation.h"
#include "scheduler/hold.h"
#include "scheduler/policy/learned.h"
#include "sim/trace.h"

namespace hf::sim {

struct ReplayOptions {
  bool be_preemptible = true;  // trace qos "BE" tasks may be evicted
  double load = 0;             // peak demand / capacity; 0: times as recorded
  std::int64_t sample_every_s = 0;  // 0: 200 samples over the run
  std::uint64_t seed = 42;          // node tie-break ranks
  double coverage = 0.95;           // target workload of the fragmentation
  // hf-frag: nodes scored per decision (0: every node); the server's bound.
  std::size_t max_scored_nodes = scheduler::LearnedOptions{}.max_scored_nodes;
  // Holds, as the server's scheduler keeps them (scheduler::HoldBook): a
  // task that waited `hold_after_s` seconds of trace time (this stint in
  // the queue) gets GPUs held for it, while fewer than `max_holds` tasks
  // have one; no other task is placed there. 0: no holds (the published
  // simulator's plain backfill).
  std::int64_t hold_after_s = 0;
  int max_holds = 1;
};

// One task of the replay.
struct ReplayTask {
  std::size_t pod = 0;  // index into the trace's pods
  ledger::PlacementRequest request;
  std::int64_t gpu_milli = 0;  // total GPU request
  bool preemptible = false;
  std::int64_t arrival = 0;        // seconds (after `load` scaling)
  std::int64_t remaining = 0;      // seconds of work left; -1: runs forever
  std::optional<SliceId> slice;    // while running
  std::int64_t started = -1;       // last start
  std::int64_t queued_since = -1;  // while waiting
  std::int64_t waited = 0;         // seconds waited so far, all stints
  int evictions = 0;
  bool done = false;
};

// What a DefragHook may see and do while tasks wait.
class ReplayControl {
 public:
  virtual ~ReplayControl() = default;
  virtual std::int64_t now() const = 0;
  virtual const ledger::Ledger& ledger() const = 0;
  // Waiting tasks (ids), in queue order.
  virtual std::vector<std::size_t> waiting() const = 0;
  virtual const ReplayTask& task(std::size_t id) const = 0;
  // Running tasks holding (part of) `gpu`.
  virtual const std::vector<std::size_t>& tasks_on_gpu(GpuId gpu) const = 0;
  // Every running task on `node`: those on its GPUs and its node-only
  // (CPU) tasks, which hold CPU and host memory a waiting task may need.
  virtual const std::vector<std::size_t>& tasks_on_node(NodeId node) const = 0;
  // Tasks arrived so far and evictions so far.
  virtual std::int64_t arrived() const = 0;
  virtual std::int64_t evictions() const = 0;
  // Evicts a running preemptible task (false if it is neither): its
  // allocation is released and it waits again.
  virtual bool Evict(std::size_t id) = 0;
  // Starts a waiting task where `policy` chooses (the ledger checks the
  // choice); false if it did not start.
  virtual bool Start(std::size_t id, const ledger::PlacementPolicy& policy) = 0;
  // The replay's placement policy (a planner may try it on a snapshot).
  virtual const ledger::PlacementPolicy& policy() const = 0;
};

// The seam for a defragmentation planner: called after a scheduling pass
// that left tasks waiting. Whatever it evicts is queued again and the queue
// is tried once more.
class DefragHook {
 public:
  virtual ~DefragHook() = default;
  virtual std::string_view name() const = 0;
  virtual void OnWaiting(ReplayControl& control) = 0;
};

// A simple in-simulator defragmenter: for the oldest waiting GPU tasks (at
// most `tries` per call), the node where evicting the fewest running
// preemptible tasks (then the least GPU) lets the task fit; it evicts them,
// starts the task there, and the evicted tasks go back to the queue, where
// the policy usually places them at once elsewhere (a move). Evictions are
// capped at `evictions_per_100` per 100 arrived tasks, over the run.
class SimpleDefragmenter final : public DefragHook {
 public:
  explicit SimpleDefragmenter(double evictions_per_100 = 1.0, int tries = 4)
      : evictions_per_100_(evictions_per_100), tries_(tries) {}
  std::string_view name() const override { return "simple"; }
  void OnWaiting(ReplayControl& control) override;

 private:
  double evictions_per_100_;
  int tries_;
};

// A defragmenter that plans moves, not evictions: for the oldest waiting
// GPU tasks (at most `tries` per call), it takes the nodes where evicting
// the fewest preemptible tasks would make room (the same candidates as
// SimpleDefragmenter, best `plans` of them), and tries each on a snapshot of
// the ledger: release the evictees, place the waiting task there, then
// place every evictee again with the replay's policy. Only a plan where all
// of them land is applied, on the real ledger the same way, so an evicted
// task restarts at once elsewhere and never waits. Moves are capped at
// `evictions_per_100` per 100 arrived tasks.
class MovingDefragmenter final : public DefragHook {
 public:
  explicit MovingDefragmenter(double evictions_per_100 = 1.0, int tries = 16,
                              int plans = 10)
      : evictions_per_100_(evictions_per_100), tries_(tries), plans_(plans) {}
  std::string_view name() const override { return "moves"; }
  void OnWaiting(ReplayControl& control) override;

 private:
  double evictions_per_100_;
  int tries_;
  int plans_;
};

// A planner that plans for the waiting queue as a whole: for the oldest
// waiting GPU tasks (at most `tasks` distinct requests per call) and every
// node, the fewest running preemptible tasks whose departure lets the task
// fit there: those on the GPUs it would take (slices, largest first, until
// one GPU has room; whole GPUs cleared) and, where the node's CPU or host
// memory is what lacks, any other preemptible task on the node, CPU-only
// ones included. Each such plan is valued by the GPU of the waiting tasks
// (that one and any later ones) that would fit on the node afterwards, per
// eviction, since one move that frees a node's CPU can let several waiting
// tasks onto its idle GPUs. The best plans (at most `trials` per round)
// are tried on a snapshot of the ledger: the waiting task is placed there
// and every evictee placed again by the replay's policy; only a plan where
// all of them land is applied, so an evicted task restarts at once
// elsewhere (a move) and never waits. A plan without an eviction (a task
// that fits on a node the policy did not choose) is taken as well. Then
// the next round plans on the changed cluster, up to `rounds` per call.
// Evictions are capped at `evictions_per_100` per 100 arrived tasks, and a
// task that started at this instant is never moved again.
class ConsolidatingDefragmenter final : public DefragHook {
 public:
  explicit ConsolidatingDefragmenter(double evictions_per_100 = 1.0,
                                     int tasks = 16, int trials = 4,
                                     int rounds = 8)
      : evictions_per_100_(evictions_per_100),
        tasks_(tasks),
        trials_(trials),
        rounds_(rounds) {}
  std::string_view name() const override { return "consolidate"; }
  void OnWaiting(ReplayControl& control) override;

 private:
  double evictions_per_100_;
  int tasks_;
  int trials_;
  int rounds_;
  // Plans that failed: (waiting task, node, the node's generation then).
  std::set<std::tuple<std::size_t, std::size_t, std::uint64_t>> failed_;
};

// For planners: what a defragmenter may still evict, `per_100` per 100
// arrived tasks less the evictions so far.
std::int64_t EvictionBudget(const ReplayControl& control, double per_100);

// For planners: a policy that places exactly the GPUs (or, for a CPU-only
// task, the node) it was given, to apply a plan made on a snapshot; the
// ledger checks the choice.
class PinnedPolicy final : public ledger::PlacementPolicy {
 public:
  explicit PinnedPolicy(std::vector<GpuId> gpus,
                        std::optional<NodeId> node = std::nullopt)
      : gpus_(std::move(gpus)), node_(node) {}
  std::string_view name() const override { return "pinned"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView&,
      const ledger::PlacementRequest&) const override {
    return gpus_;
  }
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView&,
      const ledger::PlacementRequest&) const override {
    return node_;
  }

 private:
  std::vector<GpuId> gpus_;
  std::optional<NodeId> node_;
};

struct ReplaySample {
  std::int64_t time = 0;
  std::int64_t running_milli = 0;
  std::int64_t waiting_milli = 0;  // GPU requested by waiting tasks
  int waiting_tasks = 0;
  double allocation_pct = 0;     // allocated GPU / capacity
  double frag_pct = 0;           // fragmentation / capacity
  double waiting_share_pct = 0;  // waiting / (waiting + running) GPU
};

struct ReplayResult {
  std::string policy;
  std::string defrag;  // "" without
  std::int64_t capacity_milli = 0;
  double time_scale = 1;  // arrival times were multiplied by this
  std::int64_t tasks = 0;
  std::int64_t started = 0;        // started at least once
  std::int64_t never_started = 0;  // still waiting at the end
  std::int64_t never_fit = 0;      // do not fit the empty cluster: left out
  std::int64_t evictions = 0;
  double evictions_per_100 = 0;
  // Evictions after which the task did not start again at the same instant
  // (it went back to waiting): 0 for a planner that only moves tasks.
  std::int64_t evictions_requeued = 0;
  double waiting_gpu_hours = 0;  // integral of the waiting GPU request
  // The part of it while the cluster's idle GPU covered the task (waiting
  // tasks taken in queue order, each using up idle GPU it is counted
  // against): what placement or defragmentation could at most have saved;
  // the rest waited because the GPU was short.
  double waiting_with_idle_gpu_hours = 0;
  // The part of that during which some node could also have taken the task
  // had every preemptible task on it left (by memory, compute, CPU and host
  // memory; ignoring where those tasks would go): the most that evicting
  // preemptible tasks could save at the moment it waited.
  double waiting_evictable_gpu_hours = 0;
  // Waiting GPU-time by task shape ("share", "1 gpus", "8 gpus", ...).
  std::map<std::string, double> waiting_gpu_hours_by_shape;
  double running_gpu_hours = 0;
  double waiting_share_pct = 0;  // waiting / (waiting + running) GPU-time
  double wait_median_s = 0;
  double wait_p99_s = 0;
  double wait_max_s = 0;
  // Holds (ReplayOptions::hold_after_s): how many began, and how many ended
  // with their task started (the others drained or changed and did not
  // help, or were in force at the end).
  std::int64_t holds = 0;
  std::int64_t holds_started = 0;
  double decisions_per_second = 0;
  std::vector<ReplaySample> samples;
};

// Replays `pods` (which must have creation and deletion times) on the GPU
// nodes of `nodes` with the named policy and an optional hook.
StatusOr<ReplayResult> RunReplay(const std::vector<TraceNode>& nodes,
                                 const std::vector<TracePod>& pods,
                                 const std::string& policy,
                                 const ReplayOptions& options,
                                 DefragHook* hook);

std::string ReplayJson(const ReplayResult& result);
// A table: one row per `every` samples (at least the last), then totals.
std::string ReplayTable(const ReplayResult& result, std::size_t rows = 12);

}  // namespace hf::sim
