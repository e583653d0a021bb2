// Scheduler (scheduler.h): the bind pass and its loop.
#include "server/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <set>
#include <string_view>

#include "gpu/mig_profiles.h"
#include "server/internal.h"

namespace hf::server {

using store::Millis;
using store::RowId;

using store::SliceRow;
using store::TaskRow;
using store::TaskState;
using store::Txn;

namespace {

// A waiting task's pending_reason whose class has not changed is written
// again at most this often.
constexpr store::Millis kPendingReasonRefreshMs = 60'000;

struct Decision {
  RowId task_id = 0;
  enum Kind { kPlaced, kWaiting, kFailed } kind = kWaiting;
  TaskRow updated;     // the row to write (CAS on its version)
  bool write = false;  // kWaiting: only when the reason changed
  SliceRow slice;      // kPlaced
  std::optional<store::SliceRequestRow> mig_create;  // kPlaced, gold
  bool claim_lost = false;  // set inside the transaction
  TaskRow stored;           // set inside the transaction
};

}  // namespace

StatusOr<int> Scheduler::BindPendingOnce(bool* more) {
  MutexLock bind_lock(bind_mu_);
  if (more != nullptr) *more = false;
  SchedulerQueue::Work work = queue_->Take();
  std::vector<TaskRow>& incoming = work.created;
  std::vector<RowId>& created = work.committed;
  const bool resync = work.resync;
  if (resync) {
    std::vector<TaskRow> rows;
    RowId after = 0;
    for (;;) {
      std::vector<TaskRow> page;
      HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
        store::TaskFilter f;
        f.state = TaskState::kPending;
        f.after_id = after;
        f.limit = 1000;
        auto listed = txn.ListTasks(f);
        if (!listed.ok()) return listed.status();
        page = std::move(*listed);
        return Status::Ok();
      }));
      if (page.empty()) break;
      after = page.back().id;
      std::move(page.begin(), page.end(), std::back_inserter(rows));
    }
    pending_.Replace(std::move(rows));
  }
  for (TaskRow& t : incoming) pending_.Add(std::move(t));
  // Tasks other instances created (the task feed): read those not held.
  const std::vector<RowId> unknown =
      resync ? std::vector<RowId>{} : pending_.Unknown(created);
  if (!unknown.empty()) {
    std::vector<TaskRow> rows;
    HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
      rows.clear();
      for (RowId id : unknown) {
        auto t = txn.GetTask(id);
        if (t.ok()) {
          if (t->state == TaskState::kPending) rows.push_back(*std::move(t));
        } else if (t.status().code() != StatusCode::kNotFound) {
          return t.status();
        }
      }
      return Status::Ok();
    }));
    for (TaskRow& t : rows) pending_.Add(std::move(t));
  }

  HF_RETURN_IF_ERROR(EndHoldIfStale());
  {
    MutexLock lock(ledger_->mu());
    ledger_->placement().ForgetNoHold(
        [&](store::RowId id) { return !pending_.Unknown({id}).empty(); });
  }

  const std::uint64_t generation = queue_->generation();
  const store::Millis now = clock_->NowMillis();
  std::vector<TaskRow> batch = pending_.Due(
      generation, now, options_.retry_interval_ms, options_.bind_batch);
  if (batch.empty()) return 0;
  if (more != nullptr) {
    *more = static_cast<int>(batch.size()) >= options_.bind_batch;
  }

  // The placements are reserved in the ledger under mu_, written without
  // it (other placements see the reservations meanwhile), and undone under
  // it if the write fails: the ledger never holds less than the store.
  ReaderLock gate(ledger_->write_gate());
  std::vector<Decision> decisions;
  decisions.reserve(batch.size());
  MutexLock lock(ledger_->mu());
  Placement& placement = ledger_->placement();
  bool hold_ended = false;
  for (TaskRow& due : batch) {
    Decision d;
    d.task_id = due.id;
    d.updated = std::move(due);  // the copy Due() made is the row to write
    // The task as read: each branch below reads it before changing it.
    const TaskRow& task = d.updated;
    const ledger::PlacementRequest request = placement.RequestFor(task);
    placement.Learn(task, request);  // once: ids only grow
    ledger::PlacementRequest asked = request;
    placement.ApplyHold(task.id, asked);
    ledger::PlacementResult result = placement.Place(std::move(asked));
    const bool holder = placement.HoldOf(task.id) != nullptr;
    if (result.placed() && holder) {
      spdlog::info("scheduler: hold for task {} ended: bound", task.id);
      placement.EndHold(task.id);
      hold_ended = true;
    }
    if (result.placed()) {
      const ledger::Allocation& a = result.allocation;
      SliceRow& slice = d.slice;
      slice = ledger_->SliceRowOf(a);
      slice.task_id = task.id;
      slice.origin = "scheduler";
      slice.created_at = now;
      if (slice.qos_level ==
              scheduler::QosLevelName(scheduler::QosLevel::kGold) &&
          !slice.whole) {
        store::SliceRequestRow cmd =
            mig_->CommandFor(slice, "create", slice.gpu_indices[0], now);
        cmd.profile = a.mig_profile;
        cmd.mig_start = a.mig_start;
        d.mig_create = cmd;
      }
      TaskRow& t = d.updated;
      t.state = TaskState::kScheduled;
      t.slice_id = slice.id;
      t.node_id = slice.node_id;
      t.gpu_indices = slice.gpu_indices;
      t.pending_reason.clear();
      t.message.clear();
      StripBindingLabels(t.labels);
      // Strip every variable of an older slice, inject this one's.
      ApplySliceEnv(host_->SliceEnvFor(slice, t), t.env);
      t.updated_at = now;
      d.kind = Decision::kPlaced;
      d.write = true;
    } else if (result.outcome == ledger::PlacementOutcome::kInvalid &&
               result.status.code() == StatusCode::kInvalidArgument) {
      // The request itself can never be placed. (A policy whose choice the
      // ledger refused is the platform's fault, not the task's: that is
      // retried below, never failed.)
      d.kind = Decision::kFailed;
      d.updated.state = TaskState::kFailed;
      d.updated.pending_reason.clear();
      d.updated.message = "cannot be scheduled: " + result.status.ToString();
      d.updated.updated_at = now;
      d.write = true;
    } else {
      d.kind = Decision::kWaiting;
      if (result.outcome == ledger::PlacementOutcome::kInvalid) {
        spdlog::error("scheduler: task {}: {}", task.id,
                      result.status.ToString());
        result.message = "the scheduler could not place it (" +
                         result.status.message() + "); retrying";
      }
      // Written when its class changes (PendingReasonClass), or when its
      // text changed and the stored one is kPendingReasonRefreshMs old:
      // the counts in it move with every capacity change, and would
      // otherwise rewrite every waiting task each time.
      UpdateHold(task, request, result.message, now, hold_ended);
      std::string reason = result.message;
      const std::string holds = placement.DescribeHolds();
      if (!holds.empty()) reason += "; " + holds;
      // A hold that began or ended is written at once, like a new class:
      // the stored reason ends with other holds than these (or names one
      // where none is left).
      const bool holds_changed =
          holds.empty() ? Placement::NamesHold(task.pending_reason)
                        : !task.pending_reason.ends_with("; " + holds);
      const bool class_changed = std::string_view(PendingReasonClass(reason)) !=
                                     PendingReasonClass(task.pending_reason) ||
                                 holds_changed;
      if (reason != task.pending_reason &&
          (class_changed || now - task.updated_at >= kPendingReasonRefreshMs)) {
        d.updated.pending_reason = reason;
        d.updated.updated_at = now;
        d.write = true;
      }
    }
    decisions.push_back(std::move(d));
  }
  telemetry_->SetHeldGpus(placement.HeldGpuCount());
  lock.Unlock();

  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    // Each kind of row in one batch call: on PostgreSQL a statement per
    // kind instead of a round trip per row.
    std::vector<Decision*> writing;
    std::vector<store::TaskRow> updates;
    for (Decision& d : decisions) {
      d.claim_lost = false;
      if (!d.write) continue;
      writing.push_back(&d);
      updates.push_back(d.updated);
    }
    auto stored = txn.UpdateTasks(updates);
    if (!stored.ok()) return stored.status();
    std::vector<SliceRow> slices;
    std::vector<store::HistoryRow> history;
    std::vector<store::SliceRequestRow> commands;
    for (std::size_t i = 0; i < writing.size(); ++i) {
      Decision& d = *writing[i];
      StatusOr<TaskRow>& row = (*stored)[i];
      if (!row.ok()) {
        if (row.status().code() == StatusCode::kAborted ||
            row.status().code() == StatusCode::kNotFound) {
          d.claim_lost = true;  // changed (e.g. cancelled) since we read it
          continue;
        }
        return row.status();
      }
      d.stored = *std::move(row);
      if (d.kind != Decision::kPlaced) continue;
      slices.push_back(d.slice);
      store::HistoryRow h = HistoryFor(d.slice, "allocate");
      h.at = d.slice.created_at;
      h.actor = "scheduler";
      h.reason = "bound task " + std::to_string(d.task_id) + " (" +
                 d.slice.qos_level + ")";
      // Which leader bound it (several instances): the term shows in the
      // history that no stale leader bound after a takeover.
      if (fence_ != nullptr) {
        h.reason += " by leader term " + std::to_string(fence_->Term());
      }
      history.push_back(std::move(h));
      if (d.mig_create) commands.push_back(*d.mig_create);
    }
    HF_RETURN_IF_ERROR(txn.InsertSlices(slices));
    HF_RETURN_IF_ERROR(txn.AppendHistories(history).status());
    return txn.InsertSliceRequests(commands).status();
  });

  int bound = 0;
  bool lost_any = false;
  std::vector<SliceId> undo;  // reservations the store did not take
  for (Decision& d : decisions) {
    if (!written.ok() || d.claim_lost) {
      if (d.kind == Decision::kPlaced) {
        undo.push_back(SliceId(static_cast<std::uint64_t>(d.slice.id)));
      }
      if (d.claim_lost) {
        pending_.Remove(d.task_id);
        lost_any = true;
      }
      continue;
    }
    if (d.kind == Decision::kWaiting) {
      pending_.Waited(d.task_id, d.write ? &d.stored : nullptr, generation,
                      now);
      continue;
    }
    if (d.kind == Decision::kPlaced) {
      ++bound;
      host_->NodeHasWork(d.slice.node_id);
      telemetry_->SliceLive(d.slice);
      telemetry_->Bound(static_cast<double>(now - d.stored.created_at) / 1e3);
    }
    pending_.Remove(d.task_id);
  }
  if (hold_ended) queue_->CapacityFreed();  // its GPUs take tasks again
  if (!undo.empty()) {
    lock.Lock();
    for (SliceId id : undo) (void)ledger_->ledger().Release(id);
    lock.Unlock();
  }
  telemetry_->SetPending(pending_.ByReasonClass());
  if (lost_any) queue_->RequestResync();
  if (!written.ok()) {
    queue_->CapacityFreed();  // the undone placements freed capacity again
    return written.WithContext("persisting a bind batch");
  }
  return bound;
}

Status Scheduler::EndHoldIfStale() {
  std::vector<store::RowId> holders;
  {
    MutexLock lock(ledger_->mu());
    for (const Placement::Hold& hold : ledger_->placement().holds()) {
      holders.push_back(hold.task_id);
    }
  }
  if (holders.empty()) {
    telemetry_->SetHeldGpus(0);
    return Status::Ok();
  }
  // Their rows, not what pending_ holds: a task cancelled while it waits
  // stays there until its next try.
  std::vector<store::RowId> gone;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    gone.clear();
    for (const store::RowId holder : holders) {
      auto t = txn.GetTask(holder);
      if (t.ok()) {
        if (t->state != TaskState::kPending) gone.push_back(holder);
      } else if (t.status().code() == StatusCode::kNotFound) {
        gone.push_back(holder);
      } else {
        return t.status();
      }
    }
    return Status::Ok();
  }));
  if (gone.empty()) return Status::Ok();
  int held = 0;
  {
    MutexLock lock(ledger_->mu());
    Placement& placement = ledger_->placement();
    for (const store::RowId holder : gone) {
      pending_.Remove(holder);
      if (placement.HoldOf(holder) == nullptr) continue;
      spdlog::info("scheduler: hold for task {} ended: it no longer waits",
                   holder);
      placement.EndHold(holder);
    }
    held = placement.HeldGpuCount();
  }
  telemetry_->SetHeldGpus(held);
  queue_->CapacityFreed();  // their GPUs take tasks again
  return Status::Ok();
}

void Scheduler::UpdateHold(const TaskRow& task,
                           const ledger::PlacementRequest& request,
                           const std::string& message, store::Millis now,
                           bool& hold_ended) {
  Placement& placement = ledger_->placement();
  // Only a task waiting for room: more of it will not come otherwise.
  const std::string_view why = PendingReasonClass(message);
  const bool for_room = why == "memory" || why == "compute" ||
                        why == "whole_gpus" || why == "no_fit";
  const scheduler::HoldChange change = placement.UpdateHold(
      task.id, request,
      scheduler::HoldRules{options_.hold_after_ms, options_.max_holds},
      for_room, now - task.created_at, now);
  switch (change) {
    case scheduler::HoldChange::kNone:
      break;
    case scheduler::HoldChange::kBegan:
      spdlog::info("scheduler: task {} waited {} s for room: {}", task.id,
                   (now - task.created_at) / 1000,
                   placement.DescribeHold(*placement.HoldOf(task.id)));
      break;
    case scheduler::HoldChange::kEndedDrained:
    case scheduler::HoldChange::kEndedChanged:
      spdlog::warn(
          "scheduler: hold for task {} ended: {} and it still does not fit "
          "there",
          task.id,
          change == scheduler::HoldChange::kEndedDrained ? "its GPUs drained"
                                                         : "its GPUs changed");
      hold_ended = true;
      break;
  }
}

StatusOr<int> Scheduler::Pass(bool* more) {
  queue_->SweepIfDue(clock_->NowMillis());
  auto bound = BindPendingOnce(more);
  if (!bound.ok()) {
    if (more != nullptr) *more = false;
    queue_->RequestResync();
  }
  return bound;
}

void Scheduler::Run() {
  std::uint64_t last_generation = 0;
  bool more = false;  // the last pass filled a batch: a backlog remains
  for (;;) {
    // With a backlog the next pass runs at once (stop permitting).
    const auto wait = std::chrono::milliseconds(more ? 0 : 500);
    if (!queue_->WaitForWork(last_generation, wait)) return;
    last_generation = queue_->generation();
    auto bound = Pass(&more);
    if (!bound.ok()) {
      spdlog::error("scheduler: {}", bound.status().ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

}  // namespace hf::server
