// RunRandom: one seeded run of the whole-system simulation. A random
// workload (slice, whole-GPU and gold tasks; cancels in every state; admin
// deletes; quota changes; tenants joining and leaving groups; approvals
// granted, revoked and expiring; a node joining late) runs against a World
// while a seeded fault injector drops, delays and duplicates agent calls,
// partitions nodes, crashes and restarts agents and the server (inside store
// transactions too), powers nodes off, loses GPUs, fails MIG creates, stops
// MPS daemons and jumps the clock. The world's invariants are checked after
// every step. Then the faults stop, and every task must settle (terminal or
// running) within a bounded simulated time with no slice outliving its
// task.
//
// The same options replay the same run exactly; `until` stops it at a step
// (to look at the events that led there).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "simulation/world.h"

namespace hf::simulation {

struct RandomRunOptions {
  std::uint64_t seed = 1;
  std::int64_t steps = 5'000;  // with faults; the settling steps come on top
  std::optional<std::int64_t> until;
  int nodes = 4;
  bool faults = true;
  std::filesystem::path dir;  // scratch; removed afterwards
  bool keep_dir = false;      // unless this is set
  // How long the system may take to settle once the faults stop: a backlog
  // of whole-GPU tasks can take hours of simulated time to drain.
  std::int64_t settle_bound_ms = std::int64_t{4} * 60 * 60'000;
};

struct RandomRunResult {
  bool ok = true;
  std::int64_t steps = 0;
  std::int64_t simulated_ms = 0;
  std::string violation;  // empty when ok
  std::int64_t violation_step = 0;
  std::vector<std::string> trace;  // the last events before the end
  World::Counters counters;
};

RandomRunResult RunRandom(const RandomRunOptions& options);

}  // namespace hf::simulation
