// Gc: the leader's garbage collection, one pass every gc_interval_ms
// (docs/CONTRACT.md section 5):
// - orphaned slices: a slice older than `min_age_ms` whose task ended, is
//   gone, or holds another slice is released (operator reservations stay);
// - lost nodes: a node silent for more than `node_lost_ms` (NodeBeats) is
//   taken to have stopped the tasks it was asked to stop (cancelled ones
//   end, deleted slices' tasks wait to be bound again, a defragmentation
//   move lands on its target); its other tasks keep their slices;
// - the MIG channel's commands past their deadline (MigChannel::MarkStuck).
// Each part reads the store, writes its releases through the LeaderWriter
// (the ledger learns them after the commit), and asks the scheduler's
// queue for a rescan when tasks went back to pending.
//
// Thread-safety: no state of its own; safe from any thread (the control
// plane runs one pass at a time). Calls GcHost and the LeaderWriter
// without holding any lock.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/leader_writer.h"
#include "server/mig_channel.h"
#include "server/node_beats.h"
#include "server/releases.h"
#include "server/scheduler_queue.h"
#include "store/store.h"

namespace hf::server {

// What Gc needs of the control plane.
class GcHost {
 public:
  virtual ~GcHost() = default;
  // Inside a releasing write (LeaderWriter::WriteReleases): `task`, stopped,
  // had a defragmentation move in flight from `slice`; it lands on the move's
  // target when `rebind` (true returned), or the move's reservation is given
  // back.
  virtual StatusOr<bool> LandMoveInTxn(store::Txn& txn, store::TaskRow& task,
                                       store::RowId slice, bool rebind,
                                       std::vector<store::RowId>& released) = 0;
};

struct GcOptions {
  std::int64_t min_age_ms = 60'000;     // younger slices are never orphans
  std::int64_t node_lost_ms = 600'000;  // silence after which a node is lost
};

class Gc {
 public:
  // Everything passed must outlive the Gc. `monotonic` measures node
  // silence (NodeBeats' clock).
  Gc(store::Store* store, const Clock* clock, const Clock* monotonic,
     GcOptions options, const NodeBeats* beats, MigChannel* mig,
     Releases* releases, SchedulerQueue* queue, LeaderWriter* writer,
     GcHost* host)
      : store_(store),
        clock_(clock),
        monotonic_(monotonic),
        options_(options),
        beats_(beats),
        mig_(mig),
        releases_(releases),
        queue_(queue),
        writer_(writer),
        host_(host) {}

  Gc(const Gc&) = delete;
  Gc& operator=(const Gc&) = delete;

  // One pass: orphans, lost nodes, stuck MIG commands. Returns how many
  // slices were released.
  StatusOr<int> RunOnce();

 private:
  StatusOr<int> ReleaseOrphans();
  StatusOr<int> ReleaseOnLostNodes();

  store::Store* const store_;
  const Clock* const clock_;
  const Clock* const monotonic_;
  const GcOptions options_;
  const NodeBeats* const beats_;
  MigChannel* const mig_;
  Releases* const releases_;
  SchedulerQueue* const queue_;
  LeaderWriter* const writer_;
  GcHost* const host_;
};

}  // namespace hf::server
