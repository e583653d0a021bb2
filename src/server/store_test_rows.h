// For the server's unit tests over a real store: a stored task or slice
// read back in a read transaction of its own (a failed read fails the test
// and gives a default row), and a LeaderWriter straight onto the store.
// Test-only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "server/leader_writer.h"
#include "store/store.h"

namespace hf::server {

template <typename Row>
Row ReadRow(store::Store& store,
            const std::function<StatusOr<Row>(store::Txn&)>& get) {
  Row row;
  const Status read = store.Read([&](store::Txn& txn) -> Status {
    auto r = get(txn);
    if (!r.ok()) return r.status();
    row = *std::move(r);
    return Status::Ok();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
  return row;
}

inline store::TaskRow StoredTask(store::Store& store, store::RowId id) {
  return ReadRow<store::TaskRow>(
      store, [&](store::Txn& txn) { return txn.GetTask(id); });
}

inline store::SliceRow StoredSlice(store::Store& store, store::RowId id) {
  return ReadRow<store::SliceRow>(
      store, [&](store::Txn& txn) { return txn.GetSlice(id); });
}

// Tenant "acme" and the nodes named, inserted inside `txn`: their ids.
struct TenantAndNodes {
  store::RowId tenant = 0;
  std::vector<store::RowId> nodes;
};
inline StatusOr<TenantAndNodes> InsertTenantAndNodes(
    store::Txn& txn, const std::vector<std::string>& nodes) {
  TenantAndNodes out;
  store::TenantRow tenant;
  tenant.name = "acme";
  auto t = txn.InsertTenant(tenant);
  if (!t.ok()) return t.status();
  out.tenant = t->id;
  for (const std::string& name : nodes) {
    store::NodeRow node;
    node.name = name;
    auto n = txn.UpsertNode(node);
    if (!n.ok()) return n.status();
    out.nodes.push_back(n->id);
  }
  return out;
}

// A LeaderWriter straight onto `store`, as the control plane's (the only
// instance: nothing fenced): a releasing write's releases are learned after
// its commit and after `committed`. `refuse` makes every write Unavailable
// (a failed write, as on an instance that may not act); `learned` (when
// set) is told each slice released, as the ledger learns them.
class StoreWriterForTest : public LeaderWriter {
 public:
  explicit StoreWriterForTest(store::Store* store) : store_(store) {}

  Status LeaderWrite(const WriteFn& fn) override {
    if (refuse) return Status::Unavailable("not the leader");
    return store_->Write(fn);
  }
  StatusOr<int> WriteReleases(const ReleasingFn& fn,
                              const std::function<void()>& committed) override {
    if (refuse) return Status::Unavailable("not the leader");
    std::vector<store::RowId> released;
    HF_RETURN_IF_ERROR(store_->Write([&](store::Txn& txn) -> Status {
      released.clear();
      return fn(txn, released);
    }));
    if (committed) committed();
    for (store::RowId id : released) {
      if (learned) learned(id);
    }
    return static_cast<int>(released.size());
  }
  using LeaderWriter::WriteReleases;

  bool refuse = false;
  std::function<void(store::RowId)> learned;

 private:
  store::Store* const store_;
};

}  // namespace hf::server
