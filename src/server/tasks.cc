#include "server/tasks.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "server/internal.h"
#include "server/slice_env.h"
#include "server/telemetry.h"

namespace hf::server {

using store::Role;
using store::RowId;
using store::TaskRow;
using store::TaskState;
using store::Txn;

namespace {

bool ValidEnvName(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  if (std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

Status ValidateTaskCreate(const TaskCreate& task) {
  if (task.name.empty()) return Status::InvalidArgument("is required", "name");
  if (task.name.size() > 253) {
    return Status::InvalidArgument("must be at most 253 characters", "name");
  }
  HF_RETURN_IF_ERROR(ValidateName(task.gpu_type, "gpu_type"));
  if (task.gpu_required < 0) {
    return Status::InvalidArgument("must not be negative", "gpu_required");
  }
  if (task.gpu_required > 64) {
    return Status::InvalidArgument("must be at most 64", "gpu_required");
  }
  const bool slice_fields = task.memory_mib || task.compute_percent;
  if (task.gpu_required > 0 && slice_fields) {
    return Status::InvalidArgument(
        "whole GPUs (gpu_required > 0) cannot be combined with "
        "gpu_memory_mb or gpu_compute_ratio",
        "gpu_required");
  }
  if (task.gpu_required == 0 && !slice_fields) {
    return Status::InvalidArgument(
        "a GPU slice needs gpu_memory_mb and/or gpu_compute_ratio (or set "
        "gpu_required for whole GPUs)",
        "gpu_memory_mb");
  }
  if (task.memory_mib && *task.memory_mib < 32) {
    return Status::InvalidArgument(
        "must be at least 32 (MB), got " + std::to_string(*task.memory_mib),
        "gpu_memory_mb");
  }
  if (task.memory_mib && *task.memory_mib > (std::int64_t{1} << 40)) {
    return Status::InvalidArgument("is larger than any GPU", "gpu_memory_mb");
  }
  if (task.compute_percent &&
      (*task.compute_percent < 1 || *task.compute_percent > 100)) {
    return Status::InvalidArgument("must be in (0, 1]", "gpu_compute_ratio");
  }
  for (const auto& [name, value] : task.env) {
    if (!ValidEnvName(name)) {
      return Status::InvalidArgument(
          "is not a valid variable name (letters, digits, '_'; not starting "
          "with a digit)",
          "env." + name);
    }
    if (IsReservedEnvName(name)) {
      return Status::InvalidArgument(
          "is set by the platform for the slice and cannot be given",
          "env." + name);
    }
  }
  for (const auto& [name, value] : task.labels) {
    if (name.empty() || name.size() > 253) {
      return Status::InvalidArgument("label names are 1..253 characters",
                                     "labels." + name);
    }
    if (name.starts_with("heteroflow.")) {
      return Status::InvalidArgument(
          "labels starting with 'heteroflow.' are set by the platform",
          "labels." + name);
    }
  }
  return Status::Ok();
}

StatusOr<TaskRow> Tasks::CreateTask(const Caller& caller, TaskCreate task) {
  // Who may call is checked before what they sent.
  auto tenant = tenancy_->ResolveTenantForWrite(caller, task.tenant);
  if (!tenant.ok()) return tenant.status();
  HF_RETURN_IF_ERROR(ValidateTaskCreate(task));
  TaskRow row;
  row.tenant_id = tenant->id;
  row.name = std::move(task.name);
  row.image = std::move(task.image);
  row.command = std::move(task.command);
  row.command_is_shell = task.command_is_shell;
  row.gpu_type = std::move(task.gpu_type);
  row.gpu_required = task.gpu_required;
  row.memory_mib = task.memory_mib;
  row.compute_percent = task.compute_percent;
  row.preemptible = task.preemptible;
  row.gpu_compute_mode = task.gpu_compute_mode;
  row.user_env = task.env;
  row.env = std::move(task.env);
  row.labels = std::move(task.labels);
  row.state = TaskState::kPending;
  row.pending_reason = kNotTriedReason;
  row.created_at = row.updated_at = clock_->NowMillis();
  TaskRow stored;
  const bool scheduling = host_->Scheduling();
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    auto inserted = txn.InsertTask(row);
    if (!inserted.ok()) return inserted.status();
    stored = *inserted;
    // A follower (no ledger) tells the leader through the store's task
    // feed; the leader queues its own tasks below.
    if (!scheduling) {
      HF_RETURN_IF_ERROR(txn.NotifyTaskCreated(stored.id));
    }
    return task.in_txn ? task.in_txn(txn, stored) : Status::Ok();
  }));
  // A follower runs no scheduler: the leader finds the task in its next
  // store rescan (ControlPlaneOptions::resync_interval_ms).
  if (scheduling) host_->TaskQueued(stored);
  return stored;
}

StatusOr<TaskRow> Tasks::GetTask(const Caller& caller, RowId id) {
  std::optional<TaskRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto t = txn.GetTask(id);
    if (t.ok()) row = *t;
    return t.ok() || t.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                                : t.status();
  }));
  if (!row || !CanSee(caller, row->tenant_id)) {
    return Status::NotFound("no task " + std::to_string(id));
  }
  return *row;
}

StatusOr<TaskLog> Tasks::ReadTaskLog(const Caller& caller, RowId id,
                                     std::int64_t offset, std::int64_t limit) {
  if (offset < 0) return Status::InvalidArgument("must be >= 0", "offset");
  if (limit < 1 || limit > (1 << 20)) {
    return Status::InvalidArgument("must be 1..1048576 bytes", "limit");
  }
  auto task = GetTask(caller, id);
  if (!task.ok()) return task.status();
  TaskLog out;
  out.offset = offset;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto size = txn.TaskLogSize(id);
    if (!size.ok()) return size.status();
    out.size = *size;
    auto data = txn.ReadTaskLog(id, offset, limit);
    if (!data.ok()) return data.status();
    out.data = std::move(*data);
    return Status::Ok();
  }));
  out.truncated = out.size >= kMaxTaskLogBytes;
  return out;
}

StatusOr<Page<TaskRow>> Tasks::ListTasks(const Caller& caller,
                                         const TaskQuery& query) {
  if (caller.role == Role::kNode) return Page<TaskRow>{};
  store::TaskFilter f;
  f.state = query.state;
  f.after = query.after;
  f.limit = query.limit + 1;
  if (!caller.admin()) {
    HF_RETURN_IF_ERROR(CheckActsFor(caller, query.tenant));
    f.tenant_id = caller.tenant_id;
  } else if (query.tenant) {
    auto t = tenancy_->ResolveTenantForWrite(caller, query.tenant);
    if (!t.ok()) return t.status();
    f.tenant_id = t->id;
  }
  Page<TaskRow> page;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListTasks(f);
    if (!rows.ok()) return rows.status();
    page.items = std::move(*rows);
    return Status::Ok();
  }));
  TrimToPage(page, query.limit);
  return page;
}

StatusOr<TaskRow> Tasks::CancelTask(const Caller& caller, RowId id) {
  auto current = GetTask(caller, id);
  if (!current.ok()) return current.status();
  if (caller.role == Role::kNode) {
    return Status::PermissionDenied("node tokens cannot cancel tasks");
  }
  TaskRow out;
  // The releases reach the ledger after the commit.
  auto written = writer_->WriteReleases(
      [&](Txn& txn, std::vector<RowId>& released) -> Status {
        auto t = txn.GetTask(id);
        if (!t.ok()) return t.status();
        TaskRow row = *t;
        switch (row.state) {
          case TaskState::kCancelled:
            out = row;
            return Status::Ok();
          case TaskState::kSucceeded:
          case TaskState::kFailed:
            return Status::FailedPrecondition(
                "task " + std::to_string(id) + " already " +
                std::string(store::TaskStateName(row.state)));
          case TaskState::kScheduled:
          case TaskState::kRunning:
            // Bound to a node, which may have started it already (even a
            // scheduled task: the agent may have fetched it and not
            // reported yet). The agent stops it, or says it never started
            // it, and reports `cancelled`; the slice is released then, once
            // its GPU memory is really free (or when the node is declared
            // lost: RunGcOnce).
            if (row.cancel_requested) {
              out = row;
              return Status::Ok();
            }
            row.cancel_requested = true;
            row.message = "cancel requested by " + caller.Actor();
            break;
          case TaskState::kPending:
            // Bound nowhere: nothing runs it.
            HF_RETURN_IF_ERROR(host_->ReleaseTaskSliceInTxn(
                txn, row, caller.Actor(), "task cancelled", released));
            row.state = TaskState::kCancelled;
            row.cancel_requested = true;
            row.pending_reason.clear();
            row.message = "cancelled by " + caller.Actor();
            break;
        }
        row.updated_at = clock_->NowMillis();
        auto updated = txn.UpdateTask(row);
        if (!updated.ok()) return updated.status();
        out = *updated;
        return Status::Ok();
      });
  if (!written.ok()) return written.status();
  if (out.node_id && out.cancel_requested &&
      (out.state == TaskState::kScheduled ||
       out.state == TaskState::kRunning)) {
    host_->NodeHasWork(*out.node_id);
  }
  return out;
}

}  // namespace hf::server
