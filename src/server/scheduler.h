// Scheduler: the leader's bind pass and its loop (docs/CONTRACT.md section
// 5). What it reads comes from the SchedulerQueue (tasks created here, ids
// the store's task feed reported, a rescan); the tasks waiting to be bound
// are its own (PendingTasks).
//
// A bind pass takes a batch of due pending tasks, places each in the
// ledger (GuardedLedger, under its lock), and persists the whole batch in
// one store transaction with the lock given up: per task a
// compare-and-set on its version (the claim), the slice, the injected env,
// the history entry and, for gold, the MIG create command. A task whose
// claim loses (cancelled meanwhile) has its placement undone; if the
// transaction fails, every placement of the batch is undone and the tasks
// stay pending. Tasks that do not fit keep a `pending_reason` (rewritten
// when its class changes, or at most once a minute when only its counts
// moved) and are tried again when capacity frees up (the queue's
// generation moves) or every retry interval.
//
// Holds (scheduler/hold.h): the first task found waiting for room for
// `hold_after_ms` or longer, while fewer than `max_holds` tasks have one,
// gets GPUs held for it (Placement::UpdateHold), where it fits once they
// drain, among the GPUs no other hold has; no other task is placed there,
// and its pending_reason says which GPUs and why (and so do the reasons of
// the others while the holds last). A hold ends when its task is bound, or is
// no longer pending, or its GPUs drained (or changed) and it still does not fit
// there; such a task gets no second hold. Holds are the leader's own state: a
// new leader makes them again from the tasks' ages.
//
// Thread-safety: one bind pass at a time (bind_mu_, taken before the
// ledger's write gate); safe from any thread. Calls SchedulerHost holding
// no lock, or (SliceEnvFor) the ledger's lock only; writes through the
// LeaderWriter holding no ledger lock.
#pragma once

#include <cstdint>
#include <functional>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/guarded_ledger.h"
#include "server/leader_writer.h"
#include "server/leadership.h"
#include "server/mig_channel.h"
#include "server/pending_tasks.h"
#include "server/scheduler_queue.h"
#include "server/slice_env.h"
#include "server/telemetry.h"
#include "store/store.h"

namespace hf::server {

// What the Scheduler needs of the control plane.
class SchedulerHost {
 public:
  virtual ~SchedulerHost() = default;
  // The env of `slice` bound to `task`; callable under the ledger's lock.
  virtual SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                                    const store::TaskRow& task) = 0;
  // Node `node` has new work (a task bound to it): wakes its agent's wait
  // (NodeWork). Called holding no lock.
  virtual void NodeHasWork(store::RowId /*node*/) {}
};

struct SchedulerOptions {
  int bind_batch = 512;                    // most tasks bound per commit
  std::int64_t retry_interval_ms = 5'000;  // unplaceable tasks retry at least
  // A task that has waited this long for room (since it was created) gets
  // GPUs held for it, while fewer than `max_holds` tasks have a hold (0:
  // never).
  std::int64_t hold_after_ms = 120'000;
  int max_holds = 1;
};

class Scheduler {
 public:
  // Everything passed must outlive the Scheduler; `fence` may be null (the
  // only instance), else its term is named in each bind's history entry.
  Scheduler(store::Store* store, const Clock* clock, SchedulerOptions options,
            GuardedLedger* ledger, SchedulerQueue* queue, MigChannel* mig,
            Telemetry* telemetry, const WriteFence* fence, LeaderWriter* writer,
            SchedulerHost* host)
      : store_(store),
        clock_(clock),
        options_(options),
        ledger_(ledger),
        queue_(queue),
        mig_(mig),
        telemetry_(telemetry),
        fence_(fence),
        writer_(writer),
        host_(host) {}

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Binds up to one batch of pending tasks; returns how many were bound.
  // `more` (optional) is set when the batch was full: call again at once.
  StatusOr<int> BindPendingOnce(bool* more = nullptr) HF_EXCLUDES(bind_mu_);
  // One turn of the loop: the queue's periodic rescan when it is due, then
  // one bind pass (a failed pass asks for a rescan).
  StatusOr<int> Pass(bool* more = nullptr);
  // Runs passes as work arrives (at once while a backlog remains, else
  // when the queue is woken or every 500 ms) until the queue is stopped.
  void Run();
  // How many tasks wait to be bound (as of the last pass).
  int pending() const { return pending_.size(); }

 private:
  // Ends the hold of a task that no longer waits (bound by another path,
  // cancelled, failed), as its stored row says.
  Status EndHoldIfStale() HF_REQUIRES(bind_mu_);
  // After task `task` (`request`, as asked without holds) failed to place
  // with `message`: ends its own hold where it did not help, setting
  // `hold_ended`, or gives it one where it qualifies (above;
  // scheduler::HoldBook::AfterWaiting).
  void UpdateHold(const store::TaskRow& task,
                  const ledger::PlacementRequest& request,
                  const std::string& message, store::Millis now,
                  bool& hold_ended) HF_REQUIRES(bind_mu_, ledger_->mu());

  store::Store* const store_;
  const Clock* const clock_;
  const SchedulerOptions options_;
  GuardedLedger* const ledger_;
  SchedulerQueue* const queue_;
  MigChannel* const mig_;
  Telemetry* const telemetry_;
  const WriteFence* const fence_;
  LeaderWriter* const writer_;
  SchedulerHost* const host_;
  Mutex bind_mu_;  // one bind pass at a time
  // The tasks waiting to be bound, and when each is due to be tried again.
  // Its own lock, a leaf; the bind pass is its only writer.
  PendingTasks pending_;
};

}  // namespace hf::server
