// For the server's unit tests: a stored task or slice read back in a read
// transaction of its own. A failed read fails the test and gives a default
// row. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <functional>

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

}  // namespace hf::server
