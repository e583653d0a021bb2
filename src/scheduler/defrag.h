// The defragmentation planner (docs/CONTRACT.md section 10, docs/PLACEMENT.md
// "Defragmentation"): a pure function from a ledger snapshot to a list of
// moves that frees a larger contiguous slice somewhere.
//
// Only the slices the caller marks movable (slices of preemptible tasks)
// ever move. Every move is simulated on a private copy of the ledger
// (Ledger::Snapshot): the slice is released there and placed again with the
// task's own request, excluding the GPU being freed, so the ledger re-checks
// every target (capacity, tenancy, models, MIG geometry) and nothing is
// oversold. A plan is returned only when every slice it moves has a target.
//
// Thread-safety: pure functions; the ledger passed in is only read (its
// snapshot is taken under its lock).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/quantity.h"
#include "ledger/ledger.h"

namespace hf::scheduler {

// A slice the planner may move, and how its task asks to be placed (the
// same request the scheduler would build for it).
struct MovableSlice {
  std::uint64_t task_id = 0;
  ledger::PlacementRequest request;
};

struct DefragRequest {
  // Slices that may move, by slice id. Anything else stays where it is.
  std::map<SliceId, MovableSlice> movable;
  // Free room on this node only (moves may still land anywhere).
  std::optional<NodeId> node;
  // The slice size to make room for: the plan must leave one GPU (of
  // `node`, when set) able to take a slice this large. Unset: the largest
  // room the moves can make.
  std::optional<MemoryMib> goal_memory_mib;
  int max_moves = 8;
  // GPUs that take no moved slice (the server's MIG GPUs that take no new
  // partition now).
  std::vector<GpuId> excluded_targets;
};

// The largest slice a GPU could take now and its free memory.
struct GpuRoom {
  GpuId gpu;
  NodeId node;
  MemoryMib total_memory_mib = 0;
  MemoryMib free_memory_mib = 0;
  MemoryMib largest_slice_mib = 0;
};

// Fragmentation of a set of GPUs: 1 - (largest allocatable slice on any of
// them / their free memory), in [0, 1]; 0 when nothing is free. A cluster
// whose free memory sits on one GPU scores 0; free memory spread evenly
// over N GPUs scores 1 - 1/N.
struct RoomSummary {
  std::vector<GpuRoom> gpus;  // ascending GPU id
  MemoryMib free_memory_mib = 0;
  MemoryMib largest_slice_mib = 0;
  double fragmentation = 0;
};

// The largest slice `gpu` could take now (any tenant that may join it): 0
// for a lost GPU, one held whole, or one without free compute; on a GPU in
// MIG mode, the largest partition that still fits its free memory slots.
MemoryMib LargestSliceMib(const ledger::GpuRecord& gpu);

// The room of the live GPUs (of `node`, when set).
RoomSummary MeasureRoom(const ledger::ClusterView& view,
                        std::optional<NodeId> node);

struct DefragMove {
  SliceId slice;
  std::uint64_t task_id = 0;
  NodeId from_node;
  GpuId from_gpu;
  NodeId to_node;
  GpuId to_gpu;
};

struct DefragPlan {
  std::vector<DefragMove> moves;  // in the order they must be applied
  GpuId freed_gpu;                // the GPU the moves make room on
  RoomSummary before;
  RoomSummary after;
};

// Plans moves on a snapshot of `ledger` with `policy` choosing each target.
// InvalidArgument (naming the API field) for a bad request; NotFound for an
// unknown node; FailedPrecondition when no plan within max_moves reaches
// the goal (or, without one, makes any larger room), with the reason.
StatusOr<DefragPlan> PlanDefrag(const ledger::Ledger& ledger,
                                const DefragRequest& request,
                                const ledger::PlacementPolicy& policy);

}  // namespace hf::scheduler
