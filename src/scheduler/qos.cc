#include "scheduler/qos.h"

namespace hf::scheduler {

std::string_view QosLevelName(QosLevel level) {
  switch (level) {
    case QosLevel::kGold:
      return "gold";
    case QosLevel::kSilver:
      return "silver";
    case QosLevel::kBronze:
      return "bronze";
    case QosLevel::kExclusive:
      return "exclusive";
  }
  return "bronze";
}

bool SupportsMpsLimits(int cc_major, int cc_minor) {
  return cc_major > 7 || (cc_major == 7 && cc_minor >= 0);
}

QosDecision DeriveQos(const ledger::GpuSpec& gpu, bool node_containerized,
                      bool hook_available, bool whole_gpus) {
  QosDecision d;
  if (whole_gpus) {
    // Nothing is shared, so nothing of MIG, MPS or the hook applies: an MPS
    // limit on a whole card would only cap the task below what it was given.
    d.level = QosLevel::kExclusive;
    d.explanation =
        "exclusive: whole GPUs, the task's alone; the ledger places no other "
        "slice or task on them and the task is pinned to them, so no MIG "
        "partition, MPS limit or hook quota applies; it may use all of each "
        "card's memory and compute";
    return d;
  }
  const bool nvidia = gpu.vendor == "nvidia";
  if (!nvidia) {
    d.level = QosLevel::kBronze;
    d.explanation =
        "bronze: the ledger admits the slice, but nothing limits its memory "
        "or compute at run time on this vendor's GPU";
    return d;
  }
  if (!node_containerized && gpu.mig_capable) {
    d.level = QosLevel::kGold;
    d.enforcement = {"mig"};
    d.explanation =
        "gold: a MIG partition; the GPU hardware isolates memory, compute "
        "and faults";
    return d;
  }
  // The hook's part, said the same way for silver and bronze: it counts
  // only once it is attached.
  d.hook_eligible = hook_available;
  const char* hook_part =
      "; the node preloads the hook, which makes the memory quota a hard "
      "limit and throttles compute inside the task's processes (\"hook\" is "
      "listed in enforcement once the agent reports it attached)";
  if (!node_containerized && gpu.mps_capable &&
      SupportsMpsLimits(gpu.compute_capability_major,
                        gpu.compute_capability_minor)) {
    d.level = QosLevel::kSilver;
    d.enforcement = {"mps"};
    d.explanation =
        "silver: MPS limits memory and compute share for well-behaved "
        "clients; a fatal error in one client kills every client on the GPU";
    if (hook_available) d.explanation += hook_part;
    return d;
  }
  d.level = QosLevel::kBronze;
  if (hook_available) {
    d.explanation =
        std::string(
            "bronze: no hardware or driver isolation; the ledger admits the "
            "slice") +
        hook_part;
  } else {
    d.explanation =
        "bronze: the ledger admits the slice, but nothing limits its memory "
        "or compute at run time";
  }
  return d;
}

std::vector<std::string> AddHookEnforcement(
    std::vector<std::string> enforcement) {
  for (const std::string& e : enforcement) {
    if (e == "hook" || e == "mig") return enforcement;
  }
  enforcement.emplace_back("hook");
  return enforcement;
}

}  // namespace hf::scheduler
