// OperatorSlices: the slices operators write (docs/CONTRACT.md sections 6
// and 13): a reservation (a slice with no task, placed by the ledger's
// rules, optionally pinned to a node and GPU), DELETE (a slice bound to a
// scheduled task stays charged until its node stops the task; a running
// task's slice is refused), and a live slice's memory quota changed.
//
// Each is reserved in (or, for a lowered quota or a release, given back
// to) the ledger on the side that keeps the ledger holding no less than
// the store: a reservation or a raise under the ledger's lock before its
// write, undone when the write fails; a release or a lowering after the
// commit. The writes go through the LeaderWriter without the ledger's lock
// (the write gate held shared).
//
// Thread-safety: safe from any thread. One resize at a time (resize_mu_,
// taken before the write gate): each reads the size it changes from the
// store and commits without the ledger's lock, so two at once could leave
// the ledger with one's size and the store with the other's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/guarded_ledger.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/releases.h"
#include "server/scheduler_queue.h"
#include "server/slice_env.h"
#include "server/telemetry.h"
#include "server/tenancy.h"
#include "store/store.h"

namespace hf::server {

// POST /api/v1/slices: an operator reservation.
struct SliceCreate {
  std::string tenant;
  std::optional<std::string> node;
  std::optional<int> gpu_index;
  std::optional<std::int64_t> memory_mib;
  std::optional<int> compute_percent;
  std::string reason;
};

// PATCH /api/v1/slices/{id} (dynamic quota, docs/CONTRACT.md section 13).
struct SliceResizeRequest {
  std::int64_t memory_mib = 0;
  std::string reason;
};

struct SliceResize {
  store::SliceRow slice;
  // For people: what the change may do (a lowered quota the task may
  // already exceed, a limit that stays until the task restarts, ...).
  std::vector<std::string> warnings;
};

// What OperatorSlices needs of the control plane.
class OperatorSlicesHost {
 public:
  virtual ~OperatorSlicesHost() = default;
  // Slice `id` as `caller` may see it (NotFound for another tenant's).
  virtual StatusOr<store::SliceRow> GetSlice(const Caller& caller,
                                             store::RowId id) = 0;
  // The env of `slice` bound to `task`; callable inside a write.
  virtual SliceEnvInput SliceEnvFor(const store::SliceRow& slice,
                                    const store::TaskRow& task) = 0;
  // Node `node` has new work (a task to stop whose slice was deleted):
  // wakes its agent's wait (NodeWork).
  virtual void NodeHasWork(store::RowId /*node*/) {}
};

class OperatorSlices {
 public:
  // Everything passed must outlive the OperatorSlices.
  OperatorSlices(store::Store* store, const Clock* clock, GuardedLedger* ledger,
                 Tenancy* tenancy, Releases* releases, SchedulerQueue* queue,
                 Telemetry* telemetry, LeaderWriter* writer,
                 OperatorSlicesHost* host)
      : store_(store),
        clock_(clock),
        ledger_(ledger),
        tenancy_(tenancy),
        releases_(releases),
        queue_(queue),
        telemetry_(telemetry),
        writer_(writer),
        host_(host) {}

  OperatorSlices(const OperatorSlices&) = delete;
  OperatorSlices& operator=(const OperatorSlices&) = delete;

  // Admin, or a tenant-admin for its own tenant.
  StatusOr<store::SliceRow> Create(const Caller& caller,
                                   const SliceCreate& request)
      HF_EXCLUDES(ledger_->mu());
  StatusOr<store::SliceRow> Delete(const Caller& caller, store::RowId id,
                                   const std::string& reason)
      HF_EXCLUDES(ledger_->mu());
  // memory_mib >= 32 and a multiple of 32 (InvalidArgument naming
  // "memory_mb"). Gold (MIG) and whole-GPU slices, released ones, a raise
  // the GPU's free memory cannot cover (the message names the free
  // amount): FailedPrecondition (409). Persisted with a `slice_resized`
  // history entry and the task's slice env.
  StatusOr<SliceResize> Resize(const Caller& caller, store::RowId id,
                               const SliceResizeRequest& request)
      HF_EXCLUDES(ledger_->mu(), resize_mu_);

 private:
  store::Store* const store_;
  const Clock* const clock_;
  GuardedLedger* const ledger_;
  Tenancy* const tenancy_;
  Releases* const releases_;
  SchedulerQueue* const queue_;
  Telemetry* const telemetry_;
  LeaderWriter* const writer_;
  OperatorSlicesHost* const host_;
  Mutex resize_mu_;  // one resize at a time (taken before the write gate)
};

}  // namespace hf::server
