// ControlPlane: the slices API's reads (docs/CONTRACT.md section 6): reads
// narrowed to the caller's tenant, stats from the ledger, the history log,
// the GPUs a slice could move to, the MIG command rows, the hook usage
// reported per slice, and the ledger-vs-store check used by tests and the
// crash test. Operator reservations, DELETE and resizes: OperatorSlices
// (operator_slices.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "server/control_plane.h"
#include "server/internal.h"

namespace hf::server {

using store::Millis;

using store::Role;
using store::SliceRow;
using store::Txn;

StatusOr<SliceRow> ControlPlane::GetSlice(const Caller& caller, RowId id) {
  std::optional<SliceRow> row;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto s = txn.GetSlice(id);
    if (s.ok()) row = *s;
    return s.ok() || s.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                                : s.status();
  }));
  if (!row || !CanSee(caller, row->tenant_id)) {
    return Status::NotFound("no slice " + std::to_string(id));
  }
  return *row;
}

StatusOr<Page<SliceRow>> ControlPlane::ListSlices(const Caller& caller,
                                                  const SliceQuery& query) {
  if (caller.role == Role::kNode) return Page<SliceRow>{};
  store::SliceFilter f;
  f.after_id = query.after_id;
  f.limit = query.limit + 1;
  f.gpu_index = query.gpu_index;
  if (query.state) {
    f.state = query.state;
  } else if (!query.all_states) {
    f.live_only = true;
  }
  if (!caller.admin()) f.tenant_id = caller.tenant_id;
  Page<SliceRow> page;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    if (query.node) {
      auto node = txn.FindNode(*query.node);
      if (!node.ok()) {
        if (node.status().code() == StatusCode::kNotFound) return Status::Ok();
        return node.status();
      }
      f.node_id = node->id;
    }
    auto rows = txn.ListSlices(f);
    if (!rows.ok()) return rows.status();
    page.items = std::move(*rows);
    return Status::Ok();
  }));
  TrimToPage(page, query.limit);
  return page;
}

StatusOr<SliceStats> ControlPlane::Stats(const Caller& caller) {
  SliceStats stats;
  // Identity that cannot be resolved to a tenant (node tokens) gets the
  // narrowest view: nothing.
  std::optional<TenantId> only;
  if (!caller.admin()) {
    stats.cluster_scope = false;
    stats.tenant = caller.tenant;
    if (!caller.tenant_id) return stats;
    only = TenantId(*caller.tenant_id);
  }
  struct Pending {
    GpuStats stats;
    std::vector<TenantId> tenants;
  };
  std::vector<Pending> rows;
  {
    MutexLock lock(core_.mu());
    if (!only) {
      stats.policy = std::string(core_.placement().policy().name());
      if (const auto* learner = core_.placement().learner();
          learner != nullptr) {
        stats.policy_learns = true;
        stats.policy_cold_start = learner->ColdStart();
        stats.policy_tasks_learned = learner->tasks_observed();
      }
      for (const Placement::Hold& hold : core_.placement().holds()) {
        HoldStats& out = stats.holds.emplace_back();
        out.task_id = hold.task_id;
        out.since = hold.since;
        Placement::HeldAt at = core_.placement().WhereHeld(hold);
        out.node = std::move(at.node);
        out.gpu_indices = std::move(at.gpu_indices);
      }
    }
    std::map<RowId, bool> hooks = core_.inventory().hooks();
    core_.ledger().Read([&](const ledger::ClusterView& view) {
      core_.mu().AssertHeld();  // runs here, under mu_
      const MemoryMib cap = MaxSliceMemoryMib(view.largest_gpu_memory_mib());
      std::set<NodeId> nodes;
      for (std::size_t slot = 0; slot < view.gpu_slot_count(); ++slot) {
        const GpuId id(slot);
        if (!view.HasGpu(id)) continue;
        const ledger::GpuRecord& g = view.gpu(id);
        if (only) {
          const bool mine =
              std::any_of(g.tenants.begin(), g.tenants.end(),
                          [&](const auto& t) { return t.first == *only; });
          if (!mine) continue;
        }
        const ledger::NodeRecord& n = view.node(g.node);
        const GpuKey* key = core_.inventory().FindKey(id);
        if (key == nullptr) continue;
        Pending p;
        GpuStats& s = p.stats;
        s.index = g.spec.index;
        s.uuid = g.spec.uuid;
        s.model = g.spec.model;
        s.vendor = g.spec.vendor;
        s.lost = !g.healthy();
        s.mig_capable = g.spec.mig_capable;
        s.mps_capable = g.spec.mps_capable;
        auto hook = hooks.find(key->node_id);
        s.qos_level = std::string(scheduler::QosLevelName(
            scheduler::DeriveQos(g.spec, n.spec.containerized,
                                 hook != hooks.end() && hook->second)
                .level));
        s.total_memory_mib = g.spec.memory_mib;
        s.accounted_memory_mib = g.used_memory_mib;
        s.accounted_compute_percent = g.used_compute_percent;
        s.slices = g.allocation_count;
        s.whole_owned = g.whole_owned;
        s.node = std::to_string(key->node_id);  // named below
        for (const auto& [tenant, count] : g.tenants)
          p.tenants.push_back(tenant);
        nodes.insert(g.node);
        if (!only) {
          stats.total_memory_mib += g.spec.memory_mib;
          stats.accounted_memory_mib += g.used_memory_mib;
          if (g.healthy() && !g.whole_owned &&
              g.used_compute_percent < kFullComputePercent) {
            stats.largest_placeable_slice_mib =
                std::max(stats.largest_placeable_slice_mib,
                         std::min<MemoryMib>(g.free_memory_mib(), cap));
          }
        }
        rows.push_back(std::move(p));
      }
      if (!only) {
        nodes.clear();
        for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
          if (view.HasNode(NodeId(i))) nodes.insert(NodeId(i));
        }
      }
      stats.nodes = static_cast<int>(nodes.size());
    });
    if (only) {
      // Only the caller's own slices count (not even its group's).
      std::map<std::pair<RowId, int>, std::pair<MemoryMib, int>> mine;
      for (const ledger::Allocation& a : core_.ledger().Allocations()) {
        if (a.tenant != *only) continue;
        ++stats.live_slices;
        for (GpuId g : a.gpus) {
          const GpuKey& k = core_.inventory().KeyOf(g);
          auto& m = mine[{k.node_id, k.index}];
          m.first += a.kind == ledger::RequestKind::kWholeGpus
                         ? a.memory_mib / static_cast<MemoryMib>(a.gpus.size())
                         : a.memory_mib;
          m.second += a.compute_percent;
        }
      }
      for (Pending& p : rows) {
        const std::pair<RowId, int> k{std::stoll(p.stats.node), p.stats.index};
        auto it = mine.find(k);
        p.stats.accounted_memory_mib = it == mine.end() ? 0 : it->second.first;
        p.stats.accounted_compute_percent =
            it == mine.end() ? 0 : it->second.second;
        p.tenants = {*only};
        stats.accounted_memory_mib += p.stats.accounted_memory_mib;
      }
    } else {
      stats.live_slices = static_cast<int>(core_.ledger().allocation_count());
      stats.free_memory_mib =
          stats.total_memory_mib - stats.accounted_memory_mib;
      stats.pending_tasks = scheduler_.pending();
    }
  }
  for (Pending& p : rows) {
    const RowId node_id = std::stoll(p.stats.node);
    p.stats.node = NodeName(node_id);
    for (TenantId t : p.tenants) {
      p.stats.tenants.push_back(TenantName(static_cast<RowId>(t.value())));
    }
    if (only) {
      // Capacity of a GPU shared with others is not the tenant's to see.
      p.stats.total_memory_mib = 0;
      p.stats.slices = 0;
    }
    stats.per_gpu.push_back(std::move(p.stats));
  }
  stats.gpus = static_cast<int>(stats.per_gpu.size());
  return stats;
}

StatusOr<Page<store::HistoryRow>> ControlPlane::History(
    const Caller& caller, const store::HistoryFilter& filter) {
  store::HistoryFilter f = filter;
  // A client's page, in the order no later commit reaches back into
  // (store::ListPosition); unset: from the beginning.
  if (!f.after) f.after.emplace();
  const int limit = f.limit;
  f.limit = limit + 1;
  if (!caller.admin()) {
    if (!caller.tenant_id) return Page<store::HistoryRow>{};
    f.tenant_id = caller.tenant_id;
  }
  Page<store::HistoryRow> page;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListHistory(f);
    if (!rows.ok()) return rows.status();
    page.items = std::move(*rows);
    return Status::Ok();
  }));
  TrimToPage(page, limit);
  return page;
}

StatusOr<std::vector<SliceTarget>> ControlPlane::SliceTargets(RowId id) {
  auto found = SliceTargets(std::vector<RowId>{id});
  if (!found.ok()) return found.status();
  auto it = found->find(id);
  if (it == found->end()) {
    return Status::NotFound("no live slice " + std::to_string(id) +
                            " on one GPU");
  }
  return std::move(it->second);
}

StatusOr<std::map<RowId, std::vector<SliceTarget>>> ControlPlane::SliceTargets(
    const std::vector<RowId>& ids) {
  struct Asked {
    RowId id = 0;
    GpuKey own;
    ledger::PlacementRequest request;
    std::optional<std::string> gpu_type;  // the task's; none: any model
  };
  std::vector<Asked> asked;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    asked.clear();
    for (RowId id : ids) {
      auto s = txn.GetSlice(id);
      if (!s.ok()) {
        if (s.status().code() == StatusCode::kNotFound) continue;
        return s.status();
      }
      if (s->state == store::SliceState::kReleased || s->whole ||
          s->gpu_indices.size() != 1) {
        continue;
      }
      Asked a;
      a.id = id;
      a.own = GpuKey{s->node_id, s->gpu_indices[0]};
      // The slice as it is now (a resized quota, the compute it is
      // accounted at), asked again the way the scheduler asks: the ledger's
      // own checks decide, so this never disagrees with what a placement
      // would do.
      a.request = ledger::PlacementRequest::Slice(
          TenantId(s->tenant_id), s->memory_mib,
          s->compute_defaulted
              ? std::nullopt
              : std::optional<ComputePercent>(s->compute_percent));
      if (s->task_id) {
        auto t = txn.GetTask(*s->task_id);
        if (t.ok()) a.gpu_type = t->gpu_type;
      }
      asked.push_back(std::move(a));
    }
    return Status::Ok();
  }));
  std::map<RowId, std::vector<std::pair<GpuKey, SliceTarget>>> found;
  if (!asked.empty()) {
    MutexLock lock(core_.mu());
    // What every placement withdraws first and leaves out.
    const std::set<GpuId> skipped = core_.placement().PrepareTargets();
    for (Asked& a : asked) {
      if (a.gpu_type)
        a.request.allowed_models = core_.inventory().AllowedModels(*a.gpu_type);
      found[a.id];
    }
    core_.ledger().Read([&](const ledger::ClusterView& view) {
      core_.mu().AssertHeld();  // runs here, under mu_
      std::vector<ledger::SharingKey> tenant_keys;
      tenant_keys.reserve(asked.size());
      for (const Asked& a : asked) {
        tenant_keys.push_back(view.SharingKeyOf(a.request.tenant));
      }
      for (const auto& [key, gpu] : core_.inventory().gpus()) {
        if (skipped.contains(gpu) || !view.HasGpu(gpu)) continue;
        const ledger::GpuRecord& g = view.gpu(gpu);
        for (std::size_t i = 0; i < asked.size(); ++i) {
          const Asked& a = asked[i];
          if (key == a.own) continue;
          gpu::MigFit fit;  // the partition it gets on a GPU in MIG mode
          if (view.CheckSlice(g, a.request, tenant_keys[i], &fit)) continue;
          SliceTarget t;
          t.gpu_index = key.index;
          t.slices = g.allocation_count;
          if (fit.profile != nullptr) t.mig_profile = fit.profile->name;
          found[a.id].emplace_back(key, std::move(t));
        }
      }
    });
  }
  std::map<RowId, std::vector<SliceTarget>> out;
  for (auto& [id, targets] : found) {
    std::vector<SliceTarget>& listed = out[id];
    listed.reserve(targets.size());
    for (auto& [key, target] : targets) {
      target.node = NodeName(key.node_id);
      listed.push_back(std::move(target));
    }
    std::sort(listed.begin(), listed.end(),
              [](const SliceTarget& a, const SliceTarget& b) {
                return std::tie(a.node, a.gpu_index) <
                       std::tie(b.node, b.gpu_index);
              });
  }
  return out;
}

StatusOr<Page<store::SliceRequestRow>> ControlPlane::ListSliceRequests(
    const Caller& caller, const store::SliceRequestFilter& filter) {
  HF_RETURN_IF_ERROR(RequireAdmin(caller));
  store::SliceRequestFilter f = filter;
  const int limit = f.limit;
  f.limit = limit + 1;
  Page<store::SliceRequestRow> page;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto rows = txn.ListSliceRequests(f);
    if (!rows.ok()) return rows.status();
    page.items = std::move(*rows);
    return Status::Ok();
  }));
  TrimToPage(page, limit);
  return page;
}

Status ControlPlane::CheckLedgerMatchesStore() {
  WriterLock settled(core_.write_gate());  // no write between store and ledger
  MutexLock lock(core_.mu());
  std::vector<SliceRow> live;
  RowId after = 0;
  for (;;) {
    auto page = LiveSlicePage(*store_, after);
    if (!page.ok()) return page.status();
    if (page->empty()) break;
    after = page->back().id;
    live.insert(live.end(), page->begin(), page->end());
  }
  std::vector<ledger::Allocation> allocations = core_.ledger().Allocations();
  if (allocations.size() != live.size()) {
    return Status::Internal("ledger holds " +
                            std::to_string(allocations.size()) +
                            " allocations, the store " +
                            std::to_string(live.size()) + " live slices");
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    ledger::Allocation expected = core_.AllocationOf(live[i]);
    ledger::Allocation actual = allocations[i];
    expected.node = actual.node;  // rows name the node by store id
    if (actual.kind == ledger::RequestKind::kWholeGpus) {
      expected.memory_mib = actual.memory_mib;
      expected.compute_percent = actual.compute_percent;
    }
    actual.cpu_milli = expected.cpu_milli;
    actual.host_memory_mib = expected.host_memory_mib;
    if (!(expected == actual)) {
      const auto show = [](const ledger::Allocation& a) {
        return std::to_string(a.memory_mib) + " MB / " +
               std::to_string(a.compute_percent) + "%" +
               (a.compute_defaulted ? " (default)" : "") +
               (a.mig_profile.empty() ? std::string()
                                      : " as " + a.mig_profile + "@" +
                                            std::to_string(a.mig_start));
      };
      return Status::Internal("slice " + std::to_string(live[i].id) +
                              " differs between the ledger (" + show(actual) +
                              ") and the store (" + show(expected) + ")");
    }
  }
  return core_.ledger().CheckInvariants();
}

std::optional<HookUsage> ControlPlane::SliceHookUsage(RowId id) {
  if (auto latest = usage_.Latest(id)) return latest;
  // Not reported to this instance (a follower, or since a restart): what
  // the leader stored.
  std::optional<store::SliceUsageRow> row;
  Status read = store_->Read([&](Txn& txn) -> Status {
    auto r = txn.GetSliceUsage(id);
    if (!r.ok()) return r.status();
    row = *r;
    return Status::Ok();
  });
  if (!read.ok() || !row) return std::nullopt;
  return SliceUsage::FromRow(*row);
}

StatusOr<std::vector<HookUsage>> ControlPlane::SliceUsageHistory(
    const Caller& caller, RowId id, store::Millis since, int limit) {
  HF_RETURN_IF_ERROR(GetSlice(caller, id).status());
  std::vector<store::SliceUsageRow> rows;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto r = txn.ListSliceUsageHistory(id, since, limit);
    if (!r.ok()) return r.status();
    rows = std::move(r).value();
    return Status::Ok();
  }));
  std::vector<HookUsage> out;
  out.reserve(rows.size());
  for (const store::SliceUsageRow& row : rows) {
    if (auto usage = SliceUsage::FromRow(row)) out.push_back(std::move(*usage));
  }
  return out;
}

}  // namespace hf::server
