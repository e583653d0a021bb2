// Value types of the ledger: what a node, a GPU, a request and an allocation
// are. No behaviour beyond small accessors lives here (STYLE.md: value types
// apart from the stateful manager).
//
// Thread-safety: plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/quantity.h"

namespace hf::ledger {

// The smallest slice memory the platform accepts (docs/CONTRACT.md section 4).
inline constexpr MemoryMib kMinSliceMemoryMib = 32;

enum class GpuHealth { kOk, kLost };

// The most CPU and host memory a node may have: what the placement index
// holds per entry (32 bits). Nothing real comes near (2^31 milli-CPUs, 2 PiB).
inline constexpr CpuMilli kMaxNodeCpuMilli = 2'147'483'647;
inline constexpr MemoryMib kMaxNodeHostMemoryMib = 2'147'483'647;

// What a node's task runtime starts a task from: a node that runs tasks as
// host processes needs their command, one that runs them as containers
// their image. kAny: the node did not say (a node registered through the
// API alone, an agent from before the field, the simulator's nodes), and
// is offered every task.
enum class TaskLaunch : std::uint8_t { kAny, kCommand, kImage };

struct NodeSpec {
  std::string name;
  CpuMilli cpu_milli = 0;         // allocatable CPU
  MemoryMib host_memory_mib = 0;  // allocatable host memory
  bool containerized = false;     // the agent runs inside a container
  TaskLaunch launch = TaskLaunch::kAny;
};

struct GpuSpec {
  std::string uuid;
  int index = 0;                  // index on its node
  std::string vendor = "nvidia";  // lower case: "nvidia", "ascend", ...
  std::string model;              // e.g. "A100-SXM4-80GB", "V100M16"
  MemoryMib memory_mib = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  bool mig_capable = false;  // MIG mode is currently Enabled
  // The MIG profile table's key (gpu::MigModelTable::model_key, e.g.
  // "A100-80GB") where the model name does not say it (the simulator's
  // anonymised models); empty: found from `model` and `memory_mib`.
  std::string mig_table;
  bool mps_capable = false;  // MPS daemon alive and compute capability >= 7.0
  GpuHealth health = GpuHealth::kOk;
};

// kNodeOnly: a task that needs no GPU, only node CPU / host memory (the
// simulator's CPU-only tasks compete for the CPU of GPU nodes).
enum class RequestKind { kSlice, kWholeGpus, kNodeOnly };

// A request for GPU resources by one tenant. Quantities are integers; the
// API layer converts ratios with RatioToPercent before building one.
struct PlacementRequest {
  TenantId tenant;
  RequestKind kind = RequestKind::kSlice;
  // Slice: at least one of the two. A slice without a compute percent is
  // accounted at LedgerOptions::default_compute_percent.
  std::optional<MemoryMib> memory_mib;
  std::optional<ComputePercent> compute_percent;
  // Whole GPUs: how many, all on one node.
  int gpu_count = 0;
  // Optional node-level resources.
  CpuMilli cpu_milli = 0;
  MemoryMib host_memory_mib = 0;
  // GPU models the task accepts; empty means any.
  std::vector<std::string> allowed_models;
  // Filters beyond the admission rules (placement pipeline, docs/PLACEMENT.md):
  // only this node, and on it only this GPU (an operator's slice, the
  // compensation path); never these GPUs (the server's MIG GPUs that take no
  // new partition now).
  std::optional<NodeId> pinned_node;
  std::optional<GpuId> pinned_gpu;
  std::vector<GpuId> excluded_gpus;
  // What the task can be started from (a filter of the pipeline: a node
  // whose runtime needs the one it lacks never takes it). Both by default:
  // requests that are not a task's (operator slices, the simulator).
  bool has_command = true;
  bool has_image = true;

  static PlacementRequest Slice(TenantId tenant,
                                std::optional<MemoryMib> memory_mib,
                                std::optional<ComputePercent> compute_percent) {
    PlacementRequest r;
    r.tenant = tenant;
    r.kind = RequestKind::kSlice;
    r.memory_mib = memory_mib;
    r.compute_percent = compute_percent;
    return r;
  }
  static PlacementRequest NodeOnly(TenantId tenant, CpuMilli cpu_milli,
                                   MemoryMib host_memory_mib) {
    PlacementRequest r;
    r.tenant = tenant;
    r.kind = RequestKind::kNodeOnly;
    r.cpu_milli = cpu_milli;
    r.host_memory_mib = host_memory_mib;
    return r;
  }
  static PlacementRequest WholeGpus(TenantId tenant, int count) {
    PlacementRequest r;
    r.tenant = tenant;
    r.kind = RequestKind::kWholeGpus;
    r.gpu_count = count;
    return r;
  }
};

// A live grant: one slice on one GPU, or N whole GPUs on one node. Whole GPUs
// account their full memory and 100% compute on each GPU.
struct Allocation {
  SliceId id;
  TenantId tenant;
  RequestKind kind = RequestKind::kSlice;
  NodeId node;
  std::vector<GpuId> gpus;  // 1 for a slice; none for kNodeOnly
  // Slice: the memory accounted on its GPU. Whole GPUs: the sum of their
  // memory (each GPU is accounted at its full size).
  MemoryMib memory_mib = 0;
  ComputePercent compute_percent = 0;  // accounted per GPU
  bool compute_defaulted = false;      // slice had no ratio; default applied
  CpuMilli cpu_milli = 0;
  MemoryMib host_memory_mib = 0;
  // A slice on a GPU in MIG mode: the partition it is charged as (its
  // profile and the memory slot it starts at); empty / -1 otherwise.
  std::string mig_profile;
  int mig_start = -1;

  friend bool operator==(const Allocation&, const Allocation&) = default;
};

}  // namespace hf::ledger
