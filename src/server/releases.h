// Releases: how a slice's release is written in the store (docs/CONTRACT.md
// section 5), inside the caller's transaction. A slice with no MIG
// partition is released at once and listed as free; a gold slice whose
// partition exists waits, `releasing`, for its destroy command (written
// here); one whose create the agent is still executing waits for that
// result, and an unclaimed create is withdrawn. The ledger learns what was
// listed after the caller's commit (the control plane's WriteReleases).
//
// Thread-safety: no state of its own; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/mig_channel.h"
#include "server/telemetry.h"
#include "store/store.h"

namespace hf::server {

class Releases {
 public:
  // `clock`, `mig` and `telemetry` must outlive the Releases.
  Releases(const Clock* clock, MigChannel* mig, Telemetry* telemetry)
      : clock_(clock), mig_(mig), telemetry_(telemetry) {}

  Releases(const Releases&) = delete;
  Releases& operator=(const Releases&) = delete;

  // Releases `slice` (when allocated) by `actor` for `reason`, with its
  // history entry; appends its id to `released` when it is free now.
  Status ReleaseInTxn(store::Txn& txn, store::SliceRow& slice,
                      const std::string& actor, const std::string& reason,
                      std::vector<store::RowId>& released);
  // The same for `task`'s slice, if it has one that exists.
  Status ReleaseTaskSliceInTxn(store::Txn& txn, const store::TaskRow& task,
                               const std::string& actor,
                               const std::string& reason,
                               std::vector<store::RowId>& released);

 private:
  const Clock* const clock_;
  MigChannel* const mig_;
  Telemetry* const telemetry_;
};

}  // namespace hf::server
