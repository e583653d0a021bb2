// ControlPlane: the task API (docs/CONTRACT.md section 4) and task releases.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "server/control_plane.h"
#include "server/internal.h"
#include "server/slice_env.h"

namespace hf::server {

using store::Millis;

using store::Role;
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

// The profile of the create command that made `slice`'s partition (the
// destroy command names the same one), or "" when none is found.
StatusOr<std::string> CreatedMigProfile(Txn& txn,
                                        const store::SliceRow& slice) {
  store::SliceRequestFilter f;
  f.node_id = slice.node_id;
  f.state = store::SliceRequestState::kDone;
  f.limit = 1000;
  for (;;) {
    auto rows = txn.ListSliceRequests(f);
    if (!rows.ok()) return rows.status();
    for (const store::SliceRequestRow& row : *rows) {
      if (row.slice_id == slice.id && row.action == "create") {
        return row.profile;
      }
    }
    if (rows->size() < static_cast<size_t>(f.limit)) return std::string();
    f.after_id = rows->back().id;
  }
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

StatusOr<store::TenantRow> ControlPlane::ResolveTenantForWrite(
    const Caller& caller, const std::optional<std::string>& tenant) {
  if (caller.role == Role::kNode) {
    return Status::PermissionDenied("node tokens cannot act for tenants");
  }
  std::string name;
  if (caller.admin()) {
    name = tenant.value_or(std::string(kDefaultTenant));
  } else {
    if (tenant && *tenant != caller.tenant) {
      return Status::PermissionDenied(
          "only platform admins act on behalf of another tenant");
    }
    name = caller.tenant;
  }
  std::optional<store::TenantRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto t = txn.FindTenant(name);
    if (t.ok()) row = *t;
    return Status::Ok();
  }));
  if (!row)
    return Status::InvalidArgument("no tenant '" + name + "'", "tenant");
  return *row;
}

bool ControlPlane::CanSee(const Caller& caller, RowId tenant_id) const {
  if (caller.admin()) return true;
  if (caller.role == Role::kNode) return false;
  return caller.tenant_id && *caller.tenant_id == tenant_id;
}

StatusOr<TaskRow> ControlPlane::CreateTask(const Caller& caller,
                                           TaskCreate task) {
  HF_RETURN_IF_ERROR(ValidateTaskCreate(task));
  auto tenant = ResolveTenantForWrite(caller, task.tenant);
  if (!tenant.ok()) return tenant.status();
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
  HF_RETURN_IF_ERROR(store_->Write([&](Txn& txn) -> Status {
    auto inserted = txn.InsertTask(row);
    if (!inserted.ok()) return inserted.status();
    stored = *inserted;
    // A follower (no ledger) tells the leader through the store's task
    // feed; the leader queues its own tasks below.
    if (!recovered_.load()) {
      HF_RETURN_IF_ERROR(txn.NotifyTaskCreated(stored.id));
    }
    return task.in_txn ? task.in_txn(txn, stored) : Status::Ok();
  }));
  // A follower runs no scheduler: the leader finds the task in its next
  // store rescan (ControlPlaneOptions::resync_interval_ms).
  if (!recovered_.load()) return stored;
  queue_.Created(stored);
  return stored;
}

StatusOr<TaskRow> ControlPlane::GetTask(const Caller& caller, RowId id) {
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

StatusOr<TaskLog> ControlPlane::ReadTaskLog(const Caller& caller, RowId id,
                                            std::int64_t offset,
                                            std::int64_t limit) {
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

StatusOr<Page<TaskRow>> ControlPlane::ListTasks(const Caller& caller,
                                                const TaskQuery& query) {
  if (caller.role == Role::kNode) return Page<TaskRow>{};
  store::TaskFilter f;
  f.state = query.state;
  f.after = query.after;
  f.limit = query.limit + 1;
  if (!caller.admin()) {
    if (query.tenant && *query.tenant != caller.tenant) {
      return Status::PermissionDenied(
          "the tenant filter is for platform admins");
    }
    f.tenant_id = caller.tenant_id;
  } else if (query.tenant) {
    auto t = ResolveTenantForWrite(caller, query.tenant);
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

StatusOr<TaskRow> ControlPlane::CancelTask(const Caller& caller, RowId id) {
  auto current = GetTask(caller, id);
  if (!current.ok()) return current.status();
  if (caller.role == Role::kNode) {
    return Status::PermissionDenied("node tokens cannot cancel tasks");
  }
  std::vector<RowId> released;
  TaskRow out;
  // Written without mu_; the releases reach the ledger after the commit.
  ReaderLock gate(write_gate_);
  HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
    released.clear();
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
        // scheduled task: the agent may have fetched it and not reported
        // yet). The agent stops it, or says it never started it, and
        // reports `cancelled`; the slice is released then, once its GPU
        // memory is really free (or when the node is declared lost:
        // RunGcOnce).
        if (row.cancel_requested) {
          out = row;
          return Status::Ok();
        }
        row.cancel_requested = true;
        row.message = "cancel requested by " + caller.Actor();
        break;
      case TaskState::kPending:
        // Bound nowhere: nothing runs it.
        HF_RETURN_IF_ERROR(ReleaseTaskSliceInTxn(txn, row, caller.Actor(),
                                                 "task cancelled", released));
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
  }));
  MutexLock lock(mu_);
  ApplyReleasesLocked(released);
  return out;
}

// ------------------------------------------------------------- releases

Status ControlPlane::ReleaseInTxn(Txn& txn, store::SliceRow& slice,
                                  const std::string& actor,
                                  const std::string& reason,
                                  std::vector<RowId>& released) {
  if (slice.state != store::SliceState::kAllocated) return Status::Ok();
  telemetry_->NoteReleasePath(slice.id, ReleasePath(actor, reason));
  const store::Millis now = clock_->NowMillis();
  store::HistoryRow h = HistoryFor(slice, "release");
  h.at = now;
  h.actor = actor;
  h.reason = reason;
  if (slice.qos_level == "gold" && slice.mig_device_id.empty()) {
    // No partition exists yet. An unclaimed create is withdrawn and the
    // slice released now; a create the agent is executing is left to
    // finish, and its result writes the destroy (ReportSliceRequest).
    bool in_flight = false;
    for (auto state : {store::SliceRequestState::kPending,
                       store::SliceRequestState::kClaimed}) {
      store::SliceRequestFilter f;
      f.node_id = slice.node_id;
      f.state = state;
      HF_RETURN_IF_ERROR(ForEachSliceRequest(
          txn, f, [&](store::SliceRequestRow& row) -> Status {
            if (row.slice_id != slice.id || row.action != "create") {
              return Status::Ok();
            }
            if (state == store::SliceRequestState::kPending) {
              row.state = store::SliceRequestState::kFailed;
              row.error =
                  "withdrawn: the slice was released before the agent "
                  "claimed the command";
              row.finished_at = now;
              return txn.UpdateSliceRequest(row);
            }
            in_flight = true;
            return Status::Ok();
          }));
    }
    if (in_flight) {
      slice.state = store::SliceState::kReleasing;
      HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
      h.op = "release_requested";
      h.reason +=
          " (the MIG partition is being created; it is destroyed "
          "when the agent reports it)";
      return txn.AppendHistory(h).status();
    }
  }
  if (slice.qos_level == "gold" && !slice.mig_device_id.empty()) {
    // The partition holds its memory until the agent destroys it: the slice
    // stays accounted (releasing) until the destroy command succeeds.
    slice.state = store::SliceState::kReleasing;
    HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
    store::SliceRequestRow cmd;
    cmd.node_id = slice.node_id;
    cmd.slice_id = slice.id;
    cmd.task_id = slice.task_id;
    cmd.action = "destroy";
    cmd.gpu_index = slice.gpu_indices.empty() ? 0 : slice.gpu_indices[0];
    cmd.gpu_uuid = GpuUuid(slice.node_id, cmd.gpu_index);
    auto profile = CreatedMigProfile(txn, slice);
    if (!profile.ok()) return profile.status();
    cmd.profile = *profile;
    cmd.device_id = slice.mig_device_id;
    cmd.created_at = now;
    cmd.deadline_at = now + options_.mig_command_deadline_ms;
    HF_RETURN_IF_ERROR(txn.InsertSliceRequest(cmd).status());
    h.op = "release_requested";
    h.reason += " (waiting for the MIG partition to be destroyed)";
    return txn.AppendHistory(h).status();
  }
  slice.state = store::SliceState::kReleased;
  slice.released_at = now;
  HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
  HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
  released.push_back(slice.id);
  return Status::Ok();
}

Status ControlPlane::ReleaseTaskSliceInTxn(Txn& txn, const TaskRow& task,
                                           const std::string& actor,
                                           const std::string& reason,
                                           std::vector<RowId>& released) {
  if (!task.slice_id) return Status::Ok();
  auto slice = txn.GetSlice(*task.slice_id);
  if (!slice.ok()) {
    return slice.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                          : slice.status();
  }
  return ReleaseInTxn(txn, *slice, actor, reason, released);
}

void ControlPlane::ApplyReleasesLocked(const std::vector<RowId>& released) {
  if (released.empty()) return;
  for (RowId id : released) {
    Status s = ledger_->Release(SliceId(static_cast<std::uint64_t>(id)));
    if (!s.ok() && s.code() != StatusCode::kNotFound) {
      spdlog::error("ledger release of slice {} failed: {}", id, s.ToString());
    }
  }
  usage_.Forget(released);
  for (RowId id : released) telemetry_->SliceReleased(id);
  queue_.CapacityFreed();
}

}  // namespace hf::server
