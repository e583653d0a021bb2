#include "ledger/cluster_state.h"

#include <algorithm>
#include <cassert>

namespace hf::ledger {

std::uint64_t ClusterState::ModelBit(const std::string& model) {
  // Up to 63 distinct models get a bit each; the rest share bit 63, which
  // only weakens pruning (the exact model check still runs on each entry).
  auto it = model_bits.find(model);
  if (it != model_bits.end()) return it->second;
  const std::size_t n = model_bits.size();
  const std::uint64_t bit = std::uint64_t{1} << std::min<std::size_t>(n, 63);
  model_bits.emplace(model, bit);
  return bit;
}

SharingKey ClusterState::ComputeDomain(const GpuRecord& gpu) const {
  if (gpu.tenants.empty()) return SharingKey{};
  const ClusterView view(*this);
  const SharingKey first = view.SharingKeyOf(gpu.tenants.front().first);
  for (const auto& [tenant, count] : gpu.tenants) {
    if (!(view.SharingKeyOf(tenant) == first)) return SharingKey::Conflict();
  }
  return first;
}

FitAttrs ClusterState::GpuAttrs(const GpuRecord& gpu) const {
  const NodeRecord& node = nodes[gpu.node.value()];
  return FitAttrs{gpu.free_compute_percent(), node.free_cpu_milli(),
                  node.free_host_memory_mib(), gpu.model_bit};
}

bool ClusterState::WholeEligible(const GpuRecord& gpu) const {
  return gpu.live && gpu.healthy() && gpu.empty() && !gpu.spec.mig_capable;
}

void ClusterState::Reindex(GpuId id) {
  const auto slot = static_cast<FitIndex::Slot>(id.value());
  if (gpu_tree.size() <= id.value()) gpu_tree.resize(id.value() + 1);
  auto& current = gpu_tree[id.value()];
  if (current.has_value()) {
    FitIndex::Root& root = current->kind == SharingKey::Kind::kNone
                               ? empty_gpus
                               : domain_gpus.at(*current);
    gpu_index.Erase(root, slot);
    if (current->kind != SharingKey::Kind::kNone && root == FitIndex::kNil) {
      domain_gpus.erase(*current);
    }
    current.reset();
  }
  const GpuRecord& gpu = gpus[id.value()];
  const bool indexable = gpu.live && gpu.healthy() && !gpu.whole_owned &&
                         gpu.free_compute_percent() > 0 &&
                         gpu.domain.kind != SharingKey::Kind::kConflict;
  if (indexable) {
    const SharingKey key = gpu.empty() ? SharingKey{} : gpu.domain;
    // A new domain's tree starts empty (kNil; a value-initialised Root would
    // be slot 0).
    FitIndex::Root& root =
        key.kind == SharingKey::Kind::kNone
            ? empty_gpus
            : domain_gpus.try_emplace(key, FitIndex::kNil).first->second;
    gpu_index.Insert(root, slot,
                     FitKey{gpu.free_memory_mib(),
                            nodes[gpu.node.value()].tie_rank, id.value()},
                     GpuAttrs(gpu));
    current = key;
  }
  // The node's whole-GPU eligibility may have changed with this GPU.
  if (gpu.node.valid() && gpu.node.value() < nodes.size()) {
    ReindexNode(gpu.node);
  }
}

void ClusterState::ReindexNode(NodeId id) {
  const auto slot = static_cast<FitIndex::Slot>(id.value());
  if (node_whole_count.size() <= id.value()) {
    node_whole_count.resize(id.value() + 1, 0);
    node_whole_mask.resize(id.value() + 1, 0);
  }
  const NodeRecord& node = nodes[id.value()];
  int count = 0;
  std::uint64_t mask = 0;
  if (node.live) {
    for (GpuId g : node.gpus) {
      const GpuRecord& gpu = gpus[g.value()];
      if (WholeEligible(gpu)) {
        ++count;
        mask |= gpu.model_bit;
      }
    }
  }
  const bool was_in = node_index.Contains(slot);
  if (was_in && count == node_whole_count[id.value()] &&
      mask == node_whole_mask[id.value()]) {
    return;  // unchanged; resource changes go through RefreshNodeResources
  }
  if (was_in) node_index.Erase(whole_nodes, slot);
  node_whole_count[id.value()] = count;
  node_whole_mask[id.value()] = mask;
  if (count > 0) {
    node_index.Insert(whole_nodes, slot,
                      FitKey{count, node.tie_rank, id.value()},
                      FitAttrs{count, node.free_cpu_milli(),
                               node.free_host_memory_mib(), mask});
  }
}

void ClusterState::RefreshNodeResources(NodeId id) {
  const NodeRecord& node = nodes[id.value()];
  for (GpuId g : node.gpus) {
    const auto& tree = gpu_tree.size() > g.value()
                           ? gpu_tree[g.value()]
                           : std::optional<SharingKey>{};
    if (!tree.has_value()) continue;
    const FitIndex::Root root = tree->kind == SharingKey::Kind::kNone
                                    ? empty_gpus
                                    : domain_gpus.at(*tree);
    gpu_index.SetAttrs(root, static_cast<FitIndex::Slot>(g.value()),
                       GpuAttrs(gpus[g.value()]));
  }
  const auto slot = static_cast<FitIndex::Slot>(id.value());
  if (node_index.Contains(slot)) {
    node_index.SetAttrs(
        whole_nodes, slot,
        FitAttrs{node_whole_count[id.value()], node.free_cpu_milli(),
                 node.free_host_memory_mib(), node_whole_mask[id.value()]});
  }
}

}  // namespace hf::ledger
