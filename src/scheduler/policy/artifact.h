// The six node-scoring placement policies of the FGD artifact (Weng et al.,
// "Beware of Fragmentation", USENIX ATC'23; their Kubernetes scheduler
// simulator), reimplemented on the ledger for the trace simulator: Random,
// DotProd, GpuClustering, GpuPacking, BestFit and FGD.
//
// Each policy works like the artifact's scheduling cycle:
// 1. filter: the nodes that can take the request, by the ledger's own rules
//    (a slice: some GPU passes ClusterView::CheckSlice; whole GPUs: the node's
//    CPU / host memory fit and it has gpu_count GPUs that EligibleWholeGpus
//    would list; node-only: the node's CPU / host memory fit);
// 2. score: every feasible node, as the artifact does (integer scores, so
//    its truncation decides ties the same way);
// 3. select: the highest score; ties go to the smallest NodeRecord::tie_rank
//    (the simulator's per-seed random node order), then the smallest node id;
// 4. GPUs inside the node as the artifact's allocator does: "best" (a slice
//    takes the candidate GPU with the least free milli, lowest index on
//    ties; whole GPUs take the lowest-index eligible GPUs), "random" (a slice
//    takes a uniformly random candidate) or FGD's own per-GPU score.
//
// Quantities: a GPU's free milli is GpuFreeMilli (fragmentation.h); a
// request's per-GPU milli is its memory share of a 64000-MiB GPU for a slice
// (the simulator maps gpu_milli to memory_mib = 64 x gpu_milli), 1000 for
// whole GPUs and 0 for node-only tasks.
//
// Thread-safety: DotProd, GpuClustering, GpuPacking and BestFit are
// stateless. RandomPolicy (its generator) and FgdPolicy (its memo) keep
// mutable state under an internal mutex, so they are safe to call from any
// thread, but RandomPolicy's choices are reproducible only while one caller
// (one Ledger, whose lock orders the calls) uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "ledger/placement_policy.h"
#include "scheduler/fragmentation.h"

namespace hf::scheduler {

// The artifact's normalisation constants (open-gpu-share utils/const.go).
inline constexpr CpuMilli kArtifactMaxSpecCpu = 128000;
inline constexpr std::int64_t kArtifactMaxSpecGpuMilli = 8000;

// A uniformly random feasible node; a slice takes a uniformly random
// candidate GPU there, whole GPUs the lowest-index eligible ones.
class RandomPolicy final : public ledger::PlacementPolicy {
 public:
  explicit RandomPolicy(std::uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "random"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;

 private:
  mutable Mutex mu_;
  mutable std::mt19937_64 rng_ HF_GUARDED_BY(mu_);
};

// Tetris-style dot product of the node's free (CPU, total GPU milli) with
// the request, each over the artifact's max spec: the node with the smallest
// product wins. score = int(100 x (1 - dot / 2)).
class DotProdPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "dotprod"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

// Groups tasks of one shape ("share-gpu", "<n>-gpu") on the same nodes:
// 75 + t on a node holding only the request's shape, 50 + t on one holding
// it among others, 25 + t on a node without GPU tasks, t otherwise, where
// t = 25 x (8000 - node idle milli) / 8000 in integers. Node-only tasks
// score 0 everywhere.
class GpuClusteringPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "gpuclustering"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

// Prefers partially used GPUs, then free GPUs on used nodes, then idle
// nodes (smaller first): the artifact's three-case packing score. Node-only
// tasks score 0 everywhere.
class GpuPackingPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "gpupacking"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

// The artifact's BestFit: the least leftover of CPU and total GPU milli, each
// over its max spec, mixed half and half: score = int(100 x (1 - raw)).
// (Not the server's Best-Fit, scheduler::BestFitPolicy.)
class ArtifactBestFitPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "bestfit"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
};

// Fragmentation Gradient Descent: the placement that lowers the node's
// fragmentation (NodeFragMilli against the target workload) the most.
// score = int(100 x sigmoid((F(before) - F(after)) / 1000)); a slice tries
// every candidate GPU and keeps the best (lowest index on ties).
//
// Node fragmentation is memoised per node, and scores per (request shape,
// node), both validated against the node's exact state on every call, so a
// memo never changes a choice; `memoize` = false computes everything afresh
// (the tests compare both).
class FgdPolicy final : public ledger::PlacementPolicy {
 public:
  explicit FgdPolicy(TargetWorkload workload, bool memoize = true);
  ~FgdPolicy() override;
  std::string_view name() const override { return "fgd"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;
  std::optional<NodeId> ChooseNode(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override;

  struct Memo;  // defined in artifact.cc

 private:
  const TargetWorkload workload_;
  const bool memoize_;
  mutable Mutex mu_;
  std::unique_ptr<Memo> memo_ HF_GUARDED_BY(mu_);
};

// The simulator's names for these policies and the factory that makes them
// are in registry.h, the one registry of the server's and the simulator's
// policies.

}  // namespace hf::scheduler
