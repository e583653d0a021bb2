// Tests for the experiment loop: the task order and inflation, the binning
// of samples by arrived %, the seed statistics, and a whole small run whose
// incrementally maintained fragmentation must equal a fresh computation.
#include "sim/experiment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "scheduler/policy/best_fit.h"
#include "sim/sim_cluster.h"

namespace hf::sim {
namespace {

TracePod Pod(const std::string& name, int num_gpu, int gpu_milli,
             CpuMilli cpu = 1000) {
  TracePod p;
  p.name = name;
  p.cpu_milli = cpu;
  p.memory_mib = 1024;
  p.num_gpu = num_gpu;
  p.gpu_milli = gpu_milli;
  return p;
}

TEST(TaskOrderTest, OriginalTasksFirstThenClonesUpToTheLimit) {
  std::vector<TracePod> pods = {Pod("b", 1, 500), Pod("a", 1, 1000),
                                Pod("c", 0, 0), Pod("d", 2, 1000)};
  // Total request 3500 milli; capacity 10 GPUs; limit 1.3 x 10000 = 13000.
  std::mt19937_64 rng(42);
  const auto order = TaskOrder(pods, 10000, 1.3, rng);
  ASSERT_GE(order.size(), 4u);
  // The first four are a permutation of the originals.
  std::set<std::size_t> first(order.begin(), order.begin() + 4);
  EXPECT_EQ(first, (std::set<std::size_t>{0, 1, 2, 3}));
  std::int64_t total = 0;
  for (std::size_t i : order) total += pods[i].total_gpu_milli();
  EXPECT_LE(total, 13000);
  // The loop stopped because the next draw would exceed the limit: at
  // least 13000 - 2000 (the largest request) is reached.
  EXPECT_GT(total, 13000 - 2000);
}

TEST(TaskOrderTest, DeterministicPerSeedAndDifferentAcrossSeeds) {
  std::vector<TracePod> pods;
  for (int i = 0; i < 50; ++i)
    pods.push_back(Pod("p" + std::to_string(i), 1, 300));
  std::mt19937_64 a(7), b(7), c(8);
  EXPECT_EQ(TaskOrder(pods, 20000, 1.3, a), TaskOrder(pods, 20000, 1.3, b));
  EXPECT_NE(TaskOrder(pods, 20000, 1.3, a), TaskOrder(pods, 20000, 1.3, c));
}

TEST(TaskOrderTest, NoInflationWhenAlreadyAboveTheLimit) {
  std::vector<TracePod> pods = {Pod("a", 8, 1000), Pod("b", 8, 1000)};
  std::mt19937_64 rng(1);
  EXPECT_EQ(TaskOrder(pods, 10000, 1.3, rng).size(), 2u);
}

TEST(TaskOrderTest, CpuOnlyTraceTerminates) {
  std::vector<TracePod> pods = {Pod("a", 0, 0)};
  std::mt19937_64 rng(1);
  EXPECT_GT(TaskOrder(pods, 1000, 1.3, rng).size(), 1u);  // bounded, ends
}

TEST(DiscretiseTest, MeansPerBinWithHalfToEvenRounding) {
  // Capacity 1000 milli: arrived 5 -> 0.5% -> bin 0 (half to even);
  // 15 -> 1.5% -> bin 2; 20 -> 2%.
  std::vector<Sample> samples(3);
  samples[0].arrived_milli = 5;
  samples[0].idle_milli = 10;
  samples[1].arrived_milli = 15;
  samples[1].idle_milli = 20;
  samples[2].arrived_milli = 20;
  samples[2].idle_milli = 40;
  const auto idle = [](const Sample& s) {
    return static_cast<double>(s.idle_milli);
  };
  const std::vector<double> v = Discretise(samples, 1000, 4, idle);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_DOUBLE_EQ(v[0], 10);        // bin 0: {10}
  EXPECT_DOUBLE_EQ(v[1], 70.0 / 3);  // empty: samples of bins 0..2
  EXPECT_DOUBLE_EQ(v[2], 30);        // bin 2: {20, 40}
  EXPECT_DOUBLE_EQ(v[3], 30);        // empty: samples of bins 2..4
  EXPECT_DOUBLE_EQ(v[4], 30);        // nothing near: previous point
}

TEST(SummariseTest, MedianAndQuartilesInterpolate) {
  const Stat s = Summarise({4, 1, 3, 2, 5});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.p25, 2);
  EXPECT_DOUBLE_EQ(s.p75, 4);
  const Stat even = Summarise({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(even.median, 2.5);
  EXPECT_DOUBLE_EQ(even.p25, 1.75);
  EXPECT_DOUBLE_EQ(even.p75, 3.25);
  EXPECT_DOUBLE_EQ(Summarise({}).median, 0);
}

}  // namespace
}  // namespace hf::sim

namespace hf::sim {
namespace {

TEST(RunSeedTest, SmallClusterRecordsEveryAttemptConsistently) {
  std::vector<TraceNode> nodes = {{"n1", 32000, 65536, 2, "T4"},
                                  {"n2", 64000, 131072, 4, "V100M16"},
                                  {"cpu", 8000, 16384, 0, ""}};
  std::vector<TracePod> pods;
  for (int i = 0; i < 20; ++i) {
    pods.push_back(
        Pod("share" + std::to_string(i), 1, 250 + 10 * (i % 5), 2000));
  }
  pods.push_back(Pod("whole", 2, 1000, 8000));
  pods.push_back(Pod("cpu-only", 0, 0, 4000));
  std::vector<scheduler::TaskClass> classes;
  for (const auto& p : pods) classes.push_back(ToTaskClass(p));
  const auto workload = scheduler::TargetWorkload::FromTasks(classes);
  ExperimentOptions options;
  auto run = RunSeed(nodes, pods, "hf-bestfit", 42, workload, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::int64_t capacity = CapacityMilli(nodes);
  EXPECT_EQ(capacity, 6000);
  ASSERT_EQ(run->samples.size(),
            static_cast<std::size_t>(run->placed + run->failed) + 1);
  EXPECT_EQ(run->samples[0].arrived_milli, 0);  // the empty cluster
  EXPECT_EQ(run->samples[0].idle_milli, capacity);
  EXPECT_GT(run->placed, 0);
  EXPECT_GT(run->failed, 0);  // inflated to 1.3x: some must fail
  std::int64_t last_arrived = 0;
  for (const Sample& s : run->samples) {
    EXPECT_GE(s.arrived_milli, last_arrived);
    last_arrived = s.arrived_milli;
    EXPECT_EQ(s.allocated_milli + s.idle_milli, capacity);
    EXPECT_LE(s.allocated_milli, capacity);
    EXPECT_GE(s.frag_milli, -1e-6);
    EXPECT_LE(s.frag_milli, static_cast<double>(s.idle_milli) + 1e-6);
  }
  EXPECT_LE(last_arrived, static_cast<std::int64_t>(1.3 * 6000));
  const auto points = Aggregate({*run}, capacity, 130);
  ASSERT_EQ(points.size(), 131u);
  // Nearly nothing arrived at x = 0: almost all of the GPU is unallocated.
  EXPECT_GT(points[0].unallocated_pct.median, 80.0);
  EXPECT_LE(points[130].unallocated_pct.median, 100.0);
}

TEST(RunSeedTest, UnknownPolicyIsAnError) {
  std::vector<TraceNode> nodes = {{"n1", 32000, 65536, 2, "T4"}};
  std::vector<TracePod> pods = {Pod("a", 1, 500)};
  const auto workload = scheduler::TargetWorkload::FromTasks({});
  EXPECT_FALSE(RunSeed(nodes, pods, "no-such-policy", 1, workload, {}).ok());
}

}  // namespace
}  // namespace hf::sim
