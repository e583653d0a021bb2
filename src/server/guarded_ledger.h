// GuardedLedger: the ledger (ledger/ledger.h: every GPU's accounted memory
// and compute, the slices on it) and what is kept with it, behind one lock:
// the ledger's mirror of the store's inventory (Inventory), its side of
// tenancy (LedgerTenancy), and how every placement asks it (Placement).
// Every change to any of them happens with mu() held, so each sees the
// others as they are.
//
// The writers over it (the scheduler's bind pass, releases, registration
// and heartbeats, operator slices and resizes, defragmentation, restart
// recovery) keep the ledger never holding less than the store: a placement
// is reserved here first, written to the store with mu() given up, and
// undone here if the write fails; a release reaches the ledger only after
// its write committed. Each such write holds write_gate() shared; whoever
// must see the ledger equal to the store (the control plane's
// CheckLedgerMatchesStore) holds it alone.
//
// Thread-safety: mu() guards everything here (HF_REQUIRES on each
// accessor). Lock order: write_gate(), then mu(); never held across store
// I/O (write_gate() is: it only orders writes against the check).
#pragma once

#include <memory>
#include <utility>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "ledger/ledger.h"
#include "ledger/placement_policy.h"
#include "scheduler/policy/registry.h"
#include "server/inventory.h"
#include "server/ledger_tenancy.h"
#include "server/mig_book.h"
#include "server/names.h"
#include "server/placement.h"
#include "server/scheduler_queue.h"
#include "store/store.h"

namespace hf::server {

class GuardedLedger {
 public:
  // Every reference must outlive it. `clock` times approvals' expiry;
  // `monotonic` the MigBook's blocks (Placement).
  GuardedLedger(std::unique_ptr<ledger::Ledger> ledger, Names& names,
                SchedulerQueue& queue, const MigBook& mig, const Clock& clock,
                const Clock& monotonic, scheduler::MadePolicy policy,
                const ledger::PlacementPolicy* policy_for_testing)
      : ledger_(std::move(ledger)),
        inventory_(*ledger_, names, queue),
        tenancy_(*ledger_, queue, clock),
        placement_(*ledger_, inventory_, tenancy_, mig, monotonic,
                   std::move(policy), policy_for_testing) {}

  GuardedLedger(const GuardedLedger&) = delete;
  GuardedLedger& operator=(const GuardedLedger&) = delete;

  Mutex& mu() HF_RETURN_CAPABILITY(mu_) { return mu_; }
  SharedMutex& write_gate() HF_RETURN_CAPABILITY(write_gate_) {
    return write_gate_;
  }

  ledger::Ledger& ledger() HF_REQUIRES(mu_) { return *ledger_; }
  // For a query that needs nothing else here to agree with it (the ledger
  // locks itself): e.g. whether it still holds a slice.
  const ledger::Ledger& unlocked_ledger() const { return *ledger_; }
  Inventory& inventory() HF_REQUIRES(mu_) { return inventory_; }
  LedgerTenancy& tenancy() HF_REQUIRES(mu_) { return tenancy_; }
  Placement& placement() HF_REQUIRES(mu_) { return placement_; }

  // The allocation the ledger holds for stored slice `row` (its GPUs
  // through the inventory mirror; an unknown one is GpuId()).
  ledger::Allocation AllocationOf(const store::SliceRow& row) HF_REQUIRES(mu_);
  // The other way: the stored row of allocation `a` as placed now (its
  // node and GPU indices through the inventory mirror; its tier and
  // enforcement derived for its first GPU). The caller sets its task,
  // origin and creation time.
  store::SliceRow SliceRowOf(const ledger::Allocation& a) HF_REQUIRES(mu_);

 private:
  SharedMutex write_gate_;
  Mutex mu_;
  // Changed only with mu_ held (ledger()); it has its own lock too.
  const std::unique_ptr<ledger::Ledger> ledger_;
  Inventory inventory_ HF_GUARDED_BY(mu_);
  LedgerTenancy tenancy_ HF_GUARDED_BY(mu_);
  Placement placement_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
