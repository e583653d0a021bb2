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
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_profiles.h"
#include "ledger/ledger.h"
#include "scheduler/fragmentation.h"
#include "sim/trace.h"

namespace hf::sim {

inline constexpr MemoryMib kSimGpuMemoryMib = scheduler::kSimGpuMemoryMib;
inline constexpr MemoryMib kSimMibPerMilli = kSimGpuMemoryMib / kMilliPerGpu;
inline constexpr TenantId kSimTenant{1};

// The MIG variant: the GPUs of `models` are in MIG mode with `table`'s
// profiles and placements (an A100/H100-class geometry: 7 compute, 8 memory
// slices; GpuSpec::mig_table, since the trace's models are anonymised). The
// ledger never hands a MIG GPU out whole, so a task there holds a MIG
// instance, which the ledger chooses and charges as it does for the
// server: the smallest profile whose memory share of the card
// (memory_slices / 8) and compute share (MigComputePercent) cover the
// task's GPU milli, at a placement free on that GPU (a task above the
// largest partition short of the card takes the full-card one). Only
// sharing tasks run on MIG instances: the ledger hands no GPU in MIG mode
// out whole, so whole-GPU tasks need GPUs out of MIG mode.
struct SimMig {
  std::vector<std::string> models;
  std::vector<std::string> plain_models;  // the cluster's other GPU models
  const gpu::MigModelTable* table = nullptr;
  bool enabled() const { return table != nullptr && !models.empty(); }
};

// A ledger holding the trace's GPU nodes (nodes without GPUs are left out,
// as in the reference experiment), with tie-breaks among nodes randomised
// by `seed`; the GPUs of `mig.models` in MIG mode.
StatusOr<std::unique_ptr<ledger::Ledger>> BuildSimLedger(
    const std::vector<TraceNode>& nodes, std::uint64_t seed,
    const SimMig& mig = {});

// Total GPU capacity of the GPU nodes, in milli-GPUs.
std::int64_t CapacityMilli(const std::vector<TraceNode>& nodes);

// The ledger request for one trace task.
ledger::PlacementRequest ToRequest(const TracePod& pod);

// The request for one trace task on the MIG GPUs of `mig`: the task's own
// request (ToRequest), allowed only on MIG models; the ledger charges it
// the smallest partition of the table that covers it at a free placement.
// nullopt for tasks that cannot run on a MIG instance (not a sharing task,
// or constrained to models not in MIG mode).
std::optional<ledger::PlacementRequest> ToMigRequest(const TracePod& pod,
                                                     const SimMig& mig);

// The request for one trace task on the GPUs out of MIG mode (its models
// minus the MIG ones); nullopt when it allows only MIG models. Without MIG,
// ToRequest(pod).
std::optional<ledger::PlacementRequest> ToPlainRequest(const TracePod& pod,
                                                       const SimMig& mig);

// The task's class for the fragmentation measure.
scheduler::TaskClass ToTaskClass(const TracePod& pod);

}  // namespace hf::sim
