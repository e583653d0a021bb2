// Placement: how the control plane asks the ledger for room, the same way
// for every placement (the scheduler's bind, an operator's slice, a
// defragmentation move and plan). A task becomes a placement request (its
// tenant; its memory and compute share, or its count of whole GPUs; the
// models its gpu_type allows). Every placement first withdraws the sharing
// approvals past their expiry and leaves out the MIG GPUs that take no new
// partition now (named in the result's message when nothing else fits);
// the configured policy chooses among the rest. The tier a slice gets on a
// GPU is derived here too (scheduler::DeriveQos). A learning policy
// (hf-frag) sees each task once, in id order.
//
// Thread-safety: none of its own. It changes the ledger, so the control
// plane holds it under its ledger lock (`mu_`, HF_GUARDED_BY), with the
// Inventory and LedgerTenancy it reads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ledger/ledger.h"
#include "ledger/placement_policy.h"
#include "scheduler/hold.h"
#include "scheduler/policy/registry.h"
#include "scheduler/qos.h"
#include "server/inventory.h"
#include "server/ledger_tenancy.h"
#include "server/mig_book.h"
#include "store/store.h"

namespace hf::server {

class Placement {
 public:
  // Every reference must outlive it. Places with `policy_for_testing` when
  // set (then nothing is learned), otherwise with `made`. `monotonic` is
  // the clock MigBook's blocks run on.
  Placement(ledger::Ledger& ledger, const Inventory& inventory,
            LedgerTenancy& tenancy, const MigBook& mig, const Clock& monotonic,
            scheduler::MadePolicy made,
            const ledger::PlacementPolicy* policy_for_testing);

  // The request of `task` (the scheduler's, the history's, a move's).
  ledger::PlacementRequest RequestFor(const store::TaskRow& task) const;
  // Places `request` as described above. On a GPU in MIG mode the ledger
  // charges the slice as its partition (the allocation's mig_profile and
  // mig_start).
  ledger::PlacementResult Place(ledger::PlacementRequest request);
  // The tier a slice on `gpu` gets, or a grant of whole GPUs starting
  // there.
  scheduler::QosDecision QosFor(GpuId gpu, bool whole_gpus = false) const;
  // The MIG GPUs no gold slice may land on now, with why: each holds
  // partitions no slice owns, or its last create found no room and its
  // partitions have not changed since (MigBook).
  std::map<GpuId, std::string> Blocked() const;
  // For callers that judge targets on the ledger without placing (a
  // defragmentation plan, a slice's other targets): withdraws the
  // approvals past their expiry, as Place does first, and returns the GPUs
  // to leave out — the blocked MIG GPUs, the fenced ones (held lost) and
  // the GPUs held for a waiting task.
  std::set<GpuId> PrepareTargets();

  // Holds (scheduler/hold.h): GPUs that take no task but the holder's, so
  // that they drain until it fits; at most one per task, in the order they
  // began. The Scheduler begins and ends them (UpdateHold, EndHold) and
  // bounds how many.
  using Hold = scheduler::Hold;
  const std::vector<Hold>& holds() const { return holds_.holds(); }
  // Task `task_id`'s hold, or null.
  const Hold* HoldOf(store::RowId task_id) const {
    return holds_.HoldOf(task_id);
  }
  // Ends task `task_id`'s hold (bound, or no longer waiting); whether it
  // had one.
  bool EndHold(store::RowId task_id) { return holds_.End(task_id); }
  // The GPUs held, for all holds.
  int HeldGpuCount() const { return holds_.HeldGpuCount(); }
  // Leaves out of `request`, task `task_id`'s, the GPUs of every hold but
  // its own.
  void ApplyHold(store::RowId task_id,
                 ledger::PlacementRequest& request) const {
    holds_.ExcludeOthers(task_id, request);
  }
  // After task `task_id` failed to place (`request`, as asked without
  // holds): scheduler::HoldBook::AfterWaiting on the ledger, a new hold
  // leaving out what PrepareTargets names.
  scheduler::HoldChange UpdateHold(store::RowId task_id,
                                   const ledger::PlacementRequest& request,
                                   const scheduler::HoldRules& rules,
                                   bool for_room, store::Millis waited_ms,
                                   store::Millis now);
  // Forgets, for the tasks `gone` names, that they get no second hold.
  void ForgetNoHold(const std::function<bool(store::RowId)>& gone) {
    holds_.ForgetIf(gone);
  }
  // Where the GPUs of `hold` are, as people name them: their node and their
  // indices there (GPUs gone from the ledger left out). What the pending
  // reasons and the stats show.
  struct HeldAt {
    std::string node;
    std::vector<int> gpu_indices;
  };
  HeldAt WhereHeld(const Hold& hold) const;
  // `hold` as a pending reason names it, e.g. "GPU 1 of node gpu-a is held
  // for task 7, waiting longest, and takes no other task until it fits".
  std::string DescribeHold(const Hold& hold) const;
  // Every hold so, joined by "; "; "" without a hold.
  std::string DescribeHolds() const;
  // Whether a pending reason names a hold (DescribeHolds' text).
  static bool NamesHold(const std::string& reason) {
    return reason.find(" held for task ") != std::string::npos;
  }

  const ledger::PlacementPolicy& policy() const { return *policy_; }
  // The learning side of the policy; null when it learns nothing.
  const scheduler::WorkloadObserver* learner() const { return observer_; }
  // A learning policy's target workload: `task` (with its `request`) joins
  // it unless a task with its id or a later one did.
  void Learn(const store::TaskRow& task,
             const ledger::PlacementRequest& request);
  // Restart recovery: the target workload starts over; Learn the recent
  // tasks, then LearnedThrough the newest id so none is learned twice.
  void ForgetLearned();
  void LearnedThrough(store::RowId newest);

 private:
  ledger::Ledger& ledger_;
  const Inventory& inventory_;
  LedgerTenancy& tenancy_;
  const MigBook& mig_;
  const Clock& monotonic_;
  const std::unique_ptr<ledger::PlacementPolicy> owned_policy_;
  scheduler::WorkloadObserver* const observer_;
  const ledger::PlacementPolicy* const policy_;
  store::RowId learned_through_ = 0;  // tasks up to this id are learned
  scheduler::HoldBook holds_;
};

}  // namespace hf::server
