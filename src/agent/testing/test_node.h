// The node the agent's in-process tests and its reply fuzzer run on: an H100
// in MIG mode (gold) and a T4, as a simulated inventory (docs/INVENTORY.md).
#pragma once

namespace hf::agent::test_node {

inline constexpr char kInventory[] = R"({
  "node_id": "n1", "cpu_milli": 64000, "host_memory_mb": 524288,
  "gpus": [
    {"model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
     "compute_capability": "9.0", "mig_enabled": true},
    {"model": "Tesla T4", "memory_mb": 15360, "compute_capability": "7.5"}]})";

}  // namespace hf::agent::test_node
