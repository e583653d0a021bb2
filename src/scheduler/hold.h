// Holds: which GPUs to hold for a task that has waited long for room.
//
// Under a steady stream of small tasks a large one can wait for ever: the
// GPUs it needs never empty, because each slice that ends makes room that
// a newer, smaller task takes at once. A hold stops that: the scheduler
// gives the GPUs chosen here to the task that waited longest, no other
// task is placed on them, and they drain as their slices end until the
// held task fits (server/scheduler.h says when a hold begins and ends).
//
// HoldBook keeps the holds and decides when one begins and ends, the same
// for the server's scheduler (server/scheduler.h) and the simulator's time
// replay (sim/replay.h).
//
// Thread-safety: ChooseHold is a pure function of the view it is given; a
// HoldBook has no lock of its own (the server keeps it under its ledger
// lock).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "common/ids.h"
#include "ledger/cluster_view.h"
#include "ledger/model.h"

namespace hf::scheduler {

// The GPUs to hold for `request`: for a slice one GPU, for whole GPUs
// `gpu_count` GPUs of one node, where it would fit once every allocation
// on them has ended (ClusterView::CheckOnceEmpty), the ones that drain
// soonest by the ledger's measure: first on a node whose free CPU and host
// memory cover the task now (a hold keeps GPUs, not the node's CPU), then
// the least memory in use (summed over a node's chosen GPUs), then the
// fewest allocations, then the node's tie rank and the GPU id. Empty when no
// GPU could ever take it (or it is a task without GPUs).
std::vector<GpuId> ChooseHold(const ledger::ClusterView& view,
                              const ledger::PlacementRequest& request);

// When holds begin: a task that waited `hold_after_ms` or longer for room
// gets one while fewer than `max_holds` tasks have one. No holds when
// `hold_after_ms` is 0 or less.
struct HoldRules {
  std::int64_t hold_after_ms = 0;
  int max_holds = 1;
};

// GPUs held for one waiting task, since `since` (milliseconds, the
// caller's clock).
struct Hold {
  std::int64_t task_id = 0;
  std::vector<GpuId> gpus;
  std::int64_t since = 0;
};

// What HoldBook::AfterWaiting did.
enum class HoldChange {
  kNone,
  kBegan,         // the task got a hold
  kEndedDrained,  // its GPUs drained and it still does not fit there
  kEndedChanged,  // its GPUs can no longer take it, even once empty
};

// The holds in force, in the order they began, at most one per task, none
// sharing a GPU; and the tasks that had a hold that did not help (they get
// no second one).
class HoldBook {
 public:
  const std::vector<Hold>& holds() const { return holds_; }
  // Task `task_id`'s hold, or null.
  const Hold* HoldOf(std::int64_t task_id) const;
  // The GPUs held, for all holds.
  int HeldGpuCount() const;
  // Leaves out of `request`, task `task_id`'s, the GPUs of every hold but
  // its own: what every placement asks while the holds last.
  void ExcludeOthers(std::int64_t task_id,
                     ledger::PlacementRequest& request) const;
  // Adds every held GPU to `out`.
  void AddHeldGpus(std::set<GpuId>& out) const;
  // Ends task `task_id`'s hold (it was placed, or no longer waits); whether
  // it had one.
  bool End(std::int64_t task_id);
  // Forgets, for the tasks `gone` names (no longer waiting for good), that
  // they get no second hold.
  void ForgetIf(const std::function<bool(std::int64_t task_id)>& gone);

  // Whether task `task_id`, without a hold, may get one by `rules` after
  // waiting `waited_ms` (for room when `for_room`).
  bool MayBegin(const HoldRules& rules, std::int64_t task_id, bool for_room,
                std::int64_t waited_ms) const;

  // After task `task_id` failed to place (`request`, as asked without
  // holds): `for_room` when it waits for room (memory, compute, whole GPUs
  // or a node's resources: more of it comes as slices end), `waited_ms`
  // since it arrived, `now` on the holds' clock. A hold of its own ends
  // where it did not help: its GPUs drained, or can no longer take it once
  // empty (then the task gets no second hold). A task without one gets a
  // hold (ChooseHold, leaving out `excluded` and every held GPU) when the
  // rules allow; a task no GPU could ever take gets none, and never will.
  HoldChange AfterWaiting(const ledger::ClusterView& view,
                          const HoldRules& rules, std::int64_t task_id,
                          const ledger::PlacementRequest& request,
                          bool for_room, std::int64_t waited_ms,
                          std::int64_t now, const std::set<GpuId>& excluded);

 private:
  std::vector<Hold> holds_;
  std::set<std::int64_t> no_hold_;
};

}  // namespace hf::scheduler
