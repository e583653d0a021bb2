// Helpers shared by the files that implement ControlPlane. Not part of the
// server's interface.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace hf::server {

inline constexpr std::string_view kDefaultTenant = "default";
// After a MIG create found no room, the GPU takes no gold slice for this
// long unless its partitions change first.
inline constexpr store::Millis kMigFullMillis = 300'000;
// meta: the MIG partitions already recorded as orphaned
// ({uuid: {"node": node id, "gpu": index}}).
inline constexpr std::string_view kMigOrphansNotedKey = "mig_orphans_noted";

std::string Sha256Hex(std::string_view data);
// Tenant, group and node names: [a-z0-9][a-z0-9._-]{0,62}.
Status ValidateName(std::string_view name, std::string_view field);
Status RequireAdmin(const struct Caller& caller);
// The agent endpoints: a node token (or an admin); one bound to a node
// acts for that node only (RequireAgentFor).
Status RequireAgent(const struct Caller& caller);
Status RequireAgentFor(const struct Caller& caller, const std::string& node);

// A history entry describing `slice` (op, slice/task/tenant/node, GPUs,
// quantities); the caller fills `at`, `actor` and `reason`.
inline store::HistoryRow HistoryFor(const store::SliceRow& slice,
                                    std::string op) {
  store::HistoryRow h;
  h.op = std::move(op);
  h.slice_id = slice.id;
  h.task_id = slice.task_id;
  h.tenant_id = slice.tenant_id;
  h.node_id = slice.node_id;
  h.gpu_indices = slice.gpu_indices;
  h.memory_mib = slice.memory_mib;
  h.compute_percent = slice.compute_percent;
  return h;
}

// Every row a filter matches, page after page (a scan never stops at one
// page). `fn` may not write to the rows' table in a way that moves them
// past the cursor; it may stop the scan by returning an error.
template <typename Row, typename Filter, typename List>
Status ForEachRow(Filter f, List list, const std::function<Status(Row&)>& fn) {
  if (f.limit <= 0) f.limit = 500;
  for (;;) {
    StatusOr<std::vector<Row>> rows = list(f);
    if (!rows.ok()) return rows.status();
    for (Row& row : *rows) HF_RETURN_IF_ERROR(fn(row));
    if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();
    f.after_id = rows->back().id;
  }
}

inline Status ForEachSliceRequest(
    store::Txn& txn, store::SliceRequestFilter f,
    const std::function<Status(store::SliceRequestRow&)>& fn) {
  return ForEachRow<store::SliceRequestRow>(
      f,
      [&](const store::SliceRequestFilter& g) {
        return txn.ListSliceRequests(g);
      },
      fn);
}

// The MIG commands no agent has answered yet: pending, then claimed (`f`'s
// state is set for each).
inline Status ForEachOpenSliceRequest(
    store::Txn& txn, store::SliceRequestFilter f,
    const std::function<Status(store::SliceRequestRow&)>& fn) {
  for (auto state : {store::SliceRequestState::kPending,
                     store::SliceRequestState::kClaimed}) {
    f.state = state;
    HF_RETURN_IF_ERROR(ForEachSliceRequest(txn, f, fn));
  }
  return Status::Ok();
}

inline Status ForEachSlice(store::Txn& txn, store::SliceFilter f,
                           const std::function<Status(store::SliceRow&)>& fn) {
  return ForEachRow<store::SliceRow>(
      f, [&](const store::SliceFilter& g) { return txn.ListSlices(g); }, fn);
}

// One page of the live slices with ids above `after` (ascending), in a
// read of its own: empty past the last one.
inline StatusOr<std::vector<store::SliceRow>> LiveSlicePage(store::Store& store,
                                                            store::RowId after,
                                                            int limit = 1000) {
  std::vector<store::SliceRow> page;
  HF_RETURN_IF_ERROR(store.Read([&](store::Txn& txn) -> Status {
    store::SliceFilter f;
    f.live_only = true;
    f.after_id = after;
    f.limit = limit;
    auto rows = txn.ListSlices(f);
    if (!rows.ok()) return rows.status();
    page = std::move(*rows);
    return Status::Ok();
  }));
  return page;
}

inline Status ForEachTask(store::Txn& txn, store::TaskFilter f,
                          const std::function<Status(store::TaskRow&)>& fn) {
  return ForEachRow<store::TaskRow>(
      f, [&](const store::TaskFilter& g) { return txn.ListTasks(g); }, fn);
}

}  // namespace hf::server
