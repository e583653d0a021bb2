#include "server/names.h"

namespace hf::server {

using store::RowId;
using store::Txn;

std::unordered_map<RowId, std::string>& Names::CacheLocked(Kind kind) {
  switch (kind) {
    case Kind::kTenant:
      return tenants_;
    case Kind::kNode:
      return nodes_;
    case Kind::kGroup:
      break;
  }
  return groups_;
}

std::string Names::Cached(Kind kind, RowId id,
                          const std::function<std::string(Txn&)>& load) {
  {
    MutexLock lock(mu_);
    const auto& cache = CacheLocked(kind);
    auto it = cache.find(id);
    if (it != cache.end()) return it->second;
  }
  std::string name;
  (void)store_->Read([&](Txn& txn) -> Status {
    name = load(txn);
    return Status::Ok();
  });
  if (!name.empty()) {
    MutexLock lock(mu_);
    CacheLocked(kind)[id] = name;
  }
  return name;
}

std::string Names::Tenant(RowId id) {
  return Cached(Kind::kTenant, id, [id](Txn& txn) {
    auto t = txn.GetTenant(id);
    return t.ok() ? t->name : std::string();
  });
}

std::string Names::Node(RowId id) {
  return Cached(Kind::kNode, id, [id](Txn& txn) {
    auto n = txn.GetNode(id);
    return n.ok() ? n->name : std::string();
  });
}

std::string Names::Group(RowId id) {
  return Cached(Kind::kGroup, id, [id](Txn& txn) {
    auto g = txn.GetGroup(id);
    return g.ok() ? g->name : std::string();
  });
}

void Names::SetTenant(RowId id, const std::string& name) {
  MutexLock lock(mu_);
  tenants_[id] = name;
}

void Names::SetNode(RowId id, const std::string& name) {
  MutexLock lock(mu_);
  nodes_[id] = name;
}

void Names::SetGroup(RowId id, const std::string& name) {
  MutexLock lock(mu_);
  groups_[id] = name;
}

void Names::SetAll(const std::vector<store::GroupRow>& groups,
                   const std::vector<store::TenantRow>& tenants,
                   const std::vector<store::NodeRow>& nodes) {
  MutexLock lock(mu_);
  for (const store::GroupRow& g : groups) groups_[g.id] = g.name;
  for (const store::TenantRow& t : tenants) tenants_[t.id] = t.name;
  for (const store::NodeRow& n : nodes) nodes_[n.id] = n.name;
}

std::optional<GpuIdentity> Names::Gpu(const GpuKey& key) const {
  MutexLock lock(mu_);
  auto it = gpus_.find(key);
  if (it == gpus_.end()) return std::nullopt;
  return it->second;
}

void Names::SetGpu(const GpuKey& key, const GpuIdentity& identity) {
  MutexLock lock(mu_);
  gpus_[key] = identity;
}

std::vector<GpuIdentity> Names::Gpus(RowId node_id,
                                     const std::vector<int>& indices) const {
  std::vector<GpuIdentity> out;
  MutexLock lock(mu_);
  for (int index : indices) {
    auto it = gpus_.find(GpuKey{node_id, index});
    if (it != gpus_.end()) out.push_back(it->second);
  }
  return out;
}

std::string Names::GpuUuid(const GpuKey& key, bool read_store) {
  if (auto known = Gpu(key)) return known->uuid;
  if (!read_store) return "";
  std::string uuid;
  (void)store_->Read([&](Txn& txn) -> Status {
    auto gpus = txn.ListGpus(key.node_id);
    if (!gpus.ok()) return gpus.status();
    for (const store::GpuRow& g : *gpus) {
      if (g.index == key.index) uuid = g.uuid;
    }
    return Status::Ok();
  });
  return uuid;
}

}  // namespace hf::server
