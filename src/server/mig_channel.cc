// MigChannel (mig_channel.h): commands built, claimed, reported and marked
// stuck; orphaned partitions noted. Every write here runs through the host:
// releases reach the ledger after the commit.
#include "server/mig_channel.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "server/internal.h"

namespace hf::server {

using store::Millis;
using store::NodeRow;
using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;
using store::Txn;

store::SliceRequestRow MigChannel::CommandFor(const store::SliceRow& slice,
                                              std::string action, int gpu_index,
                                              Millis now) {
  store::SliceRequestRow cmd;
  cmd.node_id = slice.node_id;
  cmd.slice_id = slice.id;
  cmd.task_id = slice.task_id;
  cmd.action = std::move(action);
  cmd.gpu_index = gpu_index;
  cmd.gpu_uuid = host_->GpuUuid(slice.node_id, gpu_index);
  cmd.created_at = now;
  cmd.deadline_at = now + deadline_ms_;
  return cmd;
}

Status MigChannel::NoteOrphans(const NodeRow& node,
                               const wire::NodeReport& report) {
  // What is on each MIG GPU now, as the agent reports it.
  std::map<int, std::vector<std::string>> reported;
  for (const wire::GpuReport& g : report.gpus) {
    if (g.mig_devices) reported[g.index] = *g.mig_devices;
  }
  if (reported.empty()) return Status::Ok();
  std::set<std::string> owned;
  std::set<int> creating;  // GPUs with a create in flight
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    owned.clear();
    creating.clear();
    store::SliceFilter f;
    f.node_id = node.id;
    f.live_only = true;
    HF_RETURN_IF_ERROR(ForEachSlice(txn, f, [&](SliceRow& s) -> Status {
      if (!s.mig_device_id.empty()) owned.insert(s.mig_device_id);
      return Status::Ok();
    }));
    store::SliceRequestFilter rf;
    rf.node_id = node.id;
    HF_RETURN_IF_ERROR(ForEachOpenSliceRequest(
        txn, rf, [&](store::SliceRequestRow& r) -> Status {
          if (r.action == "create") creating.insert(r.gpu_index);
          if (!r.device_id.empty()) owned.insert(r.device_id);
          return Status::Ok();
        }));
    return Status::Ok();
  }));
  const MigBook::Noted noted =
      book_.NoteReport(node.id, reported, owned, creating);
  if (!noted.noted) return Status::Ok();
  const auto& fresh = noted.fresh;
  // Two heartbeats at once write what each saw: the set is noted again by
  // the next report that changes it.
  const Millis now = clock_->NowMillis();
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    for (const auto& [index, device] : fresh) {
      store::HistoryRow h;
      h.op = "mig_orphaned";
      h.at = now;
      h.node_id = node.id;
      h.gpu_indices = {index};
      h.actor = "agent:" + node.name;
      h.reason = "MIG_PARTITION_ORPHANED: " + device + " on GPU " +
                 std::to_string(index) +
                 " belongs to no slice (destroy it with nvidia-smi once "
                 "nothing uses it; it takes the card's capacity meanwhile)";
      HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
    }
    // Kept in the store, so a restart does not note them again.
    return txn.SetMeta(kMigOrphansNotedKey, *noted.noted);
  }));
  for (const auto& [index, device] : fresh) {
    spdlog::warn("node {}: MIG_PARTITION_ORPHANED {} on GPU {}", node.name,
                 device, index);
  }
  return Status::Ok();
}

StatusOr<std::vector<store::SliceRequestRow>> MigChannel::Claim(
    const Caller& caller, const std::string& node) {
  auto row = host_->NodeForAgent(caller, node);
  if (!row.ok()) return row.status();
  constexpr std::size_t kMaxOffered = 100;
  std::vector<store::SliceRequestRow> out;
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    out.clear();
    const Millis now = clock_->NowMillis();
    // Commands this node claimed and has not reported are offered again:
    // the claim's reply may have been lost, or the agent died before it
    // wrote them down. The agent knows a command by its id and carries each
    // out once (Agent::HandleMigCommand). Destroys past their deadline are
    // offered too (the partition still has to go); creates past theirs are
    // not (their task has moved on: RunGcOnce).
    for (auto state :
         {store::SliceRequestState::kClaimed, store::SliceRequestState::kStuck,
          store::SliceRequestState::kPending}) {
      store::SliceRequestFilter f;
      f.node_id = row->id;
      f.state = state;
      HF_RETURN_IF_ERROR(
          ForEachSliceRequest(txn, f, [&](store::SliceRequestRow& r) -> Status {
            if (out.size() >= kMaxOffered) return Status::Ok();
            if (state == store::SliceRequestState::kStuck &&
                r.action != "destroy") {
              return Status::Ok();
            }
            if (state == store::SliceRequestState::kPending) {
              r.state = store::SliceRequestState::kClaimed;
              r.claimed_at = now;
              HF_RETURN_IF_ERROR(txn.UpdateSliceRequest(r));
            }
            out.push_back(r);
            return Status::Ok();
          }));
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    return Status::Ok();
  }));
  return out;
}

Status MigChannel::CheckReporter(const Caller& caller, RowId id) {
  HF_RETURN_IF_ERROR(RequireAgent(caller));
  return store_->Read([&](Txn& txn) -> Status {
    return CheckReporterIn(txn, caller, id).status();
  });
}

StatusOr<store::SliceRequestRow> MigChannel::CheckReporterIn(
    Txn& txn, const Caller& caller, RowId id) {
  auto r = txn.GetSliceRequest(id);
  if (!r.ok())
    return Status::NotFound("no slice request " + std::to_string(id));
  if (caller.node) {
    auto node = txn.GetNode(r->node_id);
    if (!node.ok()) return node.status();
    HF_RETURN_IF_ERROR(RequireAgentFor(caller, node->name));
  }
  return *r;
}

StatusOr<store::SliceRequestRow> MigChannel::Report(
    const Caller& caller, RowId id, const wire::MigResult& result) {
  HF_RETURN_IF_ERROR(RequireAgent(caller));
  store::SliceRequestRow out;
  bool requeue = false;
  bool repeated = false;
  std::optional<GpuKey> full;  // the card had no room for the partition
  // The releases reach the ledger after the commit; a card found full is
  // marked before they do, so no bind pass they wake places gold there.
  auto written = writer_->WriteReleases(
      [&](Txn& txn, std::vector<RowId>& released) -> Status {
        requeue = false;
        repeated = false;
        full.reset();
        auto r = CheckReporterIn(txn, caller, id);
        if (!r.ok()) return r.status();
        store::SliceRequestRow cmd = *r;
        if (cmd.state == store::SliceRequestState::kDone ||
            cmd.state == store::SliceRequestState::kFailed) {
          out = cmd;  // repeated report: idempotent
          repeated = true;
          return Status::Ok();
        }
        // A result after the deadline (the command is marked stuck): the
        // hardware state is known again. A late create's task has moved on, so
        // a partition it made is destroyed below; a late destroy counts.
        const bool late = cmd.state == store::SliceRequestState::kStuck;
        const Millis now = clock_->NowMillis();
        cmd.finished_at = now;
        auto slice = txn.GetSlice(cmd.slice_id);
        if (!slice.ok()) return slice.status();
        SliceRow s = *slice;
        store::HistoryRow h = HistoryFor(s, "mig_" + cmd.action);
        h.at = now;
        h.actor = caller.Actor();
        if (cmd.action == "create") {
          if (result.ok && !result.device_id.empty() &&
              (late || s.state != store::SliceState::kAllocated)) {
            // Released while the partition was being created, or created after
            // the deadline: destroy it now (never an orphan).
            cmd.state = store::SliceRequestState::kDone;
            cmd.device_id = result.device_id.substr(0, 256);
            s.mig_device_id = cmd.device_id;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
            store::SliceRequestRow destroy =
                CommandFor(s, "destroy", cmd.gpu_index, now);
            destroy.gpu_uuid = cmd.gpu_uuid;  // the card the create was sent to
            destroy.profile = cmd.profile;
            destroy.device_id = cmd.device_id;
            HF_RETURN_IF_ERROR(txn.InsertSliceRequest(destroy).status());
            if (s.state == store::SliceState::kAllocated) {
              s.state = store::SliceState::kReleasing;
              HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
            }
            h.reason = "MIG partition " + cmd.device_id +
                       (late ? " created after the command's deadline"
                             : " created after its slice was released") +
                       "; destroying it";
          } else if (result.ok && !result.device_id.empty()) {
            cmd.state = store::SliceRequestState::kDone;
            cmd.device_id = result.device_id.substr(0, 256);
            s.mig_device_id = cmd.device_id;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
            if (s.task_id) {
              auto t = txn.GetTask(*s.task_id);
              if (t.ok() && t->slice_id == s.id) {
                TaskRow task = *t;
                task.labels["heteroflow.mig_device_id"] = cmd.device_id;
                ApplySliceEnv(host_->SliceEnvFor(s, task), task.env);
                task.updated_at = now;
                HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
              }
            }
            h.reason = "MIG partition " + cmd.device_id + " created";
          } else if (late) {
            // Nothing was made; the cleanup destroy GC wrote releases the
            // slice.
            cmd.state = store::SliceRequestState::kFailed;
            cmd.error = (result.error.empty() ? std::string("MIG create failed")
                                              : result.error) +
                        " (reported after the deadline)";
            h.op = "mig_create_failed";
            h.reason = cmd.error;
          } else {
            // Roll the bind back: release the slice, strip the env, the task
            // goes back to pending and is retried.
            cmd.state = store::SliceRequestState::kFailed;
            cmd.error =
                result.error.empty() ? "MIG create failed" : result.error;
            if (cmd.error.find("RESOURCE_EXHAUSTED") != std::string::npos) {
              // No room on the card as it really is: no more gold there until
              // its partitions change (Placement::Blocked).
              full = GpuKey{cmd.node_id, cmd.gpu_index};
            }
            s.state = store::SliceState::kReleased;
            s.released_at = now;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
            released.push_back(s.id);
            if (s.task_id) {
              auto t = txn.GetTask(*s.task_id);
              if (t.ok() && t->slice_id == s.id &&
                  t->state == TaskState::kScheduled) {
                TaskRow task = *t;
                auto node_row = txn.GetNode(cmd.node_id);
                UnbindTask(task, "MIG partition create failed on node " +
                                     (node_row.ok() ? node_row->name : "?") +
                                     " GPU " + std::to_string(cmd.gpu_index) +
                                     ": " + cmd.error);
                task.updated_at = now;
                HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
                requeue = true;
              }
            }
            h.op = "release";
            h.reason = "MIG create failed: " + cmd.error;
          }
        } else {  // destroy
          if (result.ok) {
            cmd.state = store::SliceRequestState::kDone;
            if (s.state != store::SliceState::kReleased) {
              s.state = store::SliceState::kReleased;
              s.released_at = now;
              HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
              released.push_back(s.id);
            }
            h.op = "release";
            h.reason = "MIG partition destroyed";
          } else {
            cmd.state = store::SliceRequestState::kFailed;
            cmd.error = (result.orphaned ? "MIG_PARTITION_ORPHANED: " : "") +
                        (result.error.empty() ? std::string("destroy failed")
                                              : result.error);
            h.op = result.orphaned ? "mig_orphaned" : "mig_destroy_failed";
            h.reason = cmd.error + " (the slice stays accounted)";
          }
        }
        HF_RETURN_IF_ERROR(txn.UpdateSliceRequest(cmd));
        HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
        out = cmd;
        return Status::Ok();
      },
      [&] {
        if (full) {
          book_.MarkFull(*full, monotonic_->NowMillis() + kMigFullMillis);
        }
      });
  if (!written.ok()) return written.status();
  if (!repeated && out.finished_at) {
    telemetry_->MigCommandFinished(
        out.action,
        out.state == store::SliceRequestState::kFailed ? "failed" : "done",
        static_cast<double>(*out.finished_at - out.created_at) / 1e3);
  }
  if (requeue) queue_->RequestResync();  // back to pending
  return out;
}

Status MigChannel::MarkStuck() {
  // MIG commands past their deadline: the hardware state is unknown.
  const Millis now = clock_->NowMillis();
  bool requeued = false;
  // Written as every release is (write_gate_ shared), though nothing is
  // freed here: a stuck create's slice stays charged, releasing, until its
  // destroy is reported.
  auto written = writer_->WriteReleases(
      [&](Txn& txn, [[maybe_unused]] std::vector<RowId>& released) -> Status {
        requeued = false;
        std::vector<store::SliceRequestRow> due;
        HF_RETURN_IF_ERROR(ForEachOpenSliceRequest(
            txn, {}, [&](store::SliceRequestRow& row) -> Status {
              if (row.deadline_at != 0 && row.deadline_at <= now) {
                due.push_back(row);
              }
              return Status::Ok();
            }));
        for (store::SliceRequestRow& row : due) {
          row.state = store::SliceRequestState::kStuck;
          row.error =
              "HARDWARE STATE UNKNOWN: no result from the agent before the "
              "deadline; check the GPU's MIG instances by hand";
          row.finished_at = now;
          HF_RETURN_IF_ERROR(txn.UpdateSliceRequest(row));
          if (row.action != "create") continue;  // a destroy is offered again
          // A create that may or may not have happened: its task is bound
          // again elsewhere, and the slice stays charged until the node says
          // what it holds for it (a cleanup destroy; a late result is handled
          // by ReportSliceRequest).
          auto slice = txn.GetSlice(row.slice_id);
          if (!slice.ok()) continue;
          SliceRow s = *slice;
          if (s.state == store::SliceState::kReleased) continue;
          if (s.state == store::SliceState::kAllocated) {
            s.state = store::SliceState::kReleasing;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
          }
          store::SliceRequestRow destroy =
              CommandFor(s, "destroy", row.gpu_index, now);
          destroy.gpu_uuid = row.gpu_uuid;  // the card the create was sent to
          destroy.profile = row.profile;
          destroy.device_id =
              s.mig_device_id;  // empty: whatever the create made
          HF_RETURN_IF_ERROR(txn.InsertSliceRequest(destroy).status());
          store::HistoryRow h = HistoryFor(s, "release_requested");
          h.at = now;
          h.actor = "gc";
          h.reason =
              "MIG create command " + std::to_string(row.id) +
              " got no result before its deadline (HARDWARE STATE "
              "UNKNOWN): the slice stays charged until the node cleans up";
          HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
          if (!s.task_id) continue;
          auto t = txn.GetTask(*s.task_id);
          if (!t.ok() || t->slice_id != s.id ||
              t->state != TaskState::kScheduled) {
            continue;
          }
          TaskRow task = *t;
          if (task.cancel_requested) {
            // It never started (gold waits for its device): cancelled now.
            task.state = TaskState::kCancelled;
            task.message = "cancelled; its MIG partition was never confirmed";
          } else {
            UnbindTask(
                task,
                "its MIG partition was not confirmed before the deadline; "
                "waiting to be bound again");
            requeued = true;
          }
          task.updated_at = now;
          HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
        }
        return Status::Ok();
      },
      nullptr);
  if (!written.ok()) return written.status();
  if (requeued) queue_->RequestResync();  // back to pending
  return Status::Ok();
}

}  // namespace hf::server
