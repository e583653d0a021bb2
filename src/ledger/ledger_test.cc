// Unit tests for Ledger (docs/CONTRACT.md section 5): every admission rule
// (capacity, the 90%-of-the-largest-GPU limit, compute with its configurable
// default, tenancy and shared groups, health, whole GPUs, allowed models, node
// CPU and host memory), Best-Fit and its tie-breaks, Release, Restore,
// inventory changes, request validation, the per-reason failure counts and
// messages, the retry-later / infeasible verdicts, and the re-check of a faulty
// policy's choice. Every fixture test ends with CheckInvariants().
#include "ledger/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "scheduler/policy/best_fit.h"

// Expects `needle` to occur in `haystack`.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace hf::ledger {
namespace {

constexpr TenantId kAlice(1);
constexpr TenantId kBob(2);
constexpr TenantId kCarol(3);
constexpr GroupId kTeam(10);
constexpr GroupId kOtherTeam(11);

constexpr MemoryMib k80G = 81920;
constexpr MemoryMib k40G = 40960;
constexpr MemoryMib k24G = 24576;
constexpr MemoryMib k16G = 16384;

PlacementRequest SliceReq(
    TenantId tenant, std::optional<MemoryMib> memory,
    std::optional<ComputePercent> compute = std::nullopt) {
  return PlacementRequest::Slice(tenant, memory, compute);
}

// Usage of every GPU and node, to prove an operation changed nothing (or
// returned exactly what it took).
struct Usage {
  std::vector<std::tuple<MemoryMib, ComputePercent, int, bool,
                         std::vector<std::pair<TenantId, int>>>>
      gpus;
  std::vector<std::pair<CpuMilli, MemoryMib>> nodes;
  friend bool operator==(const Usage&, const Usage&) = default;
};

// A policy that returns a fixed answer, to test the Ledger's re-check.
class FixedPolicy final : public PlacementPolicy {
 public:
  explicit FixedPolicy(std::optional<std::vector<GpuId>> choice)
      : choice_(std::move(choice)) {}
  std::string_view name() const override { return "fixed-test"; }
  std::optional<std::vector<GpuId>> Choose(
      const ClusterView&, const PlacementRequest&) const override {
    return choice_;
  }

 private:
  std::optional<std::vector<GpuId>> choice_;
};

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override { ledger_ = NewLedger({}); }

  void TearDown() override {
    const Status s = ledger_->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  static std::unique_ptr<Ledger> NewLedger(LedgerOptions options) {
    StatusOr<std::unique_ptr<Ledger>> ledger = Ledger::Create(options);
    EXPECT_TRUE(ledger.ok()) << ledger.status().ToString();
    return std::move(ledger).value();
  }

  NodeId AddNode(CpuMilli cpu = 64000, MemoryMib host = 512 * 1024) {
    NodeSpec spec;
    spec.name = "node-" + std::to_string(node_counter_++);
    spec.cpu_milli = cpu;
    spec.host_memory_mib = host;
    StatusOr<NodeId> id = ledger_->AddNode(spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : NodeId();
  }

  GpuId AddGpu(NodeId node, MemoryMib memory,
               const std::string& model = "A100-SXM4-80GB", bool mig = false) {
    GpuSpec spec;
    spec.uuid = "GPU-" + std::to_string(gpu_counter_++);
    spec.index = next_index_[node.value()]++;
    spec.model = model;
    spec.memory_mib = memory;
    spec.compute_capability_major = 8;
    spec.mig_capable = mig;
    StatusOr<GpuId> id = ledger_->AddGpu(node, spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : GpuId();
  }

  PlacementResult Place(const PlacementRequest& request) {
    return ledger_->Place(request, policy_);
  }

  // Places and expects success; returns the allocation.
  Allocation MustPlace(const PlacementRequest& request) {
    PlacementResult r = Place(request);
    EXPECT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.message;
    return r.allocation;
  }

  // The GPU a slice request lands on (invalid GpuId when not placed).
  GpuId PlaceOn(const PlacementRequest& request) {
    PlacementResult r = Place(request);
    EXPECT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.message;
    if (!r.placed() || r.allocation.gpus.empty()) return GpuId();
    return r.allocation.gpus.front();
  }

  GpuRecord Gpu(GpuId id) const {
    GpuRecord out;
    ledger_->Read([&](const ClusterView& view) { out = view.gpu(id); });
    return out;
  }
  NodeRecord Node(NodeId id) const {
    NodeRecord out;
    ledger_->Read([&](const ClusterView& view) { out = view.node(id); });
    return out;
  }

  Usage Snapshot() const {
    Usage u;
    ledger_->Read([&](const ClusterView& view) {
      for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
        const GpuRecord& g = view.gpu(GpuId(i));
        auto tenants = g.tenants;
        std::sort(tenants.begin(), tenants.end());
        u.gpus.emplace_back(g.used_memory_mib, g.used_compute_percent,
                            g.allocation_count, g.whole_owned, tenants);
      }
      for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
        const NodeRecord& n = view.node(NodeId(i));
        u.nodes.emplace_back(n.used_cpu_milli, n.used_host_memory_mib);
      }
    });
    return u;
  }

  void ExpectInvariants() {
    const Status s = ledger_->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  std::unique_ptr<Ledger> ledger_;
  scheduler::BestFitPolicy policy_;
  int node_counter_ = 0;
  int gpu_counter_ = 0;
  std::map<std::uint64_t, int> next_index_;
};

// =============================================================== capacity

TEST_F(LedgerTest, SliceFitsOnlyIntoFreeMemory) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, 10000, 10));
  EXPECT_EQ(a.gpus, std::vector<GpuId>{g});
  EXPECT_EQ(a.memory_mib, 10000);
  EXPECT_EQ(Gpu(g).used_memory_mib, 10000);

  PlacementResult r = Place(SliceReq(kAlice, 10000, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoMemory), 1);
  EXPECT_EQ(r.gpus_considered, 1);
  EXPECT_CONTAINS(r.message, "insufficient GPU memory");
  EXPECT_CONTAINS(r.message, "0 of 1 GPUs fit 10000 MB / 10% compute");
  EXPECT_CONTAINS(r.message, "1 GPU without 10000 MB of free memory");
  ExpectInvariants();

  // Exactly the remaining memory fits.
  MustPlace(SliceReq(kAlice, k16G - 10000, 10));
  EXPECT_EQ(Gpu(g).free_memory_mib(), 0);
  r = Place(SliceReq(kAlice, 32, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoMemory), 1);
}

TEST_F(LedgerTest, SliceUpToNinetyPercentOfLargestGpuIsAdmitted) {
  const NodeId n = AddNode();
  const GpuId big = AddGpu(n, k80G);
  AddGpu(n, k40G);
  const Allocation a = MustPlace(SliceReq(kAlice, MaxSliceMemoryMib(k80G)));
  EXPECT_EQ(a.memory_mib, 73728);
  EXPECT_EQ(a.gpus, std::vector<GpuId>{big});
}

TEST_F(LedgerTest, SliceAboveNinetyPercentOfLargestGpuIsInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  AddGpu(n, k40G);
  // The 80 GB GPU is empty and would hold 73729 MB, but the rule forbids it.
  const PlacementResult r = Place(SliceReq(kAlice, 73729));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(r.message, "never fits in this cluster");
  EXPECT_CONTAINS(r.message,
                  "gpu_memory_mb 73729 exceeds 90% of the largest GPU "
                  "(73728 of 81920 MB)");
  EXPECT_EQ(ledger_->allocation_count(), 0u);
}

TEST_F(LedgerTest, NinetyPercentLimitFollowsTheLargestLiveGpu) {
  const NodeId n = AddNode();
  const GpuId big = AddGpu(n, k80G);
  const GpuId small = AddGpu(n, k40G);
  // 38000 MB is above 90% of 40 GB, yet Best-Fit puts it on the 40 GB GPU:
  // the limit is 90% of the largest GPU in the cluster (80 GB).
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 38000)), small);
  ASSERT_TRUE(ledger_->Release(SliceId(1)).ok());
  ASSERT_TRUE(ledger_->RemoveGpu(big).ok());
  ledger_->Read([&](const ClusterView& view) {
    EXPECT_EQ(view.largest_gpu_memory_mib(), k40G);
  });
  // Now the 40 GB GPU is the largest; 38000 MB never fits.
  const PlacementResult r = Place(SliceReq(kAlice, 38000));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(r.message, "(36864 of 40960 MB)");
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 36864)), small);
}

// ================================================================ compute

TEST_F(LedgerTest, ComputeIsAccountedUpToHundredPercent) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 1024, 60));
  MustPlace(SliceReq(kAlice, 1024, 40));
  EXPECT_EQ(Gpu(g).used_compute_percent, 100);
  const PlacementResult r = Place(SliceReq(kAlice, 1024, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoCompute), 1);
  EXPECT_EQ(r.count(RejectReason::kNoMemory), 0);
  EXPECT_CONTAINS(r.message, "insufficient GPU compute");
  EXPECT_CONTAINS(r.message, "1 GPU without 1% free compute");
}

TEST_F(LedgerTest, ComputeOverflowIsRejectedBeforeFull) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 1024, 70));
  const PlacementResult r = Place(SliceReq(kAlice, 1024, 31));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoCompute), 1);
  EXPECT_EQ(Gpu(g).used_compute_percent, 70);
  MustPlace(SliceReq(kAlice, 1024, 30));
}

TEST_F(LedgerTest, SliceWithoutRatioIsAccountedAtFiftyPercentByDefault) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 4096));
  EXPECT_EQ(a.compute_percent, 50);
  EXPECT_TRUE(a.compute_defaulted);
  EXPECT_EQ(Gpu(g).used_compute_percent, 50);
  MustPlace(SliceReq(kAlice, 4096));
  EXPECT_EQ(Gpu(g).used_compute_percent, 100);
  const PlacementResult r = Place(SliceReq(kAlice, 4096));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoCompute), 1);
  EXPECT_CONTAINS(r.message, "without 50% free compute");
}

TEST_F(LedgerTest, SliceWithRatioIsNotMarkedDefaulted) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 4096, 50));
  EXPECT_EQ(a.compute_percent, 50);
  EXPECT_FALSE(a.compute_defaulted);
}

TEST_F(LedgerTest, DefaultComputeIsConfigurable) {
  ledger_ = NewLedger(LedgerOptions{.default_compute_percent = 25});
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  for (int i = 0; i < 4; ++i) {
    const Allocation a = MustPlace(SliceReq(kAlice, 1024));
    EXPECT_EQ(a.compute_percent, 25);
    EXPECT_TRUE(a.compute_defaulted);
  }
  EXPECT_EQ(Gpu(g).used_compute_percent, 100);
  const PlacementResult r = Place(SliceReq(kAlice, 1024));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoCompute), 1);
  ledger_->Read([](const ClusterView& view) {
    EXPECT_EQ(view.default_compute_percent(), 25);
  });
}

TEST(LedgerCreateTest, RejectsDefaultComputeOutOfRange) {
  for (ComputePercent bad : {0, -1, 101}) {
    StatusOr<std::unique_ptr<Ledger>> l =
        Ledger::Create(LedgerOptions{.default_compute_percent = bad});
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(l.status().field(), "default_compute_percent");
  }
  for (ComputePercent good : {1, 100}) {
    EXPECT_TRUE(
        Ledger::Create(LedgerOptions{.default_compute_percent = good}).ok());
  }
}

TEST_F(LedgerTest, ComputeOnlySliceAccountsNoMemory) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, std::nullopt, 30));
  EXPECT_EQ(a.memory_mib, 0);
  EXPECT_EQ(a.compute_percent, 30);
  EXPECT_EQ(Gpu(g).used_memory_mib, 0);
  EXPECT_EQ(Gpu(g).used_compute_percent, 30);
}

TEST_F(LedgerTest, FullComputeGpuWithFreeMemoryTakesNoSlice) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 1024, 100));
  const PlacementResult r = Place(SliceReq(kAlice, std::nullopt, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kNoCompute), 1);
}

// ================================================================ tenancy

TEST_F(LedgerTest, SameTenantSharesAGpu) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  AddGpu(n, k80G);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);  // Best-Fit fills it
  EXPECT_EQ(Gpu(g0).allocation_count, 2);
  EXPECT_EQ(Gpu(g0).tenants.size(), 1u);
}

TEST_F(LedgerTest, UngroupedTenantsNeverShareAGpu) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);
  // g0 has less free memory, but Bob may not join Alice.
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g1);
  const PlacementResult r = Place(SliceReq(kCarol, 4096, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 2);
  EXPECT_CONTAINS(r.message,
                  "2 GPUs excluded by the tenant-sharing constraint "
                  "(adding memory will not help)");
}

TEST_F(LedgerTest, TenantConstraintIsNeverInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 1024, 1));
  // Bob's request is tiny and the GPU nearly empty: only tenancy blocks it.
  const PlacementResult r = Place(SliceReq(kBob, 1024, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1);
  const PlacementResult whole = Place(PlacementRequest::WholeGpus(kBob, 1));
  EXPECT_EQ(whole.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(whole.count(RejectReason::kTenantConstraint), 1);
}

TEST_F(LedgerTest, TenantsOfOneSharedGroupShareAGpu) {
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kTeam).ok());
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  AddGpu(n, k80G);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g0);
  EXPECT_EQ(Gpu(g0).tenants.size(), 2u);
  EXPECT_EQ(Gpu(g0).domain, SharingKey::Group(kTeam));
  // Carol is not in the group.
  const GpuId carol = PlaceOn(SliceReq(kCarol, 4096, 10));
  EXPECT_NE(carol, g0);
}

TEST_F(LedgerTest, TenantsOfDifferentGroupsDoNotShare) {
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->DefineGroup(kOtherTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kOtherTeam).ok());
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  const PlacementResult r = Place(SliceReq(kBob, 4096, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1);
}

TEST_F(LedgerTest, GroupedTenantDoesNotShareWithUngroupedTenant) {
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  const PlacementResult r = Place(SliceReq(kBob, 4096, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1);
}

TEST_F(LedgerTest, ApprovedTenantsShareAndBestFitPrefersTheFullerGpu) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  ASSERT_EQ(PlaceOn(SliceReq(kAlice, 40960, 10)), g0);
  // Without an approval Bob goes to the empty GPU...
  ASSERT_TRUE(ledger_->ApproveSharing(kAlice, kBob).ok());
  // ...with one, Best-Fit fills Alice's GPU first (least free memory).
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g0);
  EXPECT_EQ(Gpu(g0).domain, SharingKey::Conflict());
  // Alice still reaches her own, now mixed, GPU.
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);
  // Approvals are pairwise: Carol has one with Bob only, so not onto g0.
  ASSERT_TRUE(ledger_->ApproveSharing(kCarol, kBob).ok());
  EXPECT_EQ(PlaceOn(SliceReq(kCarol, 4096, 10)), g1);
  EXPECT_TRUE(ledger_->CheckInvariants().ok());
}

TEST_F(LedgerTest, WithdrawnApprovalClosesSharedGpuButReleasesNothing) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->ApproveSharing(kAlice, kBob).ok());
  ASSERT_TRUE(ledger_->ApproveSharing(kBob, kAlice).ok());  // counted
  MustPlace(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g0);
  ASSERT_TRUE(ledger_->WithdrawSharing(kAlice, kBob).ok());
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g0);  // one approval left
  ASSERT_TRUE(ledger_->WithdrawSharing(kBob, kAlice).ok());
  EXPECT_EQ(ledger_->allocation_count(), 3u);
  const PlacementResult r = Place(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1);
  EXPECT_EQ(ledger_->WithdrawSharing(kAlice, kBob).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ledger_->ApproveSharing(kAlice, kAlice).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ledger_->CheckInvariants().ok());
}

TEST_F(LedgerTest, RestoreHonoursSharingApprovals) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  Allocation bob;
  bob.id = SliceId(100);
  bob.tenant = kBob;
  bob.kind = RequestKind::kSlice;
  bob.gpus = {g0};
  bob.memory_mib = 4096;
  bob.compute_percent = 10;
  EXPECT_EQ(ledger_->Restore(bob).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ledger_->ApproveSharing(kAlice, kBob).ok());
  EXPECT_TRUE(ledger_->Restore(bob).ok());
}

TEST_F(LedgerTest, SetTenantGroupToUndefinedGroupIsNotFoundAndFailsClosed) {
  const Status s = ledger_->SetTenantGroup(kAlice, GroupId(99));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(s.message(), "99");
  EXPECT_EQ(ledger_->SetTenantGroup(kBob, GroupId(99)).code(),
            StatusCode::kNotFound);
  ledger_->Read([](const ClusterView& view) {
    EXPECT_EQ(view.SharingKeyOf(kAlice), SharingKey::Solo(kAlice));
    EXPECT_EQ(view.SharingKeyOf(kBob), SharingKey::Solo(kBob));
  });
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(Place(SliceReq(kBob, 4096, 10)).outcome,
            PlacementOutcome::kRetryLater);
}

TEST_F(LedgerTest, GroupAdminErrors) {
  EXPECT_EQ(ledger_->DefineGroup(GroupId()).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  EXPECT_EQ(ledger_->DefineGroup(kTeam).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ledger_->RemoveGroup(kOtherTeam).code(), StatusCode::kNotFound);
  EXPECT_EQ(ledger_->SetTenantGroup(TenantId(), kTeam).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(ledger_->RemoveGroup(kTeam).ok());
  EXPECT_EQ(ledger_->RemoveGroup(kTeam).code(), StatusCode::kNotFound);
  EXPECT_EQ(ledger_->SetTenantGroup(kAlice, kTeam).code(),
            StatusCode::kNotFound);
}

TEST_F(LedgerTest, RemoveGroupClosesSharedGpusUntilSlicesGo) {
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kTeam).ok());
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const Allocation alice = MustPlace(SliceReq(kAlice, 4096, 10));
  const Allocation bob = MustPlace(SliceReq(kBob, 4096, 10));
  ASSERT_EQ(bob.gpus, std::vector<GpuId>{g0});

  ASSERT_TRUE(ledger_->RemoveGroup(kTeam).ok());
  ExpectInvariants();
  EXPECT_EQ(Gpu(g0).domain, SharingKey::Conflict());
  // Both slices stay; the shared GPU takes nothing new, not even from the
  // tenants already on it.
  EXPECT_EQ(ledger_->allocation_count(), 2u);
  for (TenantId t : {kAlice, kBob, kCarol}) {
    const PlacementResult r = Place(SliceReq(t, 1024, 1));
    EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater) << t;
    EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1) << t;
  }
  // Once Bob's slice goes, the GPU is Alice's alone and open to her again.
  ASSERT_TRUE(ledger_->Release(bob.id).ok());
  EXPECT_EQ(Gpu(g0).domain, SharingKey::Solo(kAlice));
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 1024, 1)), g0);
  EXPECT_EQ(Place(SliceReq(kBob, 1024, 1)).outcome,
            PlacementOutcome::kRetryLater);
  EXPECT_TRUE(ledger_->GetAllocation(alice.id).has_value());
}

TEST_F(LedgerTest, LeavingAGroupClosesTheSharedGpu) {
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kTeam).ok());
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  MustPlace(SliceReq(kBob, 4096, 10));
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, std::nullopt).ok());
  ExpectInvariants();
  EXPECT_EQ(Gpu(g0).domain, SharingKey::Conflict());
  EXPECT_EQ(Place(SliceReq(kAlice, 1024, 1)).outcome,
            PlacementOutcome::kRetryLater);
}

TEST_F(LedgerTest, JoiningAGroupOpensTheTenantsGpus) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  MustPlace(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(Place(SliceReq(kBob, 4096, 10)).outcome,
            PlacementOutcome::kRetryLater);
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kTeam).ok());
  ExpectInvariants();
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 4096, 10)), g0);
}

// ================================================================= health

TEST_F(LedgerTest, LostGpuIsSkippedButKeepsItsSlices) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 4096, 10));
  ASSERT_EQ(a.gpus, std::vector<GpuId>{g0});

  ASSERT_TRUE(ledger_->SetGpuHealth(g0, GpuHealth::kLost).ok());
  ExpectInvariants();
  // Not released, not moved.
  ASSERT_TRUE(ledger_->GetAllocation(a.id).has_value());
  EXPECT_EQ(ledger_->GetAllocation(a.id)->gpus, std::vector<GpuId>{g0});
  EXPECT_EQ(Gpu(g0).used_memory_mib, 4096);
  EXPECT_EQ(Gpu(g0).used_compute_percent, 10);
  // Best-Fit would pick g0 (less free memory), but it is lost.
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g1);

  ASSERT_TRUE(ledger_->SetGpuHealth(g1, GpuHealth::kLost).ok());
  const PlacementResult r = Place(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kLost), 2);
  EXPECT_CONTAINS(r.message,
                  "2 GPUs lost (GPU_LOST; allocatable again once "
                  "healthy)");

  // A heartbeat reports g0 healthy: allocatable again.
  ASSERT_TRUE(ledger_->SetGpuHealth(g0, GpuHealth::kOk).ok());
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), g0);
  ExpectInvariants();
}

TEST_F(LedgerTest, SliceOnLostGpuCanBeReleased) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 4096, 10));
  ASSERT_TRUE(ledger_->SetGpuHealth(g0, GpuHealth::kLost).ok());
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  EXPECT_EQ(Gpu(g0).used_memory_mib, 0);
  EXPECT_TRUE(Gpu(g0).empty());
  ExpectInvariants();
}

TEST_F(LedgerTest, LostGpuIsRetryLaterNotInfeasible) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->SetGpuHealth(g0, GpuHealth::kLost).ok());
  const PlacementResult slice = Place(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(slice.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(slice.count(RejectReason::kLost), 1);
  const PlacementResult whole = Place(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_EQ(whole.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(whole.count(RejectReason::kLost), 1);
}

TEST_F(LedgerTest, HealthAndCapabilityChangesOnUnknownGpuAreNotFound) {
  EXPECT_EQ(ledger_->SetGpuHealth(GpuId(5), GpuHealth::kLost).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ledger_->SetGpuCapabilities(GpuId(5), true, true).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ledger_->SetNodeTraits(NodeId(5), true, TaskLaunch::kImage).code(),
            StatusCode::kNotFound);
  const NodeId n = AddNode();
  const std::uint64_t generation = Node(n).generation;
  ASSERT_TRUE(ledger_->SetNodeTraits(n, true, TaskLaunch::kImage).ok());
  EXPECT_TRUE(Node(n).spec.containerized);
  EXPECT_EQ(Node(n).spec.launch, TaskLaunch::kImage);
  // A change is a new generation (memoising policies see it); a repeat is
  // not.
  const std::uint64_t changed = Node(n).generation;
  EXPECT_NE(changed, generation);
  ASSERT_TRUE(ledger_->SetNodeTraits(n, true, TaskLaunch::kImage).ok());
  EXPECT_EQ(Node(n).generation, changed);
}

// ======================================================= the task runtime

// `r`, carrying a command and/or an image.
PlacementRequest Launching(PlacementRequest r, bool command, bool image) {
  r.has_command = command;
  r.has_image = image;
  return r;
}

TEST_F(LedgerTest, ANodeTakesOnlyTasksItsRuntimeCanStart) {
  // Best-Fit prefers the processes node (its GPU is the smaller one).
  const NodeId processes = AddNode();
  const GpuId small = AddGpu(processes, k16G);
  const NodeId containers = AddNode();
  const GpuId large = AddGpu(containers, k80G);
  ASSERT_TRUE(
      ledger_->SetNodeTraits(processes, false, TaskLaunch::kCommand).ok());
  ASSERT_TRUE(
      ledger_->SetNodeTraits(containers, false, TaskLaunch::kImage).ok());
  // Whole GPUs (each released before the next).
  const PlacementRequest whole = PlacementRequest::WholeGpus(kAlice, 1);
  const Allocation on_containers = MustPlace(Launching(whole, false, true));
  EXPECT_EQ(on_containers.node, containers);
  ASSERT_TRUE(ledger_->Release(on_containers.id).ok());
  const Allocation on_processes = MustPlace(Launching(whole, true, false));
  EXPECT_EQ(on_processes.node, processes);
  ASSERT_TRUE(ledger_->Release(on_processes.id).ok());
  // Slices.
  const PlacementRequest slice = SliceReq(kAlice, 4096, 10);
  EXPECT_EQ(PlaceOn(Launching(slice, true, true)), small);
  EXPECT_EQ(PlaceOn(Launching(slice, true, false)), small);
  EXPECT_EQ(PlaceOn(Launching(slice, false, true)), large);
  const PlacementResult neither = Place(Launching(slice, false, false));
  EXPECT_EQ(neither.outcome, PlacementOutcome::kInfeasible) << neither.message;
  EXPECT_EQ(neither.count(RejectReason::kNodeRuntime), 2) << neither.message;
  EXPECT_NE(neither.message.find("neither a command nor an image"),
            std::string::npos)
      << neither.message;
  ExpectInvariants();
}

TEST_F(LedgerTest, ATaskNoNodeCanStartNeverFitsAndSaysWhy) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->SetNodeTraits(n, false, TaskLaunch::kCommand).ok());
  const PlacementResult image_only =
      Place(Launching(SliceReq(kAlice, 4096, 10), false, true));
  EXPECT_EQ(image_only.outcome, PlacementOutcome::kInfeasible);
  EXPECT_NE(image_only.message.find("on a node whose runtime can start it"),
            std::string::npos)
      << image_only.message;
  EXPECT_NE(image_only.message.find("1 GPU on nodes that run tasks as "
                                    "processes, which need a command"),
            std::string::npos)
      << image_only.message;
  // A node that did not say what it starts takes it.
  const NodeId silent = AddNode();
  const GpuId g = AddGpu(silent, k80G);
  EXPECT_EQ(PlaceOn(Launching(SliceReq(kAlice, 4096, 10), false, true)), g);
  // Held as a hold would be: the node that cannot start it is never a
  // GPU that could take it once empty.
  ledger_->Read([&](const ClusterView& view) {
    const PlacementRequest r =
        Launching(SliceReq(kAlice, 4096, 10), false, true);
    EXPECT_EQ(view.CheckOnceEmpty(view.gpu(view.node(n).gpus.front()), r),
              RejectReason::kNodeRuntime);
    EXPECT_FALSE(view.CheckOnceEmpty(view.gpu(g), r).has_value());
  });
}

// ============================================================= whole GPUs

TEST_F(LedgerTest, WholeGpusAccountFullMemoryAndCompute) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k40G);
  const Allocation a = MustPlace(PlacementRequest::WholeGpus(kAlice, 2));
  EXPECT_EQ(a.kind, RequestKind::kWholeGpus);
  EXPECT_EQ(a.node, n);
  std::vector<GpuId> gpus = a.gpus;
  std::sort(gpus.begin(), gpus.end());
  EXPECT_EQ(gpus, (std::vector<GpuId>{g0, g1}));
  EXPECT_EQ(a.memory_mib, k80G + k40G);
  EXPECT_EQ(a.compute_percent, 100);
  EXPECT_TRUE(Gpu(g0).whole_owned);
  EXPECT_EQ(Gpu(g0).free_memory_mib(), 0);
  EXPECT_EQ(Gpu(g1).free_compute_percent(), 0);
  ExpectInvariants();
}

TEST_F(LedgerTest, WholeGpuOnlyOnEmptyGpus) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 1024, 1)), g0);
  // g0 holds a tiny slice of Alice's own: still not whole-free.
  EXPECT_EQ(PlaceOn(PlacementRequest::WholeGpus(kAlice, 1)), g1);
  const PlacementResult r = Place(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kBusy), 2);
  EXPECT_CONTAINS(r.message, "not enough free whole GPUs on one node");
  EXPECT_CONTAINS(r.message, "2 GPUs already holding allocations");
}

TEST_F(LedgerTest, WholeOwnedGpuTakesNoSlices) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  MustPlace(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_TRUE(Gpu(g0).whole_owned);
  PlacementResult r = Place(SliceReq(kAlice, std::nullopt, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kBusy), 1);
  r = Place(SliceReq(kBob, std::nullopt, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 1);
}

TEST_F(LedgerTest, WholeGpusNeverGoToMigModeGpus) {
  const NodeId n = AddNode();
  const GpuId mig = AddGpu(n, k80G, "A100-SXM4-80GB", /*mig=*/true);
  const GpuId plain = AddGpu(n, k80G);
  EXPECT_EQ(PlaceOn(PlacementRequest::WholeGpus(kAlice, 1)), plain);
  const PlacementResult r = Place(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kMigMode), 1);
  EXPECT_EQ(r.count(RejectReason::kBusy), 1);
  EXPECT_CONTAINS(r.message,
                  "1 GPU in MIG mode (whole-GPU requests never go "
                  "there)");
  // Slices may still use the MIG GPU.
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4096, 10)), mig);
}

TEST_F(LedgerTest, WholeGpusOnlyMigGpusIsInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB", /*mig=*/true);
  AddGpu(n, k80G, "A100-SXM4-80GB", /*mig=*/true);
  const PlacementResult r = Place(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_EQ(r.count(RejectReason::kMigMode), 2);
  EXPECT_CONTAINS(r.message, "never fits in this cluster");
}

TEST_F(LedgerTest, EnablingMigRemovesGpuFromWholeGrants) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->SetGpuCapabilities(g0, true, false).ok());
  ExpectInvariants();
  EXPECT_TRUE(Gpu(g0).spec.mig_capable);
  EXPECT_EQ(Place(PlacementRequest::WholeGpus(kAlice, 1)).outcome,
            PlacementOutcome::kInfeasible);
  ASSERT_TRUE(ledger_->SetGpuCapabilities(g0, false, true).ok());
  ExpectInvariants();
  EXPECT_TRUE(Gpu(g0).spec.mps_capable);
  EXPECT_EQ(PlaceOn(PlacementRequest::WholeGpus(kAlice, 1)), g0);
}

TEST_F(LedgerTest, WholeGpusMustAllBeOnOneNode) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  AddGpu(n0, k80G);
  AddGpu(n0, k80G);
  AddGpu(n1, k80G);
  AddGpu(n1, k80G);
  // Four free GPUs in the cluster, but no node has three.
  const PlacementResult r = Place(PlacementRequest::WholeGpus(kAlice, 3));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_EQ(r.count(RejectReason::kTooFewGpus), 4);
  EXPECT_CONTAINS(r.message,
                  "no node could hold 3 whole GPUs on one "
                  "node even when idle");
  const Allocation a = MustPlace(PlacementRequest::WholeGpus(kAlice, 2));
  ASSERT_EQ(a.gpus.size(), 2u);
  EXPECT_EQ(Gpu(a.gpus[0]).node, Gpu(a.gpus[1]).node);
  EXPECT_EQ(Gpu(a.gpus[0]).node, a.node);
}

TEST_F(LedgerTest, WholeGpusTooFewPerNodeIsRetryLater) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  AddGpu(n0, k80G);
  AddGpu(n0, k80G);
  AddGpu(n1, k80G);
  AddGpu(n1, k80G);
  // One slice on each node: each node keeps one whole-free GPU.
  MustPlace(SliceReq(kAlice, 70000, 10));
  MustPlace(SliceReq(kAlice, 70000, 10));
  MustPlace(SliceReq(kAlice, 70000, 10));
  ASSERT_TRUE(ledger_->Release(SliceId(2)).ok());
  // Best-Fit put slices 1 and 2 on node 0 and slice 3 on node 1.
  const Allocation s1 = *ledger_->GetAllocation(SliceId(1));
  const Allocation s3 = *ledger_->GetAllocation(SliceId(3));
  ASSERT_NE(s1.node, s3.node);
  const PlacementResult r = Place(PlacementRequest::WholeGpus(kAlice, 2));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.count(RejectReason::kBusy), 2);
  EXPECT_EQ(r.count(RejectReason::kTooFewGpus), 2);
  EXPECT_CONTAINS(r.message,
                  "2 GPUs free on nodes with fewer than 2 "
                  "free");
}

TEST_F(LedgerTest, WholeGpusPickTheNodeWithFewestFreeGpus) {
  const NodeId roomy = AddNode();
  const NodeId tight = AddNode();
  for (int i = 0; i < 3; ++i) AddGpu(roomy, k80G);
  const GpuId t0 = AddGpu(tight, k80G);
  const GpuId t1 = AddGpu(tight, k80G);
  // A slice on t0 leaves the tight node one whole-free GPU.
  ASSERT_TRUE(ledger_
                  ->Restore(Allocation{.id = SliceId(50),
                                       .tenant = kAlice,
                                       .kind = RequestKind::kSlice,
                                       .gpus = {t0},
                                       .memory_mib = 1024,
                                       .compute_percent = 10})
                  .ok());
  // roomy: 3 free; tight: 1 free. One whole GPU goes to the tight node.
  const Allocation one = MustPlace(PlacementRequest::WholeGpus(kBob, 1));
  EXPECT_EQ(one.node, tight);
  EXPECT_EQ(one.gpus, std::vector<GpuId>{t1});
  // Now only the roomy node has free GPUs.
  const Allocation two = MustPlace(PlacementRequest::WholeGpus(kBob, 2));
  EXPECT_EQ(two.node, roomy);
}

TEST_F(LedgerTest, WholeGpusSkipNodeTooSmallForCount) {
  const NodeId small = AddNode();
  const NodeId large = AddNode();
  AddGpu(small, k80G);
  AddGpu(large, k80G);
  AddGpu(large, k80G);
  // Best-Fit prefers fewer free GPUs, but the small node has only one.
  const Allocation a = MustPlace(PlacementRequest::WholeGpus(kAlice, 2));
  EXPECT_EQ(a.node, large);
}

TEST_F(LedgerTest, WholeGpusTieBreakByNodeRank) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  AddGpu(n0, k80G);
  AddGpu(n1, k80G);
  EXPECT_EQ(MustPlace(PlacementRequest::WholeGpus(kAlice, 1)).node, n0);
  EXPECT_EQ(MustPlace(PlacementRequest::WholeGpus(kAlice, 1)).node, n1);
}

TEST_F(LedgerTest, WholeGpuReleaseMakesGpuWholeFreeAgain) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  const Allocation a = MustPlace(PlacementRequest::WholeGpus(kAlice, 1));
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  EXPECT_FALSE(Gpu(g).whole_owned);
  EXPECT_EQ(Gpu(g).used_memory_mib, 0);
  EXPECT_EQ(Gpu(g).used_compute_percent, 0);
  // Another tenant may now take it whole or sliced.
  EXPECT_EQ(PlaceOn(PlacementRequest::WholeGpus(kBob, 1)), g);
}

// ================================================================= models

TEST_F(LedgerTest, AllowedModelsRestrictSlicePlacement) {
  const NodeId n = AddNode();
  const GpuId a100 = AddGpu(n, k80G, "A100-SXM4-80GB");
  const GpuId t4 = AddGpu(n, k16G, "T4");
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.allowed_models = {"A100-SXM4-80GB"};
  // Best-Fit alone would choose the T4 (less free memory).
  EXPECT_EQ(PlaceOn(r), a100);
  r.allowed_models = {"T4", "V100"};
  EXPECT_EQ(PlaceOn(r), t4);
  r.allowed_models = {};  // any model: plain Best-Fit
  EXPECT_EQ(PlaceOn(r), t4);
}

TEST_F(LedgerTest, AllowedModelAbsentFromClusterIsInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB");
  AddGpu(n, k16G, "T4");
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.allowed_models = {"H100"};
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kInfeasible);
  EXPECT_EQ(res.count(RejectReason::kModelMismatch), 2);
  EXPECT_CONTAINS(res.message, "of the allowed models");
  EXPECT_CONTAINS(res.message,
                  "2 GPUs of a model the request does "
                  "not allow");
}

TEST_F(LedgerTest, AllowedModelTooSmallForRequestIsInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB");
  AddGpu(n, k16G, "T4");
  PlacementRequest r = SliceReq(kAlice, 20000, 10);
  r.allowed_models = {"T4"};
  EXPECT_EQ(Place(r).outcome, PlacementOutcome::kInfeasible);
}

TEST_F(LedgerTest, AllowedModelBusyIsRetryLater) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB");
  AddGpu(n, k16G, "T4");
  PlacementRequest r = SliceReq(kAlice, 10000, 10);
  r.allowed_models = {"T4"};
  MustPlace(r);
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kModelMismatch), 1);
  EXPECT_EQ(res.count(RejectReason::kNoMemory), 1);
}

TEST_F(LedgerTest, AllowedModelsRestrictWholeGpus) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB");
  const GpuId t4 = AddGpu(n, k16G, "T4");
  PlacementRequest r = PlacementRequest::WholeGpus(kAlice, 1);
  r.allowed_models = {"T4"};
  EXPECT_EQ(PlaceOn(r), t4);
  const PlacementResult again = Place(r);
  EXPECT_EQ(again.outcome, PlacementOutcome::kRetryLater);
  r.allowed_models = {"H100"};
  EXPECT_EQ(Place(r).outcome, PlacementOutcome::kInfeasible);
}

// ======================================================== node resources

TEST_F(LedgerTest, NodeCpuIsAccountedAndLimitsPlacement) {
  const NodeId n = AddNode(/*cpu=*/4000);
  AddGpu(n, k80G);
  AddGpu(n, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.cpu_milli = 3000;
  MustPlace(r);
  EXPECT_EQ(Node(n).used_cpu_milli, 3000);
  r.cpu_milli = 2000;
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeCpu), 2);
  EXPECT_CONTAINS(res.message, "2 GPUs on nodes without 2000 free milli-CPU");
  r.cpu_milli = 1000;
  MustPlace(r);
  EXPECT_EQ(Node(n).free_cpu_milli(), 0);
}

TEST_F(LedgerTest, NodeHostMemoryIsAccountedAndLimitsPlacement) {
  const NodeId n = AddNode(/*cpu=*/64000, /*host=*/8192);
  AddGpu(n, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.host_memory_mib = 6000;
  MustPlace(r);
  EXPECT_EQ(Node(n).used_host_memory_mib, 6000);
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeHostMemory), 1);
  EXPECT_CONTAINS(res.message,
                  "1 GPU on nodes without 6000 MB free host memory");
}

TEST_F(LedgerTest, NodeCpuSteersSliceToAnotherNode) {
  const NodeId busy = AddNode(/*cpu=*/4000);
  const NodeId idle = AddNode(/*cpu=*/4000);
  const GpuId on_busy = AddGpu(busy, k40G);  // less free memory: preferred
  const GpuId on_idle = AddGpu(idle, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.cpu_milli = 3000;
  EXPECT_EQ(PlaceOn(r), on_busy);
  EXPECT_EQ(PlaceOn(r), on_idle);  // busy node has only 1000 left
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeCpu), 2);
  // Releasing the first slice frees the busy node's CPU again.
  ASSERT_TRUE(ledger_->Release(SliceId(1)).ok());
  EXPECT_EQ(PlaceOn(r), on_busy);
}

// Regression for the lazily refreshed node resources in the index: stored
// free CPU is only an upper bound, tightened when it overstates the truth by
// 2x and raised on release. Draining a node step by step and freeing it again
// must keep every placement exact.
TEST_F(LedgerTest, LazilyRefreshedNodeCpuStaysExactWhileDrainingAndFreeing) {
  const NodeId n = AddNode(/*cpu=*/8000);
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 5);
  r.cpu_milli = 1000;
  std::vector<SliceId> placed;
  for (int i = 0; i < 8; ++i) {
    const Allocation a = MustPlace(r);
    EXPECT_TRUE(a.gpus[0] == g0 || a.gpus[0] == g1);
    placed.push_back(a.id);
    ASSERT_TRUE(ledger_->CheckInvariants().ok()) << "after place " << i;
  }
  const PlacementResult full = Place(r);
  EXPECT_EQ(full.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(full.count(RejectReason::kNodeCpu), 2);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(ledger_->Release(placed[i]).ok());
    ASSERT_TRUE(ledger_->CheckInvariants().ok()) << "after release " << i;
    r.cpu_milli = 1000 * (i + 1);  // exactly what is free now
    const Allocation a = MustPlace(r);
    ASSERT_TRUE(ledger_->Release(a.id).ok());
  }
  r.cpu_milli = 8001;
  EXPECT_EQ(Place(r).outcome, PlacementOutcome::kInfeasible);
}

// ====================================================== node-only tasks

TEST_F(LedgerTest, NodeOnlyTaskTakesTheTightestNodeAndReturnsItsCpu) {
  const NodeId big = AddNode(/*cpu=*/16000);
  const NodeId small = AddNode(/*cpu=*/8000);
  const GpuId on_small = AddGpu(small, k80G);
  AddGpu(big, k80G);
  const Allocation a =
      MustPlace(PlacementRequest::NodeOnly(kAlice, 6000, 1024));
  EXPECT_EQ(a.node, small);  // equally idle GPUs: least free CPU that fits
  EXPECT_TRUE(a.gpus.empty());
  EXPECT_EQ(Node(small).used_cpu_milli, 6000);
  EXPECT_EQ(Node(small).used_host_memory_mib, 1024);
  EXPECT_TRUE(Gpu(on_small).empty());  // no GPU accounting
  // A slice needing 4000 CPU no longer fits the small node.
  PlacementRequest slice = SliceReq(kBob, 1024, 10);
  slice.cpu_milli = 4000;
  EXPECT_EQ(MustPlace(slice).node, big);
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  EXPECT_EQ(Node(small).used_cpu_milli, 0);
  // Both nodes fit 8000 now, but the big node's GPU is partly busy: a task
  // without GPUs goes where it strands the least idle GPU.
  EXPECT_EQ(MustPlace(PlacementRequest::NodeOnly(kAlice, 8000, 0)).node, big);
}

TEST_F(LedgerTest, NodeOnlyTaskRetryLaterAndInfeasible) {
  const NodeId n = AddNode(/*cpu=*/8000);
  AddGpu(n, k80G);
  MustPlace(PlacementRequest::NodeOnly(kAlice, 6000, 0));
  const PlacementResult later =
      Place(PlacementRequest::NodeOnly(kAlice, 4000, 0));
  EXPECT_EQ(later.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(later.count(RejectReason::kNodeCpu), 1);
  EXPECT_CONTAINS(later.message, "0 of 1 nodes fit");
  const PlacementResult never =
      Place(PlacementRequest::NodeOnly(kAlice, 9000, 0));
  EXPECT_EQ(never.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(never.message, "never fits");
}

TEST_F(LedgerTest, NodeOnlyTaskValidation) {
  PlacementRequest nothing = PlacementRequest::NodeOnly(kAlice, 0, 0);
  PlacementResult r = Place(nothing);
  EXPECT_EQ(r.outcome, PlacementOutcome::kInvalid);
  EXPECT_EQ(r.status.field(), "cpu_milli");
  PlacementRequest with_gpu = PlacementRequest::NodeOnly(kAlice, 1000, 0);
  with_gpu.memory_mib = 1024;
  r = Place(with_gpu);
  EXPECT_EQ(r.outcome, PlacementOutcome::kInvalid);
  EXPECT_EQ(r.status.field(), "gpu_memory_mb");
}

TEST_F(LedgerTest, RestoreNodeOnlyTask) {
  const NodeId n = AddNode(/*cpu=*/8000);
  AddGpu(n, k80G);
  Allocation a;
  a.id = SliceId(41);
  a.tenant = kAlice;
  a.kind = RequestKind::kNodeOnly;
  a.node = n;
  a.cpu_milli = 5000;
  ASSERT_TRUE(ledger_->Restore(a).ok());
  EXPECT_EQ(Node(n).used_cpu_milli, 5000);
  a.id = SliceId(42);
  EXPECT_EQ(ledger_->Restore(a).status().code(),
            StatusCode::kFailedPrecondition);  // 10000 > 8000
  a.gpus = {GpuId(0)};
  EXPECT_EQ(ledger_->Restore(a).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MustPlace(PlacementRequest::NodeOnly(kAlice, 1000, 0)).id,
            SliceId(42));  // the counter moved past the restored id
}

TEST_F(LedgerTest, ReservedAndAdvancedIdsAreNeverHandedOutAgain) {
  const NodeId n = AddNode(/*cpu=*/8000);
  AddGpu(n, k80G);
  const SliceId reserved = ledger_->ReserveSliceId();
  EXPECT_NE(MustPlace(PlacementRequest::NodeOnly(kAlice, 100, 0)).id, reserved);
  ledger_->AdvanceSliceIdPast(SliceId(500));
  EXPECT_EQ(MustPlace(PlacementRequest::NodeOnly(kAlice, 100, 0)).id,
            SliceId(501));
  ledger_->AdvanceSliceIdPast(SliceId(7));  // never moves backwards
  EXPECT_EQ(ledger_->ReserveSliceId(), SliceId(502));
}

TEST_F(LedgerTest, NodeResourcesLimitWholeGpus) {
  const NodeId small = AddNode(/*cpu=*/1000);
  const NodeId big = AddNode(/*cpu=*/16000);
  AddGpu(small, k80G);
  AddGpu(big, k80G);
  AddGpu(big, k80G);
  PlacementRequest r = PlacementRequest::WholeGpus(kAlice, 1);
  r.cpu_milli = 8000;
  // The small node has fewer free GPUs (preferred) but too little CPU.
  EXPECT_EQ(MustPlace(r).node, big);
  EXPECT_EQ(Node(big).used_cpu_milli, 8000);
  r.cpu_milli = 9000;
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeCpu), 2);  // 1 + 1 eligible GPUs
}

TEST_F(LedgerTest, NodeCpuAboveEveryNodesCapacityIsInfeasible) {
  const NodeId n0 = AddNode(/*cpu=*/4000);
  const NodeId n1 = AddNode(/*cpu=*/8000);
  AddGpu(n0, k80G);
  AddGpu(n1, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.cpu_milli = 8001;
  PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(res.message, "on a node with enough CPU / host memory");
  // Within one node's capacity but not free now: retry later.
  r.cpu_milli = 5000;
  MustPlace(r);
  res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeCpu), 2);
}

TEST_F(LedgerTest, NodeHostMemoryAboveEveryNodesCapacityIsInfeasible) {
  const NodeId n = AddNode(/*cpu=*/4000, /*host=*/8192);
  AddGpu(n, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.host_memory_mib = 8193;
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kInfeasible);
  EXPECT_EQ(res.count(RejectReason::kNodeHostMemory), 1);
}

// ============================================================== Best-Fit

TEST_F(LedgerTest, BestFitPicksLeastFreeMemory) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  const GpuId big = AddGpu(n0, k80G);
  const GpuId mid = AddGpu(n1, k40G);
  const GpuId small = AddGpu(n0, k24G);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 10000, 10)), small);  // 14576 left
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 10000, 10)), small);  // 4576 left
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 20000, 10)), mid);    // 20960 left
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 30000, 10)), big);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 4576, 10)), small);  // exact fit
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 20000, 10)), mid);   // 960 left
  EXPECT_EQ(Gpu(small).free_memory_mib(), 0);
}

TEST_F(LedgerTest, BestFitPrefersOpenGpuOfTheTenantOverEmptyGpu) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k40G);
  // Alice opens the 80 GB GPU with a large slice (too big for g1).
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 60000, 10)), g0);  // 21920 left
  // 21920 < 40960: the open GPU is the better fit.
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 1024, 10)), g0);
  // Bob cannot join; the empty g1 is his best fit.
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 1024, 10)), g1);
}

TEST_F(LedgerTest, BestFitTieBreaksByNodeRankThenGpuId) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  const NodeId n2 = AddNode();
  const GpuId a = AddGpu(n1, k80G);  // lower GPU id, higher node rank
  const GpuId b = AddGpu(n0, k80G);
  const GpuId c = AddGpu(n0, k80G);
  const GpuId d = AddGpu(n2, k80G);
  // Default seed 0: rank = node id. n0 first, lower GPU id first within it.
  EXPECT_EQ(PlaceOn(SliceReq(TenantId(100), 1024, 10)), b);
  EXPECT_EQ(PlaceOn(SliceReq(TenantId(101), 1024, 10)), c);
  EXPECT_EQ(PlaceOn(SliceReq(TenantId(102), 1024, 10)), a);
  EXPECT_EQ(PlaceOn(SliceReq(TenantId(103), 1024, 10)), d);
  ledger_->Read([&](const ClusterView& view) {
    EXPECT_EQ(view.node(n0).tie_rank, 0u);
    EXPECT_EQ(view.node(n1).tie_rank, 1u);
    EXPECT_EQ(view.node(n2).tie_rank, 2u);
  });
}

TEST(LedgerTieBreakTest, SeedChangesTieRanksDeterministically) {
  constexpr int kNodes = 8;
  auto first_choice = [](std::uint64_t seed, std::uint64_t* min_rank_node) {
    auto ledger =
        std::move(Ledger::Create(LedgerOptions{.tie_break_seed = seed}))
            .value();
    for (int i = 0; i < kNodes; ++i) {
      NodeSpec ns;
      ns.name = "n" + std::to_string(i);
      ns.cpu_milli = 1000;
      ns.host_memory_mib = 1000;
      const NodeId n = *ledger->AddNode(ns);
      GpuSpec gs;
      gs.uuid = "GPU-" + std::to_string(i);
      gs.model = "A100";
      gs.memory_mib = k80G;
      EXPECT_TRUE(ledger->AddGpu(n, gs).ok());
    }
    ledger->Read([&](const ClusterView& view) {
      std::uint64_t best = 0;
      for (int i = 1; i < kNodes; ++i) {
        if (view.node(NodeId(i)).tie_rank < view.node(NodeId(best)).tie_rank) {
          best = i;
        }
      }
      *min_rank_node = best;
    });
    const scheduler::BestFitPolicy policy;
    const PlacementResult r =
        ledger->Place(PlacementRequest::Slice(kAlice, 1024, 10), policy);
    EXPECT_TRUE(r.placed()) << r.message;
    EXPECT_TRUE(ledger->CheckInvariants().ok());
    return r.allocation.node.value();
  };

  std::uint64_t expected = 0;
  EXPECT_EQ(first_choice(0, &expected), 0u);
  EXPECT_EQ(expected, 0u);
  std::set<std::uint64_t> chosen;
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    const std::uint64_t node = first_choice(seed, &expected);
    EXPECT_EQ(node, expected) << "seed " << seed;  // lowest rank wins the tie
    std::uint64_t again_expected = 0;
    EXPECT_EQ(first_choice(seed, &again_expected), node) << "seed " << seed;
    chosen.insert(node);
  }
  EXPECT_GT(chosen.size(), 1u) << "seeds never change the tie-break";
}

TEST(LedgerTieBreakTest, LessFreeMemoryBeatsRank) {
  for (std::uint64_t seed : {0u, 1u, 7u, 42u}) {
    auto ledger =
        std::move(Ledger::Create(LedgerOptions{.tie_break_seed = seed}))
            .value();
    std::vector<GpuId> gpus;
    for (int i = 0; i < 4; ++i) {
      const NodeId n =
          *ledger->AddNode(NodeSpec{.name = "n" + std::to_string(i)});
      GpuSpec gs;
      gs.uuid = "GPU-" + std::to_string(i);
      gs.model = "A100";
      gs.memory_mib = i == 2 ? k40G : k80G;
      gpus.push_back(*ledger->AddGpu(n, gs));
    }
    const scheduler::BestFitPolicy policy;
    const PlacementResult r =
        ledger->Place(PlacementRequest::Slice(kAlice, 1024, 10), policy);
    ASSERT_TRUE(r.placed());
    EXPECT_EQ(r.allocation.gpus, std::vector<GpuId>{gpus[2]}) << seed;
  }
}

// ================================================================ Release

TEST_F(LedgerTest, ReleaseReturnsExactlyTheQuota) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  PlacementRequest keep = SliceReq(kAlice, 3000, 20);
  keep.cpu_milli = 500;
  keep.host_memory_mib = 700;
  MustPlace(keep);
  const Usage before = Snapshot();
  PlacementRequest r = SliceReq(kAlice, 5000, 35);
  r.cpu_milli = 1500;
  r.host_memory_mib = 2048;
  const Allocation a = MustPlace(r);
  EXPECT_EQ(Gpu(g).used_memory_mib, 8000);
  EXPECT_EQ(Gpu(g).used_compute_percent, 55);
  EXPECT_EQ(Node(n).used_cpu_milli, 2000);
  EXPECT_EQ(Node(n).used_host_memory_mib, 2748);
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  EXPECT_EQ(Snapshot(), before);
  EXPECT_FALSE(ledger_->GetAllocation(a.id).has_value());
  EXPECT_EQ(ledger_->allocation_count(), 1u);
}

TEST_F(LedgerTest, ReleaseTwiceIsNotFound) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 3000, 20));
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  const Status again = ledger_->Release(a.id);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(again.message(), "not allocated");
  EXPECT_EQ(ledger_->Release(SliceId(777)).code(), StatusCode::kNotFound);
}

// ============================================================ resize (13)

TEST_F(LedgerTest, ResizeRaisesWithinFreeMemoryAndReleaseReturnsTheNewSize) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  const Usage empty = Snapshot();
  const Allocation a = MustPlace(SliceReq(kAlice, 4096, 20));
  MustPlace(SliceReq(kAlice, 8192, 20));  // 4096 MB left free
  StatusOr<Allocation> r = ledger_->ResizeSlice(a.id, 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->memory_mib, 8192);
  EXPECT_EQ(r->compute_percent, 20);
  EXPECT_EQ(r->gpus, a.gpus);
  EXPECT_EQ(ledger_->GetAllocation(a.id)->memory_mib, 8192);
  EXPECT_EQ(Gpu(g).used_memory_mib, 16384);
  EXPECT_EQ(Gpu(g).free_memory_mib(), 0);
  EXPECT_EQ(Gpu(g).used_compute_percent, 40);
  EXPECT_EQ(Gpu(g).allocation_count, 2);
  ExpectInvariants();
  // The full GPU now takes nothing more.
  EXPECT_EQ(Place(SliceReq(kAlice, 32, 1)).outcome,
            PlacementOutcome::kRetryLater);
  // Release returns the new size exactly.
  for (const Allocation& live : ledger_->Allocations()) {
    ASSERT_TRUE(ledger_->Release(live.id).ok());
  }
  EXPECT_EQ(Snapshot(), empty);
}

TEST_F(LedgerTest, ResizeThatDoesNotFitNamesTheFreeMemoryAndChangesNothing) {
  const NodeId n = AddNode();
  AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, 4096, 20));
  MustPlace(SliceReq(kAlice, 10240, 20));  // 2048 MB left free
  const Usage before = Snapshot();
  StatusOr<Allocation> r = ledger_->ResizeSlice(a.id, 8192);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), "has 2048 MB free");
  EXPECT_CONTAINS(r.status().message(), "needs 4096 MB more");
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(ledger_->GetAllocation(a.id)->memory_mib, 4096);
  // Exactly the free memory fits.
  EXPECT_TRUE(ledger_->ResizeSlice(a.id, 4096 + 2048).ok());
}

TEST_F(LedgerTest, ResizeLowersAlwaysAndFreesTheDifference) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, 12288, 20));
  ASSERT_TRUE(ledger_->SetGpuHealth(g, GpuHealth::kLost).ok());
  // Lowering works on a lost GPU too; raising does not.
  StatusOr<Allocation> r = ledger_->ResizeSlice(a.id, 1024);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Gpu(g).used_memory_mib, 1024);
  EXPECT_EQ(ledger_->ResizeSlice(a.id, 2048).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ledger_->SetGpuHealth(g, GpuHealth::kOk).ok());
  // The freed memory is placeable again (12288 MB did not fit before).
  MustPlace(SliceReq(kAlice, 12288, 10));
  // Same size: nothing to do.
  EXPECT_EQ(ledger_->ResizeSlice(a.id, 1024)->memory_mib, 1024);
  ExpectInvariants();
}

TEST_F(LedgerTest, ResizeKeepsTheNinetyPercentRuleAndTheMinimum) {
  const NodeId n = AddNode();
  AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, 1024, 20));
  // 90% of 16384 is 14745 MB: free memory alone would allow 16384.
  StatusOr<Allocation> r = ledger_->ResizeSlice(a.id, k16G);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), "at most 14745 MB");
  EXPECT_TRUE(ledger_->ResizeSlice(a.id, 14745).ok());
  r = ledger_->ResizeSlice(a.id, 16);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().field(), "memory_mb");
  EXPECT_EQ(ledger_->GetAllocation(a.id)->memory_mib, 14745);
}

TEST_F(LedgerTest, ResizeRefusesWholeGpusAndUnknownSlices) {
  const NodeId n = AddNode();
  AddGpu(n, k16G);
  AddGpu(n, k16G);
  const Allocation whole = MustPlace(PlacementRequest::WholeGpus(kAlice, 1));
  const Usage before = Snapshot();
  StatusOr<Allocation> r = ledger_->ResizeSlice(whole.id, 1024);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), "whole GPUs");
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(ledger_->ResizeSlice(SliceId(999), 1024).status().code(),
            StatusCode::kNotFound);
}

TEST_F(LedgerTest, ResizeOfAComputeOnlySliceGivesItMemory) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  const Allocation a = MustPlace(SliceReq(kAlice, std::nullopt, 30));
  EXPECT_EQ(a.memory_mib, 0);
  StatusOr<Allocation> r = ledger_->ResizeSlice(a.id, 2048);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Gpu(g).used_memory_mib, 2048);
  EXPECT_EQ(Gpu(g).used_compute_percent, 30);
  ExpectInvariants();
}

TEST_F(LedgerTest, ReleaseOfLastSliceFreesGpuForOtherTenants) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 3000, 20));
  ASSERT_EQ(Place(SliceReq(kBob, 3000, 20)).outcome,
            PlacementOutcome::kRetryLater);
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  EXPECT_TRUE(Gpu(g).tenants.empty());
  EXPECT_EQ(Gpu(g).domain, SharingKey{});
  EXPECT_EQ(PlaceOn(SliceReq(kBob, 3000, 20)), g);
}

TEST_F(LedgerTest, SliceIdsAscendAndAllocationsAreListedInOrder) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 1000, 10));
  const Allocation b = MustPlace(SliceReq(kAlice, 1000, 10));
  const Allocation c = MustPlace(SliceReq(kAlice, 1000, 10));
  EXPECT_EQ(a.id, SliceId(1));
  EXPECT_EQ(b.id, SliceId(2));
  EXPECT_EQ(c.id, SliceId(3));
  ASSERT_TRUE(ledger_->Release(b.id).ok());
  const std::vector<Allocation> all = ledger_->Allocations();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], a);
  EXPECT_EQ(all[1], c);
  // Released ids are not reused.
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 1000, 10)).id, SliceId(4));
}

// ================================================================ Restore

Allocation SliceAllocation(std::uint64_t id, TenantId tenant, GpuId gpu,
                           MemoryMib memory, ComputePercent compute) {
  Allocation a;
  a.id = SliceId(id);
  a.tenant = tenant;
  a.kind = RequestKind::kSlice;
  a.gpus = {gpu};
  a.memory_mib = memory;
  a.compute_percent = compute;
  return a;
}

TEST_F(LedgerTest, RestoreMovesIdCounterPastRestoredId) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  StatusOr<Allocation> r =
      ledger_->Restore(SliceAllocation(100, kAlice, g, 4096, 25));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->node, n);  // taken from the GPU
  EXPECT_EQ(Gpu(g).used_memory_mib, 4096);
  EXPECT_EQ(Gpu(g).used_compute_percent, 25);
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 1024, 10)).id, SliceId(101));
  // A lower restored id does not move the counter back.
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(7, kAlice, g, 1024, 5)).ok());
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 1024, 10)).id, SliceId(102));
  ExpectInvariants();
}

TEST_F(LedgerTest, RestoreRefusesDuplicateId) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(5, kAlice, g, 1024, 5)).ok());
  EXPECT_EQ(
      ledger_->Restore(SliceAllocation(5, kAlice, g, 1024, 5)).status().code(),
      StatusCode::kAlreadyExists);
}

TEST_F(LedgerTest, RestoreRefusesOversell) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G);
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(1, kAlice, g, 10000, 60)).ok());
  const Usage before = Snapshot();
  StatusOr<Allocation> mem =
      ledger_->Restore(SliceAllocation(2, kAlice, g, 10000, 10));
  ASSERT_FALSE(mem.ok());
  EXPECT_EQ(mem.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(mem.status().message(), "oversell");
  StatusOr<Allocation> cpt =
      ledger_->Restore(SliceAllocation(3, kAlice, g, 100, 41));
  ASSERT_FALSE(cpt.ok());
  EXPECT_EQ(cpt.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(ledger_->allocation_count(), 1u);
  // Exactly the rest fits.
  EXPECT_TRUE(
      ledger_->Restore(SliceAllocation(4, kAlice, g, k16G - 10000, 40)).ok());
}

TEST_F(LedgerTest, RestoreAllowsLostGpuModelAndNinetyPercentRule) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k16G, "T4");
  ASSERT_TRUE(ledger_->SetGpuHealth(g, GpuHealth::kLost).ok());
  // 16000 MB is above 90% of the largest GPU (14745), and the GPU is lost:
  // Restore records what exists in the world anyway.
  StatusOr<Allocation> r =
      ledger_->Restore(SliceAllocation(9, kAlice, g, 16000, 50));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Gpu(g).used_memory_mib, 16000);
  ExpectInvariants();
  // The lost GPU still takes no new placement.
  EXPECT_EQ(Place(SliceReq(kAlice, 32, 1)).outcome,
            PlacementOutcome::kRetryLater);
}

TEST_F(LedgerTest, RestoreChecksTenancy) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(1, kAlice, g, 1024, 10)).ok());
  StatusOr<Allocation> r =
      ledger_->Restore(SliceAllocation(2, kBob, g, 1024, 10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), "shared group");
  ASSERT_TRUE(ledger_->DefineGroup(kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kAlice, kTeam).ok());
  ASSERT_TRUE(ledger_->SetTenantGroup(kBob, kTeam).ok());
  EXPECT_TRUE(ledger_->Restore(SliceAllocation(2, kBob, g, 1024, 10)).ok());
}

TEST_F(LedgerTest, RestoreWholeGpus) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k40G);
  Allocation whole;
  whole.id = SliceId(3);
  whole.tenant = kAlice;
  whole.kind = RequestKind::kWholeGpus;
  whole.gpus = {g0, g1};
  StatusOr<Allocation> r = ledger_->Restore(whole);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->memory_mib, k80G + k40G);
  EXPECT_EQ(r->compute_percent, 100);
  EXPECT_TRUE(Gpu(g0).whole_owned);
  EXPECT_TRUE(Gpu(g1).whole_owned);
  // Neither whole nor sliced on top of a whole grant.
  whole.id = SliceId(4);
  whole.gpus = {g1};
  EXPECT_EQ(ledger_->Restore(whole).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      ledger_->Restore(SliceAllocation(5, kAlice, g0, 0, 0)).status().code(),
      StatusCode::kFailedPrecondition);
}

TEST_F(LedgerTest, RestoreRejectsMalformedAllocations) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  const GpuId g0 = AddGpu(n0, k80G);
  const GpuId g1 = AddGpu(n1, k80G);
  const GpuId g2 = AddGpu(n0, k80G);

  Allocation a = SliceAllocation(1, kAlice, g0, 1024, 10);
  a.id = SliceId();
  EXPECT_EQ(ledger_->Restore(a).status().field(), "id");
  a = SliceAllocation(1, TenantId(), g0, 1024, 10);
  EXPECT_EQ(ledger_->Restore(a).status().field(), "tenant");
  a = SliceAllocation(1, kAlice, g0, 1024, 10);
  a.gpus.clear();
  EXPECT_EQ(ledger_->Restore(a).status().field(), "gpus");
  a.gpus = {g0, g2};
  EXPECT_EQ(ledger_->Restore(a).status().field(), "gpus");  // slice on two
  a = SliceAllocation(1, kAlice, g0, -1, 10);
  EXPECT_EQ(ledger_->Restore(a).status().code(), StatusCode::kInvalidArgument);
  a = SliceAllocation(1, kAlice, g0, 1024, 101);
  EXPECT_EQ(ledger_->Restore(a).status().code(), StatusCode::kInvalidArgument);
  a = SliceAllocation(1, kAlice, g0, 1024, 10);
  a.cpu_milli = -5;
  EXPECT_EQ(ledger_->Restore(a).status().code(), StatusCode::kInvalidArgument);

  Allocation whole;
  whole.id = SliceId(2);
  whole.tenant = kAlice;
  whole.kind = RequestKind::kWholeGpus;
  whole.gpus = {g0, g0};
  EXPECT_EQ(ledger_->Restore(whole).status().field(), "gpus");  // twice
  whole.gpus = {g0, g1};
  EXPECT_EQ(ledger_->Restore(whole).status().field(), "gpus");  // two nodes
  whole.gpus = {GpuId(99)};
  EXPECT_EQ(ledger_->Restore(whole).status().code(), StatusCode::kNotFound);

  a = SliceAllocation(3, kAlice, g0, 1024, 10);
  a.cpu_milli = 64001;
  EXPECT_EQ(ledger_->Restore(a).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_->allocation_count(), 0u);
  EXPECT_TRUE(Gpu(g0).empty());
}

// ============================================================== inventory

TEST_F(LedgerTest, RemoveGpuRefusedWhileAllocated) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G);
  const Allocation a = MustPlace(SliceReq(kAlice, 1024, 10));
  const Status s = ledger_->RemoveGpu(g);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(s.message(), "1 allocation(s)");
  ledger_->Read(
      [](const ClusterView& view) { EXPECT_EQ(view.live_gpu_count(), 1u); });
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  ASSERT_TRUE(ledger_->RemoveGpu(g).ok());
  EXPECT_EQ(ledger_->RemoveGpu(g).code(), StatusCode::kNotFound);
  ledger_->Read([&](const ClusterView& view) {
    EXPECT_FALSE(view.HasGpu(g));
    EXPECT_EQ(view.live_gpu_count(), 0u);
    EXPECT_EQ(view.largest_gpu_memory_mib(), 0);
  });
  const PlacementResult r = Place(SliceReq(kAlice, 1024, 10));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(r.message, "it has no GPUs");
}

TEST_F(LedgerTest, RemoveNodeRefusedWhileAllocated) {
  const NodeId n = AddNode();
  const GpuId g0 = AddGpu(n, k80G);
  const GpuId g1 = AddGpu(n, k80G);
  const Allocation a = MustPlace(PlacementRequest::WholeGpus(kAlice, 1));
  EXPECT_EQ(ledger_->RemoveNode(n).code(), StatusCode::kFailedPrecondition);
  ledger_->Read([&](const ClusterView& view) {
    EXPECT_TRUE(view.HasNode(n));
    EXPECT_TRUE(view.HasGpu(g0));
    EXPECT_TRUE(view.HasGpu(g1));
  });
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  ASSERT_TRUE(ledger_->RemoveNode(n).ok());
  ledger_->Read([&](const ClusterView& view) {
    EXPECT_FALSE(view.HasNode(n));
    EXPECT_FALSE(view.HasGpu(g0));
    EXPECT_FALSE(view.HasGpu(g1));
    EXPECT_EQ(view.live_gpu_count(), 0u);
  });
  EXPECT_EQ(ledger_->RemoveNode(n).code(), StatusCode::kNotFound);
  GpuSpec spec;
  spec.uuid = "GPU-new";
  spec.model = "A100";
  spec.memory_mib = k80G;
  EXPECT_EQ(ledger_->AddGpu(n, spec).status().code(), StatusCode::kNotFound);
}

TEST_F(LedgerTest, RemovedGpuUuidAndIndexCanBeReused) {
  const NodeId n = AddNode();
  GpuSpec spec;
  spec.uuid = "GPU-x";
  spec.index = 0;
  spec.model = "A100";
  spec.memory_mib = k80G;
  const GpuId g = *ledger_->AddGpu(n, spec);
  ASSERT_TRUE(ledger_->RemoveGpu(g).ok());
  StatusOr<GpuId> again = ledger_->AddGpu(n, spec);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE(*again, g);
  EXPECT_EQ(PlaceOn(SliceReq(kAlice, 1024, 10)), *again);
}

TEST_F(LedgerTest, AddGpuDuplicateUuidOrIndexIsAlreadyExists) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  GpuSpec spec;
  spec.uuid = "GPU-a";
  spec.index = 0;
  spec.model = "A100";
  spec.memory_mib = k80G;
  ASSERT_TRUE(ledger_->AddGpu(n0, spec).ok());
  // Same UUID anywhere in the cluster.
  spec.index = 3;
  StatusOr<GpuId> dup = ledger_->AddGpu(n1, spec);
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_CONTAINS(dup.status().message(), "GPU-a");
  // Same index on the same node.
  spec.uuid = "GPU-b";
  spec.index = 0;
  dup = ledger_->AddGpu(n0, spec);
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_CONTAINS(dup.status().message(), "index 0");
  // Same index on another node is fine.
  EXPECT_TRUE(ledger_->AddGpu(n1, spec).ok());
  ledger_->Read(
      [](const ClusterView& view) { EXPECT_EQ(view.live_gpu_count(), 2u); });
}

TEST_F(LedgerTest, AddGpuInvalidSpecNamesTheField) {
  const NodeId n = AddNode();
  GpuSpec good;
  good.uuid = "GPU-ok";
  good.model = "A100";
  good.memory_mib = k80G;
  struct Case {
    const char* field;
    GpuSpec spec;
  };
  std::vector<Case> cases;
  cases.push_back({"uuid", good});
  cases.back().spec.uuid = "";
  cases.push_back({"model", good});
  cases.back().spec.model = "";
  cases.push_back({"vendor", good});
  cases.back().spec.vendor = "";
  cases.push_back({"memory_mib", good});
  cases.back().spec.memory_mib = 0;
  cases.push_back({"memory_mib", good});
  cases.back().spec.memory_mib = -1;
  cases.push_back({"index", good});
  cases.back().spec.index = -1;
  for (const Case& c : cases) {
    StatusOr<GpuId> r = ledger_->AddGpu(n, c.spec);
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(r.status().field(), c.field);
  }
  EXPECT_EQ(ledger_->AddGpu(NodeId(42), good).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(ledger_->AddGpu(n, good).ok());
}

TEST_F(LedgerTest, AddNodeInvalidSpecNamesTheField) {
  NodeSpec spec;
  EXPECT_EQ(ledger_->AddNode(spec).status().field(), "name");
  spec.name = "n";
  spec.cpu_milli = -1;
  EXPECT_EQ(ledger_->AddNode(spec).status().field(), "cpu_milli");
  spec.cpu_milli = 0;
  spec.host_memory_mib = -1;
  EXPECT_EQ(ledger_->AddNode(spec).status().field(), "host_memory_mib");
  spec.host_memory_mib = 0;
  EXPECT_TRUE(ledger_->AddNode(spec).ok());
}

// ============================================================= validation

void ExpectInvalid(const PlacementRequest& r, const std::string& field) {
  const Status s = ValidatePlacementRequest(r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_EQ(s.field(), field);
  EXPECT_FALSE(s.message().empty());
}

TEST(ValidatePlacementRequestTest, AcceptsWellFormedRequests) {
  EXPECT_TRUE(ValidatePlacementRequest(SliceReq(kAlice, 32)).ok());
  EXPECT_TRUE(ValidatePlacementRequest(SliceReq(kAlice, std::nullopt, 1)).ok());
  EXPECT_TRUE(
      ValidatePlacementRequest(SliceReq(kAlice, std::nullopt, 100)).ok());
  EXPECT_TRUE(ValidatePlacementRequest(SliceReq(kAlice, 4096, 50)).ok());
  EXPECT_TRUE(
      ValidatePlacementRequest(PlacementRequest::WholeGpus(kAlice, 1)).ok());
}

TEST(ValidatePlacementRequestTest, TenantIsRequired) {
  ExpectInvalid(SliceReq(TenantId(), 1024), "tenant");
  ExpectInvalid(PlacementRequest::WholeGpus(TenantId(), 1), "tenant");
}

TEST(ValidatePlacementRequestTest, MemoryBelowThirtyTwoIsRejected) {
  ExpectInvalid(SliceReq(kAlice, 31), "gpu_memory_mb");
  ExpectInvalid(SliceReq(kAlice, 0), "gpu_memory_mb");
  ExpectInvalid(SliceReq(kAlice, -100), "gpu_memory_mb");
  EXPECT_CONTAINS(ValidatePlacementRequest(SliceReq(kAlice, 31)).message(),
                  "32");
}

TEST(ValidatePlacementRequestTest, ComputeOutsideOneToHundredIsRejected) {
  ExpectInvalid(SliceReq(kAlice, 1024, 0), "gpu_compute_ratio");
  ExpectInvalid(SliceReq(kAlice, 1024, -5), "gpu_compute_ratio");
  ExpectInvalid(SliceReq(kAlice, 1024, 101), "gpu_compute_ratio");
  ExpectInvalid(SliceReq(kAlice, std::nullopt, 0), "gpu_compute_ratio");
}

TEST(ValidatePlacementRequestTest, SliceNeedsMemoryOrCompute) {
  const Status s = ValidatePlacementRequest(SliceReq(kAlice, std::nullopt));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.field().empty());
  EXPECT_CONTAINS(s.message(), "gpu_memory_mb or gpu_compute_ratio");
}

TEST(ValidatePlacementRequestTest, GpuRequiredCombinations) {
  ExpectInvalid(PlacementRequest::WholeGpus(kAlice, 0), "gpu_required");
  ExpectInvalid(PlacementRequest::WholeGpus(kAlice, -1), "gpu_required");
  PlacementRequest whole_with_memory = PlacementRequest::WholeGpus(kAlice, 1);
  whole_with_memory.memory_mib = 1024;
  ExpectInvalid(whole_with_memory, "gpu_memory_mb");
  PlacementRequest whole_with_compute = PlacementRequest::WholeGpus(kAlice, 1);
  whole_with_compute.compute_percent = 50;
  ExpectInvalid(whole_with_compute, "gpu_compute_ratio");
  PlacementRequest slice_with_count = SliceReq(kAlice, 1024, 50);
  slice_with_count.gpu_count = 2;
  ExpectInvalid(slice_with_count, "gpu_required");
}

TEST(ValidatePlacementRequestTest, NodeResourcesAndModels) {
  PlacementRequest r = SliceReq(kAlice, 1024);
  r.cpu_milli = -1;
  ExpectInvalid(r, "cpu_milli");
  r = SliceReq(kAlice, 1024);
  r.host_memory_mib = -1;
  ExpectInvalid(r, "host_memory_mb");
  r = SliceReq(kAlice, 1024);
  r.allowed_models = {"A100", ""};
  ExpectInvalid(r, "gpu_models");
}

TEST_F(LedgerTest, PlaceRejectsInvalidRequestWithoutChangingState) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  const Usage before = Snapshot();
  const PlacementResult r = Place(SliceReq(kAlice, 16));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInvalid);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status.field(), "gpu_memory_mb");
  EXPECT_EQ(r.message, r.status.message());
  EXPECT_FALSE(r.placed());
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(ledger_->allocation_count(), 0u);
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 32)).id, SliceId(1));
}

// ===================================================== counts and messages

TEST_F(LedgerTest, FailureMessageMatchesSpecExample) {
  std::vector<NodeId> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(AddNode());
  for (int i = 0; i < 12; ++i) AddGpu(nodes[i / 4], k80G);
  // Bob opens three GPUs, Alice the other nine; each keeps 31920 MB free.
  for (int i = 0; i < 3; ++i) MustPlace(SliceReq(kBob, 50000));
  for (int i = 0; i < 9; ++i) MustPlace(SliceReq(kAlice, 50000));
  ExpectInvariants();
  const PlacementResult r = Place(SliceReq(kAlice, 40960));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(r.gpus_considered, 12);
  EXPECT_EQ(r.count(RejectReason::kTenantConstraint), 3);
  EXPECT_EQ(r.count(RejectReason::kNoMemory), 9);
  EXPECT_CONTAINS(r.message,
                  "insufficient GPU memory: 0 of 12 GPUs fit 40960 MB; "
                  "3 GPUs excluded by the tenant-sharing constraint "
                  "(adding memory will not help)");
  EXPECT_CONTAINS(r.message, "9 GPUs without 40960 MB of free memory");
  EXPECT_CONTAINS(r.message, "retrying later");
}

TEST_F(LedgerTest, RejectCountsCoverEveryGpuOnceInRuleOrder) {
  const NodeId n = AddNode(/*cpu=*/4000);
  const GpuId lost = AddGpu(n, k80G);
  AddGpu(n, k16G, "T4");
  const GpuId bobs = AddGpu(n, k80G);
  const GpuId full_mem = AddGpu(n, k80G);
  const GpuId full_cpt = AddGpu(n, k80G);
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(1, kBob, bobs, 32, 1)).ok());
  ASSERT_TRUE(
      ledger_->Restore(SliceAllocation(2, kAlice, full_mem, k80G - 100, 1))
          .ok());
  ASSERT_TRUE(
      ledger_->Restore(SliceAllocation(3, kAlice, full_cpt, 1000, 100)).ok());
  // The lost GPU also holds Bob's slice: lost is reported first.
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(4, kBob, lost, 32, 1)).ok());
  ASSERT_TRUE(ledger_->SetGpuHealth(lost, GpuHealth::kLost).ok());
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.allowed_models = {"A100-SXM4-80GB"};
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.gpus_considered, 5);
  EXPECT_EQ(res.count(RejectReason::kLost), 1);
  EXPECT_EQ(res.count(RejectReason::kModelMismatch), 1);
  EXPECT_EQ(res.count(RejectReason::kTenantConstraint), 1);
  EXPECT_EQ(res.count(RejectReason::kNoMemory), 1);
  EXPECT_EQ(res.count(RejectReason::kNoCompute), 1);
  int total = 0;
  for (int c : res.reject_counts) total += c;
  EXPECT_EQ(total, 5);
  EXPECT_CONTAINS(res.message, "0 of 5 GPUs fit 1024 MB / 10% compute");
  // Clauses appear in rule order.
  const std::size_t lost_at = res.message.find("lost");
  const std::size_t model_at = res.message.find("of a model");
  const std::size_t tenant_at = res.message.find("tenant-sharing");
  const std::size_t memory_at = res.message.find("of free memory");
  const std::size_t compute_at = res.message.find("free compute");
  ASSERT_NE(lost_at, std::string::npos);
  EXPECT_LT(lost_at, model_at);
  EXPECT_LT(model_at, tenant_at);
  EXPECT_LT(tenant_at, memory_at);
  EXPECT_LT(memory_at, compute_at);
}

TEST_F(LedgerTest, NodeReasonsCountedPerGpu) {
  const NodeId cpu_poor = AddNode(/*cpu=*/1000, /*host=*/1 << 20);
  const NodeId host_poor = AddNode(/*cpu=*/1 << 20, /*host=*/1000);
  const NodeId rich = AddNode(/*cpu=*/1 << 20, /*host=*/1 << 20);
  AddGpu(cpu_poor, k80G);
  AddGpu(cpu_poor, k80G);
  AddGpu(host_poor, k80G);
  const GpuId g = AddGpu(rich, k80G);
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.cpu_milli = 2000;
  r.host_memory_mib = 2000;
  ASSERT_TRUE(ledger_->Restore(SliceAllocation(1, kBob, g, 1024, 10)).ok());
  const PlacementResult res = Place(r);
  EXPECT_EQ(res.outcome, PlacementOutcome::kRetryLater);
  EXPECT_EQ(res.count(RejectReason::kNodeCpu), 2);
  EXPECT_EQ(res.count(RejectReason::kNodeHostMemory), 1);
  EXPECT_EQ(res.count(RejectReason::kTenantConstraint), 1);
}

TEST_F(LedgerTest, EmptyClusterIsInfeasible) {
  const PlacementResult r = Place(SliceReq(kAlice, 1024));
  EXPECT_EQ(r.outcome, PlacementOutcome::kInfeasible);
  EXPECT_CONTAINS(r.message, "no GPUs");
  AddNode();
  EXPECT_EQ(Place(PlacementRequest::WholeGpus(kAlice, 1)).outcome,
            PlacementOutcome::kInfeasible);
}

TEST_F(LedgerTest, PolicyDecliningAdmissibleGpuIsReportedAsPolicyChoice) {
  const NodeId n = AddNode();
  AddGpu(n, k80G);
  const FixedPolicy none(std::nullopt);
  const PlacementResult r = ledger_->Place(SliceReq(kAlice, 1024), none);
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
  EXPECT_CONTAINS(r.message, "the placement policy chose no GPU");
  EXPECT_CONTAINS(r.message, "1 of 1 GPUs fit");
}

TEST(LedgerNamesTest, OutcomeAndReasonNames) {
  EXPECT_STREQ(PlacementOutcomeName(PlacementOutcome::kPlaced), "placed");
  EXPECT_STREQ(PlacementOutcomeName(PlacementOutcome::kRetryLater),
               "retry_later");
  EXPECT_STREQ(PlacementOutcomeName(PlacementOutcome::kInfeasible),
               "infeasible");
  EXPECT_STREQ(PlacementOutcomeName(PlacementOutcome::kInvalid), "invalid");
  std::set<std::string> names;
  for (int r = 0; r < kRejectReasonCount; ++r) {
    const std::string name = RejectReasonName(static_cast<RejectReason>(r));
    EXPECT_NE(name, "unknown") << r;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(kRejectReasonCount));
  EXPECT_STREQ(RejectReasonName(RejectReason::kTenantConstraint),
               "tenant_constraint");
  EXPECT_STREQ(RejectReasonName(RejectReason::kLost), "gpu_lost");
}

// ========================================================= faulty policies

class FaultyPolicyTest : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    n0_ = AddNode();
    n1_ = AddNode();
    g0_ = AddGpu(n0_, k80G);
    g1_ = AddGpu(n0_, k16G);
    g2_ = AddGpu(n1_, k80G);
    mig_ = AddGpu(n1_, k80G, "A100-SXM4-80GB", /*mig=*/true);
    bob_ = MustPlace(SliceReq(kBob, 1024, 10)).gpus.front();  // g1_
  }

  // Places `request` through a policy that answers `choice`; expects
  // kInvalid with an Internal status mentioning `why`, and no change.
  void ExpectRejected(const PlacementRequest& request,
                      std::vector<GpuId> choice, const std::string& why) {
    const Usage before = Snapshot();
    const std::size_t count = ledger_->allocation_count();
    const FixedPolicy policy(std::move(choice));
    const PlacementResult r = ledger_->Place(request, policy);
    EXPECT_EQ(r.outcome, PlacementOutcome::kInvalid) << why;
    EXPECT_EQ(r.status.code(), StatusCode::kInternal) << why;
    EXPECT_CONTAINS(r.status.message(), "placement policy fixed-test");
    EXPECT_CONTAINS(r.status.message(), why);
    EXPECT_EQ(r.message, r.status.message());
    EXPECT_EQ(Snapshot(), before) << why;
    EXPECT_EQ(ledger_->allocation_count(), count) << why;
    ExpectInvariants();
  }

  NodeId n0_, n1_;
  GpuId g0_, g1_, g2_, mig_, bob_;
};

TEST_F(FaultyPolicyTest, SliceOnAnotherTenantsGpu) {
  ASSERT_EQ(bob_, g1_);
  ExpectRejected(SliceReq(kAlice, 1024, 10), {g1_},
                 "chosen GPU fails rule tenant_constraint");
}

TEST_F(FaultyPolicyTest, SliceOnLostGpu) {
  ASSERT_TRUE(ledger_->SetGpuHealth(g0_, GpuHealth::kLost).ok());
  ExpectRejected(SliceReq(kAlice, 1024, 10), {g0_}, "gpu_lost");
}

TEST_F(FaultyPolicyTest, SliceLargerThanFreeMemory) {
  ExpectRejected(SliceReq(kBob, 16000, 10), {g1_}, "no_memory");
}

TEST_F(FaultyPolicyTest, SliceAboveNinetyPercentRule) {
  ExpectRejected(SliceReq(kAlice, 80000, 10), {g0_}, "90%");
}

TEST_F(FaultyPolicyTest, SliceWithTooMuchCompute) {
  ExpectRejected(SliceReq(kBob, 1024, 91), {g1_}, "no_compute");
}

TEST_F(FaultyPolicyTest, SliceOnModelNotAllowed) {
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.allowed_models = {"T4"};
  ExpectRejected(r, {g0_}, "model_mismatch");
}

TEST_F(FaultyPolicyTest, SliceOnNodeWithoutCpu) {
  PlacementRequest r = SliceReq(kAlice, 1024, 10);
  r.cpu_milli = 64001;
  ExpectRejected(r, {g0_}, "node_cpu");
}

TEST_F(FaultyPolicyTest, SliceGivenTwoGpusOrNone) {
  ExpectRejected(SliceReq(kAlice, 1024, 10), {g0_, g2_}, "exactly one GPU");
  ExpectRejected(SliceReq(kAlice, 1024, 10), {}, "exactly one GPU");
}

TEST_F(FaultyPolicyTest, SliceOnUnknownOrRemovedGpu) {
  ExpectRejected(SliceReq(kAlice, 1024, 10), {GpuId(99)}, "unknown GPU");
  ExpectRejected(SliceReq(kAlice, 1024, 10), {GpuId()}, "unknown GPU");
  ASSERT_TRUE(ledger_->RemoveGpu(g2_).ok());
  ExpectRejected(SliceReq(kAlice, 1024, 10), {g2_}, "unknown GPU");
}

TEST_F(FaultyPolicyTest, WholeGpusWrongCount) {
  ExpectRejected(PlacementRequest::WholeGpus(kAlice, 2), {g0_}, "wrong number");
}

TEST_F(FaultyPolicyTest, WholeGpusSameGpuTwice) {
  ExpectRejected(PlacementRequest::WholeGpus(kAlice, 2), {g0_, g0_},
                 "one GPU twice");
}

TEST_F(FaultyPolicyTest, WholeGpusOnTwoNodes) {
  ExpectRejected(PlacementRequest::WholeGpus(kAlice, 2), {g0_, g2_},
                 "more than one node");
}

TEST_F(FaultyPolicyTest, WholeGpuInMigMode) {
  ExpectRejected(PlacementRequest::WholeGpus(kAlice, 1), {mig_}, "mig_mode");
}

TEST_F(FaultyPolicyTest, WholeGpuAlreadyHoldingSlices) {
  ExpectRejected(PlacementRequest::WholeGpus(kBob, 1), {g1_}, "gpu_busy");
  ExpectRejected(PlacementRequest::WholeGpus(kAlice, 1), {g1_},
                 "tenant_constraint");
}

TEST_F(FaultyPolicyTest, WholeGpusOnNodeWithoutHostMemory) {
  PlacementRequest r = PlacementRequest::WholeGpus(kAlice, 1);
  r.host_memory_mib = 1 << 30;
  ExpectRejected(r, {g2_}, "node_host_memory");
}

TEST_F(FaultyPolicyTest, RejectedChoiceDoesNotConsumeASliceId) {
  ExpectRejected(SliceReq(kAlice, 1024, 10), {g1_}, "tenant_constraint");
  // Slice 1 is Bob's from SetUp; the next good placement gets 2.
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 1024, 10)).id, SliceId(2));
}

TEST_F(FaultyPolicyTest, AdmissibleChoiceFromCustomPolicyIsCommitted) {
  // g2_ is not Best-Fit's choice, but it is admissible.
  const FixedPolicy policy(std::vector<GpuId>{g2_});
  const PlacementResult r = ledger_->Place(SliceReq(kAlice, 1024, 10), policy);
  ASSERT_TRUE(r.placed()) << r.message;
  EXPECT_EQ(r.allocation.gpus, std::vector<GpuId>{g2_});
  EXPECT_EQ(r.allocation.node, n1_);
}

// ============================================== MIG partitions, filters

// On a GPU in MIG mode the ledger charges a slice as the partition it gets
// (A100 80GB: 8 memory slots, 7 compute slices), where it sits.
TEST_F(LedgerTest, MigSliceIsChargedAsItsPartitionWhereItSits) {
  const NodeId n = AddNode();
  const GpuId g = AddGpu(n, k80G, "A100-SXM4-80GB", /*mig=*/true);
  const Allocation small = MustPlace(SliceReq(kAlice, 4096, 10));
  EXPECT_EQ(small.mig_profile, "1g.10gb");
  EXPECT_EQ(small.mig_start, 0);
  EXPECT_EQ(small.memory_mib, k80G / 8);
  EXPECT_EQ(small.compute_percent, 14);
  EXPECT_FALSE(small.compute_defaulted);
  const Allocation big = MustPlace(SliceReq(kAlice, 30000, std::nullopt));
  EXPECT_EQ(big.mig_profile, "3g.40gb");
  EXPECT_EQ(big.mig_start, 4);  // 3g.40gb starts at slot 0 or 4; 0 is taken
  EXPECT_EQ(Gpu(g).used_memory_mib, k80G / 8 + k80G / 2);
  EXPECT_EQ(Gpu(g).used_compute_percent, 14 + 42);
  // Slots 1-3 are free but no 3g.40gb placement fits there.
  const PlacementResult r = Place(SliceReq(kAlice, 30000, std::nullopt));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater) << r.message;
  EXPECT_EQ(r.count(RejectReason::kMigGeometry), 1);
  EXPECT_CONTAINS(r.message, "no MIG partition covering it fits");
  // A 1g.20gb (two memory slots, one compute slice) still fits in 2-3.
  const Allocation two = MustPlace(SliceReq(kAlice, 15000, std::nullopt));
  EXPECT_EQ(two.mig_profile, "1g.20gb");
  EXPECT_EQ(two.mig_start, 2);
  EXPECT_EQ(two.compute_percent, 14);
  // A partition's memory is the hardware's.
  EXPECT_EQ(ledger_->ResizeSlice(two.id, 16000).status().code(),
            StatusCode::kFailedPrecondition);
  // Released, its slots are free again.
  ASSERT_TRUE(ledger_->Release(big.id).ok());
  EXPECT_EQ(MustPlace(SliceReq(kAlice, 30000, std::nullopt)).mig_start, 4);
}

// A GPU whose model name says nothing of its geometry (the simulator's
// anonymised models) takes the table its spec names; an unknown table is
// refused, naming the field.
TEST_F(LedgerTest, AGpuSpecMayNameItsMigTable) {
  const NodeId n = AddNode();
  GpuSpec spec;
  spec.uuid = "GPU-anon";
  spec.model = "G3";
  spec.memory_mib = 64000;
  spec.mig_capable = true;
  spec.mig_table = "A100-80GB";
  ASSERT_TRUE(ledger_->AddGpu(n, spec).ok());
  const Allocation a = MustPlace(SliceReq(kAlice, 6400, 10));
  EXPECT_EQ(a.mig_profile, "1g.10gb");
  EXPECT_EQ(a.memory_mib, 64000 / 8);
  EXPECT_EQ(a.compute_percent, 14);
  // Without the table, the same model is charged as asked.
  GpuSpec plain = spec;
  plain.uuid = "GPU-anon-2";
  plain.index = 1;
  plain.mig_table.clear();
  const NodeId m = AddNode();
  ASSERT_TRUE(ledger_->AddGpu(m, plain).ok());
  const Allocation b = MustPlace(SliceReq(kBob, 6400, 10));
  EXPECT_TRUE(b.mig_profile.empty());
  EXPECT_EQ(b.memory_mib, 6400);
  GpuSpec unknown = spec;
  unknown.uuid = "GPU-anon-3";
  unknown.index = 2;
  unknown.mig_table = "Z9-1GB";
  const StatusOr<GpuId> refused = ledger_->AddGpu(n, unknown);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().field(), "mig_table");
}

TEST_F(LedgerTest, MigSliceBeyondTheLargestPartitionIsInfeasible) {
  const NodeId n = AddNode();
  AddGpu(n, k40G, "A100-SXM4-40GB", /*mig=*/true);
  // 30000 MB is within 90% of the card, and the smallest profile of the
  // 40 GB card that covers it is the whole card (7g.40gb).
  const Allocation a = MustPlace(SliceReq(kAlice, 30000, std::nullopt));
  EXPECT_EQ(a.mig_profile, "7g.40gb");
  EXPECT_EQ(a.memory_mib, k40G);
  EXPECT_EQ(a.compute_percent, 100);
  // The card is now one partition: nothing else fits.
  const PlacementResult r = Place(SliceReq(kAlice, 1024, std::nullopt));
  EXPECT_EQ(r.outcome, PlacementOutcome::kRetryLater);
}

// Restoring a slice (recovery, compensation) puts its partition back where
// it was, and refuses one that overlaps a partition placed since.
TEST_F(LedgerTest, RestoreKeepsThePartitionOrRefusesAnOverlap) {
  const NodeId n = AddNode();
  AddGpu(n, k80G, "A100-SXM4-80GB", /*mig=*/true);
  const Allocation a = MustPlace(SliceReq(kAlice, 30000, std::nullopt));
  ASSERT_EQ(a.mig_start, 0);
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  StatusOr<Allocation> back = ledger_->Restore(a);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->mig_profile, "3g.40gb");
  EXPECT_EQ(back->mig_start, 0);
  ASSERT_TRUE(ledger_->Release(a.id).ok());
  const Allocation other = MustPlace(SliceReq(kAlice, 4096, 10));
  ASSERT_EQ(other.mig_start, 0);
  EXPECT_EQ(ledger_->Restore(a).status().code(),
            StatusCode::kFailedPrecondition);
  // Recorded without a partition (before the ledger charged them): it gets
  // the one it would get now.
  Allocation old = a;
  old.id = SliceId(a.id.value() + 100);
  old.mig_profile.clear();
  old.mig_start = -1;
  old.memory_mib = 30000;
  old.compute_percent = 30;
  old.compute_defaulted = false;
  back = ledger_->Restore(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->mig_profile, "3g.40gb");
  EXPECT_EQ(back->mig_start, 4);
  EXPECT_EQ(back->memory_mib, k80G / 2);
}

TEST_F(LedgerTest, PinnedAndExcludedRequestsStayInsideTheirFilters) {
  const NodeId n0 = AddNode();
  const NodeId n1 = AddNode();
  const GpuId a0 = AddGpu(n0, k80G);
  const GpuId a1 = AddGpu(n0, k80G);
  const GpuId b0 = AddGpu(n1, k80G);
  MustPlace(SliceReq(kAlice, 8192, 10));  // Best-Fit now prefers a0
  PlacementRequest pinned = SliceReq(kAlice, 1024, 10);
  pinned.pinned_node = n1;
  EXPECT_EQ(PlaceOn(pinned), b0);
  pinned.pinned_node.reset();
  pinned.pinned_gpu = a1;
  EXPECT_EQ(PlaceOn(pinned), a1);
  PlacementRequest excluded = SliceReq(kAlice, 1024, 10);
  excluded.excluded_gpus = {a0, a1};
  EXPECT_EQ(PlaceOn(excluded), b0);
  // A pin that cannot be honoured waits: it is never placed elsewhere.
  PlacementRequest more = SliceReq(kAlice, 20000, 10);
  more.pinned_gpu = a0;
  EXPECT_EQ(PlaceOn(more), a0);
  PlacementRequest full = SliceReq(kAlice, 70000, 10);
  full.pinned_gpu = a0;
  const PlacementResult r = Place(full);
  EXPECT_NE(r.outcome, PlacementOutcome::kPlaced);
  EXPECT_EQ(r.gpus_considered, 1);
  EXPECT_EQ(r.count(RejectReason::kNoMemory), 1);
  PlacementRequest whole = PlacementRequest::WholeGpus(kBob, 1);
  whole.pinned_node = n0;
  const PlacementResult w = Place(whole);
  EXPECT_NE(w.outcome, PlacementOutcome::kPlaced);  // n0's GPUs hold slices
}

}  // namespace
}  // namespace hf::ledger
