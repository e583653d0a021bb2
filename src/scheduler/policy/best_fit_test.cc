// Tests for the Best-Fit placement policies and the policy registry.
//
// BestFitPolicy (indexed) and LinearScanBestFitPolicy (plain scan) must make
// the same choice for every request: checked on hand-built clusters (sizes,
// tenants and groups, lost GPUs, MIG mode, models, node resources, tie ranks)
// against a grid of requests, and on randomized clusters driven through two
// ledgers in lockstep. The registry: names with the default first, lookup by
// name, NotFound listing the known names, and the default policy.
#include "scheduler/policy/best_fit.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/registry.h"

namespace hf::scheduler {
namespace {

using ledger::Allocation;
using ledger::ClusterView;
using ledger::GpuHealth;
using ledger::GpuSpec;
using ledger::Ledger;
using ledger::LedgerOptions;
using ledger::NodeSpec;
using ledger::PlacementOutcome;
using ledger::PlacementRequest;
using ledger::PlacementResult;

constexpr TenantId kAlice(1);
constexpr TenantId kBob(2);
constexpr TenantId kCarol(3);
constexpr TenantId kDave(4);
constexpr GroupId kTeam(10);

// A ledger plus helpers to build a cluster in it.
class Cluster {
 public:
  explicit Cluster(LedgerOptions options = {}) {
    StatusOr<std::unique_ptr<Ledger>> l = Ledger::Create(options);
    EXPECT_TRUE(l.ok());
    ledger_ = std::move(l).value();
  }

  NodeId Node(CpuMilli cpu = 64000, MemoryMib host = 512 * 1024) {
    NodeSpec spec;
    spec.name = "node-" + std::to_string(nodes_++);
    spec.cpu_milli = cpu;
    spec.host_memory_mib = host;
    return *ledger_->AddNode(spec);
  }

  GpuId Gpu(NodeId node, MemoryMib memory, const std::string& model = "A100",
            bool mig = false) {
    GpuSpec spec;
    spec.uuid = "GPU-" + std::to_string(gpus_++);
    spec.index = gpus_;
    spec.model = model;
    spec.memory_mib = memory;
    spec.mig_capable = mig;
    StatusOr<GpuId> id = ledger_->AddGpu(node, spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return *id;
  }

  // Places with Best-Fit; expects success.
  Allocation Place(const PlacementRequest& r) {
    const PlacementResult res = ledger_->Place(r, BestFitPolicy());
    EXPECT_TRUE(res.placed()) << res.message;
    return res.allocation;
  }

  Ledger& ledger() { return *ledger_; }

 private:
  std::unique_ptr<Ledger> ledger_;
  int nodes_ = 0;
  int gpus_ = 0;
};

PlacementRequest Slice(TenantId t, std::optional<MemoryMib> memory,
                       std::optional<ComputePercent> compute) {
  return PlacementRequest::Slice(t, memory, compute);
}

// Compares both policies on `request` in the ledger's current state.
// Returns true when they chose a placement.
bool ExpectAgree(const Ledger& ledger, const PlacementRequest& request) {
  bool placed = false;
  ledger.Read([&](const ClusterView& view) {
    const BestFitPolicy indexed;
    const LinearScanBestFitPolicy scan;
    const std::optional<std::vector<GpuId>> a = indexed.Choose(view, request);
    const std::optional<std::vector<GpuId>> b = scan.Choose(view, request);
    EXPECT_EQ(a.has_value(), b.has_value())
        << "tenant " << request.tenant << " memory "
        << request.memory_mib.value_or(-1) << " compute "
        << request.compute_percent.value_or(-1) << " count "
        << request.gpu_count << " cpu " << request.cpu_milli;
    if (a.has_value() && b.has_value()) {
      EXPECT_EQ(*a, *b) << "tenant " << request.tenant << " memory "
                        << request.memory_mib.value_or(-1) << " count "
                        << request.gpu_count;
      // The choice is admissible.
      if (request.kind == ledger::RequestKind::kSlice) {
        EXPECT_EQ(a->size(), 1u);
        EXPECT_FALSE(view.CheckSlice(view.gpu(a->front()), request));
      } else {
        EXPECT_EQ(a->size(), static_cast<std::size_t>(request.gpu_count));
        for (GpuId g : *a)
          EXPECT_FALSE(view.CheckWholeGpu(view.gpu(g), request));
      }
    }
    placed = a.has_value();
  });
  return placed;
}

// Runs a grid of slice and whole-GPU requests; returns how many placed.
int ExpectAgreeOnGrid(const Ledger& ledger) {
  const std::vector<TenantId> tenants = {kAlice, kBob, kCarol, kDave};
  const std::vector<std::optional<MemoryMib>> memories = {
      std::nullopt, 32,    1000,  8000,  15000, 20000,
      36000,        40000, 70000, 73728, 80000};
  const std::vector<std::optional<ComputePercent>> computes = {
      std::nullopt, 1, 30, 50, 70, 100};
  const std::vector<std::vector<std::string>> models = {
      {}, {"A100"}, {"T4"}, {"A100", "T4"}, {"H100"}};
  const std::vector<CpuMilli> cpus = {0, 3000, 100000};
  int placed = 0;
  int total = 0;
  for (TenantId t : tenants) {
    for (const auto& model : models) {
      for (CpuMilli cpu : cpus) {
        for (const auto& memory : memories) {
          for (const auto& compute : computes) {
            if (!memory && !compute) continue;
            PlacementRequest r = Slice(t, memory, compute);
            r.allowed_models = model;
            r.cpu_milli = cpu;
            placed += ExpectAgree(ledger, r);
            ++total;
          }
        }
        for (int count = 1; count <= 4; ++count) {
          PlacementRequest r = PlacementRequest::WholeGpus(t, count);
          r.allowed_models = model;
          r.cpu_milli = cpu;
          placed += ExpectAgree(ledger, r);
          ++total;
        }
      }
    }
  }
  EXPECT_GT(total, 0);
  return placed;
}

TEST(BestFitPolicyTest, Names) {
  EXPECT_EQ(BestFitPolicy().name(), "best-fit");
  EXPECT_EQ(LinearScanBestFitPolicy().name(), "best-fit-scan");
}

TEST(BestFitPolicyTest, EmptyClusterChoosesNothing) {
  Cluster c;
  EXPECT_FALSE(ExpectAgree(c.ledger(), Slice(kAlice, 1024, 10)));
  EXPECT_FALSE(ExpectAgree(c.ledger(), PlacementRequest::WholeGpus(kAlice, 1)));
  c.Node();
  EXPECT_FALSE(ExpectAgree(c.ledger(), Slice(kAlice, 1024, 10)));
  EXPECT_EQ(ExpectAgreeOnGrid(c.ledger()), 0);
}

TEST(BestFitPolicyTest, ChoosesLeastFreeMemoryGpu) {
  Cluster c;
  const NodeId n = c.Node();
  c.Gpu(n, 81920);
  const GpuId small = c.Gpu(n, 16384);
  c.Gpu(n, 40960);
  c.ledger().Read([&](const ClusterView& view) {
    const auto choice = BestFitPolicy().Choose(view, Slice(kAlice, 1024, 10));
    ASSERT_TRUE(choice.has_value());
    EXPECT_EQ(*choice, std::vector<GpuId>{small});
    // Too big for the small GPU: the next best.
    const auto mid = BestFitPolicy().Choose(view, Slice(kAlice, 20000, 10));
    ASSERT_TRUE(mid.has_value());
    EXPECT_EQ(view.gpu(mid->front()).spec.memory_mib, 40960);
  });
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 0);
}

TEST(BestFitPolicyTest, AgreeOnMixedSizesAndTenants) {
  Cluster c;
  const NodeId n0 = c.Node();
  const NodeId n1 = c.Node();
  const NodeId n2 = c.Node();
  for (int i = 0; i < 3; ++i) c.Gpu(n0, 81920);
  c.Gpu(n1, 40960);
  c.Gpu(n1, 40960);
  c.Gpu(n2, 16384, "T4");
  c.Gpu(n2, 24576, "L4");
  c.Place(Slice(kAlice, 20000, 30));
  c.Place(Slice(kAlice, 10000, 20));
  c.Place(Slice(kBob, 30000, std::nullopt));
  c.Place(Slice(kCarol, 4000, 60));
  c.Place(PlacementRequest::WholeGpus(kDave, 1));
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
}

TEST(BestFitPolicyTest, AgreeWithSharedGroupsAndClosedGpus) {
  Cluster c;
  ASSERT_TRUE(c.ledger().DefineGroup(kTeam).ok());
  ASSERT_TRUE(c.ledger().SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(c.ledger().SetTenantGroup(kBob, kTeam).ok());
  const NodeId n0 = c.Node();
  const NodeId n1 = c.Node();
  c.Gpu(n0, 81920);
  c.Gpu(n0, 81920);
  c.Gpu(n1, 81920);
  c.Gpu(n1, 40960);
  c.Place(Slice(kAlice, 30000, 20));
  c.Place(Slice(kBob, 30000, 20));  // joins Alice's GPU
  c.Place(Slice(kCarol, 50000, 20));
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
  // Alice leaves: the shared GPU closes (kConflict).
  ASSERT_TRUE(c.ledger().SetTenantGroup(kAlice, std::nullopt).ok());
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
  ASSERT_TRUE(c.ledger().CheckInvariants().ok());
}

TEST(BestFitPolicyTest, AgreeWithLostAndMigGpus) {
  Cluster c;
  const NodeId n0 = c.Node();
  const NodeId n1 = c.Node();
  const GpuId lost = c.Gpu(n0, 81920);
  c.Gpu(n0, 81920, "A100", /*mig=*/true);
  c.Gpu(n0, 81920);
  c.Gpu(n1, 81920, "A100", /*mig=*/true);
  c.Gpu(n1, 40960);
  c.Gpu(n1, 40960);
  c.Place(Slice(kAlice, 1000, 10));
  ASSERT_TRUE(c.ledger().SetGpuHealth(lost, GpuHealth::kLost).ok());
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
  ASSERT_TRUE(c.ledger().SetGpuHealth(lost, GpuHealth::kOk).ok());
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
}

TEST(BestFitPolicyTest, AgreeWithNodeResourceLimits) {
  Cluster c;
  const NodeId poor = c.Node(/*cpu=*/4000, /*host=*/4096);
  const NodeId rich = c.Node(/*cpu=*/200000, /*host=*/1 << 20);
  c.Gpu(poor, 16384, "T4");
  c.Gpu(poor, 81920);
  c.Gpu(rich, 81920);
  c.Gpu(rich, 81920);
  PlacementRequest r = Slice(kAlice, 1000, 10);
  r.cpu_milli = 2000;
  c.Place(r);
  EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100);
}

TEST(BestFitPolicyTest, AgreeOnTiesUnderSeveralSeeds) {
  for (std::uint64_t seed : {0u, 1u, 2u, 99u, 12345u}) {
    Cluster c(LedgerOptions{.tie_break_seed = seed});
    for (int i = 0; i < 6; ++i) {
      const NodeId n = c.Node();
      c.Gpu(n, 81920);
      c.Gpu(n, 81920);
    }
    c.Place(Slice(kAlice, 1000, 10));
    c.Place(PlacementRequest::WholeGpus(kBob, 1));
    EXPECT_GT(ExpectAgreeOnGrid(c.ledger()), 100) << seed;
  }
}

// Two ledgers driven by the same random operations, one placing with each
// policy: every outcome and allocation must be identical, and both policies
// must agree on extra probes in between.
TEST(BestFitPolicyRandomTest, IndexedAndScanAgreeInLockstep) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed * 7919);
    auto uniform = [&](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    const LedgerOptions options{.default_compute_percent = 40,
                                .tie_break_seed = seed};
    Cluster a(options);
    Cluster b(options);
    const std::vector<std::string> models = {"A100", "T4", "L4"};
    const std::vector<MemoryMib> sizes = {16384, 24576, 40960, 81920};
    std::vector<GpuId> gpus;
    const int node_count = uniform(4, 10);
    for (int n = 0; n < node_count; ++n) {
      const CpuMilli cpu = uniform(4, 64) * 1000;
      const NodeId na = a.Node(cpu, 1 << 20);
      const NodeId nb = b.Node(cpu, 1 << 20);
      ASSERT_EQ(na, nb);
      const int per_node = uniform(1, 4);
      for (int g = 0; g < per_node; ++g) {
        const MemoryMib mem = sizes[uniform(0, 3)];
        const std::string& model = models[uniform(0, 2)];
        const bool mig = uniform(0, 9) == 0;
        const GpuId ga = a.Gpu(na, mem, model, mig);
        ASSERT_EQ(ga, b.Gpu(nb, mem, model, mig));
        gpus.push_back(ga);
      }
    }
    ASSERT_TRUE(a.ledger().DefineGroup(kTeam).ok());
    ASSERT_TRUE(b.ledger().DefineGroup(kTeam).ok());

    const BestFitPolicy indexed;
    const LinearScanBestFitPolicy scan;
    std::vector<SliceId> live;
    int placed = 0;
    int failed = 0;
    for (int step = 0; step < 1500; ++step) {
      const int op = uniform(0, 99);
      if (op < 55) {
        const TenantId tenant(uniform(1, 6));
        PlacementRequest r;
        if (uniform(0, 9) == 0) {
          r = PlacementRequest::WholeGpus(tenant, uniform(1, 3));
        } else {
          std::optional<MemoryMib> memory;
          std::optional<ComputePercent> compute;
          if (uniform(0, 3) != 0) memory = uniform(32, 40000);
          if (!memory || uniform(0, 1) == 0) compute = uniform(1, 100);
          r = Slice(tenant, memory, compute);
        }
        if (uniform(0, 4) == 0) r.cpu_milli = uniform(0, 8) * 1000;
        if (uniform(0, 5) == 0) r.allowed_models = {models[uniform(0, 2)]};
        ExpectAgree(a.ledger(), r);
        const PlacementResult ra = a.ledger().Place(r, indexed);
        const PlacementResult rb = b.ledger().Place(r, scan);
        ASSERT_EQ(ra.outcome, rb.outcome)
            << "step " << step << ": " << ra.message << " | " << rb.message;
        ASSERT_EQ(ra.allocation, rb.allocation) << "step " << step;
        ASSERT_EQ(ra.message, rb.message) << "step " << step;
        if (ra.placed()) {
          live.push_back(ra.allocation.id);
          ++placed;
        } else {
          ++failed;
        }
      } else if (op < 85) {
        if (live.empty()) continue;
        const std::size_t i = static_cast<std::size_t>(
            uniform(0, static_cast<int>(live.size()) - 1));
        ASSERT_TRUE(a.ledger().Release(live[i]).ok());
        ASSERT_TRUE(b.ledger().Release(live[i]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op < 92) {
        const GpuId g = gpus[static_cast<std::size_t>(
            uniform(0, static_cast<int>(gpus.size()) - 1))];
        const GpuHealth h = uniform(0, 1) ? GpuHealth::kOk : GpuHealth::kLost;
        ASSERT_TRUE(a.ledger().SetGpuHealth(g, h).ok());
        ASSERT_TRUE(b.ledger().SetGpuHealth(g, h).ok());
      } else {
        const TenantId tenant(uniform(1, 6));
        std::optional<GroupId> group;
        if (uniform(0, 1)) group = kTeam;
        ASSERT_TRUE(a.ledger().SetTenantGroup(tenant, group).ok());
        ASSERT_TRUE(b.ledger().SetTenantGroup(tenant, group).ok());
      }
      if (step % 100 == 0) {
        ASSERT_TRUE(a.ledger().CheckInvariants().ok()) << "step " << step;
        ASSERT_TRUE(b.ledger().CheckInvariants().ok()) << "step " << step;
      }
    }
    EXPECT_EQ(a.ledger().Allocations(), b.ledger().Allocations());
    EXPECT_GT(placed, 100) << seed;
    EXPECT_GT(failed, 10) << seed;
    ExpectAgreeOnGrid(a.ledger());
  }
}

// ================================================================ registry

TEST(PolicyRegistryTest, NamesListTheDefaultFirst) {
  const std::vector<std::string> names = PolicyNames();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), kDefaultPolicyName);
  EXPECT_EQ(names,
            (std::vector<std::string>{"hf-frag", "best-fit", "best-fit-scan"}));
}

TEST(PolicyRegistryTest, MakePolicyByName) {
  for (const std::string& name : PolicyNames()) {
    StatusOr<MadePolicy> p = MakePolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    ASSERT_NE(p->policy, nullptr);
    EXPECT_EQ(p->policy->name(), name);
    // Only the learning policy observes tasks.
    EXPECT_EQ(p->observer != nullptr, name == "hf-frag") << name;
  }
  // Every server gets its own history.
  StatusOr<MadePolicy> a = MakePolicy("hf-frag");
  StatusOr<MadePolicy> b = MakePolicy("hf-frag");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->policy.get(), b->policy.get());
}

TEST(PolicyRegistryTest, UnknownNameIsNotFoundListingKnownNames) {
  StatusOr<MadePolicy> p = MakePolicy("worst-fit");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("worst-fit"), std::string::npos) << m;
  EXPECT_NE(m.find("hf-frag"), std::string::npos) << m;
  EXPECT_NE(m.find("best-fit"), std::string::npos) << m;
  EXPECT_NE(m.find("best-fit-scan"), std::string::npos) << m;
  EXPECT_EQ(MakePolicy("").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(MakePolicy("Best-Fit").status().code(), StatusCode::kNotFound);
}

TEST(PolicyRegistryTest, DefaultPolicyIsTheLearnedHfFrag) {
  StatusOr<MadePolicy> d = MakePolicy(kDefaultPolicyName);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->policy->name(), "hf-frag");
  EXPECT_NE(dynamic_cast<const LearnedFragPolicy*>(d->policy.get()), nullptr);
}

}  // namespace
}  // namespace hf::scheduler
