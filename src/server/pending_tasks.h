// PendingTasks: the tasks the scheduler holds as waiting to be bound, and
// when each is due to be tried again. A task is tried when it is new to
// the scheduler, when capacity moved since it last failed (its failed
// generation is older than the queue's capacity generation), or when the
// retry interval passed since its last try; otherwise a full cluster costs
// the bind pass nothing. What reaches it (tasks created here, ids the
// store's task feed reported, a rescan of the store) comes from
// SchedulerQueue; the bind pass (ControlPlane's) places what Due() picks
// and reports back with Waited() / Remove().
//
// Thread-safety: an internal mutex, a leaf (never held across I/O, nothing
// else taken under it). The bind pass is its only writer; size() is read
// from any thread without the lock (the stats' pending count).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::server {

class PendingTasks {
 public:
  PendingTasks() = default;
  PendingTasks(const PendingTasks&) = delete;
  PendingTasks& operator=(const PendingTasks&) = delete;

  // A full rescan of the store's pending tasks: `rows` replace what is
  // held. A task held already at the same version keeps when it was last
  // tried; any other is new (tried on the next pass).
  void Replace(std::vector<store::TaskRow> rows) HF_EXCLUDES(mu_);
  // Adds `row` unless its task is held already (as new: tried next pass).
  void Add(store::TaskRow row) HF_EXCLUDES(mu_);
  // Of `ids`, the ones not held (ascending, without repeats).
  std::vector<store::RowId> Unknown(const std::vector<store::RowId>& ids) const
      HF_EXCLUDES(mu_);

  // Up to `limit` tasks due for a try, by ascending id (oldest first): new
  // ones (never tried; generations count from 1), those that failed before
  // capacity `generation`, and those last tried `retry_interval_ms` or longer
  // before `now`. Copies: the caller works on them without the lock.
  std::vector<store::TaskRow> Due(std::uint64_t generation, store::Millis now,
                                  store::Millis retry_interval_ms,
                                  int limit) const HF_EXCLUDES(mu_);

  // Task `id` was tried at `now` at capacity `generation` and still waits;
  // `stored`, when set, is its row as written by the try (its new
  // pending_reason and version). Nothing when `id` is not held.
  void Waited(store::RowId id, const store::TaskRow* stored,
              std::uint64_t generation, store::Millis now) HF_EXCLUDES(mu_);
  // Task `id` is no longer waiting (bound, failed, or changed by someone
  // else since it was read).
  void Remove(store::RowId id) HF_EXCLUDES(mu_);

  // How many tasks are held; without the lock.
  int size() const { return size_.load(std::memory_order_relaxed); }
  // How many held tasks wait for each class of reason
  // (PendingReasonClass of their stored pending_reason).
  std::map<std::string, int> ByReasonClass() const HF_EXCLUDES(mu_);

 private:
  struct Entry {
    store::TaskRow row;
    std::uint64_t failed_generation = 0;  // 0: never tried
    store::Millis last_try = 0;
  };
  void CountLocked() HF_REQUIRES(mu_) {
    size_.store(static_cast<int>(tasks_.size()), std::memory_order_relaxed);
  }

  mutable Mutex mu_;
  std::map<store::RowId, Entry> tasks_ HF_GUARDED_BY(mu_);
  std::atomic<int> size_{0};
};

}  // namespace hf::server
