#include "server/pending_tasks.h"

#include <set>
#include <utility>

#include "server/telemetry.h"

namespace hf::server {

using store::RowId;
using store::TaskRow;

void PendingTasks::Replace(std::vector<TaskRow> rows) {
  MutexLock lock(mu_);
  std::map<RowId, Entry> fresh;
  for (TaskRow& row : rows) {
    Entry entry;
    auto old = tasks_.find(row.id);
    if (old != tasks_.end() && old->second.row.version == row.version) {
      entry.failed_generation = old->second.failed_generation;
      entry.last_try = old->second.last_try;
    }
    entry.row = std::move(row);
    const RowId id = entry.row.id;
    fresh[id] = std::move(entry);
  }
  tasks_ = std::move(fresh);
  CountLocked();
}

void PendingTasks::Add(TaskRow row) {
  MutexLock lock(mu_);
  const RowId id = row.id;
  tasks_.try_emplace(id, Entry{std::move(row)});
  CountLocked();
}

std::vector<RowId> PendingTasks::Unknown(const std::vector<RowId>& ids) const {
  std::set<RowId> unknown;
  MutexLock lock(mu_);
  for (RowId id : ids) {
    if (!tasks_.contains(id)) unknown.insert(id);
  }
  return {unknown.begin(), unknown.end()};
}

std::vector<TaskRow> PendingTasks::Due(std::uint64_t generation,
                                       store::Millis now,
                                       store::Millis retry_interval_ms,
                                       int limit) const {
  std::vector<TaskRow> due;
  MutexLock lock(mu_);
  for (const auto& [id, entry] : tasks_) {
    if (static_cast<int>(due.size()) >= limit) break;
    const bool fresh = entry.failed_generation == 0;
    const bool capacity_moved = entry.failed_generation != generation;
    const bool retry_due = now - entry.last_try >= retry_interval_ms;
    if (fresh || capacity_moved || retry_due) due.push_back(entry.row);
  }
  return due;
}

void PendingTasks::Waited(RowId id, const TaskRow* stored,
                          std::uint64_t generation, store::Millis now) {
  MutexLock lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  if (stored != nullptr) it->second.row = *stored;
  it->second.failed_generation = generation;
  it->second.last_try = now;
}

void PendingTasks::Remove(RowId id) {
  MutexLock lock(mu_);
  tasks_.erase(id);
  CountLocked();
}

std::map<std::string, int> PendingTasks::ByReasonClass() const {
  std::map<std::string, int> by_reason;
  MutexLock lock(mu_);
  for (const auto& [id, entry] : tasks_) {
    ++by_reason[PendingReasonClass(entry.row.pending_reason)];
  }
  return by_reason;
}

}  // namespace hf::server
