#include "server/scheduler_queue.h"

#include <utility>

namespace hf::server {

void SchedulerQueue::SetFeedActive(bool active) {
  MutexLock lock(mu_);
  feed_active_ = active;
  if (!active) created_here_.clear();
}

void SchedulerQueue::Created(store::TaskRow task) {
  {
    MutexLock lock(mu_);
    if (feed_active_) created_here_.insert(task.id);
    created_.push_back(std::move(task));
  }
  work_cv_.NotifyAll();
}

void SchedulerQueue::Committed(store::RowId id) {
  {
    MutexLock lock(mu_);
    if (id == 0) {
      resync_ = true;
      created_here_.clear();  // the rescan reads them all anyway
    } else if (created_here_.erase(id) == 0) {
      committed_.push_back(id);
    }
    if (created_here_.size() > kMaxCreatedHere) created_here_.clear();
  }
  work_cv_.NotifyAll();
}

void SchedulerQueue::RequestResync() {
  {
    MutexLock lock(mu_);
    resync_ = true;
  }
  work_cv_.NotifyAll();
}

void SchedulerQueue::SweepIfDue(store::Millis now) {
  MutexLock lock(mu_);
  if (last_sweep_ != 0 && now - last_sweep_ < resync_interval_ms_ &&
      now >= last_sweep_) {
    return;
  }
  if (last_sweep_ != 0) resync_ = true;  // other paths or instances
  last_sweep_ = now;
}

void SchedulerQueue::CapacityFreed() {
  generation_.fetch_add(1);
  work_cv_.NotifyAll();
}

SchedulerQueue::Work SchedulerQueue::Take() {
  Work work;
  MutexLock lock(mu_);
  work.created.swap(created_);
  work.committed.swap(committed_);
  work.resync = std::exchange(resync_, false);
  return work;
}

bool SchedulerQueue::HasWorkLocked(std::uint64_t seen_generation) const {
  return !created_.empty() || !committed_.empty() || resync_ ||
         generation_.load() != seen_generation;
}

bool SchedulerQueue::WaitForWork(std::uint64_t seen_generation,
                                 std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  work_cv_.WaitFor(mu_, timeout, [&] {
    mu_.AssertHeld();  // a predicate runs with the lock held
    return stop_ || HasWorkLocked(seen_generation);
  });
  return !stop_;
}

bool SchedulerQueue::Sleep(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  sleep_cv_.WaitFor(mu_, timeout, [&] {
    mu_.AssertHeld();  // a predicate runs with the lock held
    return stop_;
  });
  return !stop_;
}

void SchedulerQueue::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  sleep_cv_.NotifyAll();
}

void SchedulerQueue::Resume() {
  MutexLock lock(mu_);
  stop_ = false;
}

}  // namespace hf::server
