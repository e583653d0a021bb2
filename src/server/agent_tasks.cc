// ControlPlane: the agent's side of its tasks (docs/CONTRACT.md sections
// 5 and 8): the assignments a node's agent starts and stops, the task
// states it reports (a stopped task's slice released, a deleted slice's
// task bound again, a defragmentation move landed on its target) and the
// task output it ships. Registration and heartbeats: Nodes (nodes.h).
#include "server/control_plane.h"
#include "server/internal.h"

namespace hf::server {

using store::TaskRow;
using store::TaskState;
using store::Txn;

StatusOr<Assignments> ControlPlane::GetAssignments(const Caller& caller,
                                                   const std::string& node) {
  auto row = NodeForAgent(caller, node);
  if (!row.ok()) return row.status();
  Assignments out;
  // One snapshot: `bound` and `cancel` together are every task the node
  // may hold, so the agent stops whatever else it runs (Agent::Reconcile).
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    out = Assignments{};
    for (TaskState state : {TaskState::kScheduled, TaskState::kRunning}) {
      store::TaskFilter f;
      f.state = state;
      f.node_id = row->id;
      f.limit = 1000;
      for (;;) {
        auto tasks = txn.ListTasks(f);
        if (!tasks.ok()) return tasks.status();
        for (TaskRow& t : *tasks) {
          // A task whose slice an operator deleted is stopped as a
          // cancelled one is: its slice is released when the node reports
          // it stopped (ReportTaskStates).
          bool slice_live = true;
          if (t.slice_id) {
            auto slice = txn.GetSlice(*t.slice_id);
            slice_live =
                slice.ok() && slice->state == store::SliceState::kAllocated;
          }
          if (t.slice_id) out.slices[t.id] = *t.slice_id;
          if (t.cancel_requested || !slice_live) {
            out.cancel.push_back(t.id);
            continue;
          }
          out.bound.push_back(t.id);
          if (state != TaskState::kScheduled) continue;
          auto qos = t.env.find("HETEROFLOW_SLICE_QOS");
          const bool gold = qos != t.env.end() && qos->second == "gold";
          // A gold task is held until its MIG device exists (docs/CONTRACT.md
          // section 8).
          if (gold && !t.labels.contains("heteroflow.mig_device_id")) continue;
          out.run.push_back(std::move(t));
        }
        if (static_cast<int>(tasks->size()) < f.limit) break;
        f.after_id = tasks->back().id;
      }
    }
    return Status::Ok();
  }));
  return out;
}

StatusOr<NodeWork::Waited> ControlPlane::WaitForNodeWork(
    const Caller& caller, const std::string& node, std::uint64_t after,
    std::chrono::milliseconds timeout) {
  auto row = NodeForAgent(caller, node);
  if (!row.ok()) return row.status();
  return node_work_.Wait(row->id, after, timeout);
}

StatusOr<int> ControlPlane::ReportTaskStates(
    const Caller& caller, const std::string& node,
    const std::vector<TaskStateReport>& states) {
  auto row = NodeForAgent(caller, node);
  if (!row.ok()) return row.status();
  int accepted = 0;
  bool requeued = false;
  std::vector<RowId> woken;  // targets of the moves that landed
  auto written = WriteReleases([&](Txn& txn,
                                   std::vector<RowId>& released) -> Status {
    accepted = 0;
    requeued = false;
    woken.clear();
    for (std::size_t i = 0; i < states.size(); ++i) {
      const TaskStateReport& r = states[i];
      auto t = txn.GetTask(r.task_id);
      if (!t.ok() || t->node_id != row->id) {
        return Status::InvalidArgument(
            "task " + std::to_string(r.task_id) + " is not bound to node " +
                node,
            "states[" + std::to_string(i) + "].task_id");
      }
      TaskRow task = *t;
      if (store::IsTerminal(task.state) || task.state == r.state) continue;
      if (r.slice_id && task.slice_id != r.slice_id) {
        continue;  // about an earlier binding of the task: stale
      }
      if (r.state == TaskState::kPending || r.state == TaskState::kScheduled) {
        return Status::InvalidArgument(
            "agents report running, succeeded, failed or cancelled",
            "states[" + std::to_string(i) + "].state");
      }
      task.updated_at = clock_->NowMillis();
      if (!store::IsTerminal(r.state)) {
        task.state = r.state;
        HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
        ++accepted;
        continue;
      }
      // The node has stopped the task (or it ended): its slice is free now.
      bool rebind = false;
      if (task.slice_id) {
        auto slice = txn.GetSlice(*task.slice_id);
        if (slice.ok() && slice->state != store::SliceState::kReleased) {
          store::SliceRow s = *slice;
          // Releasing here means an operator deleted it while the task was
          // bound: stopped on that request, the task is bound again.
          rebind = s.state == store::SliceState::kReleasing &&
                   !task.cancel_requested && r.state == TaskState::kCancelled;
          s.state = store::SliceState::kAllocated;  // the node confirmed
          HF_RETURN_IF_ERROR(releases_.ReleaseInTxn(
              txn, s, "agent:" + node,
              "task " + std::string(store::TaskStateName(r.state)) +
                  (rebind ? " (its slice was deleted)" : ""),
              released));
        } else if (!slice.ok() &&
                   slice.status().code() != StatusCode::kNotFound) {
          return slice.status();
        }
      }
      // A defragmentation move stopped it: bound to its reserved target.
      bool landed = false;
      if (task.slice_id) {
        auto moved = LandMoveInTxn(txn, task, *task.slice_id, rebind, released);
        if (!moved.ok()) return moved.status();
        landed = *moved;
      }
      if (landed) {
        // `task` is bound to the move's target now (LandMoveInTxn).
        if (task.node_id) woken.push_back(*task.node_id);
      } else if (rebind) {
        std::string why = "its slice ";
        why += std::to_string(task.slice_id.value_or(0));
        why += " was deleted; stopped on node " + node;
        why += ", waiting to be bound again";
        UnbindTask(task, std::move(why));
        requeued = true;
      } else {
        task.state = r.state;
        task.exit_code = r.exit_code;
        if (!r.message.empty()) task.message = r.message.substr(0, 4096);
      }
      HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
      ++accepted;
    }
    return Status::Ok();
  });
  if (!written.ok()) return written.status();
  if (requeued) queue_.RequestResync();
  for (const RowId target : woken) node_work_.Changed(target);
  return accepted;
}

StatusOr<std::int64_t> ControlPlane::AppendTaskLog(const Caller& caller,
                                                   const std::string& node,
                                                   RowId task_id,
                                                   std::int64_t offset,
                                                   std::string_view data) {
  auto row = NodeForAgent(caller, node);
  if (!row.ok()) return row.status();
  if (offset < 0) return Status::InvalidArgument("must be >= 0", "offset");
  std::int64_t size = 0;
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    auto task = txn.GetTask(task_id);
    if (!task.ok() || task->node_id != row->id) {
      return Status::NotFound("no task " + std::to_string(task_id) +
                              " on node '" + node + "'");
    }
    auto current = txn.TaskLogSize(task_id);
    if (!current.ok()) return current.status();
    size = *current;
    if (offset > size) {
      return Status::InvalidArgument(
          "is past the end of the log the server holds (" +
              std::to_string(size) + " bytes): ship from there",
          "offset");
    }
    // Skip what the server already holds (a retried request).
    const auto skip = static_cast<std::size_t>(size - offset);
    if (skip >= data.size()) return Status::Ok();
    std::string_view fresh = data.substr(skip);
    const std::int64_t room = kMaxTaskLogBytes - size;
    if (room <= 0) return Status::Ok();
    fresh = fresh.substr(0, static_cast<std::size_t>(room));
    HF_RETURN_IF_ERROR(txn.AppendTaskLog(task_id, size, fresh));
    size += static_cast<std::int64_t>(fresh.size());
    return Status::Ok();
  }));
  return size;
}

}  // namespace hf::server
