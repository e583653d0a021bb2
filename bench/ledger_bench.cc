// Placement benchmark: the cost of one Ledger::Place + Ledger::Release pair
// at 100, 1,000, 10,000 and 100,000 GPUs.
//
// Workload. Each cluster size is built once (cached for the whole run, so
// setup is never timed) from a fixed seed:
// - 8 GPUs per node (the last node may have fewer); each node is one model
//   with realistic memory, node CPU and host memory: A100-80GB (30% of
//   nodes; 128 cores, 2 TiB), A100-40GB (25%; 96 cores, 1 TiB), V100-32GB
//   (25%; 64 cores, 512 GiB), T4-16GB (20%; 48 cores, 256 GiB). About 5% of
//   A100 GPUs are in MIG mode (sliceable, never granted whole).
// - 12 tenants: 8 solo tenants of unequal size and a shared group of 4
//   tenants that may share GPUs with each other.
// - Pre-filled through Ledger::Restore to a realistic occupancy (about 2/3
//   of GPU memory accounted; each run reports it as `mem_used_pct`): one node
//   in 12 stays empty, ~12% of the rest run a whole-node job, and on the
//   others each GPU is empty (~10%), held whole (~10%), lost (~3%, half of
//   them still holding slices) or sliced by one sharing domain (a solo
//   tenant or the group) to 65-100% of its memory with slices of 5-50% of
//   the GPU, compute ratios of 5-30% or none (accounted at the 50% default),
//   some node CPU and host memory. Node CPU and host memory stay within ~70%
//   of the node; compute often runs out on a GPU before its memory.
//
// Timed loop. One iteration is one pair: take the next request from a
// pre-generated deterministic list (4096 requests: varied tenants, slice
// sizes 512 MiB..40 GiB, compute-only slices, some model restrictions and
// node CPU / host memory), Place it with the policy under test, then Release
// it, so the cluster returns to the same state after every pair. A request
// that does not place is counted (the `placed` counter is the fraction that
// did; it should be ~1, since the failure path scans the cluster to explain
// itself).
//
// Benchmarks (time per iteration = ns per place + release pair; the
// `ns_per_pair` counter is the same figure measured in wall-clock time):
//   BM_PlaceRelease_BestFit/N              indexed Best-Fit slices
//   BM_PlaceRelease_LinearScan/N           LinearScanBestFitPolicy, the same
//                                          requests on the same cluster; its
//                                          `vs_indexed` counter is the
//                                          scan/indexed time ratio
//   BM_PlaceRelease_BestFit_WholeGpu/N     whole-GPU requests (1, 2, 4, 8)
//   BM_PlaceRelease_LinearScan_WholeGpu/N  the same by scan
// Targets (issue): <= 2 us per pair at 10,000 GPUs; the 100,000-GPU figure
// within 2x of the 1,000-GPU one (growth no more than logarithmic).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ledger/ledger.h"
#include "scheduler/policy/best_fit.h"
#include "scheduler/policy/learned.h"

namespace hf {
namespace {

using ledger::Allocation;
using ledger::ClusterView;
using ledger::GpuHealth;
using ledger::GpuRecord;
using ledger::GpuSpec;
using ledger::Ledger;
using ledger::NodeSpec;
using ledger::PlacementOutcome;
using ledger::PlacementPolicy;
using ledger::PlacementRequest;
using ledger::PlacementResult;
using ledger::RequestKind;

constexpr int kGpusPerNode = 8;
constexpr std::size_t kSliceRequestCount = 4096;  // powers of two: index & mask
constexpr std::size_t kWholeRequestCount = 1024;
static_assert((kSliceRequestCount & (kSliceRequestCount - 1)) == 0);
static_assert((kWholeRequestCount & (kWholeRequestCount - 1)) == 0);

// A small deterministic generator (splitmix64), so the workload is the same
// on every standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  int Uniform(int n) {
    return static_cast<int>(Next() % static_cast<unsigned>(n));
  }
  template <typename T, std::size_t N>
  const T& Pick(const T (&values)[N]) {
    return values[Next() % N];
  }

 private:
  std::uint64_t state_;
};

struct ModelSpec {
  const char* name;
  MemoryMib memory_mib;
  int cc_major;
  int cc_minor;
  CpuMilli node_cpu_milli;
  MemoryMib node_host_memory_mib;
  int weight;  // share of nodes, percent
};

constexpr ModelSpec kModels[] = {
    {"A100-80GB", 81920, 8, 0, 128000, 2097152, 30},
    {"A100-40GB", 40960, 8, 0, 96000, 1048576, 25},
    {"V100-32GB", 32768, 7, 0, 64000, 524288, 25},
    {"T4-16GB", 15360, 7, 5, 48000, 262144, 20},
};

const ModelSpec& PickModel(Rng& rng) {
  int r = rng.Uniform(100);
  for (const ModelSpec& m : kModels) {
    if (r < m.weight) return m;
    r -= m.weight;
  }
  return kModels[0];
}

const ModelSpec& ModelByName(const std::string& name) {
  for (const ModelSpec& m : kModels) {
    if (name == m.name) return m;
  }
  std::abort();
}

// Tenants: solo tenants 1..8 (unequal weights) and group 1 = tenants
// 101..104, which together weigh 35%.
constexpr GroupId kGroup{1};
constexpr int kSoloWeights[] = {16, 12, 10, 8, 7, 5, 4, 3};  // sum 65
constexpr int kGroupWeight = 35;
constexpr int kGroupSize = 4;

TenantId PickTenant(Rng& rng) {
  int r = rng.Uniform(100);
  if (r < kGroupWeight) return TenantId(101 + rng.Uniform(kGroupSize));
  r -= kGroupWeight;
  for (int i = 0; i < 8; ++i) {
    if (r < kSoloWeights[i]) return TenantId(1 + i);
    r -= kSoloWeights[i];
  }
  return TenantId(1);
}

// The next tenant of the same sharing domain as `t` (a group member may be
// any member; a solo tenant is itself).
TenantId SameDomainTenant(Rng& rng, TenantId t) {
  if (t.value() >= 101) return TenantId(101 + rng.Uniform(kGroupSize));
  return t;
}

struct Cluster {
  std::unique_ptr<Ledger> ledger;
  int gpus = 0;
  double memory_used_pct = 0;
  std::vector<PlacementRequest> slice_requests;
  std::vector<PlacementRequest> whole_requests;
};

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "ledger_bench setup: %s: %s\n", what,
                 s.ToString().c_str());
    std::abort();
  }
}

template <typename T>
T CheckValue(StatusOr<T> v, const char* what) {
  Check(v.status(), what);
  return std::move(v).value();
}

// Builds and pre-fills a cluster of `n_gpus` GPUs (see the top comment).
void BuildCluster(Cluster& c, int n_gpus) {
  Rng rng(0x5EED0000ULL + static_cast<std::uint64_t>(n_gpus));
  c.ledger = CheckValue(Ledger::Create(), "create");
  Ledger& l = *c.ledger;
  c.gpus = n_gpus;
  Check(l.DefineGroup(kGroup), "define group");
  for (int i = 0; i < kGroupSize; ++i) {
    Check(l.SetTenantGroup(TenantId(101 + i), kGroup), "tenant group");
  }

  // Slice sizes in percent of the GPU's memory (bigger GPUs get bigger
  // slices) and compute ratios (0: none, accounted at the 50% default).
  static constexpr int kFillSizePct[] = {5, 10, 10, 15, 20, 25, 25, 30, 40, 50};
  static constexpr ComputePercent kFillCompute[] = {0,  5,  10, 10,
                                                    15, 20, 25, 30};
  static constexpr CpuMilli kFillCpu[] = {0, 0, 500, 1000, 2000, 4000};
  static constexpr MemoryMib kFillHost[] = {0, 0, 4096, 8192, 16384, 32768};

  const ComputePercent kDefaultCompute =
      ledger::LedgerOptions{}.default_compute_percent;
  std::uint64_t next_id = 1;
  const int node_count = (n_gpus + kGpusPerNode - 1) / kGpusPerNode;
  int gpus_left = n_gpus;
  for (int n = 0; n < node_count; ++n) {
    // The first nodes cover every model, so small clusters have them all.
    const ModelSpec& model = n < 4 ? kModels[n] : PickModel(rng);
    NodeSpec ns;
    ns.name = "node-" + std::to_string(n);
    ns.cpu_milli = model.node_cpu_milli;
    ns.host_memory_mib = model.node_host_memory_mib;
    const NodeId node = CheckValue(l.AddNode(ns), "add node");
    const int count = std::min(gpus_left, kGpusPerNode);
    gpus_left -= count;
    std::vector<GpuId> gpus;
    std::vector<bool> mig;
    for (int g = 0; g < count; ++g) {
      GpuSpec gs;
      gs.uuid = "GPU-" + std::to_string(n) + "-" + std::to_string(g);
      gs.index = g;
      gs.model = model.name;
      gs.memory_mib = model.memory_mib;
      gs.compute_capability_major = model.cc_major;
      gs.compute_capability_minor = model.cc_minor;
      gs.mig_capable = model.cc_major >= 8 && rng.Uniform(100) < 5;
      gs.mps_capable = true;
      gpus.push_back(CheckValue(l.AddGpu(node, gs), "add gpu"));
      mig.push_back(gs.mig_capable);
    }

    // Node resources handed out so far; stay within ~70% of the node.
    CpuMilli cpu_used = 0;
    MemoryMib host_used = 0;
    const CpuMilli cpu_cap = model.node_cpu_milli * 7 / 10;
    const MemoryMib host_cap = model.node_host_memory_mib * 7 / 10;
    auto restore = [&](Allocation a) {
      if (cpu_used + a.cpu_milli > cpu_cap ||
          host_used + a.host_memory_mib > host_cap) {
        a.cpu_milli = 0;
        a.host_memory_mib = 0;
      }
      cpu_used += a.cpu_milli;
      host_used += a.host_memory_mib;
      a.id = SliceId(next_id++);
      (void)CheckValue(l.Restore(a), "restore");
    };

    if (n % 12 == 5) continue;    // an empty node, kept for large jobs
    if (rng.Uniform(100) < 12) {  // a whole-node training job
      Allocation a;
      a.tenant = PickTenant(rng);
      a.kind = RequestKind::kWholeGpus;
      for (int g = 0; g < count; ++g) {
        if (!mig[g]) a.gpus.push_back(gpus[g]);
      }
      if (!a.gpus.empty()) {
        a.cpu_milli = std::min<CpuMilli>(
            8000 * static_cast<CpuMilli>(a.gpus.size()), cpu_cap);
        a.host_memory_mib = model.node_host_memory_mib / 2;
        restore(a);
        continue;
      }
    }
    for (int g = 0; g < count; ++g) {
      const int q = rng.Uniform(100);
      const bool lost = q < 3;
      if ((lost && rng.Uniform(2) == 0) || (q >= 3 && q < 13) || mig[g]) {
        // Empty (or lost and empty). A GPU in MIG mode is left empty too:
        // the ledger charges its slices as partitions, which this fill's
        // sizes do not follow; the timed requests still land on it.
      } else if (q >= 13 && q < 23 && !mig[g]) {
        Allocation a;
        a.tenant = PickTenant(rng);
        a.kind = RequestKind::kWholeGpus;
        a.gpus = {gpus[g]};
        a.cpu_milli = 8000;
        a.host_memory_mib = 65536;
        restore(a);
      } else {  // sliced by one sharing domain
        const TenantId owner = PickTenant(rng);
        const MemoryMib target =
            model.memory_mib * (65 + rng.Uniform(36)) / 100;
        MemoryMib used = 0;
        ComputePercent compute = 0;
        for (int attempt = 0; attempt < 12 && used < target; ++attempt) {
          const MemoryMib size =
              model.memory_mib * rng.Pick(kFillSizePct) / 100;
          const ComputePercent ratio = rng.Pick(kFillCompute);
          const ComputePercent accounted = ratio == 0 ? kDefaultCompute : ratio;
          if (used + size > target || compute + accounted > 100) continue;
          Allocation a;
          a.tenant = SameDomainTenant(rng, owner);
          a.kind = RequestKind::kSlice;
          a.gpus = {gpus[g]};
          a.memory_mib = size;
          a.compute_percent = accounted;
          a.compute_defaulted = ratio == 0;
          a.cpu_milli = rng.Pick(kFillCpu);
          a.host_memory_mib = rng.Pick(kFillHost);
          restore(a);
          used += size;
          compute += accounted;
        }
      }
      if (lost) Check(l.SetGpuHealth(gpus[g], GpuHealth::kLost), "lose gpu");
    }
  }

  l.Read([&](const ClusterView& view) {
    MemoryMib total = 0;
    MemoryMib used = 0;
    for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
      const GpuRecord& g = view.gpu(GpuId(i));
      if (!g.live) continue;
      total += g.spec.memory_mib;
      used += g.used_memory_mib;
    }
    c.memory_used_pct = total == 0 ? 0
                                   : 100.0 * static_cast<double>(used) /
                                         static_cast<double>(total);
  });

  // The timed requests.
  Rng req(0xBEEF0000ULL + static_cast<std::uint64_t>(n_gpus));
  static const std::vector<std::vector<std::string>> kModelChoices = {
      {"A100-80GB"}, {"A100-80GB", "A100-40GB"}, {"V100-32GB"}, {"T4-16GB"}};
  static constexpr MemoryMib kRequestSizes[] = {
      512,  1024,  1024,  2048,  2048,  4096,  4096, 8192,
      8192, 10240, 16384, 20480, 24576, 32768, 40960};
  static constexpr ComputePercent kRequestCompute[] = {0,  0,  0,  5, 10,
                                                       20, 25, 30, 50};
  static constexpr CpuMilli kRequestCpu[] = {0, 0, 0, 500, 1000, 2000};
  static constexpr MemoryMib kRequestHost[] = {0, 0, 2048, 4096, 8192, 16384};
  c.slice_requests.reserve(kSliceRequestCount);
  for (std::size_t i = 0; i < kSliceRequestCount; ++i) {
    PlacementRequest r;
    r.tenant = PickTenant(req);
    r.kind = RequestKind::kSlice;
    MemoryMib max_memory = kModels[0].memory_mib * 9 / 10;
    if (req.Uniform(100) < 15) {
      r.allowed_models = kModelChoices[req.Next() % kModelChoices.size()];
      for (const std::string& m : r.allowed_models) {
        max_memory = std::min(max_memory, ModelByName(m).memory_mib * 6 / 10);
      }
    }
    if (req.Uniform(100) < 10) {  // compute-only slice
      r.compute_percent = 10 * (1 + req.Uniform(5));
    } else {
      MemoryMib size = req.Pick(kRequestSizes);
      while (size > max_memory) size /= 2;
      r.memory_mib = size;
      if (const ComputePercent p = req.Pick(kRequestCompute); p != 0) {
        r.compute_percent = p;
      }
    }
    r.cpu_milli = req.Pick(kRequestCpu);
    r.host_memory_mib = req.Pick(kRequestHost);
    c.slice_requests.push_back(std::move(r));
  }
  static constexpr int kWholeCounts[] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                         2, 2, 2, 4, 4, 4, 4, 8, 8, 8};
  c.whole_requests.reserve(kWholeRequestCount);
  for (std::size_t i = 0; i < kWholeRequestCount; ++i) {
    PlacementRequest r =
        PlacementRequest::WholeGpus(PickTenant(req), req.Pick(kWholeCounts));
    r.cpu_milli = 4000 * static_cast<CpuMilli>(r.gpu_count);
    r.host_memory_mib = 16384 * static_cast<MemoryMib>(r.gpu_count);
    if (r.gpu_count <= 2 && req.Uniform(100) < 20) {
      r.allowed_models = kModelChoices[req.Next() % kModelChoices.size()];
    }
    c.whole_requests.push_back(std::move(r));
  }
}

// The cluster of each size, built on first use and kept for the whole run
// (every benchmark leaves it exactly as it found it).
Cluster& ClusterOf(int n_gpus) {
  static std::map<int, std::unique_ptr<Cluster>> cache;
  std::unique_ptr<Cluster>& c = cache[n_gpus];
  if (!c) {
    c = std::make_unique<Cluster>();
    BuildCluster(*c, n_gpus);
  }
  return *c;
}

// Indexed ns/pair per (whole?, size), for the scan benchmarks' ratio.
std::map<std::pair<bool, int>, double>& IndexedNs() {
  static std::map<std::pair<bool, int>, double> ns;
  return ns;
}

void RunPairs(benchmark::State& state, const PlacementPolicy& policy,
              bool whole, bool indexed) {
  const int n_gpus = static_cast<int>(state.range(0));
  Cluster& c = ClusterOf(n_gpus);
  Ledger& l = *c.ledger;
  const std::vector<PlacementRequest>& requests =
      whole ? c.whole_requests : c.slice_requests;
  const std::size_t mask = requests.size() - 1;
  std::size_t next = 0;
  std::int64_t placed = 0;

  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const PlacementRequest& r = requests[next++ & mask];
    PlacementResult result = l.Place(r, policy);
    if (result.placed()) {
      ++placed;
      if (Status s = l.Release(result.allocation.id); !s.ok()) {
        state.SkipWithError(("release failed: " + s.ToString()).c_str());
        break;
      }
    } else if (result.outcome == PlacementOutcome::kInvalid) {
      state.SkipWithError(("invalid placement: " + result.message).c_str());
      break;
    }
    benchmark::DoNotOptimize(result);
  }
  const auto stop = std::chrono::steady_clock::now();

  const double iterations = static_cast<double>(state.iterations());
  if (iterations == 0) return;
  const double ns =
      static_cast<double>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start)
              .count()) /
      iterations;
  state.counters["gpus"] = n_gpus;
  state.counters["mem_used_pct"] = c.memory_used_pct;
  state.counters["placed"] = static_cast<double>(placed) / iterations;
  state.counters["ns_per_pair"] = ns;
  if (indexed) {
    IndexedNs()[{whole, n_gpus}] = ns;
  } else if (auto it = IndexedNs().find({whole, n_gpus});
             it != IndexedNs().end() && it->second > 0) {
    state.counters["vs_indexed"] = ns / it->second;
  }
}

void BM_PlaceRelease_BestFit(benchmark::State& state) {
  static const scheduler::BestFitPolicy policy;
  RunPairs(state, policy, /*whole=*/false, /*indexed=*/true);
}

void BM_PlaceRelease_LinearScan(benchmark::State& state) {
  static const scheduler::LinearScanBestFitPolicy policy;
  RunPairs(state, policy, /*whole=*/false, /*indexed=*/false);
}

void BM_PlaceRelease_BestFit_WholeGpu(benchmark::State& state) {
  static const scheduler::BestFitPolicy policy;
  RunPairs(state, policy, /*whole=*/true, /*indexed=*/true);
}

void BM_PlaceRelease_LinearScan_WholeGpu(benchmark::State& state) {
  static const scheduler::LinearScanBestFitPolicy policy;
  RunPairs(state, policy, /*whole=*/true, /*indexed=*/false);
}

// The server's default, hf-frag (scheduler/policy/learned.h), warm: it has
// seen every request of the run once, so it places with the learned
// target workload, not the cold-start Best-Fit.
const scheduler::LearnedFragPolicy& WarmHfFrag(int n_gpus) {
  static std::map<int, std::unique_ptr<scheduler::LearnedFragPolicy>> cache;
  std::unique_ptr<scheduler::LearnedFragPolicy>& p = cache[n_gpus];
  if (!p) {
    p = std::make_unique<scheduler::LearnedFragPolicy>();
    const Cluster& c = ClusterOf(n_gpus);
    for (const PlacementRequest& r : c.slice_requests) p->Observe(r);
    for (const PlacementRequest& r : c.whole_requests) p->Observe(r);
    if (p->ColdStart()) std::abort();
  }
  return *p;
}

void BM_PlaceRelease_HfFrag(benchmark::State& state) {
  RunPairs(state, WarmHfFrag(static_cast<int>(state.range(0))),
           /*whole=*/false, /*indexed=*/false);
}

void BM_PlaceRelease_HfFrag_WholeGpu(benchmark::State& state) {
  RunPairs(state, WarmHfFrag(static_cast<int>(state.range(0))),
           /*whole=*/true, /*indexed=*/false);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int n : {100, 1000, 10000, 100000}) b->Arg(n);
  b->ArgName("gpus");
}

// Indexed runs first, so each scan run can report its ratio to them. They
// repeat 5 times and report mean / median / spread: the shared 2-core
// machines this runs on are noisy, and the targets are about ratios.
BENCHMARK(BM_PlaceRelease_BestFit)
    ->Apply(Sizes)
    ->MinTime(0.5)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_PlaceRelease_BestFit_WholeGpu)
    ->Apply(Sizes)
    ->MinTime(0.5)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
// hf-frag beside Best-Fit, in the same run (its vs_indexed: x Best-Fit).
BENCHMARK(BM_PlaceRelease_HfFrag)
    ->Apply(Sizes)
    ->MinTime(0.5)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_PlaceRelease_HfFrag_WholeGpu)
    ->Apply(Sizes)
    ->MinTime(0.5)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);
// A scan at 100,000 GPUs costs milliseconds a pair: a shorter minimum time.
BENCHMARK(BM_PlaceRelease_LinearScan)->Apply(Sizes)->MinTime(0.3);
BENCHMARK(BM_PlaceRelease_LinearScan_WholeGpu)->Apply(Sizes)->MinTime(0.3);

}  // namespace
}  // namespace hf

BENCHMARK_MAIN();
