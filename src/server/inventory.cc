// Inventory: the ledger's mirror of the store's inventory (inventory.h).
#include "server/inventory.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace hf::server {

CardIdentity CardOf(const store::GpuRow& gpu) {
  return {gpu.uuid,       gpu.vendor,   gpu.model,
          gpu.memory_mib, gpu.cc_major, gpu.cc_minor};
}

CardIdentity CardOf(const ledger::GpuSpec& gpu) {
  return {gpu.uuid,
          gpu.vendor,
          gpu.model,
          gpu.memory_mib,
          gpu.compute_capability_major,
          gpu.compute_capability_minor};
}

CardIdentity CardOf(const wire::GpuReport& gpu) {
  return {gpu.uuid,       gpu.vendor,   gpu.model,
          gpu.memory_mib, gpu.cc_major, gpu.cc_minor};
}

std::pair<Inventory::GpuMap::const_iterator, Inventory::GpuMap::const_iterator>
Inventory::GpusOf(store::RowId node) const {
  return {gpus_.lower_bound(GpuKey{node, std::numeric_limits<int>::min()}),
          gpus_.upper_bound(GpuKey{node, std::numeric_limits<int>::max()})};
}

std::optional<NodeId> Inventory::FindNode(store::RowId node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

const GpuKey* Inventory::FindKey(GpuId gpu) const {
  auto it = gpu_keys_.find(gpu);
  return it == gpu_keys_.end() ? nullptr : &it->second;
}

std::set<int> Inventory::Occupied(store::RowId node) const {
  std::set<int> out;
  const auto [first, last] = GpusOf(node);
  ledger_.Read([&, from = first, to = last](const ledger::ClusterView& view) {
    for (auto it = from; it != to; ++it) {
      if (view.HasGpu(it->second) && !view.gpu(it->second).empty()) {
        out.insert(it->first.index);
      }
    }
  });
  return out;
}

bool Inventory::Hook(store::RowId node) const {
  auto it = hooks_.find(node);
  return it != hooks_.end() && it->second;
}

Status Inventory::FenceUnrestored(store::RowId slice,
                                  const std::vector<GpuKey>& keys) {
  for (const GpuKey& key : keys) {
    auto it = gpus_.find(key);
    if (it != gpus_.end()) {
      HF_RETURN_IF_ERROR(
          ledger_.SetGpuHealth(it->second, ledger::GpuHealth::kLost));
    }
  }
  unrestored_[slice] = keys;
  queue_.CapacityFreed();
  return Status::Ok();
}

ledger::TaskLaunch LaunchOf(std::string_view runtime) {
  if (runtime == "process" || runtime == "sim") {
    return ledger::TaskLaunch::kCommand;
  }
  if (runtime == "docker") return ledger::TaskLaunch::kImage;
  return ledger::TaskLaunch::kAny;
}

StatusOr<NodeId> Inventory::SyncNode(const store::NodeRow& node) {
  auto it = nodes_.find(node.id);
  if (it != nodes_.end()) {
    HF_RETURN_IF_ERROR(ledger_.SetNodeTraits(it->second, node.containerized,
                                             LaunchOf(node.runtime)));
    return it->second;
  }
  ledger::NodeSpec spec;
  spec.name = node.name;
  // Node CPU and host memory are not scheduled by the server (tasks ask
  // for GPUs only): the ledger gets the largest amounts its placement
  // index holds exactly (32 bits), whatever the node reported, so the
  // node-resource checks stay out of the way and no reported value enters
  // any arithmetic. (Scaling the reported values up overflowed, and past
  // 2^31 the index saturated and the ledger's own check failed.)
  spec.cpu_milli = ledger::kMaxNodeCpuMilli;
  spec.host_memory_mib = ledger::kMaxNodeHostMemoryMib;
  spec.containerized = node.containerized;
  spec.launch = LaunchOf(node.runtime);
  auto id = ledger_.AddNode(spec);
  if (!id.ok()) return id.status();
  nodes_[node.id] = *id;
  node_rows_[*id] = node.id;
  return *id;
}

Status Inventory::SyncGpu(const store::NodeRow& node,
                          const store::GpuRow& gpu) {
  auto node_id = SyncNode(node);
  if (!node_id.ok()) return node_id.status();
  const GpuKey key{node.id, gpu.index};
  auto it = gpus_.find(key);
  vendors_models_[gpu.vendor].insert(gpu.model);
  if (it == gpus_.end()) {
    ledger::GpuSpec spec;
    spec.uuid = gpu.uuid;
    spec.index = gpu.index;
    spec.vendor = gpu.vendor;
    spec.model = gpu.model;
    spec.memory_mib = gpu.memory_mib;
    spec.compute_capability_major = gpu.cc_major;
    spec.compute_capability_minor = gpu.cc_minor;
    spec.mig_capable = gpu.mig_capable;
    spec.mps_capable = gpu.mps_capable;
    spec.health = gpu.lost || Fenced(key) ? ledger::GpuHealth::kLost
                                          : ledger::GpuHealth::kOk;
    auto id = ledger_.AddGpu(*node_id, spec);
    if (!id.ok()) return id.status().WithContext("GPU " + gpu.uuid);
    gpus_[key] = *id;
    gpu_keys_[*id] = key;
    names_.SetGpu(key, GpuIdentity{gpu.uuid, gpu.vendor});
    queue_.CapacityFreed();
    return Status::Ok();
  }
  bool replaced = false;
  ledger_.Read([&](const ledger::ClusterView& view) {
    const ledger::GpuRecord& record = view.gpu(it->second);
    const ledger::GpuSpec& spec = record.spec;
    replaced = record.empty() && CardOf(spec) != CardOf(gpu);
  });
  if (replaced) {
    // A different card at this index, holding nothing: swap it in.
    HF_RETURN_IF_ERROR(ledger_.RemoveGpu(it->second));
    gpu_keys_.erase(it->second);
    gpus_.erase(it);
    return SyncGpu(node, gpu);
  }
  // A GPU holding a slice recovery could not restore takes nothing new.
  const bool lost = gpu.lost || Fenced(key);
  bool changed = false;
  ledger_.Read([&](const ledger::ClusterView& view) {
    const ledger::GpuSpec& spec = view.gpu(it->second).spec;
    changed = spec.mig_capable != gpu.mig_capable ||
              spec.mps_capable != gpu.mps_capable ||
              (spec.health == ledger::GpuHealth::kLost) != lost;
  });
  if (!changed) return Status::Ok();
  HF_RETURN_IF_ERROR(
      ledger_.SetGpuCapabilities(it->second, gpu.mig_capable, gpu.mps_capable));
  HF_RETURN_IF_ERROR(ledger_.SetGpuHealth(
      it->second, lost ? ledger::GpuHealth::kLost : ledger::GpuHealth::kOk));
  queue_.CapacityFreed();
  return Status::Ok();
}

bool Inventory::Fenced(const GpuKey& key) const {
  if (registering_.contains(key)) return true;
  for (const auto& [slice, keys] : unrestored_) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return true;
  }
  return false;
}

std::vector<GpuKey> Inventory::FenceRegistration(
    store::RowId node_row, const wire::NodeReport& report) {
  std::map<int, const wire::GpuReport*> reported;
  for (const wire::GpuReport& g : report.gpus) reported[g.index] = &g;
  std::vector<GpuKey> fenced;
  const auto [first, last] = GpusOf(node_row);
  ledger_.Read([&, from = first, to = last](const ledger::ClusterView& view) {
    for (auto it = from; it != to; ++it) {
      if (!view.HasGpu(it->second)) continue;
      const ledger::GpuSpec& spec = view.gpu(it->second).spec;
      if (spec.health != ledger::GpuHealth::kOk) continue;  // takes nothing
      const auto r = reported.find(it->first.index);
      const bool changes = r == reported.end() || r->second->lost ||
                           CardOf(spec) != CardOf(*r->second);
      if (changes) fenced.push_back(it->first);
    }
  });
  for (const GpuKey& key : fenced) {
    registering_.insert(key);
    (void)ledger_.SetGpuHealth(gpus_.at(key), ledger::GpuHealth::kLost);
  }
  return fenced;
}

void Inventory::EndRegistration(const std::vector<GpuKey>& fenced) {
  // Back to what they were (each took work); a written report's GPUs are
  // synced from their rows right after (SyncGpu), under the same lock.
  for (const GpuKey& key : fenced) registering_.erase(key);
  for (const GpuKey& key : fenced) {
    auto it = gpus_.find(key);
    if (it == gpus_.end() || Fenced(key)) continue;
    (void)ledger_.SetGpuHealth(it->second, ledger::GpuHealth::kOk);
  }
  if (!fenced.empty()) queue_.CapacityFreed();
}

Status Inventory::Unfence(store::RowId slice_id,
                          const std::optional<store::NodeRow>& node,
                          const std::vector<store::GpuRow>& rows) {
  auto it = unrestored_.find(slice_id);
  if (it == unrestored_.end()) return Status::Ok();
  const std::vector<GpuKey> keys = it->second;
  unrestored_.erase(it);
  // The GPUs take work again as their last report says.
  if (!node) return Status::Ok();
  for (const store::GpuRow& g : rows) {
    if (std::find(keys.begin(), keys.end(), GpuKey{g.node_id, g.index}) !=
        keys.end()) {
      HF_RETURN_IF_ERROR(SyncGpu(*node, g));
    }
  }
  return Status::Ok();
}

StatusOr<GpuId> Inventory::Gpu(store::RowId node_id, int index) const {
  auto it = gpus_.find(GpuKey{node_id, index});
  if (it == gpus_.end()) {
    return Status::NotFound("GPU " + std::to_string(index) + " of node " +
                            std::to_string(node_id));
  }
  return it->second;
}

std::vector<std::string> Inventory::AllowedModels(
    const std::string& vendor) const {
  if (vendors_models_.size() <= 1 && vendors_models_.contains(vendor)) {
    return {};  // every GPU is of that vendor
  }
  auto it = vendors_models_.find(vendor);
  if (it == vendors_models_.end() || it->second.empty()) {
    // Matches no GPU: the failure explains it as a model mismatch.
    return {"(no " + vendor + " GPU in the cluster)"};
  }
  return {it->second.begin(), it->second.end()};
}

}  // namespace hf::server
