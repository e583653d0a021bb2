// Recovery: restart recovery (docs/CONTRACT.md section 5), run once when an
// instance starts leading, before anything is bound. The ledger is rebuilt
// from the store alone: names, tenancy (groups, tenants, approvals), the
// inventory and every live slice go back into it; a slice whose tenant is
// gone belongs to its task's tenant (else `default`); a slice recorded
// without its MIG partition is charged as the one the ledger gives it; a
// slice the ledger cannot take back (its GPU unknown, or it would oversell)
// fences its GPUs until an operator deletes it (`recovery_refused`); the
// slice-id counter moves past the highest id ever stored; a learning
// policy reads the recent task history.
//
// Thread-safety: Run holds the ledger's lock throughout, store I/O
// included (nothing else runs on the ledger while it is rebuilt). Safe
// from any thread; one Run at a time.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "server/guarded_ledger.h"
#include "server/leader_writer.h"
#include "server/mig_book.h"
#include "server/names.h"
#include "server/node_beats.h"
#include "server/telemetry.h"
#include "store/store.h"

namespace hf::server {

class Recovery {
 public:
  // Everything passed must outlive the Recovery. `learn_half_life_tasks`:
  // the learning policy's half-life (how much history is worth reading).
  Recovery(store::Store* store, const Clock* clock, const Clock* monotonic,
           GuardedLedger* ledger, Names* names, NodeBeats* beats, MigBook* mig,
           Telemetry* telemetry, double learn_half_life_tasks,
           LeaderWriter* writer)
      : store_(store),
        clock_(clock),
        monotonic_(monotonic),
        ledger_(ledger),
        names_(names),
        beats_(beats),
        mig_(mig),
        telemetry_(telemetry),
        learn_half_life_tasks_(learn_half_life_tasks),
        writer_(writer) {}

  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Rebuilds the ledger (empty before) from the store.
  Status Run();

 private:
  // Reads the recent task history into the policy's target workload (the
  // learned hf-frag; nothing for other policies).
  Status LearnHistory() HF_REQUIRES(ledger_->mu());
  // `slice` could not be put back (`why`): its GPUs are held lost in the
  // ledger, logged and recorded in the history (`recovery_refused`).
  Status FenceUnrestored(const store::SliceRow& slice, const std::string& why)
      HF_REQUIRES(ledger_->mu());

  store::Store* const store_;
  const Clock* const clock_;
  const Clock* const monotonic_;
  GuardedLedger* const ledger_;
  Names* const names_;
  NodeBeats* const beats_;
  MigBook* const mig_;
  Telemetry* const telemetry_;
  const double learn_half_life_tasks_;
  LeaderWriter* const writer_;
};

}  // namespace hf::server
