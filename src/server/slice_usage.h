// SliceUsage: the hook usage last reported for each live slice. The
// leader keeps the newest report in memory (the agent sends one every
// heartbeat) and stores it (store::SliceUsageRow) when it changed
// materially or every kSliceUsagePersistMs, so every instance can serve it
// and a restart keeps it. This unit holds the reports, decides which are
// worth storing, and owns the stored rows' format; the control plane does
// the store I/O.
//
// Thread-safety: an internal mutex, a leaf (never held across I/O); safe
// from any thread, with or without the control plane's mutex held (lock
// order: control plane mu_, then this).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

// The hook usage last reported for a live slice.
struct HookUsage {
  wire::HookReport report;
  store::RowId task_id = 0;
  store::Millis reported_at = 0;
};
inline constexpr store::Millis kSliceUsagePersistMs = 30'000;

class SliceUsage {
 public:
  // Records `usage` as slice `slice`'s newest report if `live()` (asked
  // under this unit's lock: a release takes the slice out of the ledger
  // before it calls Forget, so a report racing a release leaves nothing
  // behind). Returns whether the report it replaces (if any) named no
  // process running outside the hook.
  bool Record(store::RowId slice, const HookUsage& usage,
              const std::function<bool()>& live);
  // The newest report in memory for `slice`, if any.
  std::optional<HookUsage> Latest(store::RowId slice) const;
  // Of `slices`, the reports worth storing now: a counter, the attachment
  // or the processes changed, the memory used moved by more than 5% of the
  // quota (or of the larger of the two), or the one stored is older than
  // kSliceUsagePersistMs.
  std::vector<std::pair<store::RowId, HookUsage>> DueForStore(
      const std::vector<store::RowId>& slices) const;
  // `rows` (from DueForStore) were stored; kept only for slices still live.
  void MarkStored(const std::vector<std::pair<store::RowId, HookUsage>>& rows);
  // The slices were released: their reports go.
  void Forget(const std::vector<store::RowId>& released);

  // The stored row's form of `usage`, and back (nullopt when the row does
  // not read).
  static store::SliceUsageRow ToRow(store::RowId slice, const HookUsage& usage);
  static std::optional<HookUsage> FromRow(const store::SliceUsageRow& row);

 private:
  mutable Mutex mu_;
  std::map<store::RowId, HookUsage> latest_ HF_GUARDED_BY(mu_);
  std::map<store::RowId, HookUsage> stored_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
