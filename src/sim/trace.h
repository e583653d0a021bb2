// Reading cluster traces: node lists and pod (task) lists in the CSV format
// of Alibaba's openb GPU-sharing trace (cluster-trace-gpu-v2023 of
// github.com/alibaba/clusterdata), which the simulator replays through the
// ledger.
//
// Node CSV columns: sn, cpu_milli, memory_mib, gpu, model.
// Pod CSV columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli, and
// optionally gpu_spec ('|'-separated allowed models; empty or "nan" = any),
// qos (e.g. LS, BE; "BE" tasks are preemptible in the time replay),
// creation_time and deletion_time (seconds; used by the time replay; an
// empty deletion_time means the task never leaves).
// Other columns are ignored. Every malformed row is an InvalidArgument that
// names the file, the line and the column, and says what is wrong.
// cpu_milli and memory_mib are at most 2^30 (about a million CPUs, 1 PiB).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/quantity.h"
#include "common/status.h"

namespace hf::sim {

struct TraceNode {
  std::string name;
  CpuMilli cpu_milli = 0;
  MemoryMib memory_mib = 0;
  int gpu_count = 0;
  std::string model;  // GPU model ("" for CPU-only nodes)
};

struct TracePod {
  std::string name;
  CpuMilli cpu_milli = 0;
  MemoryMib memory_mib = 0;
  int num_gpu = 0;    // 0: CPU-only task
  int gpu_milli = 0;  // per GPU, 1..1000; < 1000 only with num_gpu == 1
  std::vector<std::string> gpu_spec;  // allowed GPU models; empty = any
  std::string qos;                    // "" when the trace has no qos
  std::int64_t creation_time = 0;     // seconds
  std::int64_t deletion_time = -1;    // seconds; -1: never leaves

  bool is_share() const { return num_gpu == 1 && gpu_milli < kMilliPerGpu; }
  // Total GPU request in milli-GPUs.
  std::int64_t total_gpu_milli() const {
    return static_cast<std::int64_t>(num_gpu) * gpu_milli;
  }
};

// Parses CSV text; `source` names it in error messages (e.g. a file path).
StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text,
                                              const std::string& source);
StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text,
                                            const std::string& source);

// Reads and parses a file; NotFound when it cannot be read.
StatusOr<std::vector<TraceNode>> ReadNodeCsv(const std::string& path);
StatusOr<std::vector<TracePod>> ReadPodCsv(const std::string& path);

}  // namespace hf::sim
