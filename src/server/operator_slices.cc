// OperatorSlices (operator_slices.h): reservations, DELETE and resizes.
#include "server/operator_slices.h"

#include <spdlog/spdlog.h>

#include "scheduler/qos.h"
#include "server/internal.h"

namespace hf::server {

using store::Millis;
using store::Role;
using store::RowId;
using store::SliceRow;
using store::Txn;

StatusOr<SliceRow> OperatorSlices::Create(const Caller& caller,
                                          const SliceCreate& request) {
  if (!caller.admin() && caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "operator slices need an admin or tenant-admin token");
  }
  std::optional<std::string> tenant_name;
  if (!request.tenant.empty()) tenant_name = request.tenant;
  // Who may call is checked before what they sent.
  HF_RETURN_IF_ERROR(CheckActsFor(caller, tenant_name));
  if (!request.memory_mib && !request.compute_percent) {
    return Status::InvalidArgument(
        "a slice needs gpu_memory_mb and/or gpu_compute_ratio",
        "gpu_memory_mb");
  }
  if (request.memory_mib && *request.memory_mib < 32) {
    return Status::InvalidArgument("must be at least 32 (MB)", "gpu_memory_mb");
  }
  if (request.gpu_index && !request.node) {
    return Status::InvalidArgument("needs node_id", "gpu_index");
  }
  auto tenant = tenancy_->ResolveTenantForWrite(caller, tenant_name);
  if (!tenant.ok()) return tenant.status();
  std::optional<store::NodeRow> node;
  if (request.node) {
    HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
      auto n = txn.FindNode(*request.node);
      if (n.ok()) node = *n;
      return Status::Ok();
    }));
    if (!node) {
      return Status::InvalidArgument("no node '" + *request.node + "'",
                                     "node_id");
    }
  }
  const store::Millis now = clock_->NowMillis();
  // Reserved in the ledger under mu_, written without it, undone under it
  // if the write fails.
  ReaderLock gate(ledger_->write_gate());
  MutexLock lock(ledger_->mu());
  ledger::PlacementRequest pr = ledger::PlacementRequest::Slice(
      TenantId(tenant->id), request.memory_mib, request.compute_percent);
  if (node) {
    // The operator's node (and GPU): a filter of the placement pipeline; the
    // ledger's rules and the policy decide the rest.
    auto ledger_node = ledger_->inventory().SyncNode(*node);
    if (!ledger_node.ok()) return ledger_node.status();
    pr.pinned_node = *ledger_node;
    if (request.gpu_index) {
      auto g = ledger_->inventory().Gpu(node->id, *request.gpu_index);
      if (!g.ok()) {
        return Status::InvalidArgument("node '" + node->name + "' has no GPU " +
                                           std::to_string(*request.gpu_index),
                                       "gpu_index");
      }
      pr.pinned_gpu = *g;
    }
  }
  // As every placement: expired approvals withdrawn first, the MIG GPUs
  // that take no new partition left out.
  ledger::PlacementResult result = ledger_->placement().Place(pr);
  if (!result.placed()) {
    if (result.outcome == ledger::PlacementOutcome::kInvalid) {
      return result.status;
    }
    if (pr.pinned_gpu) {
      std::optional<ledger::RejectReason> why;
      ledger_->ledger().Read([&](const ledger::ClusterView& view) {
        why = view.CheckSlice(view.gpu(*pr.pinned_gpu), pr);
      });
      if (why) {
        return Status::ResourceExhausted(
            "GPU " + std::to_string(*request.gpu_index) + " of node '" +
            node->name + "' cannot take this slice now (" +
            ledger::RejectReasonName(*why) + ")");
      }
    }
    return Status::ResourceExhausted(
        result.message.empty() ? std::string("does not fit") : result.message);
  }
  const ledger::Allocation& a = result.allocation;
  SliceRow slice = ledger_->SliceRowOf(a);
  // An operator reservation has no task to enforce anything in.
  slice.enforcement = {};
  slice.origin = "admin";
  slice.created_at = now;
  lock.Unlock();
  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    HF_RETURN_IF_ERROR(txn.InsertSlice(slice));
    store::HistoryRow h = HistoryFor(slice, "allocate");
    h.at = now;
    h.actor = caller.Actor();
    h.reason = request.reason.empty() ? "operator reservation"
                                      : request.reason.substr(0, 1024);
    return txn.AppendHistory(h).status();
  });
  if (!written.ok()) {
    lock.Lock();
    (void)ledger_->ledger().Release(a.id);
    queue_->CapacityFreed();
    return written;
  }
  telemetry_->SliceLive(slice);
  return slice;
}

StatusOr<SliceRow> OperatorSlices::Delete(const Caller& caller, RowId id,
                                          const std::string& reason) {
  if (!caller.admin() && caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "deleting slices needs an admin or tenant-admin token");
  }
  auto visible = host_->GetSlice(caller, id);
  if (!visible.ok()) return visible.status();
  SliceRow out;
  const std::string why =
      reason.empty() ? "deleted by an operator" : reason.substr(0, 1024);
  // A slice recovery could not restore fences its GPUs: its deletion reads
  // the node's GPU rows too, to lift the fence after the commit.
  bool fenced = false;
  {
    MutexLock lock(ledger_->mu());
    fenced = ledger_->inventory().Unrestored(id);
  }
  std::optional<store::NodeRow> node;
  std::vector<store::GpuRow> gpus;
  // Written without mu_; the releases reach the ledger after the commit,
  // then the fence is lifted.
  auto written = writer_->WriteReleases(
      [&](Txn& txn, std::vector<RowId>& released) -> Status {
        node.reset();
        gpus.clear();
        auto s = txn.GetSlice(id);
        if (!s.ok()) return s.status();
        out = *s;
        if (fenced) {
          auto n = txn.GetNode(out.node_id);
          if (n.ok()) {
            node = *n;
            auto g = txn.ListGpus(out.node_id);
            if (!g.ok()) return g.status();
            gpus = std::move(*g);
          }
        }
        std::optional<store::TaskRow> task;
        if (out.task_id && out.state == store::SliceState::kAllocated) {
          auto t = txn.GetTask(*out.task_id);
          if (t.ok() && t->slice_id == out.id) task = *t;
        }
        if (task && task->state == store::TaskState::kRunning) {
          // Releasing it would leave a running task unaccounted.
          return Status::FailedPrecondition(
              "slice " + std::to_string(id) + " belongs to running task " +
              std::to_string(task->id) +
              "; cancel the task (POST /api/v1/tasks/" +
              std::to_string(task->id) + "/cancel) to release it");
        }
        if (task && task->state == store::TaskState::kScheduled) {
          // Bound to a node that may have started it already: the slice
          // stays charged (releasing) while the node stops the task; its
          // report releases the slice and sends the task back to pending,
          // to be bound again with a fresh env (ReportTaskStates).
          out.state = store::SliceState::kReleasing;
          HF_RETURN_IF_ERROR(txn.UpdateSlice(out));
          store::HistoryRow h = HistoryFor(out, "release_requested");
          h.at = clock_->NowMillis();
          h.actor = caller.Actor();
          h.reason =
              why + " (task " + std::to_string(task->id) +
              " is bound to its node: released once the node has stopped "
              "it, then the task is bound again)";
          return txn.AppendHistory(h).status();
        }
        return releases_->ReleaseInTxn(txn, out, caller.Actor(), why, released);
      });
  if (!written.ok()) return written.status();
  if (out.state == store::SliceState::kReleasing) {
    host_->NodeHasWork(out.node_id);  // it stops the slice's task
  }
  MutexLock lock(ledger_->mu());
  HF_RETURN_IF_ERROR(ledger_->inventory().Unfence(id, node, gpus));
  return out;
}

StatusOr<SliceResize> OperatorSlices::Resize(
    const Caller& caller, RowId id, const SliceResizeRequest& request) {
  if (!caller.admin() && caller.role != Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "resizing slices needs an admin or tenant-admin token");
  }
  // Who may call (404 for another tenant's slice) before what they sent.
  auto visible = host_->GetSlice(caller, id);
  if (!visible.ok()) return visible.status();
  const std::int64_t memory = request.memory_mib;
  if (memory < ledger::kMinSliceMemoryMib || memory % 32 != 0 ||
      memory > (std::int64_t{1} << 40)) {
    return Status::InvalidArgument(
        "must be at least 32 and a multiple of 32 (MB), got " +
            std::to_string(memory),
        "memory_mb");
  }
  const std::string why = request.reason.substr(0, 1024);
  // One resize at a time: each reads the size it changes from the store
  // and commits without mu_, so two at once could leave the ledger with
  // one's size and the store with the other's.
  MutexLock one_resize(resize_mu_);
  SliceRow current;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto s = txn.GetSlice(id);
    if (!s.ok()) return s.status();
    current = *s;
    return Status::Ok();
  }));
  const std::string name = "slice " + std::to_string(id);
  if (current.state != store::SliceState::kAllocated) {
    return Status::FailedPrecondition(
        name + " is " + std::string(store::SliceStateName(current.state)) +
        ": only a live slice can be resized");
  }
  if (current.whole) {
    return Status::FailedPrecondition(
        name +
        " holds whole GPUs: they are not sliced and have no memory quota "
        "to change");
  }
  if (current.qos_level == "gold") {
    return Status::FailedPrecondition(
        name + " is a gold slice, a MIG partition" +
        (current.mig_device_id.empty() ? ""
                                       : " (" + current.mig_device_id + ")") +
        ": a partition cannot change size; run the task again with the new "
        "gpu_memory_mb to get a partition of that size");
  }
  const std::int64_t old = current.memory_mib;
  if (memory == old) return SliceResize{current, {}};
  const SliceId ledger_id(static_cast<std::uint64_t>(id));
  // Like a placement, a raise takes the capacity first (undone if the write
  // fails); like a release, a lowering gives it back after the commit. The
  // write runs without mu_.
  ReaderLock gate(ledger_->write_gate());
  MutexLock lock(ledger_->mu());
  if (memory > old) {
    auto raised = ledger_->ledger().ResizeSlice(ledger_id, memory);
    if (!raised.ok()) {
      if (raised.status().code() == StatusCode::kFailedPrecondition) {
        return Status::FailedPrecondition("cannot raise " + name + " to " +
                                          std::to_string(memory) +
                                          " MB: " + raised.status().message());
      }
      return raised.status();
    }
  } else {
    auto a = ledger_->ledger().GetAllocation(ledger_id);
    if (!a || a->kind != ledger::RequestKind::kSlice) {
      return Status::Internal(name + " is not a slice in the ledger");
    }
  }
  const Millis now = clock_->NowMillis();
  SliceResize out;
  bool task_running = false;
  lock.Unlock();
  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    task_running = false;
    auto s = txn.GetSlice(id);
    if (!s.ok()) return s.status();
    SliceRow slice = *s;
    if (slice.state != store::SliceState::kAllocated ||
        slice.memory_mib != old) {
      // Released (or changed) since it was read: the ledger's change is
      // undone below.
      return Status::FailedPrecondition(name +
                                        " changed while it was resized; retry");
    }
    slice.memory_mib = memory;
    HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
    store::HistoryRow h = HistoryFor(slice, "slice_resized");
    h.at = now;
    h.actor = caller.Actor();
    h.reason = "memory_mb " + std::to_string(old) + " -> " +
               std::to_string(memory) + (why.empty() ? "" : ": " + why);
    HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
    if (slice.task_id) {
      auto t = txn.GetTask(*slice.task_id);
      if (t.ok() && t->slice_id == slice.id && !store::IsTerminal(t->state)) {
        // The task's slice env names the new quota (a task that starts
        // later gets it; a running one gets it through its hook region).
        store::TaskRow task = *t;
        ApplySliceEnv(host_->SliceEnvFor(slice, task), task.env);
        task.updated_at = now;
        HF_RETURN_IF_ERROR(txn.UpdateTask(task).status());
        task_running = task.state == store::TaskState::kRunning;
      }
    }
    out.slice = slice;
    return Status::Ok();
  });
  lock.Lock();
  if (!written.ok()) {
    if (memory > old) (void)ledger_->ledger().ResizeSlice(ledger_id, old);
    return written;
  }
  if (memory < old) {
    auto lowered = ledger_->ledger().ResizeSlice(ledger_id, memory);
    if (!lowered.ok()) {
      spdlog::error("ledger resize of slice {} failed: {}", id,
                    lowered.status().ToString());
    }
    queue_->CapacityFreed();
  }
  std::vector<std::string>& warnings = out.warnings;
  if (memory < old) {
    warnings.push_back(
        "the quota was lowered from " + std::to_string(old) + " to " +
        std::to_string(memory) +
        " MB: a task already using more keeps what it holds, but its next "
        "allocations fail with CUDA out-of-memory errors until its usage "
        "drops below the new quota (the task may hit OOM)");
  }
  std::string listed;
  bool hooked = false;
  for (const std::string& e : out.slice.enforcement) {
    listed += (listed.empty() ? "" : ",") + e;
    hooked |= e == "hook";
  }
  if (task_running && !hooked) {
    warnings.push_back(
        "the hook is not attached to this slice's task (enforcement: " +
        (listed.empty() ? std::string("none") : listed) +
        "): the ledger accounts the new quota, but nothing enforces it "
        "inside the running task");
  }
  if (task_running && out.slice.qos_level == "silver") {
    warnings.push_back(
        "MPS fixed the pinned-memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) "
        "of the task's processes when they started; they keep it until the "
        "task restarts" +
        std::string(memory > old
                        ? ", so they may not reach the raised quota before"
                        : ""));
  }
  return out;
}

}  // namespace hf::server
