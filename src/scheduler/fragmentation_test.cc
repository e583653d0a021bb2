// Tests for the fragmentation measure: the per-class fragment in each case of
// the classification (Q3 with partial GPUs, lacking CPU, lacking GPUs, wrong
// model, CPU-only), the weighted node sum, the target-workload builder
// (grouping, order, cutoff, weights, ties), the artifact's own unit-test
// value, the free milli of ledger GPUs and the node state read from a real
// ledger. Every expected number is worked out in a comment.
#include "scheduler/fragmentation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/best_fit.h"

namespace hf::scheduler {
namespace {

using ledger::GpuHealth;
using ledger::GpuRecord;
using ledger::GpuSpec;
using ledger::Ledger;
using ledger::NodeSpec;
using ledger::PlacementRequest;
using ledger::PlacementResult;

TaskClass Class(CpuMilli cpu, int gpu_milli, int num_gpu,
                std::vector<std::string> models = {}) {
  return TaskClass{cpu, gpu_milli, num_gpu, std::move(models)};
}

NodeGpuState Node(CpuMilli cpu_free, std::vector<int> free,
                  std::string model = "A100") {
  return NodeGpuState{cpu_free, std::move(model), std::move(free)};
}

// `count` copies of `task`, appended to `tasks`.
void Add(std::vector<TaskClass>& tasks, const TaskClass& task, int count) {
  for (int i = 0; i < count; ++i) tasks.push_back(task);
}

// The node most cases use: 8 cores free, four A100s with
// free [1000, 300, 600, 0]; idle = 1000 + 300 + 600 + 0 = 1900.
NodeGpuState Mixed() { return Node(8000, {1000, 300, 600, 0}); }

// --- classification and per-class fragment --------------------------------

TEST(ClassFragTest, IdleSumsFreeMilli) {
  EXPECT_EQ(IdleMilli(Mixed()), 1900);
  EXPECT_EQ(IdleMilli(Node(8000, {})), 0);
}

TEST(ClassFragTest, FitsWithPartialGpusCountsOnlyGpusBelowTheShare) {
  // 500 milli x 1, 4 cores: CPU 8000 >= 4000; GPUs with >= 500 free: 1000
  // and 600 (2 >= 1), so Q3. Fragment: GPUs below 500: 300 + 0 = 300.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(4000, 500, 1)), 300.0);
  // 700 milli: only 1000 fits (1 >= 1). Below 700: 300 + 600 + 0 = 900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(4000, 700, 1)), 900.0);
  // 300 milli: 1000, 300 and 600 fit (free == share fits). Below: 0.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(4000, 300, 1)), 0.0);
  // CPU exactly equal to the free CPU fits: 8000 >= 8000, same 300.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(8000, 500, 1)), 300.0);
}

TEST(ClassFragTest, LacksCpuCountsAllIdle) {
  // 9 cores > 8 free: Q4 (GPUs would fit) -> all idle, 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(9000, 500, 1)), 1900.0);
  // 9 cores and 2 whole GPUs (only one free): Q1 -> 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(9000, 1000, 2)), 1900.0);
}

TEST(ClassFragTest, LacksGpusCountsAllIdle) {
  // 2 whole GPUs: only one GPU has 1000 free (1 < 2): Q2 -> 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(1000, 1000, 2)), 1900.0);
  // 800 milli x 1 on free [300, 600, 0, 700]: nothing has 800: Q2 ->
  // 300 + 600 + 0 + 700 = 1600.
  EXPECT_DOUBLE_EQ(
      ClassFragMilli(Node(8000, {300, 600, 0, 700}), Class(1000, 800, 1)),
      1600.0);
  // A share above a whole GPU never fits: 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(1000, 1001, 1)), 1900.0);
}

TEST(ClassFragTest, MultiGpuClassNeedsEnoughWholeFreeGpus) {
  // Free [1000, 1000, 1000, 500]: idle = 3500.
  const NodeGpuState node = Node(64000, {1000, 1000, 1000, 500});
  // 4 whole GPUs: 3 free < 4: Q2 -> 3500.
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(8000, 1000, 4)), 3500.0);
  // 2 whole GPUs: 3 >= 2: Q3 -> only the partial GPU, 500. The third whole
  // GPU, left over after one 2-GPU task, is not fragment.
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(8000, 1000, 2)), 500.0);
  // 3 whole GPUs: 3 >= 3: Q3 -> 500.
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(8000, 1000, 3)), 500.0);
  // A node with no GPUs has nothing idle: 0 for any class.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Node(64000, {}), Class(8000, 1000, 2)), 0.0);
}

TEST(ClassFragTest, WrongModelCountsAllIdle) {
  // V100-only class on an A100 node: NoAccess -> 1900, although 500 x 1 and
  // 4 cores would fit (Q3 would give 300).
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(4000, 500, 1, {"V100"})),
                   1900.0);
  // A100 among the allowed models: Q3 -> 300.
  EXPECT_DOUBLE_EQ(
      ClassFragMilli(Mixed(), Class(4000, 500, 1, {"V100", "A100"})), 300.0);
  // A node with no model takes no typed class: 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Node(8000, {1000, 300, 600, 0}, ""),
                                  Class(4000, 500, 1, {"A100"})),
                   1900.0);
  // An untyped class takes any model, even none: 300.
  EXPECT_DOUBLE_EQ(
      ClassFragMilli(Node(8000, {1000, 300, 600, 0}, ""), Class(4000, 500, 1)),
      300.0);
}

TEST(ClassFragTest, CpuOnlyClassCountsAllIdleEvenWhenCpuFits) {
  // XL: 2 cores fit 8 free, yet every idle GPU milli is fragment: 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(2000, 0, 0)), 1900.0);
  // XR: 16 cores do not fit: 1900 as well.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(16000, 0, 0)), 1900.0);
  // No model check for CPU-only classes: the list changes nothing.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(2000, 0, 0, {"V100"})),
                   1900.0);
  // A class with a share but no GPUs uses no GPU either: 1900.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Mixed(), Class(2000, 500, 0)), 1900.0);
  // All GPUs taken: nothing idle, nothing fragment.
  EXPECT_DOUBLE_EQ(ClassFragMilli(Node(8000, {0, 0}), Class(2000, 0, 0)), 0.0);
}

TEST(ClassFragTest, GpusWithNothingFreeContributeNothing) {
  // Free [0, 0, 1000, 200], 500 x 1: 1000 fits, Q3. Below 500: 0 + 0 + 200.
  const NodeGpuState node = Node(8000, {0, 0, 1000, 200});
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(1000, 500, 1)), 200.0);
  // Whole GPU x 1: Q3 as well, same 200 (the 0s add nothing).
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(1000, 1000, 1)), 200.0);
  // Lacking CPU: idle = 0 + 0 + 1000 + 200 = 1200.
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, Class(9000, 500, 1)), 1200.0);
}

// --- node fragmentation ---------------------------------------------------

TEST(NodeFragTest, WeightedSumOverClasses) {
  // 3 tasks of A (1 core, 500 x 1), 1 of B (2 cores, CPU-only); coverage 1:
  // weights 3/4 and 1/4.
  std::vector<TaskClass> tasks;
  Add(tasks, Class(1000, 500, 1), 3);
  Add(tasks, Class(2000, 0, 0), 1);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.classes().size(), 2u);
  // On Mixed(): A is Q3 -> 300; B is XL -> 1900.
  // 0.75 x 300 + 0.25 x 1900 = 225 + 475 = 700.
  EXPECT_DOUBLE_EQ(NodeFragMilli(Mixed(), w), 700.0);
  // With 0.5 cores free A lacks CPU too: 0.75 x 1900 + 0.25 x 1900 = 1900.
  EXPECT_DOUBLE_EQ(NodeFragMilli(Node(500, {1000, 300, 600, 0}), w), 1900.0);
  // Fully used GPUs: 0.
  EXPECT_DOUBLE_EQ(NodeFragMilli(Node(8000, {0, 0, 0, 0}), w), 0.0);
  // An empty workload measures nothing.
  EXPECT_DOUBLE_EQ(NodeFragMilli(Mixed(), TargetWorkload::FromTasks({})), 0.0);
}

TEST(NodeFragTest, ThreeClassesOnOneNode) {
  // Weights 2/5, 2/5, 1/5 (coverage 1): C1 = 2 whole GPUs, 4 cores;
  // C2 = 250 x 1, 1 core; C3 = 8 cores, CPU-only.
  std::vector<TaskClass> tasks;
  Add(tasks, Class(4000, 1000, 2), 2);
  Add(tasks, Class(1000, 250, 1), 2);
  Add(tasks, Class(8000, 0, 0), 1);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  // Node: 6 cores, free [1000, 1000, 200, 750]; idle = 2950.
  //   C1: 2 whole free >= 2, 6000 >= 4000: Q3 -> 200 + 750 = 950.
  //   C2: 1000, 1000, 750 have >= 250: Q3 -> 200.
  //   C3: XR (8000 > 6000) -> 2950.
  // 0.4 x 950 + 0.4 x 200 + 0.2 x 2950 = 380 + 80 + 590 = 1050.
  EXPECT_NEAR(NodeFragMilli(Node(6000, {1000, 1000, 200, 750}), w), 1050.0,
              1e-9);
}

TEST(NodeFragTest, ArtifactUnitTestValue) {
  // FGD's frag_test.go: one class (6 cores, 465 x 1, weight 0.0933) on a
  // node with 1 core free and free [200, 1000, 1000, 500]. Three GPUs have
  // >= 465, but 1000 < 6000: Q4, so all idle is fragment:
  // 200 + 1000 + 1000 + 500 = 2700, and 0.0933 x 2700 = 251.91.
  const NodeGpuState node = Node(1000, {200, 1000, 1000, 500});
  const TaskClass typical = Class(6000, 465, 1);
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, typical), 2700.0);
  // Weight 0.0933 = 933 / 10000: the other 9067 tasks are of a class with
  // no fragment here (1 core, 100 x 1: Q3, no GPU below 100).
  std::vector<TaskClass> tasks;
  Add(tasks, typical, 933);
  Add(tasks, Class(1000, 100, 1), 9067);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.classes().size(), 2u);
  EXPECT_EQ(w.classes()[1].task, typical);
  EXPECT_DOUBLE_EQ(w.classes()[1].weight, 0.0933);
  EXPECT_DOUBLE_EQ(ClassFragMilli(node, w.classes()[0].task), 0.0);
  EXPECT_NEAR(NodeFragMilli(node, w), 251.91, 1e-9);
}

TEST(NodeFragTest, LargeNodeTakesTheSameRules) {
  // 20 GPUs (past the sorted fast path's 16): ten at 1000, ten at 400;
  // idle = 10 x 1000 + 10 x 400 = 14000. Classes, weight 1/2 each:
  //   500 x 1: ten GPUs fit, Q3 -> the ten 400s, 4000;
  //   1000 x 16: ten < 16 whole GPUs, Q2 -> 14000.
  // 0.5 x 4000 + 0.5 x 14000 = 9000.
  std::vector<int> free(10, 1000);
  free.insert(free.end(), 10, 400);
  const NodeGpuState node = Node(64000, free);
  std::vector<TaskClass> tasks;
  Add(tasks, Class(1000, 500, 1), 1);
  Add(tasks, Class(1000, 1000, 16), 1);
  EXPECT_DOUBLE_EQ(NodeFragMilli(node, TargetWorkload::FromTasks(tasks, 1.0)),
                   9000.0);
}

TEST(NodeFragTest, EqualsTheWeightedSumOfClassFragments) {
  // NodeFragMilli (sorted fast path, or the plain loop past 16 GPUs) must
  // give exactly sum(weight x ClassFragMilli) in class order.
  std::mt19937 rng(7);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const std::vector<std::string> models = {"A100", "V100", "T4", ""};
  std::vector<TaskClass> tasks;
  for (int i = 0; i < 2000; ++i) {
    const int kind = uniform(0, 3);
    TaskClass t;
    t.cpu_milli = CpuMilli{1000} * uniform(0, 12);
    if (kind == 1) {
      t.gpu_milli = 50 * uniform(1, 19);
      t.num_gpu = 1;
    } else if (kind >= 2) {
      t.gpu_milli = 1000;
      t.num_gpu = 1 << uniform(0, 3);
    }
    if (kind != 0 && uniform(0, 4) == 0) {
      t.gpu_models = {models[uniform(0, 2)]};
    }
    tasks.push_back(t);
  }
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  for (int trial = 0; trial < 500; ++trial) {
    NodeGpuState node;
    node.cpu_free = CpuMilli{1000} * uniform(0, 16);
    node.model = models[uniform(0, 3)];
    const int gpus = trial % 10 == 0 ? uniform(17, 24) : uniform(0, 8);
    for (int g = 0; g < gpus; ++g) {
      const int pick = uniform(0, 3);
      node.gpu_free_milli.push_back(pick == 0   ? 0
                                    : pick == 1 ? 1000
                                                : 50 * uniform(0, 20));
    }
    double expected = 0;
    for (const WeightedClass& c : w.classes()) {
      expected += c.weight * ClassFragMilli(node, c.task);
    }
    EXPECT_EQ(NodeFragMilli(node, w), expected) << "trial " << trial;
    EXPECT_LE(NodeFragMilli(node, w),
              static_cast<double>(IdleMilli(node)) + 1e-6);
  }
}

// --- the estimate by class groups -------------------------------------------

// Random classes: CPU-only, sharing (one GPU, a share) and whole-GPU
// (1000 x 1..8), some with models, a few with shares the groups leave out
// (over 1000); weighted, as the server's learned workload is.
TargetWorkload RandomWorkload(std::mt19937& rng, int classes) {
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const std::vector<std::string> models = {"A100", "V100", "T4"};
  std::vector<std::pair<TaskClass, double>> weighted;
  for (int i = 0; i < classes; ++i) {
    const int kind = uniform(0, 9);
    TaskClass t;
    t.cpu_milli = CpuMilli{500} * uniform(0, 40);
    if (kind <= 5) {
      t.gpu_milli = uniform(1, 1000);
      t.num_gpu = 1;
    } else if (kind <= 8) {
      t.gpu_milli = 1000;
      t.num_gpu = uniform(1, 8);
    } else if (uniform(0, 1) == 0) {
      t.gpu_milli = 1500;  // never fits one GPU
      t.num_gpu = 1;
    }
    if (t.gpu_milli > 0 && uniform(0, 3) == 0) {
      t.gpu_models = {models[static_cast<std::size_t>(uniform(0, 2))]};
      if (uniform(0, 2) == 0) t.gpu_models.push_back("A100");
    }
    weighted.emplace_back(
        t, std::uniform_real_distribution<double>(0.001, 3.0)(rng));
  }
  return TargetWorkload::FromWeighted(weighted, 1.0);
}

TEST(EstimateNodeFragTest, WithinItsBoundOfTheMeasure) {
  std::mt19937 rng(11);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const std::vector<std::string> models = {"A100", "V100", "T4", "", "H100"};
  double worst = 0;  // the largest |estimate - measure| / bound seen
  for (int round = 0; round < 20; ++round) {
    const TargetWorkload w = RandomWorkload(rng, uniform(1, 400));
    for (int trial = 0; trial < 500; ++trial) {
      NodeGpuState node;
      node.cpu_free = CpuMilli{500} * uniform(-1, 42);
      node.model = models[static_cast<std::size_t>(uniform(0, 4))];
      const int gpus = uniform(0, 16);
      for (int g = 0; g < gpus; ++g) {
        const int pick = uniform(0, 3);
        node.gpu_free_milli.push_back(pick == 0   ? 0
                                      : pick == 1 ? 1000
                                                  : uniform(0, 1000));
      }
      const std::optional<FragEstimate> e = EstimateNodeFragMilli(node, w);
      ASSERT_TRUE(e.has_value());
      const double exact = NodeFragMilli(node, w);
      const double off = std::abs(e->milli - exact);
      ASSERT_LE(off, e->error) << "round " << round << " trial " << trial;
      if (e->error > 0) worst = std::max(worst, off / e->error);
    }
  }
  // The bound is generous, but not absurdly so.
  EXPECT_LT(worst, 1.0);
}

TEST(EstimateNodeFragTest, ExactOnSmallNumbers) {
  // Mixed(): free [1000, 300, 600, 0], 8 cores, A100. 500 x 1 (4 cores)
  // saves all but 300; 1000 x 2 lacks GPUs; the V100 class lacks the model.
  // Weights 1/2, 1/4, 1/4: 0.5 x 300 + 0.25 x 1900 + 0.25 x 1900 = 1100.
  std::vector<TaskClass> tasks;
  Add(tasks, Class(4000, 500, 1), 2);
  Add(tasks, Class(1000, 1000, 2), 1);
  Add(tasks, Class(1000, 200, 1, {"V100"}), 1);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  const std::optional<FragEstimate> e = EstimateNodeFragMilli(Mixed(), w);
  ASSERT_TRUE(e.has_value());
  EXPECT_NEAR(e->milli, 1100.0, e->error);
  EXPECT_DOUBLE_EQ(NodeFragMilli(Mixed(), w), 1100.0);
}

TEST(EstimateNodeFragTest, NotWhereTheGroupsDoNotApply) {
  std::vector<TaskClass> tasks;
  Add(tasks, Class(1000, 500, 1), 1);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  EXPECT_FALSE(EstimateNodeFragMilli(Node(8000, std::vector<int>(17, 500)), w));
  EXPECT_FALSE(EstimateNodeFragMilli(Node(8000, {1001}), w));
  EXPECT_FALSE(EstimateNodeFragMilli(Node(8000, {-1}), w));
  // No idle GPU: 0, exactly as NodeFragMilli.
  const std::optional<FragEstimate> none =
      EstimateNodeFragMilli(Node(8000, {0, 0}), w);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->milli, 0.0);
  EXPECT_EQ(none->error, 0.0);
}

TEST(NodeFragEstimatorTest, SameAsTheEstimateOfEachChangedState) {
  // With(i, v) must be EstimateNodeFragMilli of the changed state, the very
  // same doubles (hf-frag's scores rely on it), or nullopt where that is.
  std::mt19937 rng(12);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const std::vector<std::string> models = {"A100", "V100", "T4", "", "H100"};
  NodeFragEstimator estimator;
  for (int round = 0; round < 10; ++round) {
    const TargetWorkload w = RandomWorkload(rng, uniform(1, 400));
    for (int trial = 0; trial < 300; ++trial) {
      NodeGpuState node;
      node.cpu_free = CpuMilli{500} * uniform(-1, 42);
      node.model = models[static_cast<std::size_t>(uniform(0, 4))];
      const int gpus = uniform(1, trial % 10 == 0 ? 17 : 16);
      for (int g = 0; g < gpus; ++g) {
        const int pick = uniform(0, 9);
        node.gpu_free_milli.push_back(pick == 0   ? 0
                                      : pick == 1 ? 1000
                                      : pick == 2 ? 1001  // out of range
                                                  : uniform(0, 1000));
      }
      estimator.Reset(node, w);
      for (int change = 0; change < 4; ++change) {
        const auto i = static_cast<std::size_t>(uniform(0, gpus - 1));
        const int pick = uniform(0, 9);
        const int v = pick == 0 ? 0 : pick == 1 ? -1 : uniform(0, 1000);
        NodeGpuState changed = node;
        changed.gpu_free_milli[i] = v;
        const std::optional<FragEstimate> want =
            EstimateNodeFragMilli(changed, w);
        const std::optional<FragEstimate> got = estimator.With(i, v);
        ASSERT_EQ(got.has_value(), want.has_value())
            << "round " << round << " trial " << trial;
        if (!want.has_value()) continue;
        EXPECT_EQ(got->milli, want->milli);
        EXPECT_EQ(got->error, want->error);
      }
    }
  }
}

// --- target workload --------------------------------------------------------

TEST(TargetWorkloadTest, GroupsCountsAndOrdersByCount) {
  const TaskClass a = Class(1000, 500, 1);
  const TaskClass b = Class(2000, 0, 0);
  const TaskClass c = Class(4000, 1000, 2);
  // Interleaved: a b c a c a b a c. Counts: a 4, c 3, b 2, so the order is
  // a, c, b. Coverage 1 keeps all; weights 4/9, 3/9, 2/9.
  const std::vector<TaskClass> tasks = {a, b, c, a, c, a, b, a, c};
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.classes().size(), 3u);
  EXPECT_EQ(w.classes()[0].task, a);
  EXPECT_EQ(w.classes()[0].count, 4);
  EXPECT_DOUBLE_EQ(w.classes()[0].weight, 4.0 / 9.0);
  EXPECT_EQ(w.classes()[1].task, c);
  EXPECT_EQ(w.classes()[1].count, 3);
  EXPECT_DOUBLE_EQ(w.classes()[1].weight, 3.0 / 9.0);
  EXPECT_EQ(w.classes()[2].task, b);
  EXPECT_EQ(w.classes()[2].count, 2);
  EXPECT_DOUBLE_EQ(w.classes()[2].weight, 2.0 / 9.0);
}

TEST(TargetWorkloadTest, ModelListIsPartOfTheClass) {
  // Same resources, different model lists: three classes.
  std::vector<TaskClass> tasks;
  Add(tasks, Class(1000, 500, 1), 3);
  Add(tasks, Class(1000, 500, 1, {"A100"}), 2);
  Add(tasks, Class(1000, 500, 1, {"A100", "V100"}), 1);
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.classes().size(), 3u);
  EXPECT_EQ(w.classes()[0].task.gpu_models, std::vector<std::string>{});
  EXPECT_EQ(w.classes()[1].task.gpu_models, std::vector<std::string>{"A100"});
  EXPECT_EQ(w.classes()[2].task.gpu_models,
            (std::vector<std::string>{"A100", "V100"}));
  EXPECT_EQ(w.classes()[0].count, 3);
  EXPECT_EQ(w.classes()[1].count, 2);
  EXPECT_EQ(w.classes()[2].count, 1);
}

// Five classes of 100 tasks: counts 50, 30, 15, 4, 1.
std::vector<TaskClass> FiveClasses(int third = 15, int fourth = 4,
                                   int fifth = 1) {
  std::vector<TaskClass> tasks;
  Add(tasks, Class(1000, 1000, 1), 50);
  Add(tasks, Class(2000, 0, 0), 30);
  Add(tasks, Class(1000, 500, 1), third);
  Add(tasks, Class(8000, 1000, 8), fourth);
  Add(tasks, Class(4000, 1000, 2), fifth);
  return tasks;
}

TEST(TargetWorkloadTest, CutoffReachingCoverageExactly) {
  // Total 100, 95% -> 95. Cumulative 50, 80 (< 95: go on), 95: the third
  // class reaches 95 and is kept; 95 is not below 95, so stop at 3.
  // Weights renormalised over 95: 50/95, 30/95, 15/95.
  const TargetWorkload w = TargetWorkload::FromTasks(FiveClasses());
  ASSERT_EQ(w.classes().size(), 3u);
  EXPECT_DOUBLE_EQ(w.classes()[0].weight, 50.0 / 95.0);
  EXPECT_DOUBLE_EQ(w.classes()[1].weight, 30.0 / 95.0);
  EXPECT_DOUBLE_EQ(w.classes()[2].weight, 15.0 / 95.0);
  EXPECT_EQ(w.classes()[2].count, 15);
  EXPECT_EQ(w.classes()[2].task, Class(1000, 500, 1));
}

TEST(TargetWorkloadTest, CutoffKeepsTheCrossingClass) {
  // Counts 50, 30, 10, 6, 4 (total 100, 95% -> 95). Cumulative 50, 80, 90
  // (< 95), then 96: the fourth class crosses 95 and is kept; stop.
  // Weights over 96: 50/96, 30/96, 10/96, 6/96; they sum to 1.
  const TargetWorkload w = TargetWorkload::FromTasks(FiveClasses(10, 6, 4));
  ASSERT_EQ(w.classes().size(), 4u);
  EXPECT_EQ(w.classes()[3].task, Class(8000, 1000, 8));
  EXPECT_EQ(w.classes()[3].count, 6);
  EXPECT_DOUBLE_EQ(w.classes()[0].weight, 50.0 / 96.0);
  EXPECT_DOUBLE_EQ(w.classes()[3].weight, 6.0 / 96.0);
  double sum = 0;
  for (const WeightedClass& c : w.classes()) sum += c.weight;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(TargetWorkloadTest, CoverageOneKeepsEveryClass) {
  // All five; weights count / 100.
  const TargetWorkload w = TargetWorkload::FromTasks(FiveClasses(), 1.0);
  ASSERT_EQ(w.classes().size(), 5u);
  EXPECT_DOUBLE_EQ(w.classes()[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(w.classes()[1].weight, 0.3);
  EXPECT_DOUBLE_EQ(w.classes()[2].weight, 0.15);
  EXPECT_DOUBLE_EQ(w.classes()[3].weight, 0.04);
  EXPECT_DOUBLE_EQ(w.classes()[4].weight, 0.01);
  EXPECT_EQ(w.classes()[4].count, 1);
  // 0.99 x 100 = 99: cumulative 50, 80, 95, 99 -> the fourth reaches it.
  EXPECT_EQ(TargetWorkload::FromTasks(FiveClasses(), 0.99).classes().size(),
            4u);
  // 0.5 x 100 = 50: the first class alone reaches it, weight 1.
  const TargetWorkload half = TargetWorkload::FromTasks(FiveClasses(), 0.5);
  ASSERT_EQ(half.classes().size(), 1u);
  EXPECT_DOUBLE_EQ(half.classes()[0].weight, 1.0);
  EXPECT_EQ(half.classes()[0].count, 50);
}

TEST(TargetWorkloadTest, EqualCountsOrderByLargerKey) {
  // One task each; expected order:
  //   cpu 2000 first (larger CPU);
  //   then among cpu 1000: gpu_milli 1000 before 500;
  //   then among (1000, 500): num_gpu 2 before 1;
  //   then among (1000, 500, 1): model lists, larger first:
  //   {"B"} > {"A", "Z"} > {"A"} > {}.
  const std::vector<TaskClass> expected = {
      Class(2000, 0, 0),
      Class(1000, 1000, 1),
      Class(1000, 500, 2),
      Class(1000, 500, 1, {"B"}),
      Class(1000, 500, 1, {"A", "Z"}),
      Class(1000, 500, 1, {"A"}),
      Class(1000, 500, 1),
  };
  // Fed in a scrambled order.
  const std::vector<TaskClass> tasks = {expected[5], expected[2], expected[6],
                                        expected[0], expected[4], expected[1],
                                        expected[3]};
  const TargetWorkload w = TargetWorkload::FromTasks(tasks, 1.0);
  ASSERT_EQ(w.classes().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(w.classes()[i].task, expected[i]) << "position " << i;
    EXPECT_DOUBLE_EQ(w.classes()[i].weight, 1.0 / 7.0);
  }
  // A larger count still wins over every tie rule: two tasks of the last.
  std::vector<TaskClass> more = tasks;
  more.push_back(expected[6]);
  EXPECT_EQ(TargetWorkload::FromTasks(more, 1.0).classes()[0].task,
            expected[6]);
}

TEST(TargetWorkloadTest, EmptyTasksGiveAnEmptyWorkload) {
  EXPECT_TRUE(TargetWorkload::FromTasks({}).classes().empty());
}

// --- ledger reads -----------------------------------------------------------

GpuRecord Record(MemoryMib memory, MemoryMib used_memory,
                 ComputePercent used_compute) {
  GpuRecord g;
  g.live = true;
  g.spec.model = "A100";
  g.spec.memory_mib = memory;
  g.used_memory_mib = used_memory;
  g.used_compute_percent = used_compute;
  g.allocation_count = used_memory > 0 ? 1 : 0;
  return g;
}

TEST(GpuFreeMilliTest, SmallerOfMemoryAndCompute) {
  // Empty: 1000 by both.
  EXPECT_EQ(GpuFreeMilli(Record(80000, 0, 0)), 1000);
  // Memory-limited: 20000 of 80000 free -> 250; compute 70% free -> 700.
  EXPECT_EQ(GpuFreeMilli(Record(80000, 60000, 30)), 250);
  // Compute-limited: 12000 of 16000 free -> 750; compute 60% free -> 600.
  EXPECT_EQ(GpuFreeMilli(Record(16000, 4000, 40)), 600);
  // Rounded down: 19999 x 1000 / 30000 = 666.63 -> 666; compute 1000.
  EXPECT_EQ(GpuFreeMilli(Record(30000, 10001, 0)), 666);
  // Full: 0.
  EXPECT_EQ(GpuFreeMilli(Record(80000, 80000, 100)), 0);
}

TEST(GpuFreeMilliTest, LostOrWholeOwnedHasNothing) {
  GpuRecord lost = Record(80000, 0, 0);
  lost.spec.health = GpuHealth::kLost;
  EXPECT_EQ(GpuFreeMilli(lost), 0);
  GpuRecord lost_partial = Record(80000, 20000, 25);
  lost_partial.spec.health = GpuHealth::kLost;
  EXPECT_EQ(GpuFreeMilli(lost_partial), 0);
  GpuRecord whole = Record(80000, 80000, 100);
  whole.whole_owned = true;
  EXPECT_EQ(GpuFreeMilli(whole), 0);
  // Whole-owned counts as 0 even if the accounting looked free.
  GpuRecord odd = Record(80000, 0, 0);
  odd.whole_owned = true;
  EXPECT_EQ(GpuFreeMilli(odd), 0);
}

class LedgerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Ledger>> l = Ledger::Create();
    ASSERT_TRUE(l.ok());
    ledger_ = std::move(l).value();
  }

  NodeId AddNode(CpuMilli cpu) {
    NodeSpec spec;
    spec.name = "node-" + std::to_string(nodes_++);
    spec.cpu_milli = cpu;
    spec.host_memory_mib = MemoryMib{512} * 1024;
    StatusOr<NodeId> id = ledger_->AddNode(spec);
    EXPECT_TRUE(id.ok());
    return *id;
  }

  GpuId AddGpu(NodeId node, const std::string& model, MemoryMib memory) {
    GpuSpec spec;
    spec.uuid = "GPU-" + std::to_string(gpus_);
    spec.index = gpus_++;
    spec.model = model;
    spec.memory_mib = memory;
    StatusOr<GpuId> id = ledger_->AddGpu(node, spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return *id;
  }

  // Places with Best-Fit; returns the GPUs chosen.
  std::vector<GpuId> Place(PlacementRequest request, CpuMilli cpu) {
    request.cpu_milli = cpu;
    const PlacementResult r = ledger_->Place(request, BestFitPolicy());
    EXPECT_TRUE(r.placed()) << r.message;
    return r.allocation.gpus;
  }

  NodeGpuState StateOf(NodeId node) {
    NodeGpuState state;
    ledger_->Read([&](const ledger::ClusterView& view) {
      state = NodeStateOf(view, view.node(node));
    });
    return state;
  }

  std::unique_ptr<Ledger> ledger_;
  int nodes_ = 0;
  int gpus_ = 0;
};

TEST_F(LedgerFixture, NodeStateOfReadsCpuModelAndFreeMilliInGpuOrder) {
  constexpr TenantId kAlice(1);
  // Node 0: 32 cores, four A100s of 80000 MiB. Node 1: 16 cores, one V100 of
  // 16000 MiB. Node 2: 8 cores, no GPUs.
  const NodeId n0 = AddNode(32000);
  const std::vector<GpuId> g = {
      AddGpu(n0, "A100", 80000), AddGpu(n0, "A100", 80000),
      AddGpu(n0, "A100", 80000), AddGpu(n0, "A100", 80000)};
  const NodeId n1 = AddNode(16000);
  const GpuId v = AddGpu(n1, "V100", 16000);
  const NodeId n2 = AddNode(8000);

  // Slice 20000 MiB / 50%, 4 cores. The V100 cannot hold 20000 MiB; the
  // A100s are all empty and tie, so the first by id: g[0].
  const std::vector<GpuId> s1 =
      Place(PlacementRequest::Slice(kAlice, 20000, 50), 4000);
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0], g[0]);
  // Slice 40000 MiB / 10%, 2 cores: the least free memory that admits it is
  // g[0] (60000 free), so g[0] again: used 60000 MiB, 60%.
  const std::vector<GpuId> s2 =
      Place(PlacementRequest::Slice(kAlice, 40000, 10), 2000);
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0], g[0]);
  // Slice 4000 MiB / 50%, 1 core: the tightest GPU that admits it is the
  // V100 (16000 free < g[0]'s 20000). V100: memory 12000 of 16000 free ->
  // 750, compute 50% free -> 500: 500.
  const std::vector<GpuId> s3 =
      Place(PlacementRequest::Slice(kAlice, 4000, 50), 1000);
  ASSERT_EQ(s3.size(), 1u);
  EXPECT_EQ(s3[0], v);
  // One whole GPU, 8 cores: the V100 and g[0] hold slices, so an empty A100
  // of node 0.
  const std::vector<GpuId> w1 =
      Place(PlacementRequest::WholeGpus(kAlice, 1), 8000);
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_NE(w1[0], g[0]);
  EXPECT_NE(w1[0], v);
  // Mark one free A100 (not g[0], not the whole one) lost.
  GpuId lost;
  for (std::size_t i = 1; i < g.size(); ++i) {
    if (g[i] != w1[0]) {
      lost = g[i];
      break;
    }
  }
  ASSERT_TRUE(ledger_->SetGpuHealth(lost, GpuHealth::kLost).ok());

  // Node 0: CPU 32000 - 4000 - 2000 - 8000 = 18000.
  //   g[0]: memory 20000 of 80000 free -> 250; compute 40% -> 400: 250.
  //   the whole GPU: 0; the lost GPU: 0; the remaining A100: 1000.
  std::vector<int> expected;
  for (const GpuId id : g) {
    if (id == g[0]) {
      expected.push_back(250);
    } else if (id == w1[0] || id == lost) {
      expected.push_back(0);
    } else {
      expected.push_back(1000);
    }
  }
  const NodeGpuState s0 = StateOf(n0);
  EXPECT_EQ(s0.cpu_free, 18000);
  EXPECT_EQ(s0.model, "A100");
  EXPECT_EQ(s0.gpu_free_milli, expected);
  EXPECT_EQ(IdleMilli(s0), 1250);  // 250 + 0 + 0 + 1000

  // Node 1: CPU 16000 - 1000 = 15000; V100 at 500.
  const NodeGpuState s1n = StateOf(n1);
  EXPECT_EQ(s1n.cpu_free, 15000);
  EXPECT_EQ(s1n.model, "V100");
  EXPECT_EQ(s1n.gpu_free_milli, std::vector<int>{500});

  // Node 2: no GPUs, no model.
  const NodeGpuState s2n = StateOf(n2);
  EXPECT_EQ(s2n.cpu_free, 8000);
  EXPECT_EQ(s2n.model, "");
  EXPECT_TRUE(s2n.gpu_free_milli.empty());

  // And the measure on node 0 for a 300-milli class (1 core): only the free
  // A100 has >= 300 (1 >= 1), Q3; below 300: 250 + 0 + 0 = 250.
  EXPECT_DOUBLE_EQ(ClassFragMilli(s0, Class(1000, 300, 1)), 250.0);
}

}  // namespace
}  // namespace hf::scheduler
