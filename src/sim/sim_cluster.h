// Mapping a trace onto the ledger: the simulated cluster and the placement
// request of each trace task.
//
// The trace speaks in milli-GPUs (a share of any GPU, whatever its model);
// the ledger in MiB and compute percent. Every simulated GPU therefore has
// kSimGpuMemoryMib = 1000 x kSimMibPerMilli of memory and 100% compute, and
// a sharing task of m milli asks for m x kSimMibPerMilli MiB and
// max(1, m / 10) percent of compute (exact for the openb traces, whose
// shares are multiples of 10 milli; for other values compute is rounded
// down, so it never binds before memory does). Whole-GPU tasks ask for whole
// GPUs, CPU-only tasks for node CPU and memory only. Every task belongs to
// one tenant: the trace has no tenancy.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "ledger/ledger.h"
#include "scheduler/fragmentation.h"
#include "sim/trace.h"

namespace hf::sim {

inline constexpr MemoryMib kSimGpuMemoryMib = scheduler::kSimGpuMemoryMib;
inline constexpr MemoryMib kSimMibPerMilli = kSimGpuMemoryMib / kMilliPerGpu;
inline constexpr TenantId kSimTenant{1};

// A ledger holding the trace's GPU nodes (nodes without GPUs are left out,
// as in the reference experiment), with tie-breaks among nodes randomised
// by `seed`.
StatusOr<std::unique_ptr<ledger::Ledger>> BuildSimLedger(
    const std::vector<TraceNode>& nodes, std::uint64_t seed);

// Total GPU capacity of the GPU nodes, in milli-GPUs.
std::int64_t CapacityMilli(const std::vector<TraceNode>& nodes);

// The ledger request for one trace task.
ledger::PlacementRequest ToRequest(const TracePod& pod);

// The task's class for the fragmentation measure.
scheduler::TaskClass ToTaskClass(const TracePod& pod);

}  // namespace hf::sim
