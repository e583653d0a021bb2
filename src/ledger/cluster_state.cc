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

void ClusterState::Reindex(GpuId id, bool reindex_node) {
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
    const FitAttrs attrs = GpuAttrs(gpu);
    gpu_index.Insert(root, slot,
                     FitKey{gpu.free_memory_mib(),
                            nodes[gpu.node.value()].tie_rank, id.value()},
                     attrs);
    NoteStored(gpu.node, attrs);
    current = key;
  }
  // The node's whole-GPU eligibility may have changed with this GPU.
  if (reindex_node && gpu.node.valid() && gpu.node.value() < nodes.size()) {
    ReindexNode(gpu.node);
  }
}

NodeRecord::GpuBrief ClusterState::BriefOf(const GpuRecord& gpu) {
  return NodeRecord::GpuBrief{gpu.spec.memory_mib,
                              gpu.free_memory_mib(),
                              gpu.free_compute_percent(),
                              gpu.live && gpu.healthy() && !gpu.whole_owned,
                              gpu.mig != nullptr,
                              gpu.empty(),
                              gpu.model_bit,
                              gpu.domain};
}

void ClusterState::SummariseNodeGpus(NodeId id) {
  if (id.value() >= nodes.size()) return;
  NodeRecord& node = nodes[id.value()];
  MemoryMib memory = 0;
  ComputePercent compute = 0;
  std::uint64_t models = 0;
  int whole = 0;
  bool mig_slices = false;
  node.gpu_briefs.resize(node.gpus.size());
  for (std::size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuRecord& gpu = gpus[node.gpus[i].value()];
    const bool takes_slices = gpu.live && gpu.healthy() && !gpu.whole_owned;
    node.gpu_briefs[i] = BriefOf(gpu);
    if (!gpu.live) continue;
    models |= gpu.model_bit;
    whole += WholeEligible(gpu) ? 1 : 0;
    if (!takes_slices) continue;
    mig_slices = mig_slices || gpu.mig != nullptr;
    memory = std::max(memory, gpu.free_memory_mib());
    compute = std::max(compute, gpu.free_compute_percent());
  }
  node.max_free_memory_mib = memory;
  node.max_free_compute_percent = compute;
  node.mig_slices = mig_slices;
  node.gpu_model_mask = models;
  node.whole_eligible_gpus = whole;
  node.generation = ++next_node_generation;
}

void ClusterState::ReindexNode(NodeId id) {
  const auto slot = static_cast<FitIndex::Slot>(id.value());
  if (node_whole_count.size() <= id.value()) {
    node_whole_count.resize(id.value() + 1, 0);
    node_whole_mask.resize(id.value() + 1, 0);
  }
  SummariseNodeGpus(id);
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
    const FitAttrs attrs{count, node.free_cpu_milli(),
                         node.free_host_memory_mib(), mask};
    node_index.Insert(whole_nodes, slot,
                      FitKey{count, node.tie_rank, id.value()}, attrs);
    NoteStored(id, attrs);
  }
}

void ClusterState::NoteStored(NodeId node, const FitAttrs& attrs) {
  if (node_stored_bounds.size() <= node.value()) {
    node_stored_bounds.resize(node.value() + 1);
  }
  StoredResourceBounds& b = node_stored_bounds[node.value()];
  b.cpu_lo = std::min(b.cpu_lo, attrs.cpu_free);
  b.cpu_hi = std::max(b.cpu_hi, attrs.cpu_free);
  b.host_lo = std::min(b.host_lo, attrs.host_memory_free);
  b.host_hi = std::max(b.host_hi, attrs.host_memory_free);
}

// Node CPU / host memory in the index are upper bounds, refreshed lazily: a
// value above the truth only weakens pruning (the exact check still runs on
// every candidate). So a place (resources go down) needs no refresh unless a
// stored value would overstate the truth by more than 2x, and a release
// (resources go up) needs one only where the truth now exceeds a stored
// value. The node's stored bounds decide that without visiting its entries;
// a place + release pair usually touches nothing.
void ClusterState::RefreshNodeResources(NodeId id) {
  const NodeRecord& node = nodes[id.value()];
  const CpuMilli cpu = node.free_cpu_milli();
  const MemoryMib host = node.free_host_memory_mib();
  if (node_stored_bounds.size() <= id.value()) {
    node_stored_bounds.resize(id.value() + 1);
  }
  if (const StoredResourceBounds& b = node_stored_bounds[id.value()];
      b.cpu_lo >= cpu && b.host_lo >= host && cpu >= b.cpu_hi / 2 &&
      host >= b.host_hi / 2) {
    return;  // every stored value is an upper bound within 2x of the truth
  }
  // Rewrite every entry of the node to the truth; the bounds become exact.
  node_stored_bounds[id.value()] = StoredResourceBounds{};
  for (GpuId g : node.gpus) {
    if (gpu_tree.size() <= g.value() || !gpu_tree[g.value()].has_value()) {
      continue;
    }
    const SharingKey& tree = *gpu_tree[g.value()];
    const auto slot = static_cast<FitIndex::Slot>(g.value());
    const FitAttrs actual = GpuAttrs(gpus[g.value()]);
    NoteStored(id, actual);
    if (gpu_index.AttrsOf(slot) == actual) continue;
    const FitIndex::Root root = tree.kind == SharingKey::Kind::kNone
                                    ? empty_gpus
                                    : domain_gpus.at(tree);
    gpu_index.SetAttrs(root, slot, actual);
  }
  const auto slot = static_cast<FitIndex::Slot>(id.value());
  if (node_index.Contains(slot)) {
    const FitAttrs actual{node_whole_count[id.value()], cpu, host,
                          node_whole_mask[id.value()]};
    NoteStored(id, actual);
    if (!(node_index.AttrsOf(slot) == actual)) {
      node_index.SetAttrs(whole_nodes, slot, actual);
    }
  }
}

}  // namespace hf::ledger
