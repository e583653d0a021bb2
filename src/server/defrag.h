// Defrag: defragmentation plans (docs/CONTRACT.md section 10), proposed on
// a snapshot of the ledger by the pure planner (scheduler/defrag.h), stored
// durably, applied move by move; and automatic mode, which proposes and
// applies a plan for a pending task that would fit after one.
//
// A plan and its moves are one JSON document in the store's meta table
// ("defrag_plan/<id>"), written in the same transaction as every slice and
// task change of a step, so a crash leaves the plan's record and the
// cluster in step. A move goes through these states, each step one commit:
//   pending  -> moving: the target is reserved (a slice pinned to the
//               target GPU, charged by the ledger, owned by no task yet)
//               and the source slice is marked releasing, so the source
//               node stops the task (it is in its `cancel` list);
//   moving   -> moved: the node reports the task stopped (LandMoveInTxn,
//               inside that report's write): the source slice is released
//               and the task bound to the reserved slice with a fresh env,
//               `scheduled` for the target node to start;
//   moved    -> done: the task runs on the target (or ended there).
// A task is thus always bound to exactly one slice (its source or its
// target) and is never released without a place: a task that ends on its
// own while it moves gives its reservation back (move `skipped`). A gold
// (MIG) slice is a partition: the reservation writes the target's MIG
// create command, the source's release its destroy command (the MIG
// channel), and the task starts when its new partition exists.
//
// Thread-safety: no state of its own (the store holds the plans); safe
// from any thread (the control plane's defrag thread advances plans one
// tick at a time). A step reserves its move's target under the ledger's
// lock, then writes through the LeaderWriter without it (the write gate
// held shared) and gives the reservation back when the write fails or did
// not use it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "scheduler/qos.h"
#include "server/guarded_ledger.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/mig_channel.h"
#include "server/names.h"
#include "server/releases.h"
#include "server/scheduler_queue.h"
#include "server/slice_env.h"
#include "store/store.h"

namespace hf::server {

// A validated POST /api/v1/defrag/plans.
struct DefragPlanCreate {
  std::optional<std::string> node;  // the API's node_id (a node name)
  std::optional<std::int64_t> goal_memory_mib;
  int max_moves = 8;
  bool automatic = false;  // proposed by automatic mode, not a person
};

struct DefragOptions {
  // How often applying plans advance (Run), and how long a proposed plan
  // may wait before it expires.
  std::int64_t tick_ms = 200;
  std::int64_t plan_ttl_ms = 900'000;
  // Automatic mode (off by default): when a node's fragmentation is at
  // least the threshold and a pending task would fit there after a plan,
  // one is proposed and applied, at most one per interval.
  bool automatic = false;
  double auto_threshold = 0.5;
  std::int64_t auto_interval_ms = 60'000;
};

// What Defrag needs of the control plane.
class DefragHost {
 public:
  virtual ~DefragHost() = default;
  // The env of `slice` bound to `task`; callable inside a write.
  virtual SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                                    const store::TaskRow& task) = 0;
  // Node `node` has new work (a move's task to stop, or its target's MIG
  // create): wakes its agent's wait (NodeWork).
  virtual void NodeHasWork(store::RowId /*node*/) {}
};

class Defrag {
 public:
  // Everything passed must outlive the Defrag. `monotonic` times automatic
  // mode's rate limit.
  Defrag(store::Store* store, const Clock* clock, const Clock* monotonic,
         DefragOptions options, GuardedLedger* ledger, SchedulerQueue* queue,
         MigChannel* mig, Releases* releases, Names* names,
         LeaderWriter* writer, DefragHost* host)
      : store_(store),
        clock_(clock),
        monotonic_(monotonic),
        options_(options),
        ledger_(ledger),
        queue_(queue),
        mig_(mig),
        releases_(releases),
        names_(names),
        writer_(writer),
        host_(host) {}

  Defrag(const Defrag&) = delete;
  Defrag& operator=(const Defrag&) = delete;

  // Plans are JSON documents in the API's shape (docs/API.md,
  // "Defragmentation"). Admin only.
  // Computes a plan on a snapshot of the ledger; never applies it.
  StatusOr<nlohmann::json> Propose(const Caller& caller,
                                   const DefragPlanCreate& request)
      HF_EXCLUDES(ledger_->mu());
  // Starts applying a proposed plan, move by move (TickOnce).
  // FailedPrecondition (409) when the cluster no longer matches the plan's
  // snapshot or the plan is too old: the plan becomes `expired`.
  StatusOr<nlohmann::json> Apply(const Caller& caller, store::RowId id)
      HF_EXCLUDES(ledger_->mu());
  // A proposed plan is cancelled at once; an applying one after the move
  // in flight (if any) has landed its task on the target.
  StatusOr<nlohmann::json> Cancel(const Caller& caller, store::RowId id);
  StatusOr<std::vector<nlohmann::json>> List(const Caller& caller);
  StatusOr<nlohmann::json> Get(const Caller& caller, store::RowId id);

  // Advances every applying plan by at most one step.
  Status TickOnce() HF_EXCLUDES(ledger_->mu());
  // Automatic mode's pass: proposes and applies at most one plan for a
  // pending task. Returns the plan's id, or 0 when none was needed or found.
  StatusOr<store::RowId> AutoOnce() HF_EXCLUDES(ledger_->mu());
  // Ticks every tick_ms (and automatic mode's pass, when on, within its
  // rate limit) until the queue is stopped.
  void Run();

  // Inside the write of a task-state report (or GC's for a lost node):
  // `task`, stopped, had a move in flight from `slice`. With `rebind` it is
  // bound to the move's reserved target (true returned); otherwise (it
  // ended) the reservation is released, listed in `released`.
  StatusOr<bool> LandMoveInTxn(store::Txn& txn, store::TaskRow& task,
                               store::RowId slice, bool rebind,
                               std::vector<store::RowId>& released);

 private:
  // What a pending move reserves for: its task (as read before the write)
  // and its target GPU.
  struct MoveTarget {
    store::TaskRow task;
    store::RowId node_row = 0;
    int gpu_index = 0;
  };
  struct ReservedTarget {
    std::optional<ledger::Allocation> allocation;  // reserved in the ledger
    scheduler::QosDecision qos;                    // of the target GPU
    std::string refused;  // why nothing was reserved (empty: reserved)
  };

  // Every live allocation and every GPU's health and capacity, hashed: a
  // plan is valid only on the cluster it was computed on.
  std::string ClusterFingerprintLocked() HF_REQUIRES(ledger_->mu());
  // The ids of the plans in `state`.
  StatusOr<std::vector<store::RowId>> PlansIn(const std::string& state);
  // One step of an applying plan: a pending move's target is reserved
  // (ReserveTarget, under the ledger's lock), then the move written
  // without it.
  Status AdvancePlan(store::RowId id) HF_EXCLUDES(ledger_->mu());
  ReservedTarget ReserveTarget(const std::optional<MoveTarget>& want)
      HF_EXCLUDES(ledger_->mu());

  store::Store* const store_;
  const Clock* const clock_;
  const Clock* const monotonic_;
  const DefragOptions options_;
  GuardedLedger* const ledger_;
  SchedulerQueue* const queue_;
  MigChannel* const mig_;
  Releases* const releases_;
  Names* const names_;
  LeaderWriter* const writer_;
  DefragHost* const host_;
};

}  // namespace hf::server
