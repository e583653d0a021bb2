// Trace variants built the way the FGD artifact (Weng et al., ATC'23) builds
// its openb variants, from a base pod list and the node list:
// - gpuspec: a share of the GPU tasks is constrained to GPU models present
//   in the node list (the public gpuspec10 constrains about 10%);
// - CPU-only demand: the CPU requested by CPU-only tasks is scaled, by
//   keeping a subset of them (scale < 1) or adding clones drawn with
//   replacement (scale > 1); GPU tasks are unchanged.
//
// Every draw comes from one std::mt19937_64 seeded with `seed`, using only
// its raw output (no standard distribution, whose algorithm is left to the
// library), so a variant is the same on every platform and every run.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/trace.h"

namespace hf::sim {

struct VariantOptions {
  // Share (0..1) of the GPU tasks that end up constrained to GPU models;
  // tasks constrained already count. 0 leaves the constraints as they are.
  double gpuspec_share = 0;
  // Total CPU of CPU-only tasks, as a multiple of the base trace's (1 = as
  // is, 2.5 = the "cpu250" variant).
  double cpu_only_scale = 1;
  std::uint64_t seed = 1;
};

// The variant of `pods` for the GPU nodes of `nodes`. A newly constrained
// task gets the model set of a task of the trace constrained already, drawn
// uniformly (so gpuspec10 grown to 20% keeps its mix of models), among sets
// naming a model with a node that can hold the task (enough GPUs, CPU and
// memory); when the trace has none, one model (70%) or two (30%) drawn in
// proportion to each such model's GPU count. No task becomes unplaceable on
// an empty cluster. Clones are named
// "<name>-c<k>" and keep the original's times and qos. InvalidArgument for a
// share outside 0..1 or a negative scale.
StatusOr<std::vector<TracePod>> MakeVariant(const std::vector<TraceNode>& nodes,
                                            const std::vector<TracePod>& pods,
                                            const VariantOptions& options);

// A deterministic share of the nodes, the same mix of node types: for each
// (model, GPUs, CPU, memory) type, round(share x count) nodes (at least one
// where share > 0), drawn with `seed`. For replays that need a smaller
// cluster than the trace's.
std::vector<TraceNode> SubsetNodes(const std::vector<TraceNode>& nodes,
                                   double share, std::uint64_t seed);

// The pods as CSV text in the openb columns (name, cpu_milli, memory_mib,
// num_gpu, gpu_milli, gpu_spec, qos, creation_time, deletion_time), which
// ParsePodCsv reads back to the same pods.
std::string PodCsv(const std::vector<TracePod>& pods);

}  // namespace hf::sim
