#include "server/placement.h"

#include <algorithm>
#include <utility>

#include "common/task_launch.h"
#include "scheduler/hold.h"

namespace hf::server {

Placement::Placement(ledger::Ledger& ledger, const Inventory& inventory,
                     LedgerTenancy& tenancy, const MigBook& mig,
                     const Clock& monotonic, scheduler::MadePolicy made,
                     const ledger::PlacementPolicy* policy_for_testing)
    : ledger_(ledger),
      inventory_(inventory),
      tenancy_(tenancy),
      mig_(mig),
      monotonic_(monotonic),
      owned_policy_(std::move(made.policy)),
      observer_(policy_for_testing != nullptr ? nullptr : made.observer),
      policy_(policy_for_testing != nullptr ? policy_for_testing
                                            : owned_policy_.get()) {}

ledger::PlacementRequest Placement::RequestFor(
    const store::TaskRow& task) const {
  ledger::PlacementRequest request;
  request.tenant = TenantId(task.tenant_id);
  if (task.gpu_required > 0) {
    request.kind = ledger::RequestKind::kWholeGpus;
    request.gpu_count = task.gpu_required;
  } else {
    request.kind = ledger::RequestKind::kSlice;
    request.memory_mib = task.memory_mib;
    if (task.compute_percent) request.compute_percent = *task.compute_percent;
  }
  request.allowed_models = inventory_.AllowedModels(task.gpu_type);
  // What a node's runtime can start it from (common/task_launch.h).
  request.has_command = HasStartableCommand(task.command);
  request.has_image = HasStartableImage(task.image);
  return request;
}

ledger::PlacementResult Placement::Place(ledger::PlacementRequest request) {
  tenancy_.ExpireDue();
  // The MIG GPUs that take no new partition now are a filter of the
  // pipeline: excluded up front, named if nothing else fits.
  std::string blocked;
  if (request.kind == ledger::RequestKind::kSlice) {
    for (const auto& [gpu, why] : Blocked()) {
      request.excluded_gpus.push_back(gpu);
      if (blocked.empty()) {
        std::string uuid;
        const GpuId named = gpu;  // a lambda cannot capture a binding
        ledger_.Read([&](const ledger::ClusterView& view) {
          if (view.HasGpu(named)) uuid = view.gpu(named).spec.uuid;
        });
        blocked = "MIG GPU ";
        blocked += uuid;
        blocked += ' ';
        blocked += why;
      }
    }
  }
  ledger::PlacementResult result = ledger_.Place(request, *policy_);
  if (!result.placed() && !blocked.empty()) result.message += "; " + blocked;
  return result;
}

scheduler::QosDecision Placement::QosFor(GpuId gpu, bool whole_gpus) const {
  scheduler::QosDecision qos;
  ledger_.Read([&](const ledger::ClusterView& view) {
    const ledger::GpuRecord& g = view.gpu(gpu);
    const ledger::NodeRecord& n = view.node(g.node);
    const bool hook = inventory_.Hook(inventory_.NodeRowOf(g.node));
    qos = scheduler::DeriveQos(g.spec, n.spec.containerized, hook, whole_gpus);
  });
  return qos;
}

std::map<GpuId, std::string> Placement::Blocked() const {
  std::map<GpuId, std::string> out;
  for (auto& [key, why] : mig_.AllBlocked(monotonic_.NowMillis())) {
    auto id = inventory_.gpus().find(key);
    if (id != inventory_.gpus().end()) out.emplace(id->second, std::move(why));
  }
  return out;
}

std::set<GpuId> Placement::PrepareTargets() {
  tenancy_.ExpireDue();
  std::set<GpuId> out;
  for (const auto& [gpu, why] : Blocked()) out.insert(gpu);
  for (const auto& [key, gpu] : inventory_.gpus()) {
    if (inventory_.Fenced(key)) out.insert(gpu);
  }
  holds_.AddHeldGpus(out);
  return out;
}

scheduler::HoldChange Placement::UpdateHold(
    store::RowId task_id, const ledger::PlacementRequest& request,
    const scheduler::HoldRules& rules, bool for_room, store::Millis waited_ms,
    store::Millis now) {
  // PrepareTargets only when a hold may begin: it reads every GPU.
  const std::set<GpuId> excluded =
      holds_.MayBegin(rules, task_id, for_room, waited_ms) ? PrepareTargets()
                                                           : std::set<GpuId>{};
  scheduler::HoldChange change = scheduler::HoldChange::kNone;
  ledger_.Read([&](const ledger::ClusterView& view) {
    change = holds_.AfterWaiting(view, rules, task_id, request, for_room,
                                 waited_ms, now, excluded);
  });
  return change;
}

Placement::HeldAt Placement::WhereHeld(const Hold& hold) const {
  HeldAt at;
  ledger_.Read([&](const ledger::ClusterView& view) {
    for (GpuId g : hold.gpus) {
      if (!view.HasGpu(g)) continue;
      const ledger::GpuRecord& gpu = view.gpu(g);
      at.node = view.node(gpu.node).spec.name;
      at.gpu_indices.push_back(gpu.spec.index);
    }
  });
  return at;
}

std::string Placement::DescribeHold(const Hold& hold) const {
  const HeldAt at = WhereHeld(hold);
  const std::vector<int>& indices = at.gpu_indices;
  std::string out = indices.size() == 1 ? "GPU " : "GPUs ";
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += i + 1 == indices.size() ? " and " : ", ";
    out += std::to_string(indices[i]);
  }
  out += " of node " + at.node + (indices.size() == 1 ? " is" : " are") +
         " held for task " + std::to_string(hold.task_id) +
         ", waiting longest, and take" + (indices.size() == 1 ? "s" : "") +
         " no other task until it fits";
  return out;
}

std::string Placement::DescribeHolds() const {
  std::string out;
  for (const Hold& hold : holds_.holds()) {
    if (!out.empty()) out += "; ";
    out += DescribeHold(hold);
  }
  return out;
}

void Placement::Learn(const store::TaskRow& task,
                      const ledger::PlacementRequest& request) {
  if (observer_ == nullptr || task.id <= learned_through_) return;
  observer_->Observe(request);
  learned_through_ = task.id;
}

void Placement::ForgetLearned() {
  if (observer_ != nullptr) observer_->Forget();
  learned_through_ = 0;
}

void Placement::LearnedThrough(store::RowId newest) {
  learned_through_ = std::max(learned_through_, newest);
}

}  // namespace hf::server
