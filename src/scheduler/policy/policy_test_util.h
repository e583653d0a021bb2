// Shared fixtures for the simulator policies' tests (artifact_test.cc,
// hf_frag_test.cc): requests shaped as the trace simulator builds them, a
// Ledger-backed cluster of 64000-MiB GPUs built by hand and loaded directly,
// and target workloads from task classes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/fragmentation.h"

namespace hf::scheduler::policy_test {

inline constexpr TenantId kSim(1);
inline constexpr TenantId kOther(2);
inline constexpr MemoryMib kGpuMib = 64000;
inline constexpr MemoryMib kMibPerMilli = 64;

// Requests as the simulator builds them.
inline ledger::PlacementRequest SliceReq(int milli, CpuMilli cpu = 0,
                                         TenantId t = kSim) {
  ledger::PlacementRequest r = ledger::PlacementRequest::Slice(
      t, milli * kMibPerMilli, std::max(1, milli / 10));
  r.cpu_milli = cpu;
  return r;
}
inline ledger::PlacementRequest WholeReq(int count, CpuMilli cpu = 0) {
  ledger::PlacementRequest r = ledger::PlacementRequest::WholeGpus(kSim, count);
  r.cpu_milli = cpu;
  return r;
}
inline ledger::PlacementRequest CpuReq(CpuMilli cpu, MemoryMib host = 0) {
  return ledger::PlacementRequest::NodeOnly(kSim, cpu, host);
}

// A ledger plus helpers to build a cluster and load it directly.
class Cluster {
 public:
  explicit Cluster(std::uint64_t tie_seed = 0) {
    ledger::LedgerOptions options;
    options.tie_break_seed = tie_seed;
    StatusOr<std::unique_ptr<ledger::Ledger>> l =
        ledger::Ledger::Create(options);
    EXPECT_TRUE(l.ok());
    ledger_ = std::move(l).value();
  }

  // A node with `gpus` empty GPUs of `model`.
  NodeId Node(int gpus, CpuMilli cpu = 64000, const std::string& model = "G2",
              MemoryMib host = 1 << 20) {
    ledger::GpuSpec g;
    g.model = model;
    g.memory_mib = kGpuMib;
    return NodeOf(gpus, cpu, host, g);
  }

  // A node with `gpus` empty A100-SXM4-80GB GPUs in MIG mode (the ledger
  // charges a slice there as its partition).
  NodeId MigNode(int gpus, CpuMilli cpu = 64000) {
    ledger::GpuSpec g;
    g.model = "A100-SXM4-80GB";
    g.memory_mib = 81920;
    g.mig_capable = true;
    return NodeOf(gpus, cpu, 1 << 20, g);
  }

  GpuId Gpu(NodeId node, int i) const { return gpus_[node.value()][i]; }

  // Existing work, recorded without a policy.
  void OccupySlice(GpuId gpu, int milli, CpuMilli cpu = 0, TenantId t = kSim) {
    ledger::Allocation a;
    a.id = SliceId(next_id_++);
    a.tenant = t;
    a.kind = ledger::RequestKind::kSlice;
    a.gpus = {gpu};
    a.memory_mib = milli * kMibPerMilli;
    a.compute_percent = std::max(1, milli / 10);
    a.cpu_milli = cpu;
    ASSERT_TRUE(ledger_->Restore(a).ok());
  }
  void OccupySlice(GpuId gpu, int milli, TenantId t) {
    OccupySlice(gpu, milli, 0, t);
  }
  void OccupyWhole(std::vector<GpuId> gpus, CpuMilli cpu = 0) {
    ledger::Allocation a;
    a.id = SliceId(next_id_++);
    a.tenant = kSim;
    a.kind = ledger::RequestKind::kWholeGpus;
    a.gpus = std::move(gpus);
    a.cpu_milli = cpu;
    ASSERT_TRUE(ledger_->Restore(a).ok());
  }
  void OccupyCpu(NodeId node, CpuMilli cpu) {
    ledger::Allocation a;
    a.id = SliceId(next_id_++);
    a.tenant = kSim;
    a.kind = ledger::RequestKind::kNodeOnly;
    a.node = node;
    a.cpu_milli = cpu;
    ASSERT_TRUE(ledger_->Restore(a).ok());
  }

  ledger::PlacementResult Place(const ledger::PlacementRequest& r,
                                const ledger::PlacementPolicy& p) {
    ledger::PlacementResult res = ledger_->Place(r, p);
    EXPECT_NE(res.outcome, ledger::PlacementOutcome::kInvalid) << res.message;
    return res;
  }
  // Places and expects success; returns the allocation.
  ledger::Allocation Placed(const ledger::PlacementRequest& r,
                            const ledger::PlacementPolicy& p) {
    const ledger::PlacementResult res = Place(r, p);
    EXPECT_TRUE(res.placed()) << p.name() << ": " << res.message;
    return res.allocation;
  }

  std::uint64_t Rank(NodeId node) const {
    std::uint64_t rank = 0;
    ledger_->Read([&](const ledger::ClusterView& view) {
      rank = view.node(node).tie_rank;
    });
    return rank;
  }

  ledger::Ledger& ledger() { return *ledger_; }

 private:
  // A node with `gpus` GPUs like `gpu` (its uuid and index set here).
  NodeId NodeOf(int gpus, CpuMilli cpu, MemoryMib host, ledger::GpuSpec gpu) {
    ledger::NodeSpec spec;
    spec.name = "node-" + std::to_string(gpus_.size());
    spec.cpu_milli = cpu;
    spec.host_memory_mib = host;
    StatusOr<NodeId> id = ledger_->AddNode(spec);
    EXPECT_TRUE(id.ok());
    gpus_.emplace_back();
    for (int i = 0; i < gpus; ++i) {
      gpu.uuid = "GPU-" + std::to_string(gpu_count_++);
      gpu.index = i;
      StatusOr<GpuId> gid = ledger_->AddGpu(*id, gpu);
      EXPECT_TRUE(gid.ok());
      gpus_.back().push_back(*gid);
    }
    return *id;
  }

  std::unique_ptr<ledger::Ledger> ledger_;
  std::vector<std::vector<GpuId>> gpus_;
  int gpu_count_ = 0;
  std::uint64_t next_id_ = 1000000;
};

inline TaskClass GpuClass(int milli, int num = 1, CpuMilli cpu = 0) {
  TaskClass c;
  c.cpu_milli = cpu;
  c.gpu_milli = milli;
  c.num_gpu = num;
  return c;
}

// A workload with the given classes, `count` tasks each.
inline TargetWorkload Workload(
    const std::vector<std::pair<TaskClass, int>>& spec) {
  std::vector<TaskClass> tasks;
  for (const auto& [c, n] : spec) {
    for (int i = 0; i < n; ++i) tasks.push_back(c);
  }
  return TargetWorkload::FromTasks(tasks, 1.0);
}

}  // namespace hf::scheduler::policy_test
