// The simulated GPU driver's input: an inventory file describing one node
// (its GPUs, their MIG state, the MPS daemon's behaviour and the faults to
// inject), and the MIG state file the driver persists so that MIG instances
// survive an agent restart the way real ones do. docs/INVENTORY.md describes
// the file format field by field.
//
// Parsing is strict: an unknown field, a wrong type or a value out of range is
// an InvalidArgument whose message starts with the field's path
// ("gpus[1].memroy_mb: unknown field") and whose `field()` is that path. Keys
// that start with "_" are comments and ignored.
//
// This file also holds the MIG admission rules the simulator enforces (legal
// placement, no overlap, max instances, one "+me" instance per GPU) over the
// tables of mig_profiles.h, so the inventory check and the driver apply the
// same rules.
//
// Thread-safety: plain value types and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/quantity.h"
#include "common/status.h"
#include "gpu/gpu_driver.h"
#include "gpu/mig_profiles.h"

namespace hf::gpu {

// ---- Faults -------------------------------------------------------------
// Times are milliseconds since the driver was created, read from the Clock
// the driver is given.

// The GPU is lost (NVML_ERROR_GPU_IS_LOST) from `at_ms` until
// `recover_at_ms` (forever when absent).
struct GpuLostFault {
  std::int64_t at_ms = 0;
  std::optional<std::int64_t> recover_at_ms;

  bool ActiveAt(std::int64_t elapsed_ms) const {
    return elapsed_ms >= at_ms &&
           (!recover_at_ms || elapsed_ms < *recover_at_ms);
  }
};

// MIG creates on the GPU fail with `error` from `at_ms` on: the first
// `count` of them, or every one when `count` is absent. Only creates that
// would otherwise succeed count (a request the tables reject fails for that
// reason and consumes nothing).
struct MigCreateFault {
  std::int64_t at_ms = 0;
  std::optional<int> count;
  StatusCode error = StatusCode::kInternal;
  // The error message; the parser's default names the NVML error mimicked.
  std::string message;
};

// From `at_ms` on the GPU at this index reports `uuid` (index/UUID drift).
struct UuidChangeFault {
  std::int64_t at_ms = 0;
  std::string uuid;
};

// A GPU's faults, each list in file order.
struct GpuFaults {
  std::vector<GpuLostFault> lost;
  std::vector<MigCreateFault> mig_create_failures;
  std::vector<UuidChangeFault> uuid_changes;
};

// ---- Inventory ----------------------------------------------------------

struct InventoryGpu {
  int index = 0;     // the position in the file's `gpus` array
  std::string uuid;  // as the file gives it, or "GPU-sim-<node_id>-<index>"
  std::string vendor = "nvidia";
  std::string model;  // as NVML names it
  MemoryMib memory_mib = 0;
  int cc_major = 0;
  int cc_minor = 0;
  bool mig_enabled = false;
  // The MIG table for the model; non-null whenever mig_enabled. Points into
  // AllMigTables() (valid for the life of the process).
  const MigModelTable* mig_table = nullptr;
  // Instances present when the driver starts (no state file yet), in file
  // order, each with its placement resolved.
  std::vector<MigInstance> mig_instances;
  GpuFaults faults;
};

// Whether the node can run the MPS control daemon (docs/CONTRACT.md section 9).
// The agent's MPS layer reads this to decide whether a start succeeds.
struct MpsBehaviour {
  bool daemon_can_start = true;
  // What a failed start reports when daemon_can_start is false.
  std::string failure_reason = "simulated: the MPS control daemon exited";
};

struct Inventory {
  std::string node_id = "sim";  // only used to derive default UUIDs
  bool containerized = false;
  CpuMilli cpu_milli = 0;
  MemoryMib host_memory_mib = 0;
  MpsBehaviour mps;
  std::vector<InventoryGpu> gpus;  // ascending index, starting at 0
};

// Parses and validates an inventory document. `source` names it in error
// messages (a file path, or "" for none). InvalidArgument for bad JSON (with
// nlohmann's line and column) or a bad field (its path in the message and in
// `field()`).
StatusOr<Inventory> ParseInventory(std::string_view json_text,
                                   std::string_view source = "");

// Reads and parses the inventory file at `path`. NotFound when the file does
// not exist, Unavailable when it cannot be read, else as ParseInventory.
StatusOr<Inventory> LoadInventory(const std::string& path);

// ---- MIG admission rules ------------------------------------------------

// Places a new instance of `profile` on a GPU of `table` that already holds
// `existing`: at `placement` when given, else at the lowest legal start whose
// memory slots are free (what the NVIDIA driver itself picks). The returned
// instance carries the table's spelling of the profile name.
//
// Errors: NotFound (the model has no such profile), InvalidArgument
// (`placement` is not one of the profile's legal placements),
// ResourceExhausted (max instances of the profile reached, a second "+me"
// instance, placement overlapping an existing instance, or no free legal
// placement).
StatusOr<MigInstance> PlaceMigInstance(const MigModelTable& table,
                                       const std::vector<MigInstance>& existing,
                                       std::string_view profile,
                                       std::optional<MigPlacement> placement);

// ---- Persisted MIG state ------------------------------------------------

// One GPU's MIG instances as the driver last saved them.
struct SimGpuMigState {
  int index = 0;
  std::string uuid;  // the inventory UUID (before any uuid_change fault)
  // The sequence number the next MIG device UUID is derived from, so that a
  // restarted driver never hands out a UUID it handed out before.
  std::int64_t next_mig_sequence = 0;
  std::vector<MigDevice> devices;  // ascending gpu_instance_id
};

struct SimMigState {
  std::vector<SimGpuMigState> gpus;  // ascending index
};

// Parses a state file written by SerializeSimMigState. Checks its shape
// only; the driver checks it against the inventory. InvalidArgument naming
// the field on any error.
StatusOr<SimMigState> ParseSimMigState(std::string_view json_text);

// The state as a JSON document (stable field order, one trailing newline).
std::string SerializeSimMigState(const SimMigState& state);

}  // namespace hf::gpu
