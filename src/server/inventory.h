// Inventory: the ledger's mirror of the store's inventory. Which ledger
// node each stored node is and which ledger GPU each (node, GPU index) is,
// whether each node's hook is available, the GPU models per vendor (to turn
// a task's gpu_type into allowed models), and the GPUs fenced: those
// holding a slice restart recovery could not restore, and those whose card
// a registration in flight changes. A fenced GPU is held lost in the
// ledger, so nothing new lands there.
//
// Thread-safety: none of its own. It changes the ledger, so the control
// plane holds it under its ledger lock (`mu_`, HF_GUARDED_BY), like every
// other ledger change.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ledger/ledger.h"
#include "server/names.h"
#include "server/scheduler_queue.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

// The card at a GPU index, as opposed to its capabilities and health: a
// different one there is a card swapped (the ledger's GPU replaced, the
// stored row kept lost while it holds slices). Views into the row, spec or
// report it was taken from.
struct CardIdentity {
  std::string_view uuid;
  std::string_view vendor;
  std::string_view model;
  std::int64_t memory_mib = 0;
  int cc_major = 0;
  int cc_minor = 0;
  friend bool operator==(const CardIdentity&, const CardIdentity&) = default;
};
CardIdentity CardOf(const store::GpuRow& gpu);
CardIdentity CardOf(const ledger::GpuSpec& gpu);
CardIdentity CardOf(const wire::GpuReport& gpu);

// What a node whose agent reports task runtime `runtime` starts a task
// from: "process" and "sim" (the simulated process runtime) its command,
// "docker" its image; any other name, or none, is offered every task.
ledger::TaskLaunch LaunchOf(std::string_view runtime);

class Inventory {
 public:
  // `ledger`, `names` and `queue` must outlive it; each GPU added, freed
  // or changed wakes `queue`'s scheduler, and the card at each GPU is
  // named in `names`.
  Inventory(ledger::Ledger& ledger, Names& names, SchedulerQueue& queue)
      : ledger_(ledger), names_(names), queue_(queue) {}

  // The ledger node of a stored node, added on first sight; its
  // containerized flag follows the row.
  StatusOr<NodeId> SyncNode(const store::NodeRow& node);
  // The ledger GPU at (node, index) follows its row: added, its card
  // swapped when a different one is there holding nothing, its
  // capabilities and health (lost, or fenced) updated.
  Status SyncGpu(const store::NodeRow& node, const store::GpuRow& gpu);

  const std::map<store::RowId, NodeId>& nodes() const { return nodes_; }
  // The GPU indices of `node` that hold a slice now (reservations too).
  std::set<int> Occupied(store::RowId node) const;
  const std::map<GpuKey, GpuId>& gpus() const { return gpus_; }
  std::optional<NodeId> FindNode(store::RowId node) const;
  StatusOr<GpuId> Gpu(store::RowId node, int index) const;
  // The stored node of a ledger node, and the (node, index) of a ledger
  // GPU; each must be known (every one the ledger holds is).
  store::RowId NodeRowOf(NodeId node) const { return node_rows_.at(node); }
  const GpuKey& KeyOf(GpuId gpu) const { return gpu_keys_.at(gpu); }
  const GpuKey* FindKey(GpuId gpu) const;

  void SetHook(store::RowId node, bool available) { hooks_[node] = available; }
  bool Hook(store::RowId node) const;
  const std::map<store::RowId, bool>& hooks() const { return hooks_; }

  // The models a task asking for `vendor` may use: none named when every
  // GPU is of that vendor; a name no GPU has when none is.
  std::vector<std::string> AllowedModels(const std::string& vendor) const;

  bool Fenced(const GpuKey& key) const;
  // Restart recovery could not restore `slice`: the GPUs at `keys` are
  // held lost until Unfence.
  Status FenceUnrestored(store::RowId slice, const std::vector<GpuKey>& keys);
  bool Unrestored(store::RowId slice) const {
    return unrestored_.contains(slice);
  }
  // The slice is gone: its GPUs follow `rows` (the node's, read after the
  // slice's deletion committed) again.
  Status Unfence(store::RowId slice, const std::optional<store::NodeRow>& node,
                 const std::vector<store::GpuRow>& rows);
  // Before a registration's write: the GPUs of `node` whose card the
  // report changes, drops or calls lost take nothing new; returns them.
  // EndRegistration, after the write, puts them back as they were (a
  // written report's rows are then synced, under the same lock).
  std::vector<GpuKey> FenceRegistration(store::RowId node,
                                        const wire::NodeReport& report);
  void EndRegistration(const std::vector<GpuKey>& fenced);

 private:
  using GpuMap = std::map<GpuKey, GpuId>;
  // The entries of stored node `node` in gpus_, by ascending index.
  std::pair<GpuMap::const_iterator, GpuMap::const_iterator> GpusOf(
      store::RowId node) const;

  ledger::Ledger& ledger_;
  Names& names_;
  SchedulerQueue& queue_;
  std::map<store::RowId, NodeId> nodes_;
  std::map<NodeId, store::RowId> node_rows_;
  GpuMap gpus_;
  std::map<GpuId, GpuKey> gpu_keys_;
  std::map<store::RowId, bool> hooks_;
  std::map<std::string, std::set<std::string>> vendors_models_;
  // Slices recovery could not restore, and the GPUs they fence.
  std::map<store::RowId, std::vector<GpuKey>> unrestored_;
  // GPUs a registration in flight changes.
  std::set<GpuKey> registering_;
};

}  // namespace hf::server
