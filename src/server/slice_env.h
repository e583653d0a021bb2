// The environment variables that tie a task to its slice (docs/CONTRACT.md
// sections 3, 5 and 9). This is the one place that decides them: the
// scheduler's bind, a re-bind after a rollback, and the MIG device hand-over
// all call `ApplySliceEnv`, which strips every variable of an older slice
// before it injects the new set, so the GPU a task is pinned to and the limits
// it gets always name the same slice.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/gpu_compute_mode.h"
#include "store/store.h"

namespace hf::server {

struct SliceEnvInput {
  std::int64_t slice_id = 0;
  int gpu_index = 0;            // the first GPU of the slice on its node
  std::string gpu_uuids;        // comma-separated, in gpu order
  std::string vendor;           // "nvidia", ...
  std::string qos_level;        // "gold", "silver", "bronze", "exclusive"
  bool whole = false;           // whole GPUs ("exclusive": no limits)
  std::int64_t memory_mib = 0;  // slice quota; 0: none requested
  int compute_percent = 0;      // 0: no ratio requested
  std::string mig_device_id;    // gold, once the agent created it
  // The task's gpu_compute_mode; named in the env with the compute share.
  GpuComputeMode compute_mode = kDefaultGpuComputeMode;
};

// True for names the platform owns: HETEROFLOW_*, CUDA_MPS_*,
// CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES. Users may not set them.
bool IsReservedEnvName(std::string_view name);

// Removes every reserved variable from `env`.
void StripSliceEnv(store::StringMap& env);

// The reserved variables for `slice` (what `ApplySliceEnv` injects).
store::StringMap SliceEnv(const SliceEnvInput& slice);

// StripSliceEnv, then adds SliceEnv(slice).
void ApplySliceEnv(const SliceEnvInput& slice, store::StringMap& env);

// Removes the labels a binding sets (heteroflow.*; users may not set them).
void StripBindingLabels(store::StringMap& labels);

// Takes `task` back to pending, bound nowhere: no slice, node or GPUs, its
// slice's env and binding labels removed, waiting for `reason`.
void UnbindTask(store::TaskRow& task, std::string reason);

}  // namespace hf::server
