// Tasks: the task API (docs/CONTRACT.md section 4): create (validated here
// again, whatever path the request came by), read, list, cancel and the
// task's log. Tasks are rows in the store; a task created on the leader is
// handed to its scheduler (TaskHost::TaskQueued), one created on a follower
// reaches the leader through the store's task feed. A cancel that releases
// a slice writes the release, and the ledger learns it after the commit
// (LeaderWriter::WriteReleases).
//
// Thread-safety: no state of its own (the store holds the tasks); safe from
// any thread. It calls TaskHost without holding any lock.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/gpu_compute_mode.h"
#include "common/status.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/page.h"
#include "server/tenancy.h"
#include "store/store.h"

namespace hf::server {

// A validated POST /api/v1/tasks (src/api does the JSON-level checks; the
// rules of docs/CONTRACT.md section 4 on the values are checked again here, in
// `ValidateTaskCreate`, so no path can skip them).
struct TaskCreate {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  bool command_is_shell = false;
  std::string gpu_type = "nvidia";
  int gpu_required = 0;
  std::optional<std::int64_t> memory_mib;
  std::optional<int> compute_percent;  // 1..100
  bool preemptible = false;
  GpuComputeMode gpu_compute_mode = kDefaultGpuComputeMode;
  store::StringMap env;
  store::StringMap labels;
  std::optional<std::string> tenant;  // admins acting for a tenant
  // Runs inside the transaction that inserts the task, with the stored row;
  // its failure rolls the insert back. The API records the request's
  // Idempotency-Key here, so the task and its record commit together.
  std::function<Status(store::Txn&, const store::TaskRow&)> in_txn;
};

// The one function holding the value rules of docs/CONTRACT.md section 4.
Status ValidateTaskCreate(const TaskCreate& task);

struct TaskQuery {
  std::optional<store::TaskState> state;
  std::optional<std::string> tenant;  // admins only
  store::ListPosition after;          // a client's cursor (store.h)
  int limit = 100;
};

// A piece of a task's log (GET /api/v1/tasks/{id}/logs).
struct TaskLog {
  std::int64_t offset = 0;
  std::string data;        // raw bytes
  std::int64_t size = 0;   // all the server holds
  bool truncated = false;  // the agent stopped shipping at the size cap
};

// The most log bytes the server keeps per task; later output is dropped.
inline constexpr std::int64_t kMaxTaskLogBytes = 8 << 20;

// What Tasks needs of the control plane.
class TaskHost {
 public:
  virtual ~TaskHost() = default;
  // Whether this instance schedules (it leads, its ledger recovered): then
  // the tasks it creates are queued for its scheduler; otherwise the
  // leader learns them through the store's task feed.
  virtual bool Scheduling() const = 0;
  // A pending task this instance committed, for its scheduler.
  virtual void TaskQueued(const store::TaskRow& task) = 0;
  // Inside a releasing write (LeaderWriter::WriteReleases): releases `task`'s
  // slice (if any), listing what is free now in `released`.
  virtual Status ReleaseTaskSliceInTxn(store::Txn& txn,
                                       const store::TaskRow& task,
                                       const std::string& actor,
                                       const std::string& reason,
                                       std::vector<store::RowId>& released) = 0;
  // Node `node` has new work (a cancel of a task bound to it): wakes its
  // agent's wait (NodeWork).
  virtual void NodeHasWork(store::RowId /*node*/) {}
};

class Tasks {
 public:
  // `store`, `clock`, `tenancy`, `writer` and `host` must outlive the
  // Tasks.
  Tasks(store::Store* store, const Clock* clock, Tenancy* tenancy,
        LeaderWriter* writer, TaskHost* host)
      : store_(store),
        clock_(clock),
        tenancy_(tenancy),
        writer_(writer),
        host_(host) {}

  Tasks(const Tasks&) = delete;
  Tasks& operator=(const Tasks&) = delete;

  StatusOr<store::TaskRow> CreateTask(const Caller& caller, TaskCreate task);
  // NotFound for a task the caller may not see.
  StatusOr<store::TaskRow> GetTask(const Caller& caller, store::RowId id);
  StatusOr<Page<store::TaskRow>> ListTasks(const Caller& caller,
                                           const TaskQuery& query);
  // A pending task is cancelled (its slice released); a bound one is asked
  // to stop (its agent reports it cancelled). Idempotent.
  StatusOr<store::TaskRow> CancelTask(const Caller& caller, store::RowId id);
  // Up to `limit` bytes of the task's log from `offset`; 404 as GetTask.
  StatusOr<TaskLog> ReadTaskLog(const Caller& caller, store::RowId id,
                                std::int64_t offset, std::int64_t limit);

 private:
  store::Store* const store_;
  const Clock* const clock_;
  Tenancy* const tenancy_;
  LeaderWriter* const writer_;
  TaskHost* const host_;
};

}  // namespace hf::server
