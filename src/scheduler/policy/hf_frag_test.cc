// Tests for HfFragPolicy (hf_frag.h) through a real Ledger on small
// hand-built clusters of 64000-MiB GPUs, with requests shaped as the trace
// simulator builds them: its measure (fragmentation plus CPU-stranded GPU),
// its characteristic choices and tie-breaks, the ledger's rules (tenancy,
// lost GPUs, models, node resources) and CheckInvariants.
#include "scheduler/policy/hf_frag.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/artifact.h"
#include "scheduler/policy/node_scan.h"
#include "scheduler/policy/policy_test_util.h"
#include "scheduler/policy/registry.h"

namespace hf::scheduler {
namespace {

using ledger::Allocation;
using ledger::GpuHealth;
using ledger::PlacementOutcome;
using ledger::PlacementRequest;
using ledger::PlacementResult;

using policy_test::CpuReq;
using policy_test::GpuClass;
using policy_test::kOther;
using policy_test::SliceReq;
using policy_test::WholeReq;
using policy_test::Workload;

// The shared cluster, whose placements here also check the ledger's
// invariants.
class Cluster : public policy_test::Cluster {
 public:
  using policy_test::Cluster::Cluster;

  Allocation Placed(const PlacementRequest& r, const HfFragPolicy& p) {
    const PlacementResult res = ledger().Place(r, p);
    EXPECT_TRUE(res.placed()) << res.message;
    EXPECT_TRUE(ledger().CheckInvariants().ok());
    return res.allocation;
  }
};

// One GPU class asking 12 CPUs per whole GPU: c = 12 milli-CPU per milli.
TargetWorkload TwelveCpuPerGpu() {
  return Workload({{GpuClass(1000, 1, 12000), 3}, {GpuClass(0, 0, 4000), 1}});
}

TEST(HfFragMeasureTest, CpuPerGpuMilliIsTheWeightedRatio) {
  EXPECT_DOUBLE_EQ(CpuPerGpuMilli(TwelveCpuPerGpu()), 12.0);
  // (3 x 6000 + 1 x 16000) / (3 x 500 + 1 x 2 x 1000) = 34000 / 3500.
  EXPECT_DOUBLE_EQ(CpuPerGpuMilli(Workload({{GpuClass(500, 1, 6000), 3},
                                            {GpuClass(1000, 2, 16000), 1}})),
                   34000.0 / 3500.0);
  EXPECT_DOUBLE_EQ(CpuPerGpuMilli(Workload({{GpuClass(0, 0, 4000), 1}})), 0);
}

TEST(HfFragMeasureTest, AddsTheGpuTheFreeCpuCannotFeed) {
  const TargetWorkload w = TwelveCpuPerGpu();
  NodeGpuState n;
  n.model = "G2";
  n.gpu_free_milli = {1000, 1000, 1000, 1000};
  n.cpu_free = 48000;  // feeds 4000 milli: nothing stranded
  EXPECT_DOUBLE_EQ(HfFragMilli(n, w, 12.0), NodeFragMilli(n, w));
  n.cpu_free = 24000;  // feeds 2000 of the 4000 idle milli
  EXPECT_DOUBLE_EQ(HfFragMilli(n, w, 12.0), NodeFragMilli(n, w) + 2000);
  EXPECT_DOUBLE_EQ(HfFragMilli(n, w, 0.0), NodeFragMilli(n, w));
}

// The characteristic choice: FGD's own measure sees no difference for a
// CPU-only task that leaves every class room on both nodes (its drop is 0
// on both); hf-frag sends it to the node with CPU to spare.
TEST(HfFragPolicyTest, CpuHeavyTaskGoesWhereItStrandsNoGpu) {
  for (const bool dense_first : {true, false}) {
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      Cluster c(seed);
      NodeId dense, roomy;
      if (dense_first) {
        dense = c.Node(8, 96000);
        roomy = c.Node(2, 104000, "T4");
      } else {
        roomy = c.Node(2, 104000, "T4");
        dense = c.Node(8, 96000);
      }
      HfFragPolicy p(TwelveCpuPerGpu());
      // Dense: stranded 0 -> 8000 - 56000 / 12 = 3333 milli, score
      // int(100 sigmoid(-3.33)) = 3. Roomy: 0 -> 0, score 50.
      EXPECT_EQ(c.Placed(CpuReq(40000), p).node, roomy);
      // A whole GPU with 12 CPUs: on dense, 7000 - 84000/12 = 0 stays 0;
      // on roomy (64000 left) also 0: FGD's fragment decides; both still fit
      // the class, so the drop is 0 on both and the tie rank decides. Either
      // is fine; the ledger stays consistent.
      c.Placed(WholeReq(1, 12000), p);
      (void)dense;
    }
  }
}

// Node-only ties: the node left with the least idle GPU (strands no GPU),
// whatever the tie ranks.
TEST(HfFragPolicyTest, NodeOnlyTieGoesToTheNodeWithTheLeastIdleGpu) {
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    Cluster c(seed);
    const NodeId busy = c.Node(2, 64000);
    const NodeId idle = c.Node(2, 200000);
    c.OccupyWhole({c.Gpu(busy, 0), c.Gpu(busy, 1)});
    HfFragPolicy p(TwelveCpuPerGpu());
    // Both score 50 (no measure changes); busy has 0 idle GPU milli.
    EXPECT_EQ(c.Placed(CpuReq(1000), p).node, busy);
    (void)idle;
  }
}

// Among equally scored GPUs of a node, a slice takes the tightest.
TEST(HfFragPolicyTest, SliceTakesTheTightestOfEquallyScoredGpus) {
  Cluster c;
  const NodeId n = c.Node(4);
  c.OccupySlice(c.Gpu(n, 1), 300);  // 700 free
  c.OccupySlice(c.Gpu(n, 2), 500);  // 500 free
  c.OccupySlice(c.Gpu(n, 3), 700);  // 300 free
  HfFragPolicy p(Workload({{GpuClass(200), 1}}));
  // After 200 milli: GPU0 800, GPU1 500, GPU2 300, GPU3 100. On GPU3 the
  // 100 left is a fragment of the 200 class (score < 50); elsewhere nothing
  // changes (score 50): the tightest of those is GPU2.
  const Allocation a = c.Placed(SliceReq(200), p);
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(a.gpus[0], c.Gpu(n, 2));
}

// Prices: the constrained demand per GPU of each model, over the load.
TEST(HfFragPricesTest, PriceIsConstrainedDemandPerGpuOverTheLoad) {
  Cluster c;
  c.Node(2, 64000, "T4");
  c.Node(6, 64000, "G2");
  TaskClass t4 = GpuClass(1000, 1, 8000);
  t4.gpu_models = {"T4"};
  TaskClass either = GpuClass(1000, 1, 8000);
  either.gpu_models = {"T4", "G2"};
  // 8 GPUs of demand on 8 GPUs (load 1): 1 GPU wants T4 only, 4 want T4 or
  // G2 (split 1 : 3 by GPUs), 3 go anywhere.
  std::vector<TaskClass> tasks = {t4};
  for (int i = 0; i < 4; ++i) tasks.push_back(either);
  for (int i = 0; i < 3; ++i) tasks.push_back(GpuClass(1000, 1, 8000));
  const WorkloadDemand d = WorkloadDemand::FromTasks(tasks);
  EXPECT_DOUBLE_EQ(d.gpu_milli, 8000);
  EXPECT_DOUBLE_EQ(d.cpu_milli, 64000);
  ClusterPrices prices;
  c.ledger().Read(
      [&](const ledger::ClusterView& view) { prices = PricesFor(view, d); });
  EXPECT_DOUBLE_EQ(prices.price["T4"], (1000 + 4000 * 2.0 / 8) / 2000);
  EXPECT_DOUBLE_EQ(prices.price["G2"], (4000 * 6.0 / 8) / 6000);
  // 64 CPUs per 8 GPUs; CPU load 64000 / 128000 below GPU load 1.
  EXPECT_DOUBLE_EQ(prices.cpu_per_milli_all, 8.0);
  EXPECT_DOUBLE_EQ(prices.cpu_bound, 0);
  // Twice the CPU: CPU load 1, as high as the GPU load.
  for (TaskClass& t : tasks) t.cpu_milli *= 2;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    prices = PricesFor(view, WorkloadDemand::FromTasks(tasks));
  });
  EXPECT_DOUBLE_EQ(prices.cpu_bound, 1);
}

// A task that may go anywhere leaves the model that constrained tasks need,
// where FGD sees no difference.
TEST(HfFragPolicyTest, UnconstrainedTaskAvoidsTheModelConstrainedTasksNeed) {
  int t4_plain = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    Cluster c(seed);
    const NodeId t4 = c.Node(2, 64000, "T4");
    const NodeId g2 = c.Node(2, 64000, "G2");
    const TargetWorkload w = Workload({{GpuClass(1000, 1), 1}});
    TaskClass pinned = GpuClass(1000, 1);
    pinned.gpu_models = {"T4"};
    const std::vector<TaskClass> tasks = {pinned, pinned, GpuClass(1000, 1),
                                          GpuClass(1000, 1)};
    HfFragPolicy p(w, WorkloadDemand::FromTasks(tasks));
    EXPECT_EQ(c.Placed(WholeReq(1), p).node, g2) << seed;
    // Without the demand it is the tie rank's choice.
    Cluster plain(seed);
    plain.Node(2, 64000, "T4");
    plain.Node(2, 64000, "G2");
    if (plain.Placed(WholeReq(1), HfFragPolicy(w)).node == t4) ++t4_plain;
  }
  EXPECT_GT(t4_plain, 0);
}

// When the workload is CPU-bound, stranding is measured at the whole
// workload's CPU per GPU (CPU-only tasks included), not only the GPU
// classes'.
TEST(HfFragPolicyTest, CpuBoundWorkloadMeasuresStrandingAtItsWholeCpu) {
  // GPU classes: 4 CPUs per GPU. With the CPU-only tasks the workload asks
  // 12 CPUs per GPU, and its CPU load (48 / 60) exceeds its GPU load
  // (4 / 6): CPU-bound, so c = 10, the cluster's 60 CPUs over 6 GPUs (less
  // than the 12 asked).
  std::vector<TaskClass> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(GpuClass(1000, 1, 4000));
  for (int i = 0; i < 4; ++i) tasks.push_back(GpuClass(0, 0, 8000));
  const TargetWorkload w = Workload({{GpuClass(1000, 1, 4000), 1}});
  int adaptive_tight = 0, plain_tight = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    for (const bool adaptive : {true, false}) {
      Cluster c(seed);
      // At c = 10: tight strands 3000 - 24000/10 = 600 milli, none after a
      // 4-CPU GPU task (score 64); roomy strands nothing before or after
      // (score 50). At c = 4 neither strands anything: a tie.
      const NodeId tight = c.Node(3, 24000, "G2");
      c.Node(3, 36000, "G2");
      const HfFragPolicy p =
          adaptive ? HfFragPolicy(w, WorkloadDemand::FromTasks(tasks))
                   : HfFragPolicy(w);
      const bool on_tight = c.Placed(WholeReq(1, 4000), p).node == tight;
      (adaptive ? adaptive_tight : plain_tight) += on_tight ? 1 : 0;
    }
  }
  EXPECT_EQ(adaptive_tight, 8);
  EXPECT_LT(plain_tight, 8);  // the tie rank decides
}

TEST(HfFragPolicyTest, RespectsTenancy) {
  Cluster c;
  const NodeId n = c.Node(2);
  c.OccupySlice(c.Gpu(n, 0), 500, kOther);  // the tightest fit, not ours
  HfFragPolicy p(Workload({{GpuClass(500), 1}}));
  const Allocation a = c.Placed(SliceReq(500), p);
  EXPECT_EQ(a.gpus, std::vector<GpuId>{c.Gpu(n, 1)});
  // The other tenant may use its own GPU.
  const Allocation b = c.Placed(SliceReq(500, 0, kOther), p);
  EXPECT_EQ(b.gpus, std::vector<GpuId>{c.Gpu(n, 0)});
}

TEST(HfFragPolicyTest, OnlyNodesWhoseRuntimeCanStartTheTask) {
  Cluster c;
  const NodeId processes = c.Node(4);
  const NodeId containers = c.Node(4);
  ASSERT_TRUE(c.ledger()
                  .SetNodeTraits(processes, false, ledger::TaskLaunch::kCommand)
                  .ok());
  ASSERT_TRUE(c.ledger()
                  .SetNodeTraits(containers, false, ledger::TaskLaunch::kImage)
                  .ok());
  HfFragPolicy p(Workload({{GpuClass(500), 1}}));
  for (int i = 0; i < 3; ++i) {
    PlacementRequest image_only = SliceReq(300);
    image_only.has_command = false;
    EXPECT_EQ(c.Placed(image_only, p).node, containers);
    PlacementRequest command_only = WholeReq(1);
    command_only.has_image = false;
    EXPECT_EQ(c.Placed(command_only, p).node, processes);
  }
  PlacementRequest neither = SliceReq(100);
  neither.has_command = false;
  neither.has_image = false;
  EXPECT_FALSE(c.ledger().Place(neither, p).placed());
  EXPECT_TRUE(c.ledger().CheckInvariants().ok());
}

TEST(HfFragPolicyTest, SkipsLostGpus) {
  Cluster c;
  const NodeId n = c.Node(3);
  ASSERT_TRUE(c.ledger().SetGpuHealth(c.Gpu(n, 0), GpuHealth::kLost).ok());
  HfFragPolicy p(Workload({{GpuClass(1000, 2), 1}}));
  const Allocation a = c.Placed(WholeReq(2), p);
  EXPECT_EQ(a.gpus, (std::vector<GpuId>{c.Gpu(n, 1), c.Gpu(n, 2)}));
  // One healthy GPU is left: a third whole GPU fits, a slice on the lost
  // one never.
  const PlacementResult more = c.ledger().Place(WholeReq(1), p);
  EXPECT_FALSE(more.placed());
  EXPECT_FALSE(c.ledger().Place(SliceReq(100), p).placed());
  EXPECT_TRUE(c.ledger().CheckInvariants().ok());
}

TEST(HfFragPolicyTest, RespectsModels) {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    Cluster c(seed);
    c.Node(2, 64000, "G2");
    const NodeId t4 = c.Node(2, 64000, "T4");
    HfFragPolicy p(Workload({{GpuClass(500), 1}}));
    PlacementRequest r = SliceReq(500);
    r.allowed_models = {"T4"};
    EXPECT_EQ(c.Placed(r, p).node, t4);
    PlacementRequest w = WholeReq(1);
    w.allowed_models = {"V100"};
    EXPECT_FALSE(c.ledger().Place(w, p).placed());
  }
}

TEST(HfFragPolicyTest, RespectsNodeResources) {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    Cluster c(seed);
    c.Node(2, 8000);
    const NodeId big = c.Node(2, 64000, "G2", 1 << 20);
    c.Node(2, 64000, "G2", 1000);  // too little host memory
    HfFragPolicy p(Workload({{GpuClass(1000), 1}}));
    PlacementRequest r = WholeReq(1, 16000);
    r.host_memory_mib = 4096;
    EXPECT_EQ(c.Placed(r, p).node, big);
    EXPECT_EQ(c.Placed(CpuReq(40000, 4096), p).node, big);
    EXPECT_FALSE(c.ledger().Place(CpuReq(40000, 4096), p).placed());
  }
}

TEST(HfFragPolicyTest, RandomWorkloadsKeepTheLedgerConsistent) {
  const TargetWorkload w = Workload({{GpuClass(500, 1, 6000), 10},
                                     {GpuClass(1000, 1, 8000), 5},
                                     {GpuClass(0, 0, 2000), 3}});
  Cluster c(9);
  for (int i = 0; i < 6; ++i) {
    c.Node(i % 3 == 0 ? 8 : 2, i % 3 == 0 ? 96000 : 64000,
           i % 2 == 0 ? "G2" : "T4");
  }
  ASSERT_TRUE(
      c.ledger().SetGpuHealth(c.Gpu(NodeId(0), 3), GpuHealth::kLost).ok());
  HfFragPolicy p(w);
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> pct(0, 99);
  int placed = 0;
  for (int step = 0; step < 400; ++step) {
    PlacementRequest r;
    const int kind = pct(rng);
    if (kind < 50) {
      r = SliceReq(10 * (1 + pct(rng)), 1000 * (pct(rng) % 8));
    } else if (kind < 80) {
      r = WholeReq(1 + pct(rng) % 3, 1000 * (pct(rng) % 16));
    } else {
      r = CpuReq(1000 * (1 + pct(rng) % 16));
    }
    if (pct(rng) < 10) r.tenant = kOther;
    if (pct(rng) < 10) r.allowed_models = {"T4"};
    const PlacementResult res = c.ledger().Place(r, p);
    ASSERT_NE(res.outcome, PlacementOutcome::kInvalid) << res.message;
    placed += res.placed();
    if (res.placed()) {
      for (const GpuId g : res.allocation.gpus) {
        EXPECT_NE(g, c.Gpu(NodeId(0), 3));  // never the lost GPU
      }
    }
    ASSERT_TRUE(c.ledger().CheckInvariants().ok());
  }
  EXPECT_GT(placed, 50);
}

TEST(HfFragPolicyTest, FactoryBuildsItAndNeedsAWorkload) {
  const TargetWorkload w = TwelveCpuPerGpu();
  SimPolicyContext ctx;
  ctx.workload = &w;
  auto made = MakeSimPolicy("hf-frag", ctx);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->name(), "hf-frag");
  EXPECT_FALSE(MakeSimPolicy("hf-frag", SimPolicyContext{}).ok());
}

// The scan measures a slice on a GPU in MIG mode as the ledger charges it:
// the partition it gets (memory slots and compute slices), not what it
// asked; and a defaulted compute share is a shape of its own there.
TEST(NodeScanTest, AMigGpuIsMeasuredAtThePartitionsCharge) {
  policy_test::Cluster c;
  const NodeId mig = c.MigNode(1);
  const NodeId plain = c.Node(1);
  PlacementRequest asked = PlacementRequest::Slice(policy_test::kSim, 4096, 10);
  PlacementRequest defaulted =
      PlacementRequest::Slice(policy_test::kSim, 4096, std::nullopt);
  PlacementRequest fifty = PlacementRequest::Slice(policy_test::kSim, 4096, 50);
  c.ledger().Read([&](const ledger::ClusterView& view) {
    // The scan's facts of the node's one GPU, gathered as a policy does.
    const auto milli = [&](NodeId node, const PlacementRequest& r) {
      const std::optional<node_scan::Need> need = node_scan::MakeNeed(view, r);
      EXPECT_TRUE(need.has_value());
      std::vector<node_scan::GpuFacts> gpus;
      node_scan::NodeFacts facts;
      EXPECT_TRUE(node_scan::Gather(view, node.value(), *need, gpus, facts));
      EXPECT_EQ(gpus.size(), 1u);
      return gpus.empty() ? -1 : gpus[0].after_milli;
    };
    // 1g.10gb of 80 GB: 7/8 of the memory and 6/7 of the compute left.
    EXPECT_EQ(milli(mig, asked), 860);
    EXPECT_EQ(milli(mig, defaulted), 860);  // not 50% of the compute gone
    EXPECT_EQ(milli(mig, fifty), 430);      // 4g.40gb: 3 of 7 slices left
    // A GPU out of MIG mode is charged what was asked.
    EXPECT_EQ(milli(plain, asked), 900);
    EXPECT_EQ(milli(plain, defaulted), 500);
    const std::optional<node_scan::Need> d =
        node_scan::MakeNeed(view, defaulted);
    const std::optional<node_scan::Need> f = node_scan::MakeNeed(view, fifty);
    ASSERT_TRUE(d.has_value() && f.has_value());
    EXPECT_FALSE(node_scan::ShapeOf(*d) == node_scan::ShapeOf(*f));
  });
}

}  // namespace
}  // namespace hf::scheduler
