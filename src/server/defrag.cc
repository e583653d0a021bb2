// Defrag (defrag.h): defragmentation plans proposed, stored, applied move
// by move; automatic mode.
#include "server/defrag.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "scheduler/defrag.h"
#include "server/internal.h"

namespace hf::server {

using nlohmann::json;
using store::Millis;
using store::RowId;
using store::SliceRow;
using store::TaskRow;
using store::Txn;

namespace {

constexpr std::string_view kPlanIndexKey = "defrag_plans";
constexpr std::string_view kPlanNextIdKey = "defrag_next_plan_id";
// A move waits this long for its task to run on the target before the
// move counts as done anyway (the task is bound there, `scheduled`).
constexpr Millis kMoveStartWaitMs = 120'000;

std::string PlanKey(RowId id) { return "defrag_plan/" + std::to_string(id); }
std::string TaskMoveKey(RowId task) {
  return "defrag_task/" + std::to_string(task);
}

bool Final(const std::string& state) {
  return state == "applied" || state == "cancelled" || state == "failed" ||
         state == "expired";
}

bool MoveOpen(const std::string& state) {
  return state == "pending" || state == "moving" || state == "moved";
}

// The plan as the API shows it (internal fields dropped).
json Render(json plan) {
  plan.erase("snapshot");
  return plan;
}

StatusOr<json> ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Internal("unreadable defrag record");
  return j;
}

StatusOr<json> LoadPlanInTxn(Txn& txn, RowId id) {
  auto text = txn.GetMeta(PlanKey(id));
  if (!text.ok()) return text.status();
  if (!text->has_value() || (*text)->empty()) {
    return Status::NotFound("no defrag plan " + std::to_string(id));
  }
  return ParseJson(**text);
}

Status SavePlanInTxn(Txn& txn, const json& plan) {
  return txn.SetMeta(PlanKey(plan["id"].get<RowId>()), plan.dump());
}

}  // namespace

std::string Defrag::ClusterFingerprintLocked() {
  // Every live allocation and every GPU's health and capacity: a plan is
  // valid only on the cluster it was computed on.
  std::ostringstream out;
  for (const ledger::Allocation& a : ledger_->ledger().Allocations()) {
    out << a.id.value() << ':' << a.memory_mib << ':' << a.compute_percent;
    for (GpuId g : a.gpus) out << ':' << g.value();
    out << ';';
  }
  ledger_->ledger().Read([&](const ledger::ClusterView& view) {
    for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
      const ledger::GpuRecord& g = view.gpu(GpuId(i));
      if (!g.live) continue;
      out << 'g' << i << ':' << g.healthy() << ':' << g.spec.memory_mib << ':'
          << (g.mig != nullptr) << ';';
    }
  });
  return Sha256Hex(out.str());
}

StatusOr<json> Defrag::Propose(const Caller& caller,
                               const DefragPlanCreate& request) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  if (request.max_moves < 1 || request.max_moves > 64) {
    return Status::InvalidArgument("must be 1..64", "max_moves");
  }
  if (request.goal_memory_mib && *request.goal_memory_mib < 1) {
    return Status::InvalidArgument("must be a positive number of MiB",
                                   "goal_memory_mb");
  }
  // The movable slices: slices of preemptible tasks bound to them.
  struct Bound {
    SliceRow slice;
    TaskRow task;
  };
  std::vector<Bound> bound;
  std::optional<RowId> node_row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    bound.clear();
    if (request.node) {
      auto n = txn.FindNode(*request.node);
      if (!n.ok()) {
        return Status::InvalidArgument("no node '" + *request.node + "'",
                                       "node_id");
      }
      node_row = n->id;
    }
    store::SliceFilter f;
    f.state = store::SliceState::kAllocated;
    return ForEachSlice(txn, f, [&](SliceRow& s) -> Status {
      if (!s.task_id || s.whole || s.gpu_indices.size() != 1) {
        return Status::Ok();
      }
      auto t = txn.GetTask(*s.task_id);
      if (!t.ok()) return Status::Ok();
      if (!t->preemptible || t->slice_id != s.id || t->cancel_requested ||
          (t->state != store::TaskState::kRunning &&
           t->state != store::TaskState::kScheduled)) {
        return Status::Ok();
      }
      bound.push_back({s, *t});
      return Status::Ok();
    });
  }));

  // The plan is computed on the ledger (under mu_) and written without it.
  json out;
  {
    MutexLock lock(ledger_->mu());
    scheduler::DefragRequest dr;
    dr.max_moves = request.max_moves;
    dr.goal_memory_mib = request.goal_memory_mib;
    if (node_row) {
      auto it = ledger_->inventory().nodes().find(*node_row);
      if (it == ledger_->inventory().nodes().end()) {
        return Status::InvalidArgument(
            "node '" + *request.node + "' has no GPUs known", "node_id");
      }
      dr.node = it->second;
    }
    for (const Bound& b : bound) {
      scheduler::MovableSlice m;
      m.task_id = static_cast<std::uint64_t>(b.task.id);
      m.request = ledger_->placement().RequestFor(b.task);  // a slice task's
      dr.movable[SliceId(static_cast<std::uint64_t>(b.slice.id))] = m;
    }
    // What every placement leaves out: approvals past their expiry, MIG
    // GPUs that take no new partition, fenced GPUs.
    for (GpuId gpu : ledger_->placement().PrepareTargets()) {
      dr.excluded_targets.push_back(gpu);
    }
    auto plan = scheduler::PlanDefrag(ledger_->ledger(), dr,
                                      ledger_->placement().policy());
    if (!plan.ok()) return plan.status();

    auto where = [&](NodeId node, GpuId gpu) {
      ledger_->mu().AssertHeld();  // runs here, under mu_
      const GpuKey& key = ledger_->inventory().KeyOf(gpu);
      (void)node;
      return json{{"node_id", names_->Node(key.node_id)},
                  {"gpu_index", key.index}};
    };
    auto room = [&](const scheduler::RoomSummary& r) {
      json gpus = json::array();
      for (const scheduler::GpuRoom& g : r.gpus) {
        json j = where(g.node, g.gpu);
        j["total_memory_mb"] = g.total_memory_mib;
        j["free_memory_mb"] = g.free_memory_mib;
        j["largest_slice_mb"] = g.largest_slice_mib;
        gpus.push_back(std::move(j));
      }
      return json{{"fragmentation", r.fragmentation},
                  {"free_memory_mb", r.free_memory_mib},
                  {"largest_slice_mb", r.largest_slice_mib},
                  {"gpus", std::move(gpus)}};
    };
    const Millis now = clock_->NowMillis();
    out = {{"state", "proposed"},
           {"node_id", request.node ? json(*request.node) : json(nullptr)},
           {"goal_memory_mb", request.goal_memory_mib
                                  ? json(*request.goal_memory_mib)
                                  : json(nullptr)},
           {"max_moves", request.max_moves},
           {"created_by",
            request.automatic ? std::string("defrag-auto") : caller.Actor()},
           {"created_at", now},
           {"updated_at", now},
           {"expires_at", now + options_.plan_ttl_ms},
           {"message", ""},
           {"cancel_requested", false},
           {"snapshot", ClusterFingerprintLocked()},
           {"before", room(plan->before)},
           {"after", room(plan->after)}};
    json moves = json::array();
    for (const scheduler::DefragMove& m : plan->moves) {
      moves.push_back({{"slice_id", static_cast<RowId>(m.slice.value())},
                       {"task_id", static_cast<RowId>(m.task_id)},
                       {"from", where(m.from_node, m.from_gpu)},
                       {"to", where(m.to_node, m.to_gpu)},
                       {"state", "pending"},
                       {"target_slice_id", nullptr},
                       {"message", ""}});
    }
    out["moves"] = std::move(moves);
  }
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    auto next = txn.GetMeta(kPlanNextIdKey);
    if (!next.ok()) return next.status();
    RowId id = 1;
    if (next->has_value()) id = std::stoll(**next);
    HF_RETURN_IF_ERROR(txn.SetMeta(kPlanNextIdKey, std::to_string(id + 1)));
    auto index = txn.GetMeta(kPlanIndexKey);
    if (!index.ok()) return index.status();
    json ids = json::array();
    if (index->has_value()) {
      auto parsed = ParseJson(**index);
      if (parsed.ok() && parsed->is_array()) ids = *parsed;
    }
    ids.push_back(id);
    HF_RETURN_IF_ERROR(txn.SetMeta(kPlanIndexKey, ids.dump()));
    out["id"] = id;
    return SavePlanInTxn(txn, out);
  }));
  spdlog::info("defrag: plan {} proposed with {} move(s)",
               out["id"].get<RowId>(), out["moves"].size());
  return Render(out);
}

StatusOr<json> Defrag::Get(const Caller& caller, RowId id) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  json out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto plan = LoadPlanInTxn(txn, id);
    if (!plan.ok()) return plan.status();
    out = std::move(*plan);
    return Status::Ok();
  }));
  return Render(out);
}

StatusOr<std::vector<json>> Defrag::List(const Caller& caller) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  std::vector<json> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    out.clear();
    auto index = txn.GetMeta(kPlanIndexKey);
    if (!index.ok()) return index.status();
    if (!index->has_value()) return Status::Ok();
    auto ids = ParseJson(**index);
    if (!ids.ok()) return ids.status();
    for (const json& id : *ids) {
      auto plan = LoadPlanInTxn(txn, id.get<RowId>());
      if (plan.ok()) out.push_back(Render(std::move(*plan)));
    }
    return Status::Ok();
  }));
  return out;
}

StatusOr<json> Defrag::Apply(const Caller& caller, RowId id) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  std::string fingerprint;
  {
    MutexLock lock(ledger_->mu());
    fingerprint = ClusterFingerprintLocked();
  }
  json out;
  bool expired = false;
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    expired = false;
    auto plan = LoadPlanInTxn(txn, id);
    if (!plan.ok()) return plan.status();
    out = std::move(*plan);
    const std::string state = out["state"].get<std::string>();
    if (state != "proposed") {
      return Status::FailedPrecondition("plan " + std::to_string(id) + " is " +
                                        state +
                                        "; only a proposed plan applies");
    }
    const Millis now = clock_->NowMillis();
    out["updated_at"] = now;
    if (out["snapshot"].get<std::string>() != fingerprint ||
        now >= out["expires_at"].get<Millis>()) {
      expired = true;
      out["state"] = "expired";
      out["message"] = now >= out["expires_at"].get<Millis>()
                           ? "the plan is older than its expiry"
                           : "the cluster changed since the plan was computed";
      for (json& m : out["moves"]) m["state"] = "cancelled";
      return SavePlanInTxn(txn, out);
    }
    out["state"] = "applying";
    store::HistoryRow h;
    h.at = now;
    h.op = "defrag_apply";
    h.actor = caller.Actor();
    h.reason = "defrag plan " + std::to_string(id) + ": applying " +
               std::to_string(out["moves"].size()) + " move(s)";
    HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
    return SavePlanInTxn(txn, out);
  }));
  if (expired) {
    return Status::FailedPrecondition(
        "plan " + std::to_string(id) + " is expired: " +
        out["message"].get<std::string>() + "; propose a new one");
  }
  return Render(out);
}

StatusOr<json> Defrag::Cancel(const Caller& caller, RowId id) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  json out;
  HF_RETURN_IF_ERROR(writer_->LeaderWrite([&](Txn& txn) -> Status {
    auto plan = LoadPlanInTxn(txn, id);
    if (!plan.ok()) return plan.status();
    out = std::move(*plan);
    const std::string state = out["state"].get<std::string>();
    if (Final(state)) {
      return Status::FailedPrecondition("plan " + std::to_string(id) + " is " +
                                        state + " already");
    }
    const Millis now = clock_->NowMillis();
    out["updated_at"] = now;
    out["cancel_requested"] = true;
    bool in_flight = false;
    for (json& m : out["moves"]) {
      const std::string ms = m["state"].get<std::string>();
      if (ms == "moving" || ms == "moved") in_flight = true;
    }
    if (!in_flight) {
      // Nothing moving: every task is at its source or its target now.
      for (json& m : out["moves"]) {
        if (m["state"] == "pending") m["state"] = "cancelled";
      }
      out["state"] = "cancelled";
      out["message"] = "cancelled by " + caller.Actor();
    } else {
      out["message"] = "cancel requested by " + caller.Actor() +
                       "; the move in flight finishes first";
    }
    store::HistoryRow h;
    h.at = now;
    h.op = "defrag_cancel";
    h.actor = caller.Actor();
    h.reason = "defrag plan " + std::to_string(id) + ": " +
               out["message"].get<std::string>();
    HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
    return SavePlanInTxn(txn, out);
  }));
  return Render(out);
}

StatusOr<std::vector<RowId>> Defrag::PlansIn(const std::string& state) {
  std::vector<RowId> out;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    out.clear();
    auto index = txn.GetMeta(kPlanIndexKey);
    if (!index.ok()) return index.status();
    if (!index->has_value()) return Status::Ok();
    auto ids = ParseJson(**index);
    if (!ids.ok()) return ids.status();
    for (const json& id : *ids) {
      auto plan = LoadPlanInTxn(txn, id.get<RowId>());
      if (plan.ok() && (*plan)["state"] == state) {
        out.push_back(id.get<RowId>());
      }
    }
    return Status::Ok();
  }));
  return out;
}

Status Defrag::TickOnce() {
  auto applying = PlansIn("applying");
  if (!applying.ok()) return applying.status();
  Status first = Status::Ok();
  for (RowId id : *applying) {
    Status s = AdvancePlan(id);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Defrag::AdvancePlan(RowId id) {
  // A pending move's target is reserved in the ledger (under mu_) before
  // the write that records the move, which runs without mu_; the write
  // checks that its move is still the one reserved for, and the
  // reservation is undone when the write fails or does not use it.
  std::optional<MoveTarget> want;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    want.reset();
    auto loaded = LoadPlanInTxn(txn, id);
    if (!loaded.ok()) return loaded.status();
    const json& plan = *loaded;
    if (plan["state"] != "applying" || plan["cancel_requested"].get<bool>()) {
      return Status::Ok();
    }
    for (const json& m : plan["moves"]) {
      const std::string ms = m["state"].get<std::string>();
      if (!MoveOpen(ms)) continue;
      if (ms != "pending") return Status::Ok();
      auto task = txn.GetTask(m["task_id"].get<RowId>());
      auto node = txn.FindNode(m["to"]["node_id"].get<std::string>());
      // Without either, the write fails the move.
      if (task.ok() && node.ok()) {
        want = MoveTarget{*task, node->id, m["to"]["gpu_index"].get<int>()};
      }
      return Status::Ok();
    }
    return Status::Ok();
  }));
  const ReservedTarget reservation = ReserveTarget(want);
  // The move found in the write is the one reserved for, its task asking
  // for the same as when it was read.
  const auto reserved_for = [&](const TaskRow& task, RowId node_row,
                                int gpu_index) {
    return want && want->node_row == node_row && want->gpu_index == gpu_index &&
           want->task.id == task.id && want->task.tenant_id == task.tenant_id &&
           want->task.memory_mib == task.memory_mib &&
           want->task.compute_percent == task.compute_percent &&
           want->task.gpu_type == task.gpu_type;
  };
  bool used = false;
  std::vector<RowId> woken;  // the move's source and target nodes
  ReaderLock gate(ledger_->write_gate());
  Status written = writer_->LeaderWrite([&](Txn& txn) -> Status {
    used = false;
    woken.clear();
    auto loaded = LoadPlanInTxn(txn, id);
    if (!loaded.ok()) return loaded.status();
    json plan = std::move(*loaded);
    if (plan["state"] != "applying") return Status::Ok();
    const Millis now = clock_->NowMillis();
    json* current = nullptr;
    for (json& m : plan["moves"]) {
      if (MoveOpen(m["state"].get<std::string>())) {
        current = &m;
        break;
      }
    }
    auto finish = [&](const std::string& state, const std::string& message) {
      for (json& m : plan["moves"]) {
        if (m["state"] == "pending") m["state"] = "cancelled";
      }
      plan["state"] = state;
      if (!message.empty()) plan["message"] = message;
      plan["updated_at"] = now;
      store::HistoryRow h;
      h.at = now;
      h.op = "defrag_" + state;
      h.actor = "defrag";
      h.reason = "defrag plan " + std::to_string(id) + " " + state +
                 (message.empty() ? "" : ": " + message);
      HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
      return SavePlanInTxn(txn, plan);
    };
    if (current == nullptr) {
      const bool skipped_all =
          std::all_of(plan["moves"].begin(), plan["moves"].end(),
                      [](const json& m) { return m["state"] != "done"; });
      if (plan["cancel_requested"].get<bool>()) return finish("cancelled", "");
      return finish("applied", skipped_all ? "no task needed to move" : "");
    }
    json& m = *current;
    const std::string ms = m["state"].get<std::string>();
    const RowId task_id = m["task_id"].get<RowId>();
    if (ms == "moving") return Status::Ok();  // the source node stops it
    if (ms == "moved") {
      auto t = txn.GetTask(task_id);
      const bool started = !t.ok() || t->state == store::TaskState::kRunning ||
                           store::IsTerminal(t->state) ||
                           t->slice_id != m["target_slice_id"].get<RowId>();
      const bool waited = now - m.value("moved_at", now) >= kMoveStartWaitMs;
      if (!started && !waited) return Status::Ok();
      m["state"] = "done";
      if (!started) m["message"] = "bound on the target, not running yet";
      plan["updated_at"] = now;
      return SavePlanInTxn(txn, plan);
    }
    // A pending move: cancelled plans stop here.
    if (plan["cancel_requested"].get<bool>()) return finish("cancelled", "");
    const RowId source_id = m["slice_id"].get<RowId>();
    auto fail = [&](const std::string& why) {
      m["state"] = "failed";
      m["message"] = why;
      return finish("failed",
                    "move of task " + std::to_string(task_id) + ": " + why);
    };
    auto t = txn.GetTask(task_id);
    auto s = txn.GetSlice(source_id);
    if (!t.ok() || !s.ok()) return fail("its task or slice is gone");
    TaskRow task = *t;
    SliceRow source = *s;
    if (task.slice_id != source.id ||
        source.state != store::SliceState::kAllocated ||
        task.cancel_requested ||
        (task.state != store::TaskState::kRunning &&
         task.state != store::TaskState::kScheduled)) {
      return fail("the task is no longer bound to slice " +
                  std::to_string(source_id));
    }
    auto node = txn.FindNode(m["to"]["node_id"].get<std::string>());
    if (!node.ok()) return fail("the target node is gone");
    const int to_index = m["to"]["gpu_index"].get<int>();
    if (!reserved_for(task, node->id, to_index)) {
      return Status::Ok();  // not what was reserved for: the next tick
    }
    if (!reservation.refused.empty()) return fail(reservation.refused);
    used = true;
    const ledger::Allocation& a = *reservation.allocation;
    SliceRow target;
    target.id = static_cast<RowId>(a.id.value());
    target.tenant_id = task.tenant_id;
    target.node_id = node->id;
    target.gpu_indices = {to_index};
    target.memory_mib = a.memory_mib;
    target.compute_percent = a.compute_percent;
    target.compute_defaulted = a.compute_defaulted;
    target.mig_profile = a.mig_profile;
    target.mig_start = a.mig_start;
    const scheduler::QosDecision& qos = reservation.qos;
    target.qos_level = std::string(scheduler::QosLevelName(qos.level));
    target.enforcement = qos.enforcement;
    target.origin = "defrag";
    target.created_at = now;
    HF_RETURN_IF_ERROR(txn.InsertSlice(target));
    store::HistoryRow h = HistoryFor(target, "allocate");
    h.task_id = task.id;
    h.at = now;
    h.actor = "defrag";
    h.reason = "defrag plan " + std::to_string(id) +
               ": target reserved for task " + std::to_string(task.id) +
               " (from slice " + std::to_string(source.id) + ")";
    HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
    if (qos.level == scheduler::QosLevel::kGold) {
      store::SliceRequestRow cmd =
          mig_->CommandFor(target, "create", to_index, now);
      cmd.task_id = task.id;  // the target is the task's once it lands
      cmd.profile = a.mig_profile;
      cmd.mig_start = a.mig_start;
      HF_RETURN_IF_ERROR(txn.InsertSliceRequest(cmd).status());
    }
    // Stop the task at its source: its node finds it in `cancel`.
    source.state = store::SliceState::kReleasing;
    HF_RETURN_IF_ERROR(txn.UpdateSlice(source));
    store::HistoryRow stop = HistoryFor(source, "release_requested");
    stop.at = now;
    stop.actor = "defrag";
    stop.reason = "defrag plan " + std::to_string(id) + ": moving task " +
                  std::to_string(task.id) + " to slice " +
                  std::to_string(target.id) +
                  "; released once its node has "
                  "stopped it";
    HF_RETURN_IF_ERROR(txn.AppendHistory(stop).status());
    HF_RETURN_IF_ERROR(txn.SetMeta(
        TaskMoveKey(task.id),
        json{{"plan", id}, {"source", source.id}, {"target", target.id}}
            .dump()));
    m["state"] = "moving";
    m["target_slice_id"] = target.id;
    woken = {source.node_id, node->id};
    plan["updated_at"] = now;
    return SavePlanInTxn(txn, plan);
  });
  if (reservation.allocation && (!written.ok() || !used)) {
    MutexLock lock(ledger_->mu());
    (void)ledger_->ledger().Release(reservation.allocation->id);
    queue_->CapacityFreed();
  }
  if (written.ok() && used) {
    for (const RowId node : woken) host_->NodeHasWork(node);
  }
  return written;
}

Defrag::ReservedTarget Defrag::ReserveTarget(
    const std::optional<MoveTarget>& want) {
  ReservedTarget out;
  if (!want) return out;
  MutexLock lock(ledger_->mu());
  auto lnode = ledger_->inventory().nodes().find(want->node_row);
  auto lgpu =
      ledger_->inventory().gpus().find(GpuKey{want->node_row, want->gpu_index});
  if (lnode == ledger_->inventory().nodes().end() ||
      lgpu == ledger_->inventory().gpus().end()) {
    out.refused = "the target GPU is gone";
    return out;
  }
  // The ledger re-checks the target like any placement (a movable task is
  // a slice task: its request is a slice's).
  ledger::PlacementRequest r = ledger_->placement().RequestFor(want->task);
  r.pinned_node = lnode->second;
  r.pinned_gpu = lgpu->second;
  ledger::PlacementResult placed = ledger_->placement().Place(r);
  if (!placed.placed()) {
    out.refused = "the target no longer takes it: " + placed.message;
    return out;
  }
  out.allocation = placed.allocation;
  out.qos = ledger_->placement().QosFor(placed.allocation.gpus.front());
  return out;
}

StatusOr<bool> Defrag::LandMoveInTxn(Txn& txn, TaskRow& task, RowId slice,
                                     bool rebind,
                                     std::vector<RowId>& released) {
  auto marker = txn.GetMeta(TaskMoveKey(task.id));
  if (!marker.ok()) return marker.status();
  if (!marker->has_value() || (*marker)->empty()) return false;
  auto move = ParseJson(**marker);
  if (!move.ok()) return move.status();
  if ((*move)["source"].get<RowId>() != slice) return false;
  const RowId plan_id = (*move)["plan"].get<RowId>();
  const RowId target_id = (*move)["target"].get<RowId>();
  HF_RETURN_IF_ERROR(txn.SetMeta(TaskMoveKey(task.id), ""));
  auto plan = LoadPlanInTxn(txn, plan_id);
  if (!plan.ok()) return plan.status();
  const Millis now = clock_->NowMillis();
  json* m = nullptr;
  for (json& each : (*plan)["moves"]) {
    if (each["task_id"].get<RowId>() == task.id && each["state"] == "moving") {
      m = &each;
    }
  }
  auto t = txn.GetSlice(target_id);
  if (!t.ok()) return t.status();
  SliceRow target = *t;
  if (!rebind || target.state != store::SliceState::kAllocated) {
    // The task ended (or was cancelled) while it moved: the reservation
    // goes back; the task keeps its end.
    HF_RETURN_IF_ERROR(releases_->ReleaseInTxn(
        txn, target, "defrag",
        "defrag plan " + std::to_string(plan_id) + ": task " +
            std::to_string(task.id) + " ended while it moved",
        released));
    if (m != nullptr) {
      (*m)["state"] = "skipped";
      (*m)["message"] = "the task ended while it moved";
    }
    (*plan)["updated_at"] = now;
    HF_RETURN_IF_ERROR(SavePlanInTxn(txn, *plan));
    return false;
  }
  target.task_id = task.id;
  HF_RETURN_IF_ERROR(txn.UpdateSlice(target));
  task.state = store::TaskState::kScheduled;
  task.slice_id = target.id;
  task.node_id = target.node_id;
  task.gpu_indices = target.gpu_indices;
  task.pending_reason.clear();
  task.exit_code.reset();
  task.message = "moved by defrag plan " + std::to_string(plan_id);
  StripBindingLabels(task.labels);
  if (!target.mig_device_id.empty()) {
    task.labels["heteroflow.mig_device_id"] = target.mig_device_id;
  }
  ApplySliceEnv(host_->SliceEnvFor(target, task), task.env);
  store::HistoryRow h = HistoryFor(target, "defrag_move");
  h.at = now;
  h.actor = "defrag";
  h.reason = "defrag plan " + std::to_string(plan_id) + ": task " +
             std::to_string(task.id) + " moved from slice " +
             std::to_string(slice) + " to slice " + std::to_string(target.id);
  HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
  if (m != nullptr) {
    (*m)["state"] = "moved";
    (*m)["moved_at"] = now;
  }
  (*plan)["updated_at"] = now;
  HF_RETURN_IF_ERROR(SavePlanInTxn(txn, *plan));
  return true;
}

StatusOr<RowId> Defrag::AutoOnce() {
  // One plan at a time.
  auto applying = PlansIn("applying");
  if (!applying.ok()) return applying.status();
  if (!applying->empty()) return RowId{0};
  std::vector<TaskRow> pending;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    store::TaskFilter f;
    f.state = store::TaskState::kPending;
    f.limit = 50;
    auto rows = txn.ListTasks(f);
    if (!rows.ok()) return rows.status();
    pending.clear();
    for (TaskRow& t : *rows) {
      if (t.gpu_required == 0 && t.memory_mib && !t.cancel_requested) {
        pending.push_back(std::move(t));
      }
    }
    return Status::Ok();
  }));
  if (pending.empty()) return RowId{0};
  // Nodes past the threshold, with their free memory and largest room.
  struct NodeRoom {
    std::string name;
    scheduler::RoomSummary room;
  };
  std::vector<NodeRoom> fragmented;
  {
    MutexLock lock(ledger_->mu());
    ledger_->ledger().Read([&](const ledger::ClusterView& view) {
      ledger_->mu().AssertHeld();  // runs here, under mu_
      for (const auto& [row, node] : ledger_->inventory().nodes()) {
        scheduler::RoomSummary room = scheduler::MeasureRoom(view, node);
        if (room.fragmentation >= options_.auto_threshold) {
          fragmented.push_back({names_->Node(row), std::move(room)});
        }
      }
    });
  }
  Caller leader;
  leader.role = store::Role::kAdmin;
  for (const TaskRow& task : pending) {
    for (const NodeRoom& n : fragmented) {
      if (n.room.largest_slice_mib >= *task.memory_mib ||
          n.room.free_memory_mib < *task.memory_mib) {
        continue;  // fits already, or never will here
      }
      DefragPlanCreate request;
      request.node = n.name;
      request.goal_memory_mib = *task.memory_mib;
      request.automatic = true;
      auto plan = Propose(leader, request);
      if (!plan.ok()) continue;
      const RowId id = (*plan)["id"].get<RowId>();
      auto applied = Apply(leader, id);
      if (!applied.ok()) return applied.status();
      spdlog::info(
          "defrag: automatic plan {} on node {} for pending task {} ({} MiB)",
          id, n.name, task.id, *task.memory_mib);
      return id;
    }
  }
  return RowId{0};
}

void Defrag::Run() {
  Millis last_auto = std::numeric_limits<Millis>::min() / 2;
  for (;;) {
    if (!queue_->Sleep(std::chrono::milliseconds(options_.tick_ms))) return;
    Status s = TickOnce();
    if (!s.ok()) spdlog::warn("defrag: {}", s.ToString());
    const Millis now = monotonic_->NowMillis();
    if (options_.automatic && now - last_auto >= options_.auto_interval_ms) {
      auto id = AutoOnce();
      if (!id.ok()) {
        spdlog::warn("defrag (automatic): {}", id.status().ToString());
      }
      if (!id.ok() || *id != 0) last_auto = now;  // the rate limit
    }
  }
}

}  // namespace hf::server
