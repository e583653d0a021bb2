// LeaderWriter: how the control plane's units write to the store as the
// leader. One interface for every unit (tenancy, tasks, the scheduler, the
// MIG channel, GC, recovery, nodes): the control plane answers it, fencing
// each write where there are several instances (a stale leader's write
// aborts) and, for a write that releases slices, telling the ledger of the
// releases only after the commit, so the ledger never holds less than the
// store.
//
// Thread-safety: callable from any thread, holding none of the ledger's
// locks (GuardedLedger: a releasing write takes its write gate, then its
// lock after the commit).
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace hf::server {

class LeaderWriter {
 public:
  using WriteFn = std::function<Status(store::Txn&)>;
  // A write that lists, in its second argument, the slices it releases.
  // It may run again on a rerun, with the list emptied first.
  using ReleasingFn =
      std::function<Status(store::Txn&, std::vector<store::RowId>&)>;

  virtual ~LeaderWriter() = default;

  // Runs `fn` in one store transaction. Unavailable, without running it,
  // where this instance may not act.
  virtual Status LeaderWrite(const WriteFn& fn) = 0;
  // The same for a write that releases slices: after the commit
  // `committed` runs (when set), then the ledger learns the releases (none
  // when the write fails). Returns how many slices were released.
  virtual StatusOr<int> WriteReleases(
      const ReleasingFn& fn, const std::function<void()>& committed) = 0;
  StatusOr<int> WriteReleases(const ReleasingFn& fn) {
    return WriteReleases(fn, nullptr);
  }
};

}  // namespace hf::server
