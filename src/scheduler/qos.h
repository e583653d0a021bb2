// QoS derivation: the one function that turns a GPU's probed capabilities
// into the tier a slice gets (SPEC.md section 3). The main scheduling path and
// the compensation path both call it; QoS is derived, never requested.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ledger/model.h"

namespace hf::scheduler {

enum class QosLevel { kGold, kSilver, kBronze };

std::string_view QosLevelName(QosLevel level);  // "gold", "silver", "bronze"

struct QosDecision {
  QosLevel level = QosLevel::kBronze;
  // Who enforces the slice at run time, strongest first: "mig", "mps",
  // "hook". Empty: ledger admission only.
  std::vector<std::string> enforcement;
  // One honest line on what this tier does and does not promise.
  std::string explanation;
};

// MPS client limits exist from compute capability 7.0 (Volta) on.
bool SupportsMpsLimits(int cc_major, int cc_minor);

// Gold if MIG mode is enabled, else silver if MPS is usable, else bronze; a
// containerized node is forced to bronze; non-NVIDIA GPUs are bronze with no
// run-time enforcement. `hook_available` says whether the node's agent can
// preload the CUDA interception hook (NVIDIA only; never with MIG, where the
// hardware already enforces the partition).
QosDecision DeriveQos(const ledger::GpuSpec& gpu, bool node_containerized,
                      bool hook_available);

}  // namespace hf::scheduler
