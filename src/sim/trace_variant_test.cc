// Tests for the trace variants: the same seed gives the same variant, the
// share of constrained GPU tasks and the CPU-only demand come out as asked,
// constraints name only models that can hold the task, and the CSV writer
// round-trips through the parser.
#include "sim/trace_variant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace hf::sim {
namespace {

std::vector<TraceNode> Nodes() {
  return {{"a0", 96000, 786432, 8, "G2"},   {"a1", 96000, 786432, 8, "G2"},
          {"t0", 104000, 393216, 2, "T4"},  {"t1", 104000, 393216, 2, "T4"},
          {"p0", 64000, 262144, 2, "P100"}, {"c0", 32000, 131072, 0, ""}};
}

std::vector<TracePod> Pods() {
  std::vector<TracePod> pods;
  for (int i = 0; i < 400; ++i) {
    TracePod p;
    p.name = "pod-" + std::to_string(1000 + i);
    p.cpu_milli = 4000 + 1000 * (i % 7);
    p.memory_mib = 8192;
    if (i % 5 == 0) {
      // CPU-only
    } else if (i % 5 == 1) {
      p.num_gpu = 8;  // only G2 nodes have 8 GPUs
      p.gpu_milli = 1000;
    } else {
      p.num_gpu = 1;
      p.gpu_milli = 100 * (1 + i % 10);
    }
    p.qos = i % 2 == 0 ? "BE" : "LS";
    p.creation_time = i * 10;
    p.deletion_time = i * 10 + 500;
    pods.push_back(p);
  }
  return pods;
}

std::string Csv(const StatusOr<std::vector<TracePod>>& pods) {
  EXPECT_TRUE(pods.ok()) << pods.status().ToString();
  return pods.ok() ? PodCsv(*pods) : "";
}

TEST(TraceVariantTest, SameSeedSameVariantOtherSeedOther) {
  VariantOptions o;
  o.gpuspec_share = 0.25;
  o.cpu_only_scale = 2.5;
  o.seed = 7;
  const std::string a = Csv(MakeVariant(Nodes(), Pods(), o));
  const std::string b = Csv(MakeVariant(Nodes(), Pods(), o));
  EXPECT_EQ(a, b);
  o.seed = 8;
  EXPECT_NE(a, Csv(MakeVariant(Nodes(), Pods(), o)));
  // The order of the input does not matter: tasks are drawn by name.
  std::vector<TracePod> reversed = Pods();
  std::reverse(reversed.begin(), reversed.end());
  o.seed = 7;
  auto r = MakeVariant(Nodes(), reversed, o);
  ASSERT_TRUE(r.ok());
  std::sort(r->begin(), r->end(), [](const TracePod& x, const TracePod& y) {
    return x.name < y.name;
  });
  auto f = MakeVariant(Nodes(), Pods(), o);
  ASSERT_TRUE(f.ok());
  std::sort(f->begin(), f->end(), [](const TracePod& x, const TracePod& y) {
    return x.name < y.name;
  });
  EXPECT_EQ(PodCsv(*r), PodCsv(*f));
}

TEST(TraceVariantTest, ConstrainsTheShareToModelsThatFit) {
  for (double share : {0.1, 0.2, 0.25, 0.33}) {
    VariantOptions o;
    o.gpuspec_share = share;
    auto pods = MakeVariant(Nodes(), Pods(), o);
    ASSERT_TRUE(pods.ok());
    int gpu = 0, constrained = 0;
    for (const TracePod& p : *pods) {
      if (p.num_gpu == 0) {
        EXPECT_TRUE(p.gpu_spec.empty());
        continue;
      }
      ++gpu;
      if (p.gpu_spec.empty()) continue;
      ++constrained;
      EXPECT_LE(p.gpu_spec.size(), 2u);
      for (const std::string& m : p.gpu_spec) {
        EXPECT_TRUE(m == "G2" || m == "T4" || m == "P100") << m;
        if (p.num_gpu == 8) {
          EXPECT_EQ(m, "G2") << p.name;  // only G2 nodes hold 8 GPUs
        }
      }
    }
    EXPECT_EQ(constrained, static_cast<int>(std::llround(share * gpu)))
        << share;
  }
}

TEST(TraceVariantTest, DrawsFromTheTracesOwnConstraints) {
  std::vector<TracePod> pods = Pods();
  // Every 20th task asks for P100 only: the variant's new constraints are
  // P100 too, except for 8-GPU tasks, which no P100 node holds.
  for (std::size_t i = 2; i < pods.size(); i += 20) pods[i].gpu_spec = {"P100"};
  VariantOptions o;
  o.gpuspec_share = 0.3;
  auto out = MakeVariant(Nodes(), pods, o);
  ASSERT_TRUE(out.ok());
  int p100 = 0, other = 0;
  for (const TracePod& p : *out) {
    if (p.gpu_spec.empty()) continue;
    if (p.num_gpu == 8) {
      EXPECT_EQ(p.gpu_spec.front(), "G2");
      ++other;
    } else {
      EXPECT_EQ(p.gpu_spec, std::vector<std::string>{"P100"}) << p.name;
      ++p100;
    }
  }
  EXPECT_GT(p100, 40);
  EXPECT_GT(other, 0);
}

TEST(TraceVariantTest, ScalesCpuOnlyDemandAndKeepsGpuTasks) {
  const auto cpu_only = [](const std::vector<TracePod>& pods) {
    std::int64_t cpu = 0;
    for (const TracePod& p : pods) {
      if (p.num_gpu == 0) cpu += p.cpu_milli;
    }
    return cpu;
  };
  const auto gpu_tasks = [](const std::vector<TracePod>& pods) {
    std::set<std::string> names;
    for (const TracePod& p : pods) {
      if (p.num_gpu > 0) names.insert(p.name);
    }
    return names;
  };
  const std::int64_t base = cpu_only(Pods());
  for (double scale : {0.5, 2.5}) {
    VariantOptions o;
    o.cpu_only_scale = scale;
    auto pods = MakeVariant(Nodes(), Pods(), o);
    ASSERT_TRUE(pods.ok());
    const double got = static_cast<double>(cpu_only(*pods));
    // Within one task (at most 10 CPUs) of the target, never above it.
    EXPECT_LE(got, scale * static_cast<double>(base));
    EXPECT_GT(got, scale * static_cast<double>(base) - 10000);
    EXPECT_EQ(gpu_tasks(*pods), gpu_tasks(Pods()));
    std::set<std::string> names;
    for (const TracePod& p : *pods) {
      EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
    }
  }
}

TEST(TraceVariantTest, CsvRoundTrips) {
  VariantOptions o;
  o.gpuspec_share = 0.5;
  auto pods = MakeVariant(Nodes(), Pods(), o);
  ASSERT_TRUE(pods.ok());
  const std::string csv = PodCsv(*pods);
  auto back = ParsePodCsv(csv, "variant.csv");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(PodCsv(*back), csv);
  EXPECT_EQ((*back)[3].qos, (*pods)[3].qos);
  EXPECT_EQ((*back)[3].deletion_time, (*pods)[3].deletion_time);
}

TEST(TraceVariantTest, RejectsOutOfRangeOptions) {
  VariantOptions o;
  o.gpuspec_share = 1.5;
  EXPECT_FALSE(MakeVariant(Nodes(), Pods(), o).ok());
  o.gpuspec_share = 0;
  o.cpu_only_scale = -1;
  EXPECT_FALSE(MakeVariant(Nodes(), Pods(), o).ok());
}

}  // namespace
}  // namespace hf::sim
