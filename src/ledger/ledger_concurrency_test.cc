// Concurrency tests of the slice ledger (docs/CONTRACT.md section 5: "no GPU is
// ever oversold"), meant to run under ThreadSanitizer (label tsan).
//
// ManyThreadsNeverOversell: worker threads place and release slices and whole
// GPUs on one Ledger at the same time -- releasing each other's allocations
// and racing to release the same one -- while another thread marks GPUs lost
// / healthy, flips MIG mode and adds / removes GPUs, and a reader thread
// audits Read(), Allocations() and CheckInvariants() throughout. Periodically
// and at the end it asserts: invariants OK, per-GPU accounting within
// capacity (and equal to the live allocations' sum), tenants outside one
// shared group never on one GPU, and every successful placement released
// exactly once (no id issued twice, no release lost or doubled).
//
// RacesForTheLastSlices: threads race for one GPU that holds exactly ten
// slices; each round ends with exactly ten slices of one sharing domain, or
// one whole-GPU grant, never more.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/quantity.h"
#include "common/status.h"
#include "ledger/cluster_view.h"
#include "ledger/ledger.h"
#include "ledger/model.h"
#include "scheduler/policy/best_fit.h"

namespace hf::ledger {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWorkers = 6;
constexpr int kTenants = 6;
constexpr auto kRunTime = std::chrono::milliseconds(2000);

// Fixed shared groups: tenants 1 and 2 in group 1, 3 and 4 in group 2;
// 5 and 6 share with nobody.
std::optional<GroupId> GroupOf(TenantId t) {
  if (t.value() == 1 || t.value() == 2) return GroupId(1);
  if (t.value() == 3 || t.value() == 4) return GroupId(2);
  return std::nullopt;
}

bool MayShare(TenantId a, TenantId b) {
  if (a == b) return true;
  const auto ga = GroupOf(a);
  const auto gb = GroupOf(b);
  return ga && gb && *ga == *gb;
}

std::unique_ptr<Ledger> NewLedger() {
  auto ledger = Ledger::Create();
  EXPECT_TRUE(ledger.ok());
  std::unique_ptr<Ledger> out = std::move(ledger).value();
  EXPECT_TRUE(out->DefineGroup(GroupId(1)).ok());
  EXPECT_TRUE(out->DefineGroup(GroupId(2)).ok());
  for (std::uint64_t t = 1; t <= kTenants; ++t) {
    if (auto g = GroupOf(TenantId(t))) {
      EXPECT_TRUE(out->SetTenantGroup(TenantId(t), *g).ok());
    }
  }
  return out;
}

GpuSpec Gpu(const std::string& uuid, int index, MemoryMib memory) {
  GpuSpec spec;
  spec.uuid = uuid;
  spec.index = index;
  spec.model = memory >= 81920 ? "A100-SXM4-80GB" : "A100-PCIE-40GB";
  spec.memory_mib = memory;
  spec.compute_capability_major = 8;
  return spec;
}

// Live allocation ids any worker may release.
class SlicePool {
 public:
  void Push(SliceId id) {
    std::lock_guard lock(mu_);
    ids_.push_back(id);
  }
  // Removes and returns a random id.
  std::optional<SliceId> Take(std::mt19937_64& rng) {
    std::lock_guard lock(mu_);
    if (ids_.empty()) return std::nullopt;
    const std::size_t i = rng() % ids_.size();
    const SliceId id = ids_[i];
    ids_[i] = ids_.back();
    ids_.pop_back();
    return id;
  }
  // Returns a random id without removing it (so two threads may race to
  // release the same slice).
  std::optional<SliceId> Peek(std::mt19937_64& rng) {
    std::lock_guard lock(mu_);
    if (ids_.empty()) return std::nullopt;
    return ids_[rng() % ids_.size()];
  }
  std::vector<SliceId> Drain() {
    std::lock_guard lock(mu_);
    return std::exchange(ids_, {});
  }

 private:
  std::mutex mu_;
  std::vector<SliceId> ids_;
};

// What one worker saw.
struct WorkerLog {
  std::vector<SliceId> placed;
  std::vector<SliceId> released;  // Release() returned OK
  std::uint64_t ops = 0;
  std::uint64_t not_placed = 0;
  std::uint64_t lost_races = 0;  // Release() said NotFound for a pool id
};

// Audits one consistent view: nothing oversold, fail-closed tenancy, whole
// GPUs held alone. Returns the first problem or "".
std::string AuditView(const ClusterView& view) {
  for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
    const GpuRecord& g = view.gpu(GpuId(i));
    if (!g.live) continue;
    const std::string where = "GPU " + std::to_string(i) + ": ";
    if (g.used_memory_mib < 0 || g.used_memory_mib > g.spec.memory_mib) {
      return where + "memory oversold (" + std::to_string(g.used_memory_mib) +
             " of " + std::to_string(g.spec.memory_mib) + " MB)";
    }
    if (g.used_compute_percent < 0 ||
        g.used_compute_percent > kFullComputePercent) {
      return where + "compute oversold (" +
             std::to_string(g.used_compute_percent) + "%)";
    }
    if (g.whole_owned &&
        (g.allocation_count != 1 || g.used_memory_mib != g.spec.memory_mib)) {
      return where + "whole GPU shared";
    }
    for (const auto& [a, na] : g.tenants) {
      for (const auto& [b, nb] : g.tenants) {
        if (!MayShare(a, b)) {
          return where + "tenants " + std::to_string(a.value()) + " and " +
                 std::to_string(b.value()) + " share it outside a group";
        }
      }
    }
  }
  for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
    const NodeRecord& n = view.node(NodeId(i));
    if (n.live && (n.free_cpu_milli() < 0 || n.free_host_memory_mib() < 0)) {
      return "node " + std::to_string(i) + " oversold";
    }
  }
  return {};
}

// Audits Allocations() against GPU capacities: ids ascending and unique,
// per-GPU sums within capacity.
std::string AuditAllocations(const Ledger& ledger) {
  const std::vector<Allocation> allocs = ledger.Allocations();
  struct Sum {
    int whole = 0;  // whole-GPU grants (each takes all memory)
    MemoryMib slice_memory = 0;
    ComputePercent compute = 0;
  };
  std::map<GpuId, Sum> sum;
  for (std::size_t i = 0; i < allocs.size(); ++i) {
    if (i > 0 && !(allocs[i - 1].id < allocs[i].id)) {
      return "Allocations() not strictly ascending";
    }
    for (GpuId g : allocs[i].gpus) {
      if (allocs[i].kind == RequestKind::kWholeGpus) {
        ++sum[g].whole;
        sum[g].compute += kFullComputePercent;
      } else {
        sum[g].slice_memory += allocs[i].memory_mib;
        sum[g].compute += allocs[i].compute_percent;
      }
    }
  }
  std::string error;
  // A GPU's capacity never changes (removed GPUs keep their slot), so a
  // later view gives the capacities of the GPUs in that snapshot.
  ledger.Read([&](const ClusterView& view) {
    for (const auto& [g, s] : sum) {
      if (g.value() >= view.gpu_slot_count()) {
        error = "allocation on a GPU the ledger never had";
        return;
      }
      const MemoryMib cap = view.gpu(g).spec.memory_mib;
      if (s.whole * cap + s.slice_memory > cap ||
          s.compute > kFullComputePercent) {
        error = "allocations on GPU " + std::to_string(g.value()) +
                " exceed its capacity";
        return;
      }
    }
  });
  return error;
}

TEST(LedgerConcurrencyTest, ManyThreadsNeverOversell) {
  std::unique_ptr<Ledger> ledger = NewLedger();
  std::vector<NodeId> nodes;
  std::vector<GpuId> gpus;
  int uuid = 0;
  for (int n = 0; n < 4; ++n) {
    NodeSpec spec{"node-" + std::to_string(n), 64000, 512 * 1024, false};
    auto node = ledger->AddNode(spec);
    ASSERT_TRUE(node.ok());
    nodes.push_back(*node);
    for (int i = 0; i < 4; ++i) {
      auto g = ledger->AddGpu(*node, Gpu("GPU-" + std::to_string(uuid++), i,
                                         i % 2 ? 40960 : 81920));
      ASSERT_TRUE(g.ok());
      gpus.push_back(*g);
    }
  }

  const scheduler::BestFitPolicy policy;
  SlicePool pool;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::vector<WorkerLog> logs(kWorkers);
  const auto deadline = Clock::now() + kRunTime;

  auto worker = [&](int w) {
    std::mt19937_64 rng(0x5EED + static_cast<std::uint64_t>(w));
    WorkerLog& log = logs[w];
    while (!stop.load(std::memory_order_relaxed)) {
      ++log.ops;
      const std::uint64_t dice = rng() % 100;
      if (dice < 62) {
        PlacementRequest r;
        const TenantId tenant(1 + rng() % kTenants);
        if (dice < 54) {
          std::optional<MemoryMib> memory;
          std::optional<ComputePercent> compute;
          if (rng() % 4) memory = 32 + static_cast<MemoryMib>(rng() % 24000);
          if (rng() % 3 || !memory) {
            compute = static_cast<ComputePercent>(1 + rng() % 60);
          }
          r = PlacementRequest::Slice(tenant, memory, compute);
        } else {
          r = PlacementRequest::WholeGpus(tenant,
                                          1 + static_cast<int>(rng() % 2));
        }
        if (rng() % 5 == 0) {
          r.cpu_milli = 1000 * static_cast<CpuMilli>(1 + rng() % 8);
          r.host_memory_mib = 1024 * static_cast<MemoryMib>(rng() % 64);
        }
        const PlacementResult result = ledger->Place(r, policy);
        if (result.placed()) {
          const Allocation& a = result.allocation;
          const bool shape_ok =
              a.tenant == tenant &&
              a.gpus.size() == (r.kind == RequestKind::kSlice
                                    ? 1u
                                    : static_cast<std::size_t>(r.gpu_count));
          EXPECT_TRUE(shape_ok) << "allocation " << a.id;
          if (!shape_ok) failed = true;
          log.placed.push_back(a.id);
          pool.Push(a.id);
        } else {
          // Valid requests fit or wait. Slices always fit an idle cluster;
          // two whole GPUs may not while MIG mode is on almost everywhere.
          const bool expected =
              result.outcome == PlacementOutcome::kRetryLater ||
              (r.kind == RequestKind::kWholeGpus &&
               result.outcome == PlacementOutcome::kInfeasible);
          EXPECT_TRUE(expected)
              << PlacementOutcomeName(result.outcome) << ": " << result.message;
          if (!expected) failed = true;
          ++log.not_placed;
        }
      } else if (dice < 97) {
        // Mostly take an id out of the pool; sometimes only peek at it, so
        // two workers can race to release one slice.
        const bool peek = dice >= 90;
        const std::optional<SliceId> id =
            peek ? pool.Peek(rng) : pool.Take(rng);
        if (!id) continue;
        const Status s = ledger->Release(*id);
        if (s.ok()) {
          log.released.push_back(*id);
        } else {
          EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
          if (s.code() != StatusCode::kNotFound) failed = true;
          ++log.lost_races;
        }
      } else {
        const Status s = ledger->Release(SliceId((1ull << 40) + rng() % 1000));
        EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
      }
    }
  };

  // Health, MIG mode and inventory churn. Only this thread adds or removes
  // GPUs, so its list is the truth.
  // Removed GPUs keep their slot, so adds are capped to keep audits cheap.
  constexpr int kMaxGpuAdds = 400;
  std::uint64_t churn_ops = 0, removed = 0, refused = 0;
  int adds = 0;
  auto churn = [&] {
    std::mt19937_64 rng(0xC4A05);
    std::vector<GpuId> live = gpus;
    std::vector<int> next_index(nodes.size(), 4);
    while (!stop.load(std::memory_order_relaxed)) {
      ++churn_ops;
      const std::uint64_t dice = rng() % 100;
      const GpuId g = live[rng() % live.size()];
      if (dice < 60) {
        const Status s = ledger->SetGpuHealth(
            g, rng() % 2 ? GpuHealth::kLost : GpuHealth::kOk);
        EXPECT_TRUE(s.ok()) << s.ToString();
      } else if (dice < 80) {
        const Status s = ledger->SetGpuCapabilities(g, rng() % 3 == 0, true);
        EXPECT_TRUE(s.ok()) << s.ToString();
      } else if (dice < 85 && live.size() > 8 && adds < kMaxGpuAdds) {
        const Status s = ledger->RemoveGpu(g);
        if (s.ok()) {
          ++removed;
          live.erase(std::find(live.begin(), live.end(), g));
        } else {
          EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
          ++refused;
        }
      } else if (dice >= 85 && live.size() < 24 && adds < kMaxGpuAdds) {
        ++adds;
        const std::size_t n = rng() % nodes.size();
        auto added = ledger->AddGpu(
            nodes[n], Gpu("GPU-" + std::to_string(uuid++), next_index[n]++,
                          rng() % 2 ? 40960 : 81920));
        EXPECT_TRUE(added.ok()) << added.status().ToString();
        if (added.ok()) live.push_back(*added);
      }
    }
    // Leave every GPU healthy and out of MIG mode.
    for (GpuId g : live) {
      EXPECT_TRUE(ledger->SetGpuHealth(g, GpuHealth::kOk).ok());
      EXPECT_TRUE(ledger->SetGpuCapabilities(g, false, true).ok());
    }
  };

  std::uint64_t audits = 0;
  auto reader = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      ++audits;
      const Status inv = ledger->CheckInvariants();
      EXPECT_TRUE(inv.ok()) << inv.ToString();
      std::string error;
      ledger->Read([&](const ClusterView& view) { error = AuditView(view); });
      if (error.empty()) error = AuditAllocations(*ledger);
      EXPECT_EQ(error, "");
      if (!inv.ok() || !error.empty()) failed = true;
    }
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) threads.emplace_back(worker, w);
  threads.emplace_back(churn);
  threads.emplace_back(reader);
  while (Clock::now() < deadline && !failed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(failed.load());

  // Settle: release whatever is still live (a peeking worker may already
  // have released some of the pool's ids).
  WorkerLog final_log;
  for (SliceId id : pool.Drain()) {
    const Status s = ledger->Release(id);
    if (s.ok()) {
      final_log.released.push_back(id);
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    }
  }
  ASSERT_TRUE(ledger->CheckInvariants().ok());
  EXPECT_EQ(ledger->allocation_count(), 0u);

  std::vector<SliceId> placed, released;
  std::uint64_t ops = 0, not_placed = 0, lost_races = 0;
  for (const WorkerLog& log : logs) {
    placed.insert(placed.end(), log.placed.begin(), log.placed.end());
    released.insert(released.end(), log.released.begin(), log.released.end());
    ops += log.ops;
    not_placed += log.not_placed;
    lost_races += log.lost_races;
  }
  released.insert(released.end(), final_log.released.begin(),
                  final_log.released.end());
  std::sort(placed.begin(), placed.end());
  std::sort(released.begin(), released.end());
  EXPECT_EQ(std::adjacent_find(placed.begin(), placed.end()), placed.end())
      << "a slice id was issued twice";
  // Every successful placement was released exactly once.
  EXPECT_EQ(placed, released);
  EXPECT_GT(placed.size(), 0u);
  EXPECT_GT(not_placed, 0u) << "the cluster never filled up";
  EXPECT_GT(audits, 0u);

  ledger->Read([&](const ClusterView& view) {
    for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
      const GpuRecord& g = view.gpu(GpuId(i));
      if (!g.live) continue;
      EXPECT_EQ(g.used_memory_mib, 0) << "GPU " << i;
      EXPECT_EQ(g.used_compute_percent, 0) << "GPU " << i;
      EXPECT_TRUE(g.empty()) << "GPU " << i;
      EXPECT_TRUE(g.tenants.empty()) << "GPU " << i;
    }
    for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
      EXPECT_EQ(view.node(NodeId(i)).used_cpu_milli, 0);
      EXPECT_EQ(view.node(NodeId(i)).used_host_memory_mib, 0);
    }
  });

  std::cout << "[ledger concurrency] " << ops << " worker ops, "
            << placed.size() << " placements (" << not_placed
            << " retry-later), " << released.size() << " releases, "
            << lost_races << " lost release races; " << churn_ops
            << " health/MIG/inventory ops (" << removed << " GPUs removed, "
            << refused << " removals refused); " << audits << " audits"
            << std::endl;
}

TEST(LedgerConcurrencyTest, RacesForTheLastSlices) {
  constexpr int kRacers = 6;
  constexpr int kMaxRounds = 300;
  constexpr MemoryMib kGpuMemory = 81920;
  constexpr MemoryMib kSliceMemory = kGpuMemory / 10;  // exactly ten fit

  std::unique_ptr<Ledger> ledger = NewLedger();
  auto node = ledger->AddNode(NodeSpec{"node", 64000, 1 << 20, false});
  ASSERT_TRUE(node.ok());
  ASSERT_TRUE(ledger->AddGpu(*node, Gpu("GPU-only", 0, kGpuMemory)).ok());
  const scheduler::BestFitPolicy policy;

  const auto deadline = Clock::now() + std::chrono::milliseconds(1500);
  int rounds = 0;
  int whole_wins = 0;
  for (; rounds < kMaxRounds && Clock::now() < deadline; ++rounds) {
    // Racers 0..3: tenants 1 and 2 of group 1; racer 4: tenant 5 alone;
    // racer 5: tenant 1 asking for the whole GPU. Each places until refused.
    std::vector<std::vector<Allocation>> got(kRacers);
    std::vector<std::thread> threads;
    std::latch start(kRacers);
    for (int i = 0; i < kRacers; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        // Stagger the whole-GPU racer so either side wins some rounds.
        if (i == 5) {
          for (int y = 0; y < rounds % 3; ++y) std::this_thread::yield();
        }
        const TenantId tenant(i < 4 ? 1 + i % 2 : (i == 4 ? 5 : 1));
        const PlacementRequest r =
            i == 5 ? PlacementRequest::WholeGpus(tenant, 1)
                   : PlacementRequest::Slice(tenant, kSliceMemory, 10);
        while (true) {
          PlacementResult result = ledger->Place(r, policy);
          if (!result.placed()) {
            EXPECT_EQ(result.outcome, PlacementOutcome::kRetryLater);
            break;
          }
          got[i].push_back(std::move(result.allocation));
        }
      });
    }
    for (std::thread& t : threads) t.join();

    int slices = 0;
    int whole = static_cast<int>(got[5].size());
    std::vector<TenantId> tenants;
    for (int i = 0; i < 5; ++i) {
      slices += static_cast<int>(got[i].size());
      for (const Allocation& a : got[i]) tenants.push_back(a.tenant);
    }
    ASSERT_TRUE((whole == 1 && slices == 0) || (whole == 0 && slices == 10))
        << "round " << rounds << ": " << whole << " whole grants, " << slices
        << " slices on one GPU";
    for (TenantId a : tenants) {
      for (TenantId b : tenants) {
        ASSERT_TRUE(MayShare(a, b)) << "round " << rounds << ": tenants " << a
                                    << " and " << b << " share the GPU";
      }
    }
    whole_wins += whole;
    ASSERT_TRUE(ledger->CheckInvariants().ok());
    for (const auto& list : got) {
      for (const Allocation& a : list) ASSERT_TRUE(ledger->Release(a.id).ok());
    }
    ASSERT_EQ(ledger->allocation_count(), 0u);
  }
  EXPECT_GT(rounds, 0);
  std::cout << "[ledger concurrency] " << rounds << " rounds racing for one "
            << "GPU; the whole-GPU request won " << whole_wins << std::endl;
}

}  // namespace
}  // namespace hf::ledger
