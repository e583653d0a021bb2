// MigChannel: the MIG command channel (docs/CONTRACT.md section 8). A gold
// slice's partition is created and destroyed by its node's agent: the
// server writes a command (`create` when a slice is bound, `destroy` when
// it is released), the agent claims its node's commands and reports each
// result; a command with no result before its deadline is marked stuck
// (HARDWARE STATE UNKNOWN), and a heartbeat's partitions no slice owns are
// recorded as orphaned, once each. It owns the MigBook: what the agents
// report of their partitions, and which MIG GPUs take no new gold slice
// because of it (read by placement).
//
// Commands are rows in the store, written through the LeaderWriter (fenced
// where there are several instances; the ledger learns a write's releases
// after its commit).
//
// Thread-safety: safe from any thread. Its only state is the MigBook (its
// own lock, a leaf); it calls MigChannelHost without holding any lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/mig_book.h"
#include "server/scheduler_queue.h"
#include "server/slice_env.h"
#include "server/telemetry.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

// What MigChannel needs of the control plane.
class MigChannelHost {
 public:
  virtual ~MigChannelHost() = default;
  // The UUID of the card at (`node_id`, `index`); callable inside a write.
  virtual std::string GpuUuid(store::RowId node_id, int index) = 0;
  // The env of `slice` bound to `task`; callable inside a write.
  virtual SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                                    const store::TaskRow& task) = 0;
  // The registered node `caller` may act for as its agent.
  virtual StatusOr<store::NodeRow> NodeForAgent(const Caller& caller,
                                                const std::string& node) = 0;
};

class MigChannel {
 public:
  // `store`, the clocks, `telemetry`, `queue` (told when tasks go back to
  // pending), `writer` and `host` must outlive the channel.
  // `monotonic` times the MigBook's marks; a command is stuck
  // `command_deadline_ms` after it was written.
  MigChannel(store::Store* store, const Clock* clock, const Clock* monotonic,
             std::int64_t command_deadline_ms, Telemetry* telemetry,
             SchedulerQueue* queue, LeaderWriter* writer, MigChannelHost* host)
      : store_(store),
        clock_(clock),
        monotonic_(monotonic),
        deadline_ms_(command_deadline_ms),
        telemetry_(telemetry),
        queue_(queue),
        writer_(writer),
        host_(host) {}

  MigChannel(const MigChannel&) = delete;
  MigChannel& operator=(const MigChannel&) = delete;

  // A command (`create` or `destroy`) for `slice` and its task, on the
  // slice's node's GPU at `gpu_index` (the card the ledger holds there),
  // due within the deadline of `now`; the caller sets the profile and what
  // else its action needs. Callable inside a write.
  store::SliceRequestRow CommandFor(const store::SliceRow& slice,
                                    std::string action, int gpu_index,
                                    store::Millis now);

  // The agent of `node` claims its commands: pending ones become claimed;
  // claimed ones not yet reported are offered again, and so are stuck
  // destroys (the partition still has to go). At most 100, by id.
  StatusOr<std::vector<store::SliceRequestRow>> Claim(const Caller& caller,
                                                      const std::string& node);
  // An agent reports command `id`'s result (idempotent). A created
  // partition is handed to its task's env, or destroyed when its slice was
  // released meanwhile or the result came after the deadline; a failed
  // create releases the slice and takes its task back to pending (no room
  // on the card: the GPU takes no gold slice for a while); a destroy
  // releases the slice.
  StatusOr<store::SliceRequestRow> Report(const Caller& caller, store::RowId id,
                                          const wire::MigResult& result);
  // Whether `caller` may report on command `id` (Report checks it too):
  // an agent's token, bound to the command's node if bound at all.
  // NotFound for no such command.
  Status CheckReporter(const Caller& caller, store::RowId id);
  // Records the MIG devices a heartbeat of `node` reports that no live
  // slice owns (and no command in flight is about to own) as
  // MIG_PARTITION_ORPHANED in the history, once per device.
  Status NoteOrphans(const store::NodeRow& node,
                     const wire::NodeReport& report);
  // Commands past their deadline become stuck: a stuck create's slice stays
  // charged (releasing) with a cleanup destroy written, and its task is
  // bound again elsewhere (or cancelled when it was asked to stop).
  Status MarkStuck();

  MigBook& book() { return book_; }
  const MigBook& book() const { return book_; }

 private:
  // CheckReporter inside `txn`; the command.
  static StatusOr<store::SliceRequestRow> CheckReporterIn(store::Txn& txn,
                                                          const Caller& caller,
                                                          store::RowId id);

  store::Store* const store_;
  const Clock* const clock_;
  const Clock* const monotonic_;
  const std::int64_t deadline_ms_;
  Telemetry* const telemetry_;
  SchedulerQueue* const queue_;
  LeaderWriter* const writer_;
  MigChannelHost* const host_;
  MigBook book_;
};

}  // namespace hf::server
