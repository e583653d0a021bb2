// Names: what the control plane renders rows with, cached so that rendering
// takes no lock of the control plane's and, mostly, reads no store: the
// names of tenants, nodes and groups by id, and the card at each (node, GPU
// index) as the ledger holds it (its UUID and vendor; slices, MIG commands
// and a slice's env are built inside store writes, without the ledger's
// lock).
//
// The control plane tells it every name and card it learns (recovery,
// registration, a created tenant or group, a GPU added to the ledger). A
// name asked for and not cached is read from the store, and cached when
// found; a card is read from the store only when the caller says it may
// (a follower, whose ledger is empty: see GpuUuid).
//
// Thread-safety: one internal mutex, a leaf: held only while the maps are
// read or changed, never across store I/O. Safe from any thread, with or
// without the control plane's locks held (lock order: theirs, then this).
#pragma once

#include <compare>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::server {

// A GPU by its node's row id and its index on the node.
struct GpuKey {
  store::RowId node_id;
  int index;
  // NOLINTNEXTLINE(modernize-use-nullptr): false positive on <=>
  friend auto operator<=>(const GpuKey&, const GpuKey&) = default;
};

// The card at a GpuKey.
struct GpuIdentity {
  std::string uuid;
  std::string vendor;
};

class Names {
 public:
  // `store` must outlive the Names.
  explicit Names(store::Store* store) : store_(store) {}

  Names(const Names&) = delete;
  Names& operator=(const Names&) = delete;

  // The cached name, else the store's (read in a transaction of its own,
  // so never call these inside one), cached when found; "" when unknown.
  std::string Tenant(store::RowId id) HF_EXCLUDES(mu_);
  std::string Node(store::RowId id) HF_EXCLUDES(mu_);
  std::string Group(store::RowId id) HF_EXCLUDES(mu_);

  void SetTenant(store::RowId id, const std::string& name) HF_EXCLUDES(mu_);
  void SetNode(store::RowId id, const std::string& name) HF_EXCLUDES(mu_);
  void SetGroup(store::RowId id, const std::string& name) HF_EXCLUDES(mu_);
  // Every name recovery read, at once.
  void SetAll(const std::vector<store::GroupRow>& groups,
              const std::vector<store::TenantRow>& tenants,
              const std::vector<store::NodeRow>& nodes) HF_EXCLUDES(mu_);

  // The card at `key`, if it was set.
  std::optional<GpuIdentity> Gpu(const GpuKey& key) const HF_EXCLUDES(mu_);
  void SetGpu(const GpuKey& key, const GpuIdentity& identity) HF_EXCLUDES(mu_);
  // The cards set at `indices` of node `node_id`, in that order, read at
  // once; indices with none set are left out.
  std::vector<GpuIdentity> Gpus(store::RowId node_id,
                                const std::vector<int>& indices) const
      HF_EXCLUDES(mu_);
  // The UUID of the card at `key`: the one set; else, when `read_store`,
  // the store's inventory's (not cached: the ledger decides which card is
  // there); else "". A follower passes read_store (its ledger is empty);
  // the leader does not: it asks inside write transactions, where no store
  // read may run, and its ledger knows every card.
  std::string GpuUuid(const GpuKey& key, bool read_store) HF_EXCLUDES(mu_);

 private:
  enum class Kind { kTenant, kNode, kGroup };
  // The name of `id` in the cache of `kind`, else `load`ed from the store
  // and cached when found; "" when unknown.
  std::string Cached(Kind kind, store::RowId id,
                     const std::function<std::string(store::Txn&)>& load)
      HF_EXCLUDES(mu_);
  std::unordered_map<store::RowId, std::string>& CacheLocked(Kind kind)
      HF_REQUIRES(mu_);

  store::Store* const store_;
  mutable Mutex mu_;
  std::unordered_map<store::RowId, std::string> tenants_ HF_GUARDED_BY(mu_);
  std::unordered_map<store::RowId, std::string> nodes_ HF_GUARDED_BY(mu_);
  std::unordered_map<store::RowId, std::string> groups_ HF_GUARDED_BY(mu_);
  std::map<GpuKey, GpuIdentity> gpus_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
