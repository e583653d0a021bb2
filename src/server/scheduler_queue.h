// SchedulerQueue: what the scheduler must read before its next bind pass,
// and when that pass runs. The pending tasks themselves are held in
// PendingTasks (pending_tasks.h); this unit only collects the demand and
// capacity changes that reach the bind pass from other threads:
// - tasks this instance created, queued whole (no store read to find them);
// - ids the store's task feed reported committed (by any instance), less
//   the ones created here, which are queued already;
// - a full rescan of the pending tasks in the store: asked for by whatever
//   may have left a task pending unseen (a lost claim, a node lost, a
//   requeued MIG command, a failed pass), and by the safety sweep every
//   `resync_interval_ms`;
// - the capacity generation, bumped whenever capacity frees up, so tasks
//   that failed at an older generation are tried again.
// It also carries the stop signal of the control plane's threads.
//
// Thread-safety: an internal mutex, a leaf (never held across I/O, nothing
// else taken under it); safe from any thread, with or without the control
// plane's locks held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::server {

class SchedulerQueue {
 public:
  explicit SchedulerQueue(store::Millis resync_interval_ms)
      : resync_interval_ms_(resync_interval_ms) {}

  SchedulerQueue(const SchedulerQueue&) = delete;
  SchedulerQueue& operator=(const SchedulerQueue&) = delete;

  // Whether the store's task feed runs for this instance: while it does,
  // the ids of tasks created here are remembered, so the feed's report of
  // them is not read again.
  void SetFeedActive(bool active);
  // This instance committed `task` (pending).
  void Created(store::TaskRow task);
  // The task feed's callback: task `id` was committed (0: some reports may
  // have been missed; rescan every pending task).
  void Committed(store::RowId id);
  // The next pass reads every pending task from the store.
  void RequestResync();
  // Asks for the safety sweep's rescan when `resync_interval_ms` has passed
  // since the last one at `now` (or the clock went back). The first call
  // only starts counting: a fresh queue asks for a rescan anyway.
  void SweepIfDue(store::Millis now);
  // Capacity freed up: bumps the generation and wakes the scheduler.
  void CapacityFreed();
  std::uint64_t generation() const { return generation_.load(); }
  // Wakes the scheduler to look at what is queued.
  void Wake() { work_cv_.NotifyAll(); }

  // What the next bind pass must read; taking it empties the queue.
  struct Work {
    std::vector<store::TaskRow> created;  // created here
    std::vector<store::RowId> committed;  // by the feed, not created here
    bool resync = false;                  // rescan every pending task
  };
  Work Take();

  // Blocks until there is work to take, the generation moved past
  // `seen_generation`, Stop(), or `timeout`. False once stopped.
  bool WaitForWork(std::uint64_t seen_generation,
                   std::chrono::milliseconds timeout);
  // Sleeps for `timeout` unless stopped first. False once stopped.
  bool Sleep(std::chrono::milliseconds timeout);
  // Every waiter returns false until Resume().
  void Stop();
  void Resume();

  // Bounds the ids remembered as created here: reports lost on the way
  // (the feed reconnected) would otherwise leave ids behind. The rescan
  // that follows a lost report covers them.
  static constexpr std::size_t kMaxCreatedHere = 65'536;

 private:
  bool HasWorkLocked(std::uint64_t seen_generation) const HF_REQUIRES(mu_);

  const store::Millis resync_interval_ms_;
  std::atomic<std::uint64_t> generation_{1};
  mutable Mutex mu_;
  CondVar work_cv_;   // the scheduler's wake-up
  CondVar sleep_cv_;  // Sleep()'s (stop)
  bool feed_active_ HF_GUARDED_BY(mu_) = false;
  std::vector<store::TaskRow> created_ HF_GUARDED_BY(mu_);
  std::vector<store::RowId> committed_ HF_GUARDED_BY(mu_);
  std::unordered_set<store::RowId> created_here_ HF_GUARDED_BY(mu_);
  bool resync_ HF_GUARDED_BY(mu_) = true;
  store::Millis last_sweep_ HF_GUARDED_BY(mu_) = 0;
  bool stop_ HF_GUARDED_BY(mu_) = false;
};

}  // namespace hf::server
