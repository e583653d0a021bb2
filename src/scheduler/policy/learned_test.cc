// Tests for LearnedFragPolicy (learned.h): the decayed history, the classes
// it learns on a cluster, the cold start on Best-Fit, and that once warm it
// places exactly as HfFragPolicy with the same workload given up front.
#include "scheduler/policy/learned.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/best_fit.h"
#include "scheduler/policy/hf_frag.h"
#include "scheduler/policy/policy_test_util.h"

namespace hf::scheduler {
namespace {

using ledger::PlacementRequest;
using ledger::PlacementResult;
using policy_test::Cluster;
using policy_test::SliceReq;
using policy_test::WholeReq;

TaskShape Shape(int milli) { return TaskShape::Of(SliceReq(milli)); }

TEST(WorkloadHistoryTest, AWeightHalvesEveryHalfLife) {
  WorkloadHistory h(/*half_life_tasks=*/10);
  h.Add(Shape(100));
  for (int i = 0; i < 10; ++i) h.Add(Shape(500));
  const auto shapes = h.Shapes();
  ASSERT_EQ(shapes.size(), 2u);
  for (const auto& [shape, weight] : shapes) {
    if (shape == Shape(100)) {
      EXPECT_NEAR(weight, 0.5, 1e-9);  // ten newer tasks
    } else {
      // 2^0 + 2^-0.1 + ... + 2^-0.9
      double expected = 0;
      for (int age = 0; age < 10; ++age) expected += std::exp2(-age / 10.0);
      EXPECT_NEAR(weight, expected, 1e-9);
    }
  }
  EXPECT_EQ(h.tasks(), 11);
  EXPECT_NEAR(h.weight(), shapes[0].second + shapes[1].second, 1e-9);
}

TEST(WorkloadHistoryTest, LongHistoriesStayFiniteAndForgetTheOldest) {
  WorkloadHistory h(/*half_life_tasks=*/5);
  h.Add(Shape(100));
  for (int i = 0; i < 2000; ++i) h.Add(Shape(500));  // 400 half-lives
  const auto shapes = h.Shapes();
  ASSERT_EQ(shapes.size(), 1u) << "the oldest shape is negligible now";
  EXPECT_TRUE(std::isfinite(h.weight()));
  // The sum of a geometric series: 1 / (1 - 2^(-1/5)).
  EXPECT_NEAR(h.weight(), 1 / (1 - std::exp2(-0.2)), 1e-6);
  h.Clear();
  EXPECT_EQ(h.tasks(), 0);
  EXPECT_EQ(h.weight(), 0);
}

TEST(LearnWorkloadTest, SlicesAreSharesOfTheLargestGpu) {
  Cluster c;
  c.Node(2, 64000, "A");
  c.Node(2, 64000, "B");
  // 16000 MiB of 64000 = 250 milli; compute alone 40% = 400 milli; both:
  // the larger; whole GPUs 1000 x count.
  std::vector<std::pair<TaskShape, double>> shapes = {
      {TaskShape::Of(PlacementRequest::Slice(TenantId(1), 16000, 10)), 4},
      {TaskShape::Of(PlacementRequest::Slice(TenantId(1), std::nullopt, 40)),
       3},
      {TaskShape::Of(PlacementRequest::Slice(TenantId(1), 16000, 60)), 2},
      {TaskShape::Of(WholeReq(2)), 1}};
  LearnedWorkload learned;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    learned = LearnWorkload(shapes, view);
  });
  std::vector<std::pair<int, int>> classes;  // milli, count
  for (const WeightedClass& wc : learned.target.classes()) {
    classes.emplace_back(wc.task.gpu_milli * wc.task.num_gpu, wc.count);
  }
  // Most popular first, until 95% of the weight (all four here).
  EXPECT_EQ(classes, (std::vector<std::pair<int, int>>{
                         {250, 4}, {400, 3}, {600, 2}, {2000, 1}}));
  EXPECT_DOUBLE_EQ(learned.demand.gpu_milli,
                   4 * 250 + 3 * 400 + 2 * 600 + 2000);
}

TEST(LearnWorkloadTest, AModelListNamingEveryModelIsNoConstraint) {
  Cluster c;
  c.Node(2, 64000, "A");
  c.Node(2, 64000, "B");
  PlacementRequest any = SliceReq(500);
  any.allowed_models = {"B", "A"};
  PlacementRequest only_a = SliceReq(500);
  only_a.allowed_models = {"A"};
  LearnedWorkload learned;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    learned = LearnWorkload(
        {{TaskShape::Of(any), 1}, {TaskShape::Of(only_a), 1}}, view);
  });
  ASSERT_EQ(learned.target.classes().size(), 2u);
  int constrained = 0;
  for (const WeightedClass& wc : learned.target.classes()) {
    constrained += !wc.task.gpu_models.empty();
  }
  EXPECT_EQ(constrained, 1);
  ASSERT_EQ(learned.demand.constrained_milli.size(), 1u);
  EXPECT_EQ(learned.demand.constrained_milli.begin()->first,
            std::vector<std::string>{"A"});
}

// A cluster where Best-Fit and hf-frag choose differently: Best-Fit packs
// a 500-milli slice onto the GPU with the least free memory (600 free),
// leaving 100 milli no task of the workload can use; hf-frag, whose
// workload is all 500-milli slices, takes an empty GPU's half instead.
class LearnedChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.Node(1);
    c_.Node(1);
    c_.OccupySlice(c_.Gpu(NodeId(0), 0), 400);
  }
  GpuId Chosen(const ledger::PlacementPolicy& p) {
    std::optional<std::vector<GpuId>> gpus;
    c_.ledger().Read([&](const ledger::ClusterView& view) {
      gpus = p.Choose(view, SliceReq(500));
    });
    EXPECT_TRUE(gpus.has_value());
    return gpus.has_value() ? gpus->front() : GpuId(~0u);
  }
  Cluster c_;
};

TEST_F(LearnedChoiceTest, ColdStartPlacesWithBestFitThenLearns) {
  ASSERT_NE(Chosen(BestFitPolicy()),
            Chosen(HfFragPolicy(policy_test::Workload(
                {{policy_test::GpuClass(500, 1, 0), 1}}))))
      << "the scenario must tell the two apart";
  LearnedOptions options;
  options.cold_start_tasks = 10;
  options.rebuild_every = 1;
  LearnedFragPolicy learned(options);
  EXPECT_TRUE(learned.ColdStart());
  for (int i = 0; i < 9; ++i) learned.Observe(SliceReq(500));
  EXPECT_TRUE(learned.ColdStart());
  EXPECT_EQ(Chosen(learned), Chosen(BestFitPolicy()));
  learned.Observe(SliceReq(500));
  EXPECT_FALSE(learned.ColdStart());
  EXPECT_EQ(Chosen(learned), c_.Gpu(NodeId(1), 0));
  EXPECT_EQ(learned.tasks_observed(), 10);
  learned.Forget();
  EXPECT_TRUE(learned.ColdStart());
  EXPECT_EQ(Chosen(learned), Chosen(BestFitPolicy()));
}

// Once warm and rebuilt, the learned policy chooses exactly what hf-frag
// chooses with the same classes given up front, over a random workload.
TEST(LearnedFragPolicyTest, WarmChoicesEqualHfFragWithTheSameWorkload) {
  std::mt19937_64 rng(7);
  std::vector<PlacementRequest> requests;
  const std::vector<int> sizes = {100, 250, 500, 1000};
  for (int i = 0; i < 400; ++i) {
    const int pick = static_cast<int>(rng() % 5);
    requests.push_back(
        pick == 4 ? WholeReq(1 + static_cast<int>(rng() % 2), 4000)
                  : SliceReq(sizes[pick], 1000 * static_cast<int>(rng() % 8)));
  }
  LearnedOptions options;
  options.half_life_tasks = 1e12;  // no decay: the same weights as counts
  options.cold_start_tasks = 1;
  options.rebuild_every = 1'000'000;
  LearnedFragPolicy learned(options);
  for (const PlacementRequest& r : requests) learned.Observe(r);

  Cluster a(/*tie_seed=*/3);
  Cluster b(/*tie_seed=*/3);
  for (Cluster* c : {&a, &b}) {
    for (int n = 0; n < 12; ++n) c->Node(n % 3 == 0 ? 8 : 4, 64000);
  }
  std::vector<std::pair<TaskShape, double>> shapes;
  for (const PlacementRequest& r : requests)
    shapes.emplace_back(TaskShape::Of(r), 1);
  LearnedWorkload given;
  b.ledger().Read([&](const ledger::ClusterView& view) {
    given = LearnWorkload(shapes, view);
  });
  const HfFragPolicy reference(given.target, given.demand);
  int placed = 0;
  for (const PlacementRequest& r : requests) {
    const PlacementResult ra = a.ledger().Place(r, learned);
    const PlacementResult rb = b.ledger().Place(r, reference);
    ASSERT_EQ(ra.placed(), rb.placed());
    if (!ra.placed()) continue;
    ++placed;
    ASSERT_EQ(ra.allocation.gpus, rb.allocation.gpus);
    ASSERT_EQ(ra.allocation.node, rb.allocation.node);
  }
  EXPECT_GT(placed, 50);
  EXPECT_TRUE(a.ledger().CheckInvariants().ok());
}

}  // namespace
}  // namespace hf::scheduler
