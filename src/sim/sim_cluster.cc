#include "sim/sim_cluster.h"

#include <algorithm>

namespace hf::sim {

StatusOr<std::unique_ptr<ledger::Ledger>> BuildSimLedger(
    const std::vector<TraceNode>& nodes, std::uint64_t seed,
    const SimMig& mig) {
  ledger::LedgerOptions options;
  // Seed 0 would mean "no randomised tie-breaks"; every seed must randomise.
  options.tie_break_seed = seed == 0 ? 0x5EEDULL : seed;
  auto created = ledger::Ledger::Create(options);
  if (!created.ok()) return created.status();
  std::unique_ptr<ledger::Ledger> ledger = std::move(created).value();
  // Nodes in name order, so a node's id (and with it its tie-break rank)
  // does not depend on the order of the file.
  std::vector<const TraceNode*> sorted;
  for (const TraceNode& n : nodes) {
    if (n.gpu_count > 0) sorted.push_back(&n);
  }
  std::sort(
      sorted.begin(), sorted.end(),
      [](const TraceNode* a, const TraceNode* b) { return a->name < b->name; });
  for (const TraceNode* n : sorted) {
    ledger::NodeSpec spec;
    spec.name = n->name;
    spec.cpu_milli = n->cpu_milli;
    spec.host_memory_mib = n->memory_mib;
    auto node = ledger->AddNode(spec);
    if (!node.ok()) return node.status().WithContext("node " + n->name);
    for (int i = 0; i < n->gpu_count; ++i) {
      ledger::GpuSpec gpu;
      gpu.uuid = n->name + "/gpu" + std::to_string(i);
      gpu.index = i;
      gpu.model = n->model;
      gpu.memory_mib = kSimGpuMemoryMib;
      gpu.compute_capability_major = 7;
      if (mig.enabled() && std::find(mig.models.begin(), mig.models.end(),
                                     n->model) != mig.models.end()) {
        // In MIG mode, with the table's geometry: the ledger charges each
        // slice the partition it gets, at a free placement.
        gpu.mig_capable = true;
        gpu.mig_table = mig.table->model_key;
      }
      auto id = ledger->AddGpu(*node, gpu);
      if (!id.ok()) return id.status().WithContext("node " + n->name);
    }
  }
  return ledger;
}

std::int64_t CapacityMilli(const std::vector<TraceNode>& nodes) {
  std::int64_t total = 0;
  for (const TraceNode& n : nodes) {
    total += static_cast<std::int64_t>(n.gpu_count) * kMilliPerGpu;
  }
  return total;
}

ledger::PlacementRequest ToRequest(const TracePod& pod) {
  ledger::PlacementRequest r;
  if (pod.num_gpu == 0) {
    r = ledger::PlacementRequest::NodeOnly(kSimTenant, pod.cpu_milli,
                                           pod.memory_mib);
    if (pod.cpu_milli == 0 && pod.memory_mib == 0) r.cpu_milli = 1;
  } else if (pod.is_share()) {
    r = ledger::PlacementRequest::Slice(kSimTenant,
                                        pod.gpu_milli * kSimMibPerMilli,
                                        std::max(1, pod.gpu_milli / 10));
  } else {
    r = ledger::PlacementRequest::WholeGpus(kSimTenant, pod.num_gpu);
  }
  r.cpu_milli = std::max<CpuMilli>(r.cpu_milli, pod.cpu_milli);
  r.host_memory_mib = pod.memory_mib;
  r.allowed_models = pod.gpu_spec;
  return r;
}

namespace {

bool IsMig(const SimMig& mig, const std::string& model) {
  return std::find(mig.models.begin(), mig.models.end(), model) !=
         mig.models.end();
}

}  // namespace

std::optional<ledger::PlacementRequest> ToMigRequest(const TracePod& pod,
                                                     const SimMig& mig) {
  if (!mig.enabled() || !pod.is_share()) return std::nullopt;
  std::vector<std::string> models;
  for (const std::string& m : mig.models) {
    if (pod.gpu_spec.empty() ||
        std::find(pod.gpu_spec.begin(), pod.gpu_spec.end(), m) !=
            pod.gpu_spec.end()) {
      models.push_back(m);
    }
  }
  if (models.empty()) return std::nullopt;
  // The task as it asks; the ledger charges the partition.
  ledger::PlacementRequest r = ToRequest(pod);
  r.allowed_models = std::move(models);
  return r;
}

std::optional<ledger::PlacementRequest> ToPlainRequest(const TracePod& pod,
                                                       const SimMig& mig) {
  ledger::PlacementRequest r = ToRequest(pod);
  if (!mig.enabled() || pod.num_gpu == 0) return r;
  std::vector<std::string> models;
  if (pod.gpu_spec.empty()) {
    // Every model out of MIG mode: the ledger needs them named.
    models = mig.plain_models;
  } else {
    for (const std::string& m : pod.gpu_spec) {
      if (!IsMig(mig, m)) models.push_back(m);
    }
  }
  if (models.empty()) return std::nullopt;
  r.allowed_models = std::move(models);
  return r;
}

scheduler::TaskClass ToTaskClass(const TracePod& pod) {
  scheduler::TaskClass c;
  c.cpu_milli = pod.cpu_milli;
  c.gpu_milli = pod.num_gpu == 0 ? 0 : pod.gpu_milli;
  c.num_gpu = pod.num_gpu;
  c.gpu_models = pod.gpu_spec;
  return c;
}

}  // namespace hf::sim
