// Holds: which GPUs to hold for a task that has waited long for room.
//
// Under a steady stream of small tasks a large one can wait for ever: the
// GPUs it needs never empty, because each slice that ends makes room that
// a newer, smaller task takes at once. A hold stops that: the scheduler
// gives the GPUs chosen here to the task that waited longest, no other
// task is placed on them, and they drain as their slices end until the
// held task fits (server/scheduler.h says when a hold begins and ends).
//
// Thread-safety: a pure function of the view it is given.
#pragma once

#include <vector>

#include "common/ids.h"
#include "ledger/cluster_view.h"
#include "ledger/model.h"

namespace hf::scheduler {

// The GPUs to hold for `request`: for a slice one GPU, for whole GPUs
// `gpu_count` GPUs of one node, where it would fit once every allocation
// on them has ended (ClusterView::CheckOnceEmpty), the ones that drain
// soonest by the ledger's measure: the least memory in use (summed over a
// node's chosen GPUs), then the fewest allocations, then the node's tie
// rank and the GPU id. Empty when no GPU could ever take it (or it is a
// task without GPUs).
std::vector<GpuId> ChooseHold(const ledger::ClusterView& view,
                              const ledger::PlacementRequest& request);

}  // namespace hf::scheduler
