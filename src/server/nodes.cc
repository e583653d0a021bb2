// Nodes (nodes.h): registration and heartbeats, the compensation path,
// the hook's reports, and the node views.
#include "server/nodes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "scheduler/qos.h"
#include "server/internal.h"

namespace hf::server {

using store::Millis;

using store::GpuRow;
using store::NodeRow;
using store::Role;
using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;
using store::Txn;
using wire::GpuReport;
using wire::HeartbeatReply;
using wire::HookReport;
using wire::NodeReport;
using wire::QuotaDirective;
using wire::ReportNumber;
using wire::RunningTask;

namespace {

Status ValidateNodeReport(const NodeReport& report) {
  HF_RETURN_IF_ERROR(ValidateName(report.name, "node_id"));
  if (report.gpus.size() > 64) {
    return Status::InvalidArgument("at most 64 GPUs per node", "gpus");
  }
  std::set<int> indices;
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < report.gpus.size(); ++i) {
    const GpuReport& g = report.gpus[i];
    const std::string at = "gpus[" + std::to_string(i) + "].";
    if (g.index < 0 || g.index > 1023) {
      return Status::InvalidArgument("must be 0..1023", at + "index");
    }
    if (!indices.insert(g.index).second) {
      return Status::InvalidArgument("appears twice", at + "index");
    }
    if (g.uuid.empty() || g.uuid.size() > 128) {
      return Status::InvalidArgument("is required (1..128 characters)",
                                     at + "uuid");
    }
    if (!uuids.insert(g.uuid).second) {
      return Status::InvalidArgument("appears twice", at + "uuid");
    }
    if (g.memory_mib <= 0) {
      return Status::InvalidArgument("must be positive", at + "memory_mb");
    }
    HF_RETURN_IF_ERROR(ValidateName(g.vendor, at + "vendor"));
  }
  return Status::Ok();
}

GpuRow GpuRowFrom(RowId node_id, const GpuReport& g, Millis now) {
  GpuRow row;
  row.node_id = node_id;
  row.index = g.index;
  row.uuid = g.uuid;
  row.vendor = g.vendor;
  row.model = g.model;
  row.memory_mib = g.memory_mib;
  row.cc_major = g.cc_major;
  row.cc_minor = g.cc_minor;
  row.mig_capable = g.mig_capable;
  row.mps_capable = g.mps_capable;
  row.lost = g.lost;
  row.updated_at = now;
  return row;
}

// The same card with the same capabilities and health: nothing to write.
bool SameGpu(const GpuRow& a, const GpuRow& b) {
  return CardOf(a) == CardOf(b) && a.mig_capable == b.mig_capable &&
         a.mps_capable == b.mps_capable && a.lost == b.lost;
}

}  // namespace

Status RequireAgent(const Caller& caller) {
  if (caller.role == Role::kNode || caller.admin()) return Status::Ok();
  return Status::PermissionDenied("this endpoint needs a node token");
}

Status RequireAgentFor(const Caller& caller, const std::string& node) {
  HF_RETURN_IF_ERROR(RequireAgent(caller));
  if (caller.node && *caller.node != node) {
    return Status::PermissionDenied("this node token is bound to node '" +
                                    *caller.node + "', not '" + node + "'");
  }
  return Status::Ok();
}

StatusOr<NodeRow> Nodes::NodeForAgent(const Caller& caller,
                                      const std::string& node) {
  HF_RETURN_IF_ERROR(RequireAgentFor(caller, node));
  std::optional<NodeRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto n = txn.FindNode(node);
    if (n.ok()) row = *n;
    return Status::Ok();
  }));
  if (!row) {
    return Status::NotFound(
        "node '" + node + "' is not registered (POST /api/v1/nodes/register)");
  }
  return *row;
}

StatusOr<AppliedNodeReport> Nodes::Register(const Caller& caller,
                                            const NodeReport& report) {
  HF_RETURN_IF_ERROR(RequireAgentFor(caller, report.name));
  HF_RETURN_IF_ERROR(ValidateNodeReport(report));
  const store::Millis now = clock_->NowMillis();
  NodeRow stored;
  std::vector<GpuRow> gpus;
  // One registration of this node at a time: its rows reach the ledger in
  // the order they commit. mu_ is held before and after the write, not
  // across it.
  MutexLock one(register_mu_[std::hash<std::string>{}(report.name) %
                             register_mu_.size()]);
  std::optional<RowId> node_row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto n = txn.FindNode(report.name);
    if (n.ok()) node_row = n->id;
    return Status::Ok();
  }));
  // GPUs of this node that hold slices now (by index): a different card
  // reported at such an index cannot replace the old one yet. The GPUs the
  // report changes take nothing new until the write is settled, so none
  // becomes occupied meanwhile.
  std::set<int> occupied;
  std::vector<GpuKey> fenced;
  if (node_row) {
    MutexLock lock(ledger_->mu());
    occupied = ledger_->inventory().Occupied(*node_row);
    fenced = ledger_->inventory().FenceRegistration(*node_row, report);
  }
  std::optional<ReportNumber> newer_applied;
  ReaderLock gate(ledger_->write_gate());
  const Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    gpus.clear();
    newer_applied.reset();
    NodeRow row;
    auto existing = txn.FindNode(report.name);
    if (existing.ok()) {
      row = *existing;
      ReportNumber applied{row.report_epoch, row.report_seq};
      // Repeats answered from memory may have gone past the stored number.
      if (const auto noted = beats_->NewestNumber(report.name);
          noted && applied < *noted) {
        applied = *noted;
      }
      if (report.number && *report.number <= applied) {
        // Sent before the newest one applied, delivered after it: what it
        // says is out of date, and none of it is applied.
        newer_applied = applied;
        stored = row;
        return Status::Ok();
      }
    } else {
      row.registered_at = now;
    }
    if (report.number) {
      row.report_epoch = report.number->epoch;
      row.report_seq = report.number->seq;
    }
    row.name = report.name;
    row.containerized = report.containerized;
    row.cpu_milli = report.cpu_milli;
    row.host_memory_mib = report.host_memory_mib;
    row.agent_version = report.agent_version;
    row.runtime = report.runtime;
    row.last_heartbeat_at = now;
    auto upserted = txn.UpsertNode(row);
    if (!upserted.ok()) return upserted.status();
    stored = *upserted;
    auto known = txn.ListGpus(stored.id);
    if (!known.ok()) return known.status();
    std::map<int, GpuRow> by_index;
    for (GpuRow& g : *known) by_index[g.index] = g;
    for (const GpuReport& g : report.gpus) {
      GpuRow row_gpu = GpuRowFrom(stored.id, g, now);
      auto it = by_index.find(g.index);
      if (it != by_index.end() && CardOf(it->second) != CardOf(row_gpu) &&
          occupied.contains(g.index)) {
        // Another card at an index whose slices are still live: keep the
        // old card on record, lost, until its slices are gone; then the
        // new one takes the index.
        row_gpu = it->second;
        if (!row_gpu.lost) {
          store::HistoryRow h;
          h.op = "gpu_replaced";
          h.at = now;
          h.node_id = stored.id;
          h.gpu_indices = {g.index};
          h.actor = "agent:" + report.name;
          h.reason = "GPU " + std::to_string(g.index) + " now reports " +
                     g.uuid + " (was " + it->second.uuid +
                     ") while holding slices; marked lost until they are "
                     "released";
          HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
        }
        row_gpu.lost = true;
        row_gpu.updated_at = now;
      }
      if (it == by_index.end() || !SameGpu(it->second, row_gpu)) {
        auto up = txn.UpsertGpu(row_gpu);
        if (!up.ok()) return up.status();
        row_gpu = *up;
      } else {
        row_gpu = it->second;
      }
      gpus.push_back(row_gpu);
      if (it != by_index.end()) by_index.erase(it);
    }
    // A GPU the node no longer reports is lost; its slices stay.
    for (auto& [index, g] : by_index) {
      if (!g.lost) {
        g.lost = true;
        g.updated_at = now;
        auto up = txn.UpsertGpu(g);
        if (!up.ok()) return up.status();
      }
      gpus.push_back(g);
    }
    return Status::Ok();
  });
  MutexLock lock(ledger_->mu());
  ledger_->inventory().EndRegistration(fenced);
  HF_RETURN_IF_ERROR(written);
  if (newer_applied) return AppliedNodeReport{stored, newer_applied};
  names_->SetNode(stored.id, stored.name);
  ledger_->inventory().SetHook(stored.id, report.hook_available);
  for (const GpuRow& g : gpus)
    HF_RETURN_IF_ERROR(ledger_->inventory().SyncGpu(stored, g));
  auto node_id = ledger_->inventory().SyncNode(stored);
  if (!node_id.ok()) return node_id.status();
  // Applied in full: a heartbeat that repeats it is answered from memory.
  beats_->Applied(report, stored, now, monotonic_->NowMillis());
  queue_->Wake();
  return AppliedNodeReport{stored, std::nullopt};
}

StatusOr<HeartbeatReply> Nodes::Heartbeat(
    const Caller& caller, const NodeReport& report,
    const std::vector<RunningTask>& tasks) {
  HF_RETURN_IF_ERROR(RequireAgentFor(caller, report.name));
  // The common case, nothing on the node changed: the report repeats the
  // last one applied, noted in memory (no mu_), and its node row written
  // again only now and then (time and report number).
  const Millis wall_now = clock_->NowMillis();
  NodeBeats::Decision beat;
  if (fence_ == nullptr || fence_->MayAct()) {
    beat = beats_->Classify(report, wall_now, monotonic_->NowMillis());
  }
  if (beat.kind == NodeBeats::Kind::kRefresh) {
    const NodeRow known = beat.row;
    bool same = false;
    HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
      auto row = txn.GetNode(known.id);
      if (!row.ok()) return row.status();
      same = *row == known;
      if (!same) return Status::Ok();  // changed meanwhile: apply in full
      NodeRow next = *row;
      next.last_heartbeat_at = wall_now;
      if (report.number) {
        next.report_epoch = report.number->epoch;
        next.report_seq = report.number->seq;
      }
      auto up = txn.UpsertNode(next);
      if (!up.ok()) return up.status();
      beat.row = *up;
      return Status::Ok();
    }));
    if (same) {
      beats_->Written(report, beat.row, wall_now);
    } else {
      beat.kind = NodeBeats::Kind::kApply;
    }
  }
  AppliedNodeReport applied_report;
  if (beat.kind != NodeBeats::Kind::kApply) {
    applied_report.node = beat.row;
  } else {
    auto node = NodeForAgent(caller, report.name);
    if (!node.ok()) return node.status();
    auto applied = Register(caller, report);  // capabilities afresh
    if (!applied.ok()) return applied.status();
    if (applied->newer_applied) {
      // Its running tasks and partitions are as out of date as the rest.
      HeartbeatReply reply;
      reply.newer_applied = applied->newer_applied;
      return reply;
    }
    applied_report = std::move(*applied);
  }
  const NodeRow* stored = &applied_report.node;
  const bool any_running =
      std::any_of(tasks.begin(), tasks.end(),
                  [](const RunningTask& t) { return t.state == "running"; });
  const bool any_mig =
      std::any_of(report.gpus.begin(), report.gpus.end(),
                  [](const GpuReport& g) { return g.mig_devices.has_value(); });
  // One read serves the compensation and the hook reports; a second only
  // after a compensation recorded slices.
  std::optional<RunningRead> running;
  if (any_running) {
    auto read = ReadRunning(*stored, tasks);
    if (!read.ok()) {
      spdlog::warn("running tasks of {}: {}", stored->name,
                   read.status().ToString());
    } else {
      running = std::move(*read);
    }
  }
  if (running && !running->without_slice.empty()) {
    for (const TaskRow& task : running->without_slice) {
      for (const RunningTask& t : tasks) {
        if (t.task_id != task.id || t.state != "running") continue;
        Status s = Compensate(*stored, t, task);
        if (!s.ok()) {
          spdlog::warn("compensation for task {} on {}: {}", t.task_id,
                       stored->name, s.ToString());
        }
        break;
      }
    }
    auto again = ReadRunning(*stored, tasks);  // with the slices recorded
    if (again.ok()) {
      running = std::move(*again);
    } else {
      spdlog::warn("running tasks of {}: {}", stored->name,
                   again.status().ToString());
      running.reset();
    }
  }
  if (any_mig) {
    const Status orphans = mig_->NoteOrphans(*stored, report);
    if (!orphans.ok()) {
      spdlog::warn("MIG orphan check on {}: {}", stored->name,
                   orphans.ToString());
    }
  }
  HeartbeatReply reply;
  if (!running || running->live.empty()) return reply;
  const Status hooks = NoteHookReports(*stored, running->live, reply);
  if (!hooks.ok()) {
    spdlog::warn("hook reports of {}: {}", stored->name, hooks.ToString());
  }
  return reply;
}

Status Nodes::NoteHookReports(
    const NodeRow& node,
    const std::vector<std::pair<const RunningTask*, SliceRow>>& live,
    HeartbeatReply& reply) {
  const Millis now = clock_->NowMillis();
  std::vector<std::pair<RowId, HookReport>> attached;  // "hook" to add
  // Processes the agent found using the GPU without the hook: "hook" to
  // take away (or, never listed, a history entry saying why).
  std::vector<std::pair<RowId, HookReport>> unhooked;
  std::set<RowId> restored;     // attached again after being unhooked
  std::vector<RowId> reported;  // slices with a hook report
  for (const auto& [t, slice] : live) {
    // Whole GPUs have no quota; a MIG partition runs no hook.
    const bool hook_enforceable = !slice.whole && slice.qos_level != "gold";
    if (hook_enforceable) {
      QuotaDirective q;
      q.task_id = t->task_id;
      q.slice_id = slice.id;
      if (slice.memory_mib > 0) q.memory_mib = slice.memory_mib;
      reply.quotas.push_back(q);
    }
    if (!t->hook) continue;
    reported.push_back(slice.id);
    // Only while the ledger holds the slice (SliceUsage::Record). Whether
    // the last report named no unhooked process.
    const SliceId in_ledger(static_cast<std::uint64_t>(slice.id));
    const bool was_hooked =
        usage_->Record(slice.id, HookUsage{*t->hook, t->task_id, now}, [&] {
          return ledger_->unlocked_ledger()
              .GetAllocation(in_ledger)
              .has_value();
        });
    if (!hook_enforceable) continue;
    const bool listed =
        std::ranges::find(slice.enforcement, "hook") != slice.enforcement.end();
    if (!t->hook->unhooked_pids.empty()) {
      // Never claimed without proof: one process of the task on its GPU
      // that is not under the hook is enough to take it away.
      if (listed || was_hooked) unhooked.emplace_back(slice.id, *t->hook);
    } else if (t->hook->attached && !listed &&
               scheduler::AddHookEnforcement(slice.enforcement) !=
                   slice.enforcement) {
      attached.emplace_back(slice.id, *t->hook);
      if (!was_hooked) restored.insert(slice.id);
    }
  }
  // Stored for every instance; a failure here loses nothing the next
  // heartbeat does not bring again.
  if (Status stored = PersistHookUsage(reported); !stored.ok()) {
    spdlog::warn("storing slice usage: {}", stored.ToString());
  }
  if (attached.empty() && unhooked.empty()) return Status::Ok();
  std::vector<SliceRow> changed;  // for the telemetry, once committed
  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    changed.clear();
    for (const auto& [id, hook] : unhooked) {
      auto current = txn.GetSlice(id);
      if (!current.ok() || current->state != store::SliceState::kAllocated) {
        continue;
      }
      SliceRow s = *current;
      const auto erased = std::erase(s.enforcement, "hook");
      if (erased > 0) {
        HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
        changed.push_back(s);
      }
      store::HistoryRow h = HistoryFor(s, "hook_lost");
      h.at = now;
      h.actor = "agent:" + node.name;
      h.reason = hook.unhooked_reason.empty()
                     ? "a process of task " +
                           std::to_string(s.task_id.value_or(0)) +
                           " runs without the hook"
                     : hook.unhooked_reason;
      h.reason += erased > 0 ? ": the slice's enforcement no longer lists the "
                               "hook (the memory quota is accounted, not "
                               "enforced)"
                             : ": the hook is not listed in the slice's "
                               "enforcement";
      HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
      spdlog::warn("slice {}: {}", s.id, h.reason);
    }
    for (const auto& [id, hook] : attached) {
      auto current = txn.GetSlice(id);
      if (!current.ok() || current->state != store::SliceState::kAllocated) {
        continue;
      }
      SliceRow s = *current;
      std::vector<std::string> enforcement =
          scheduler::AddHookEnforcement(s.enforcement);
      if (enforcement == s.enforcement) continue;  // another report won
      s.enforcement = std::move(enforcement);
      HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
      changed.push_back(s);
      store::HistoryRow h = HistoryFor(s, "hook_attached");
      h.at = now;
      h.actor = "agent:" + node.name;
      h.reason =
          std::string(restored.contains(id)
                          ? "every process of the task that uses the GPU "
                            "is under the hook again; "
                          : "") +
          "the hook is loaded in " + std::to_string(hook.attaches) +
          " process(es) of task " + std::to_string(s.task_id.value_or(0)) +
          ": the memory quota (" +
          (hook.quota_bytes ? std::to_string(*hook.quota_bytes >> 20) + " MiB"
                            : std::string("no cap")) +
          ") is a hard limit now";
      HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
      std::string listed;
      for (const std::string& e : s.enforcement) {
        listed += (listed.empty() ? "" : ",") + e;
      }
      spdlog::info("slice {}: the hook is attached (enforcement now {})", s.id,
                   listed);
    }
    return Status::Ok();
  });
  if (written.ok()) {
    for (const SliceRow& s : changed) telemetry_->SliceLive(s);
  }
  return written;
}

Status Nodes::PersistHookUsage(const std::vector<RowId>& slices) {
  const auto due = usage_->DueForStore(slices);
  if (due.empty()) return Status::Ok();
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    for (const auto& [id, usage] : due) {
      HF_RETURN_IF_ERROR(txn.PutSliceUsage(SliceUsage::ToRow(id, usage)));
    }
    return Status::Ok();
  }));
  usage_->MarkStored(due);
  return Status::Ok();
}

// The compensation path (docs/CONTRACT.md section 5): a task the agent runs
// that holds no live slice gets a ledger-only slice pinned to the GPU it really
// uses. Env injection is too late then; the slice is recorded so the ledger

StatusOr<Nodes::RunningRead> Nodes::ReadRunning(
    const NodeRow& node, const std::vector<RunningTask>& tasks) {
  RunningRead out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    out = RunningRead{};
    for (const RunningTask& report : tasks) {
      if (report.state != "running") continue;
      auto t = txn.GetTask(report.task_id);
      if (!t.ok() || store::IsTerminal(t->state)) continue;
      std::optional<SliceRow> slice;
      if (t->slice_id) {
        auto s = txn.GetSlice(*t->slice_id);
        if (s.ok() && s->state != store::SliceState::kReleased) {
          slice = *std::move(s);
        }
      }
      if (!slice) {
        out.without_slice.push_back(*std::move(t));
      } else if (t->node_id == node.id &&
                 slice->state == store::SliceState::kAllocated &&
                 slice->task_id == report.task_id) {
        out.live.emplace_back(&report, *std::move(slice));
      }
    }
    return Status::Ok();
  }));
  return out;
}

Status Nodes::Compensate(const NodeRow& node, const RunningTask& report,
                         const TaskRow& found) {
  const TaskRow* task = &found;
  if (report.gpu_indices.empty()) {
    return Status::InvalidArgument("running task reported without GPUs",
                                   "tasks.gpu_indices");
  }
  // Reserved in the ledger under mu_, written without it (checking again
  // that the task still has no live slice), undone under it if not written.
  ReaderLock gate(ledger_->write_gate());
  MutexLock lock(ledger_->mu());
  ledger::Allocation a;
  a.id = ledger_->ledger().ReserveSliceId();
  a.tenant = TenantId(task->tenant_id);
  a.kind = task->gpu_required > 0 ? ledger::RequestKind::kWholeGpus
                                  : ledger::RequestKind::kSlice;
  for (int index : report.gpu_indices) {
    auto gpu = ledger_->inventory().Gpu(node.id, index);
    if (!gpu.ok()) return gpu.status();
    a.gpus.push_back(*gpu);
  }
  if (a.kind == ledger::RequestKind::kSlice) {
    a.gpus.resize(1);
    a.memory_mib = task->memory_mib.value_or(0);
    a.compute_percent =
        task->compute_percent.value_or(options_.default_compute_percent);
    a.compute_defaulted = !task->compute_percent;
  }
  const store::Millis now = clock_->NowMillis();
  // The task runs there: the ledger records it even if its tenant may no
  // longer share the GPU (which then takes nothing new of either).
  auto restored = ledger_->ledger().Restore(
      a, ledger::Ledger::RestoreOptions{.check_tenancy = false});
  if (!restored.ok()) {
    // Recorded in the history so an operator sees the conflict.
    const std::string why = restored.status().message();
    lock.Unlock();
    (void)writer_->LeaderWrite([&](Txn& txn) -> Status {
      store::HistoryRow h;
      h.op = "compensate_refused";
      h.at = now;
      h.task_id = task->id;
      h.tenant_id = task->tenant_id;
      h.node_id = node.id;
      h.gpu_indices = report.gpu_indices;
      h.actor = "agent:" + node.name;
      h.reason = "running task has no slice and cannot be recorded: " + why;
      return txn.AppendHistory(h).status();
    });
    return restored.status();
  }
  SliceRow row;
  row = ledger_->SliceRowOf(*restored);
  row.task_id = task->id;
  row.node_id = node.id;
  row.enforcement = {};  // nothing was injected: ledger only
  row.origin = "compensation";
  row.created_at = now;
  lock.Unlock();
  bool accounted = false;  // meanwhile (a heartbeat repeated)
  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    accounted = false;
    auto t = txn.GetTask(task->id);
    if (!t.ok()) return t.status();
    if (store::IsTerminal(t->state)) {
      accounted = true;
      return Status::Ok();
    }
    if (t->slice_id) {
      auto live = txn.GetSlice(*t->slice_id);
      if (live.ok() && live->state != store::SliceState::kReleased) {
        accounted = true;
        return Status::Ok();
      }
    }
    TaskRow updated = *t;
    updated.slice_id = row.id;
    updated.node_id = node.id;
    updated.gpu_indices = row.gpu_indices;
    if (updated.state == TaskState::kPending ||
        updated.state == TaskState::kScheduled) {
      updated.state = TaskState::kRunning;
      updated.pending_reason.clear();
    }
    updated.updated_at = now;
    HF_RETURN_IF_ERROR(txn.UpdateTask(updated).status());
    HF_RETURN_IF_ERROR(txn.InsertSlice(row));
    store::HistoryRow h = HistoryFor(row, "compensate");
    h.at = now;
    h.actor = "agent:" + node.name;
    h.reason = "task reported running without a slice; recorded ledger-only";
    return txn.AppendHistory(h).status();
  });
  if (!written.ok() || accounted) {
    lock.Lock();
    (void)ledger_->ledger().Release(restored->id);
    queue_->CapacityFreed();
    return written;
  }
  telemetry_->SliceLive(row);
  queue_->RequestResync();  // the task may have been pending here
  return Status::Ok();
}

StatusOr<std::vector<NodeView>> Nodes::List(const Caller& caller) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  std::vector<NodeView> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto nodes = txn.ListNodes();
    if (!nodes.ok()) return nodes.status();
    auto gpus = txn.ListGpus(std::nullopt);
    if (!gpus.ok()) return gpus.status();
    for (NodeRow& n : *nodes) {
      NodeView v;
      v.node = n;
      for (const GpuRow& g : *gpus) {
        if (g.node_id == n.id) v.gpus.push_back(g);
      }
      out.push_back(std::move(v));
    }
    return Status::Ok();
  }));
  MutexLock lock(ledger_->mu());
  for (NodeView& v : out) {
    v.hook_available = ledger_->inventory().Hook(v.node.id);
    // A heartbeat answered from memory since the row was written.
    if (const auto beat = beats_->LastBeatAt(v.node.id);
        beat && *beat > v.node.last_heartbeat_at) {
      v.node.last_heartbeat_at = *beat;
    }
  }
  return out;
}

StatusOr<NodeView> Nodes::Get(const Caller& caller, const std::string& name) {
  auto nodes = List(caller);
  if (!nodes.ok()) return nodes.status();
  for (NodeView& v : *nodes) {
    if (v.node.name == name) return std::move(v);
  }
  return Status::NotFound("no node '" + name + "'");
}

}  // namespace hf::server
