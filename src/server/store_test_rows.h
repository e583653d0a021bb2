// For the server's unit tests over a real store: a stored task or slice
// read back in a read transaction of its own (a failed read fails the test
// and gives a default row), and the release path as the control plane runs
// it. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

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

// What the control plane's WriteReleases does, on `store`: `fn`'s write
// (it lists the slices it releases), then `committed` (when set), then
// `learned` for each slice released, as the ledger learns them. Returns how
// many.
inline StatusOr<int> WriteReleasesForTest(
    store::Store& store,
    const std::function<Status(store::Txn&, std::vector<store::RowId>&)>& fn,
    const std::function<void()>& committed,
    const std::function<void(store::RowId)>& learned) {
  std::vector<store::RowId> released;
  HF_RETURN_IF_ERROR(store.Write([&](store::Txn& txn) -> Status {
    released.clear();
    return fn(txn, released);
  }));
  if (committed) committed();
  for (store::RowId id : released) learned(id);
  return static_cast<int>(released.size());
}

}  // namespace hf::server
