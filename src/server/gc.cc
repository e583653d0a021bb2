// Gc (gc.h): orphaned slices, the tasks of lost nodes, stuck MIG commands.
#include "server/gc.h"

#include <map>
#include <string>
#include <vector>

#include "server/internal.h"

namespace hf::server {

using store::Millis;
using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;
using store::Txn;

StatusOr<int> Gc::RunOnce() {
  auto orphans = ReleaseOrphans();
  if (!orphans.ok()) return orphans.status();
  auto lost = ReleaseOnLostNodes();
  if (!lost.ok()) return lost.status();
  HF_RETURN_IF_ERROR(mig_->MarkStuck());
  return *orphans + *lost;
}

StatusOr<int> Gc::ReleaseOrphans() {
  const store::Millis now = clock_->NowMillis();
  struct Candidate {
    RowId slice_id;
    std::string reason;
  };
  std::vector<Candidate> candidates;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    candidates.clear();
    store::SliceFilter f;
    f.state = store::SliceState::kAllocated;
    return ForEachSlice(txn, f, [&](SliceRow& s) -> Status {
      if (!s.task_id) return Status::Ok();  // operator reservations stay
      if (now - s.created_at < options_.min_age_ms) return Status::Ok();
      auto task = txn.GetTask(*s.task_id);
      if (!task.ok()) {
        if (task.status().code() != StatusCode::kNotFound) {
          return task.status();
        }
        candidates.push_back({s.id, "orphan: task " +
                                        std::to_string(*s.task_id) +
                                        " no longer exists"});
      } else if (store::IsTerminal(task->state)) {
        candidates.push_back(
            {s.id, "orphan: task " + std::to_string(*s.task_id) + " is " +
                       std::string(store::TaskStateName(task->state))});
      } else if (task->slice_id != s.id) {
        candidates.push_back({s.id, "orphan: task " +
                                        std::to_string(*s.task_id) +
                                        " holds another slice"});
      }
      return Status::Ok();
    });
  }));

  if (candidates.empty()) return 0;
  // Only what is free now counts (a partition still to be destroyed keeps
  // its slice releasing).
  auto released = writer_->WriteReleases(
      [&](Txn& txn, std::vector<RowId>& freed) -> Status {
        for (const Candidate& c : candidates) {
          auto slice = txn.GetSlice(c.slice_id);
          if (!slice.ok()) continue;
          HF_RETURN_IF_ERROR(
              releases_->ReleaseInTxn(txn, *slice, "gc", c.reason, freed));
        }
        return Status::Ok();
      },
      nullptr);
  if (!released.ok()) return released.status();
  return *released;
}

StatusOr<int> Gc::ReleaseOnLostNodes() {
  const Millis since = monotonic_->NowMillis();
  std::map<RowId, Millis> silent;  // node id -> how long
  for (const auto& [node, seen] : beats_->SeenTimes()) {
    if (since - seen > options_.node_lost_ms) silent[node] = since - seen;
  }
  if (silent.empty()) return 0;
  const Millis now = clock_->NowMillis();
  bool requeued = false;
  auto written = writer_->WriteReleases(
      [&](Txn& txn, std::vector<RowId>& released) -> Status {
        requeued = false;
        for (const auto& [node_id, silence] : silent) {
          auto node = txn.GetNode(node_id);
          const std::string name =
              node.ok() ? node->name : std::to_string(node_id);
          const std::string lost = "node " + name + " lost (no heartbeat for " +
                                   std::to_string(silence / 1000) + " s)";
          for (TaskState state : {TaskState::kScheduled, TaskState::kRunning}) {
            store::TaskFilter f;
            f.state = state;
            f.node_id = node_id;
            std::vector<TaskRow> stop;  // tasks the node was asked to stop
            HF_RETURN_IF_ERROR(ForEachTask(txn, f, [&](TaskRow& t) -> Status {
              std::optional<SliceRow> slice;
              if (t.slice_id) {
                auto s = txn.GetSlice(*t.slice_id);
                if (s.ok()) slice = *s;
              }
              const bool deleted =
                  slice && slice->state == store::SliceState::kReleasing;
              if (t.cancel_requested || deleted) stop.push_back(t);
              return Status::Ok();
            }));
            for (TaskRow& t : stop) {
              bool rebind = false;
              std::optional<RowId> source;
              if (t.slice_id) {
                auto slice = txn.GetSlice(*t.slice_id);
                if (slice.ok() &&
                    slice->state != store::SliceState::kReleased) {
                  SliceRow s = *slice;
                  rebind = s.state == store::SliceState::kReleasing &&
                           !t.cancel_requested;
                  s.state = store::SliceState::kAllocated;
                  HF_RETURN_IF_ERROR(
                      releases_->ReleaseInTxn(txn, s, "gc", lost, released));
                  source = s.id;
                }
              }
              // A defragmentation move was stopping it: taken as stopped, it
              // lands on its reserved target, as when its node reports the stop
              // (a cancelled one gives the reservation back).
              bool landed = false;
              if (source) {
                auto moved =
                    host_->LandMoveInTxn(txn, t, *source, rebind, released);
                if (!moved.ok()) return moved.status();
                landed = *moved;
              }
              if (landed) {
                // `t` is bound to the move's target now (LandMoveInTxn).
              } else if (rebind) {
                UnbindTask(t, lost + "; waiting to be bound again");
                requeued = true;
              } else {
                t.state = TaskState::kCancelled;
                t.message = "cancelled: " + lost;
              }
              t.updated_at = now;
              HF_RETURN_IF_ERROR(txn.UpdateTask(t).status());
            }
          }
        }
        return Status::Ok();
      },
      nullptr);
  if (!written.ok()) return written.status();
  if (requeued) queue_->RequestResync();
  return *written;
}

}  // namespace hf::server
