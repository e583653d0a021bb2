// QoS derivation: the one function that turns a GPU's probed capabilities
// into the tier a slice gets (docs/CONTRACT.md section 3), and says that a
// grant of whole GPUs is exclusive rather than a slice of any tier. The main
// scheduling path and the compensation path both call it; QoS is derived,
// never requested.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ledger/model.h"

namespace hf::scheduler {

// Gold, silver and bronze are tiers of a slice of a shared GPU. Exclusive
// is a grant of whole GPUs: no other slice or task is placed on them (the
// ledger), the task is pinned to them (the agent), and no MIG partition,
// MPS limit or hook quota applies, because there is nothing to share.
enum class QosLevel { kGold, kSilver, kBronze, kExclusive };

// "gold", "silver", "bronze", "exclusive"
std::string_view QosLevelName(QosLevel level);

struct QosDecision {
  QosLevel level = QosLevel::kBronze;
  // Who enforces the slice at run time from the moment it is bound,
  // strongest first: "mig", "mps". Empty: ledger admission only. Never
  // "hook": the hook is listed only once the agent reports it attached to
  // the task's processes (AddHookEnforcement), because a preloaded library
  // that never loads (a static binary, a missing file) enforces nothing.
  std::vector<std::string> enforcement;
  // The agent will preload the hook into the task (NVIDIA, not a MIG
  // partition, the node has it): "hook" may join `enforcement` later.
  bool hook_eligible = false;
  // One honest line on what this tier does and does not promise.
  std::string explanation;
};

// MPS client limits exist from compute capability 7.0 (Volta) on.
bool SupportsMpsLimits(int cc_major, int cc_minor);

// For a slice: gold if MIG mode is enabled, else silver if MPS is usable,
// else bronze; a containerized node is forced to bronze; non-NVIDIA GPUs are
// bronze with no run-time enforcement. `hook_available` says whether the
// node's agent can preload the CUDA interception hook (NVIDIA only; never
// with MIG, where the hardware already enforces the partition): it sets
// `hook_eligible` and the explanation, never `enforcement` (see
// QosDecision). For a grant of whole GPUs (`whole_gpus`), whatever the GPU:
// exclusive, with no enforcement listed and not hook-eligible (no quota).
QosDecision DeriveQos(const ledger::GpuSpec& gpu, bool node_containerized,
                      bool hook_available, bool whole_gpus = false);

// `enforcement` with "hook" appended (after "mps", the order being strongest
// first), for a slice whose task the agent reports the hook attached to.
// Unchanged when "hook" is already there or the slice is a MIG partition
// ("mig"), where the hardware enforces the boundary and no hook is loaded.
std::vector<std::string> AddHookEnforcement(
    std::vector<std::string> enforcement);

}  // namespace hf::scheduler
