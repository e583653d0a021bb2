// A page of rows for the list endpoints, and how one is cut.
//
// Thread-safety: plain values.
#pragma once

#include <optional>
#include <vector>

#include "store/store.h"

namespace hf::server {

template <typename T>
struct Page {
  std::vector<T> items;
  std::optional<store::RowId> next_after;  // pass as after_id for the next page
};

// Turns up to `limit` + 1 rows read in id order into a page: the extra row
// only says that another page follows.
template <typename T>
void TrimToPage(Page<T>& page, int limit) {
  if (static_cast<int>(page.items.size()) <= limit) return;
  page.items.resize(limit);
  page.next_after = page.items.back().id;
}

}  // namespace hf::server
