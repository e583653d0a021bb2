// Property tests of the slice ledger (docs/CONTRACT.md section 5).
//
// Long random sequences of ledger operations -- slice and whole-GPU
// placements, releases (of live, already released and never issued ids),
// GPU_LOST / healthy, MIG capability changes, adding and removing GPUs and
// nodes, shared tenant groups being defined and removed, tenants joining and
// leaving them, restores of released allocations, resizes of live slices
// (the dynamic quota of docs/CONTRACT.md section 13) and malformed requests --
// are applied to the real Ledger (with scheduler::BestFitPolicy) and to a
// small, independent reference model written from docs/CONTRACT.md's rules
// (plain structs and linear scans; it never calls ClusterView::CheckSlice or
// the LinearScanBestFitPolicy). After every step the test checks:
// - Ledger::CheckInvariants() is OK;
// - per GPU, accounted memory and compute never exceed capacity and equal
//   the sum of the live allocations (ClusterView and Ledger::Allocations());
//   per node, CPU and host memory likewise; everything equals the reference;
// - no placement puts a tenant on a GPU holding a tenant outside its shared
//   group (same tenant, or both in one *defined* group);
// - the GPU(s) chosen equal the reference's Best-Fit choice, and the
//   outcome kind (placed / retry later / infeasible / invalid) matches;
// - a release returns exactly the allocation's quota.
// Node tie ranks are read from the ledger only for the property that runs
// with a nonzero LedgerOptions::tie_break_seed (with seed 0 the reference
// breaks ties by node id, as LedgerOptions documents).
//
// The number of operations checked is printed at the end of the run.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/quantity.h"
#include "common/status.h"
#include "gpu/mig_profiles.h"
#include "ledger/cluster_state.h"
#include "ledger/cluster_view.h"
#include "ledger/ledger.h"
#include "ledger/model.h"
#include "scheduler/policy/best_fit.h"

namespace hf::ledger {
namespace {

// ------------------------------------------------------------------ inputs

struct ModelInfo {
  const char* name;
  const char* vendor;
  MemoryMib memory_mib;
};
// Several GPUs of one model on several nodes make Best-Fit ties common.
constexpr ModelInfo kModels[] = {
    {"A100-SXM4-80GB", "nvidia", 81920},
    {"A100-PCIE-40GB", "nvidia", 40960},
    {"L4", "nvidia", 23034},
    {"V100-SXM2-16GB", "nvidia", 16384},
    {"Ascend910B", "ascend", 65536},
};
constexpr std::uint32_t kModelCount = std::size(kModels);
constexpr const char* kAbsentModel = "H200-NOT-IN-CLUSTER";

enum class OpKind : std::uint8_t {
  kPlaceSlice,
  kPlaceWhole,
  kRelease,
  kReleaseUnknown,
  kSetHealth,
  kSetMig,
  kAddGpu,
  kRemoveGpu,
  kAddNode,
  kRemoveNode,
  kDefineGroup,
  kRemoveGroup,
  kJoinGroup,
  kLeaveGroup,
  kApproveSharing,
  kWithdrawSharing,
  kRestore,
  kInvalidRequest,
  kResize,
  kCount,
};
constexpr std::size_t kOpKindCount = static_cast<std::size_t>(OpKind::kCount);

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kPlaceSlice:
      return "PlaceSlice";
    case OpKind::kPlaceWhole:
      return "PlaceWhole";
    case OpKind::kRelease:
      return "Release";
    case OpKind::kReleaseUnknown:
      return "ReleaseUnknown";
    case OpKind::kSetHealth:
      return "SetHealth";
    case OpKind::kSetMig:
      return "SetMig";
    case OpKind::kAddGpu:
      return "AddGpu";
    case OpKind::kRemoveGpu:
      return "RemoveGpu";
    case OpKind::kAddNode:
      return "AddNode";
    case OpKind::kRemoveNode:
      return "RemoveNode";
    case OpKind::kDefineGroup:
      return "DefineGroup";
    case OpKind::kRemoveGroup:
      return "RemoveGroup";
    case OpKind::kJoinGroup:
      return "JoinGroup";
    case OpKind::kLeaveGroup:
      return "LeaveGroup";
    case OpKind::kApproveSharing:
      return "ApproveSharing";
    case OpKind::kWithdrawSharing:
      return "WithdrawSharing";
    case OpKind::kRestore:
      return "Restore";
    case OpKind::kInvalidRequest:
      return "InvalidRequest";
    case OpKind::kResize:
      return "Resize";
    case OpKind::kCount:
      break;
  }
  return "?";
}

// One abstract operation. The fields are raw selectors, interpreted against
// the state at the time the op runs (indices modulo the number of live
// objects), so any subsequence of ops is still a valid test -- which is what
// lets rapidcheck shrink a failing sequence by dropping ops.
struct Op {
  OpKind kind = OpKind::kPlaceSlice;
  std::uint32_t a = 0, b = 0, c = 0, d = 0, e = 0;
};

std::ostream& operator<<(std::ostream& os, const Op& op) {
  return os << OpKindName(op.kind) << "(" << op.a << "," << op.b << "," << op.c
            << "," << op.d << "," << op.e << ")";
}

// One node of the initial inventory: a resource selector and GPU models.
struct NodeInit {
  std::uint32_t resources = 0;
  std::vector<std::uint32_t> models;
};

std::ostream& operator<<(std::ostream& os, const NodeInit& n) {
  os << "Node(res=" << n.resources << ", models=[";
  for (std::size_t i = 0; i < n.models.size(); ++i) {
    os << (i ? "," : "") << n.models[i];
  }
  return os << "])";
}

// What differs between the properties.
struct Profile {
  int tenants = 6;
  int groups = 3;
  std::size_t max_init_nodes = 6;
  std::size_t max_init_gpus = 8;  // per node
  std::size_t max_live_nodes = 10;
  std::size_t max_live_gpus = 64;
  std::size_t max_ops = 2000;  // sequence length is uniform in [0, max_ops]
  std::array<std::uint32_t, kOpKindCount> weights{};
};

Profile MixedProfile() {
  Profile p;
  p.weights = {/*PlaceSlice=*/30,     /*PlaceWhole=*/7,
               /*Release=*/22,
               /*ReleaseUnknown=*/3,  /*SetHealth=*/5,
               /*SetMig=*/3,
               /*AddGpu=*/3,          /*RemoveGpu=*/4,
               /*AddNode=*/1,
               /*RemoveNode=*/1,      /*DefineGroup=*/2,
               /*RemoveGroup=*/1,
               /*JoinGroup=*/4,       /*LeaveGroup=*/2,
               /*ApproveSharing=*/1,
               /*WithdrawSharing=*/1, /*Restore=*/3,
               /*InvalidRequest=*/2,  /*Resize=*/6};
  return p;
}

// Few GPUs, many tenants and a lot of group churn: the tenancy rule and
// "retry later" dominate.
Profile ContendedProfile() {
  Profile p;
  p.tenants = 8;
  p.groups = 3;
  p.max_init_nodes = 3;
  p.max_init_gpus = 4;
  p.max_live_nodes = 5;
  p.max_live_gpus = 16;
  p.max_ops = 1500;
  p.weights = {/*PlaceSlice=*/30,     /*PlaceWhole=*/6,
               /*Release=*/20,
               /*ReleaseUnknown=*/2,  /*SetHealth=*/6,
               /*SetMig=*/3,
               /*AddGpu=*/2,          /*RemoveGpu=*/3,
               /*AddNode=*/1,
               /*RemoveNode=*/1,      /*DefineGroup=*/4,
               /*RemoveGroup=*/3,
               /*JoinGroup=*/8,       /*LeaveGroup=*/4,
               /*ApproveSharing=*/3,
               /*WithdrawSharing=*/2, /*Restore=*/3,
               /*InvalidRequest=*/1,  /*Resize=*/5};
  return p;
}

// A uniform integer in [lo, hi), independent of rapidcheck's size.
rc::Gen<std::uint32_t> Uniform(std::uint32_t lo, std::uint32_t hi) {
  return rc::gen::resize(100, rc::gen::inRange<std::uint32_t>(lo, hi));
}

rc::Gen<Op> GenOp(const Profile& profile) {
  std::uint32_t total = 0;
  for (std::uint32_t w : profile.weights) total += w;
  const auto weights = profile.weights;
  const auto field = Uniform(0, 1u << 16);
  return rc::gen::map(
      rc::gen::tuple(Uniform(0, total), field, field, field, field, field),
      [weights](
          const std::tuple<std::uint32_t, std::uint32_t, std::uint32_t,
                           std::uint32_t, std::uint32_t, std::uint32_t>& t) {
        Op op;
        std::uint32_t sel = std::get<0>(t);
        std::size_t k = 0;
        while (sel >= weights[k]) sel -= weights[k++];
        op.kind = static_cast<OpKind>(k);
        op.a = std::get<1>(t);
        op.b = std::get<2>(t);
        op.c = std::get<3>(t);
        op.d = std::get<4>(t);
        op.e = std::get<5>(t);
        return op;
      });
}

rc::Gen<std::vector<NodeInit>> GenInventory(const Profile& profile) {
  const auto node = rc::gen::map(
      rc::gen::pair(
          Uniform(0, 1u << 16),
          rc::gen::resize(static_cast<int>(profile.max_init_gpus),
                          rc::gen::container<std::vector<std::uint32_t>>(
                              Uniform(0, kModelCount)))),
      [](const std::pair<std::uint32_t, std::vector<std::uint32_t>>& p) {
        return NodeInit{p.first, p.second};
      });
  return rc::gen::resize(
      static_cast<int>(profile.max_init_nodes),
      rc::gen::nonEmpty(rc::gen::container<std::vector<NodeInit>>(node)));
}

// ------------------------------------------------------------ the reference

// Plain records and linear scans, from docs/CONTRACT.md section 5 and the
// Ledger API documentation. GPUs and nodes are keyed by the ids the ledger
// returned.
struct RefGpu {
  NodeId node;
  std::string uuid;
  std::uint32_t model = 0;
  MemoryMib memory_mib = 0;
  bool live = true;
  bool lost = false;
  bool mig = false;
  MemoryMib used_memory_mib = 0;
  ComputePercent used_compute = 0;
  std::set<SliceId> slices;  // live allocations on this GPU
  bool whole = false;        // held by a whole-GPU allocation
  // The MIG partitions of live slices here (charged as their profile).
  std::map<SliceId, gpu::MigInstance> partitions;

  MemoryMib free_memory() const { return memory_mib - used_memory_mib; }
};

struct RefNode {
  NodeSpec spec;
  bool live = true;
  std::uint64_t rank = 0;  // as the ledger reported it at AddNode
  CpuMilli used_cpu = 0;
  MemoryMib used_host = 0;
  std::vector<GpuId> gpus;  // live GPUs, ascending id
  int next_index = 0;

  CpuMilli free_cpu() const { return spec.cpu_milli - used_cpu; }
  MemoryMib free_host() const { return spec.host_memory_mib - used_host; }
};

class Reference {
 public:
  Reference(ComputePercent default_compute, bool seeded)
      : default_compute_(default_compute), seeded_(seeded) {}

  std::map<NodeId, RefNode> nodes;
  std::map<GpuId, RefGpu> gpus;
  std::map<SliceId, Allocation> live;
  std::set<GroupId> groups;            // defined groups
  std::map<TenantId, GroupId> member;  // only for defined groups
  // Active sharing approvals per unordered pair (lower id first).
  std::map<std::pair<TenantId, TenantId>, int> approvals;
  std::uint64_t max_id = 0;  // highest slice id ever seen

  // Tenants may share a GPU if they are the same tenant or both belong to
  // one defined shared group (fail-closed otherwise).
  bool Shares(TenantId x, TenantId y) const {
    if (x == y) return true;
    if (approvals.contains(y < x ? std::make_pair(y, x)
                                 : std::make_pair(x, y))) {
      return true;
    }
    auto gx = member.find(x);
    auto gy = member.find(y);
    return gx != member.end() && gy != member.end() &&
           gx->second == gy->second && groups.contains(gx->second);
  }

  // Every tenant already on `g` may share with `tenant`.
  bool TenancyOk(const RefGpu& g, TenantId tenant) const {
    for (SliceId s : g.slices) {
      if (!Shares(live.at(s).tenant, tenant)) return false;
    }
    return true;
  }

  MemoryMib Largest() const {
    MemoryMib largest = 0;
    for (const auto& [id, g] : gpus) {
      if (g.live) largest = std::max(largest, g.memory_mib);
    }
    return largest;
  }

  std::size_t LiveGpuCount() const {
    std::size_t n = 0;
    for (const auto& [id, g] : gpus) n += g.live;
    return n;
  }

  static bool ModelOk(const PlacementRequest& r, std::uint32_t model) {
    if (r.allowed_models.empty()) return true;
    for (const std::string& m : r.allowed_models) {
      if (m == kModels[model].name) return true;
    }
    return false;
  }

  ComputePercent Accounted(const PlacementRequest& r) const {
    return r.compute_percent.value_or(default_compute_);
  }

  // In MIG mode on a model with a profile table, every new slice is a
  // partition: the table its slices are cut from, else nullptr.
  static const gpu::MigModelTable* Table(const RefGpu& g) {
    return g.mig ? gpu::FindMigTable(kModels[g.model].name, g.memory_mib)
                 : nullptr;
  }

  // What a slice asking `memory` (0: unbounded) and `compute` would be
  // charged on `g` in MIG mode: the partition at the lowest free legal
  // place, its memory slots' share of the card and its compute slices'.
  struct Partition {
    gpu::MigInstance instance;
    MemoryMib memory_mib = 0;
    ComputePercent compute = 0;
  };
  static std::optional<Partition> PartitionFor(
      const RefGpu& g, MemoryMib memory,
      std::optional<ComputePercent> compute) {
    const gpu::MigModelTable* table = Table(g);
    if (table == nullptr) return std::nullopt;
    std::vector<gpu::MigInstance> existing;
    for (const auto& [id, p] : g.partitions) existing.push_back(p);
    auto chosen = gpu::ChooseMigInstance(
        *table, memory > 0 ? std::optional<MemoryMib>(memory) : std::nullopt,
        compute, existing, g.memory_mib);
    if (!chosen.ok()) return std::nullopt;
    return Charge(*table, g, *chosen);
  }
  static Partition Charge(const gpu::MigModelTable& table, const RefGpu& g,
                          const gpu::MigInstance& instance) {
    const gpu::MigProfile* profile = gpu::FindProfile(table, instance.profile);
    return {instance,
            g.memory_mib * profile->memory_slices / table.memory_slices,
            profile->compute_slices * 100 / table.compute_slices};
  }

  static bool NodeHasRoom(const RefNode& n, const PlacementRequest& r) {
    return r.cpu_milli <= n.free_cpu() && r.host_memory_mib <= n.free_host();
  }

  // With seed 0 ties go to the lowest node id (LedgerOptions); otherwise to
  // the rank the ledger assigned the node.
  std::uint64_t Rank(NodeId n) const {
    return seeded_ ? nodes.at(n).rank : n.value();
  }

  // Rules 2-4 of docs/CONTRACT.md section 5 plus capacity, models and node
  // resources: can GPU `g` take the slice `r` now?
  bool SliceFits(const RefGpu& g, const PlacementRequest& r) const {
    if (!g.live || g.lost) return false;
    if (!ModelOk(r, g.model)) return false;
    if (!TenancyOk(g, r.tenant)) return false;
    if (r.memory_mib.value_or(0) > g.free_memory()) return false;
    if (Table(g) != nullptr) {
      const auto p =
          PartitionFor(g, r.memory_mib.value_or(0), r.compute_percent);
      if (!p || p->memory_mib > g.free_memory() ||
          g.used_compute + p->compute > kFullComputePercent) {
        return false;
      }
      return NodeHasRoom(nodes.at(g.node), r);
    }
    if (g.used_compute + Accounted(r) > kFullComputePercent) return false;
    return NodeHasRoom(nodes.at(g.node), r);
  }

  bool WithinNinetyPercent(const PlacementRequest& r) const {
    return r.memory_mib.value_or(0) * 10 <= Largest() * 9;
  }

  // Best-Fit: least free memory, then node rank, then GPU id. `ties` is set
  // to the number of admissible GPUs sharing the least free memory.
  std::optional<GpuId> ChooseSlice(const PlacementRequest& r,
                                   int* ties = nullptr) const {
    if (!WithinNinetyPercent(r)) return std::nullopt;
    std::optional<std::tuple<MemoryMib, std::uint64_t, std::uint64_t>> best;
    int equal = 0;
    for (const auto& [id, g] : gpus) {
      if (!SliceFits(g, r)) continue;
      const auto key =
          std::make_tuple(g.free_memory(), Rank(g.node), id.value());
      if (best && std::get<0>(key) == std::get<0>(*best)) ++equal;
      if (!best || std::get<0>(key) < std::get<0>(*best)) equal = 1;
      if (!best || key < *best) best = key;
    }
    if (ties) *ties = equal;
    if (!best) return std::nullopt;
    return GpuId(std::get<2>(*best));
  }

  // A GPU that could be handed out whole right now, ignoring models.
  static bool WholeFree(const RefGpu& g) {
    return g.live && !g.lost && !g.mig && g.slices.empty();
  }

  // The node with the fewest whole-free GPUs among those with enough
  // eligible GPUs of allowed models and enough CPU / host memory; ties by
  // rank then node id; its eligible GPUs in ascending id.
  std::optional<std::vector<GpuId>> ChooseWhole(const PlacementRequest& r,
                                                int* ties = nullptr) const {
    std::optional<std::tuple<int, std::uint64_t, std::uint64_t>> best;
    std::vector<GpuId> chosen;
    int equal = 0;
    for (const auto& [nid, n] : nodes) {
      if (!n.live || !NodeHasRoom(n, r)) continue;
      std::vector<GpuId> eligible;
      int free_whole = 0;
      for (GpuId gid : n.gpus) {
        const RefGpu& g = gpus.at(gid);
        if (!WholeFree(g)) continue;
        ++free_whole;
        if (ModelOk(r, g.model)) eligible.push_back(gid);
      }
      if (eligible.size() < static_cast<std::size_t>(r.gpu_count)) continue;
      const auto key = std::make_tuple(free_whole, Rank(nid), nid.value());
      if (best && std::get<0>(key) == std::get<0>(*best)) ++equal;
      if (!best || std::get<0>(key) < std::get<0>(*best)) equal = 1;
      if (!best || key < *best) {
        best = key;
        eligible.resize(static_cast<std::size_t>(r.gpu_count));
        chosen = eligible;
      }
    }
    if (ties) *ties = equal;
    if (!best) return std::nullopt;
    return chosen;
  }

  // "Never fits in this cluster": not even with every GPU empty and healthy
  // (MIG mode and the inventory stay as they are).
  bool Infeasible(const PlacementRequest& r) const {
    if (LiveGpuCount() == 0) return true;
    const bool slice = r.kind == RequestKind::kSlice;
    if (slice && !WithinNinetyPercent(r)) return true;
    const MemoryMib memory = r.memory_mib.value_or(0);
    for (const auto& [nid, n] : nodes) {
      if (!n.live || r.cpu_milli > n.spec.cpu_milli ||
          r.host_memory_mib > n.spec.host_memory_mib) {
        continue;
      }
      int capable = 0;
      for (GpuId gid : n.gpus) {
        const RefGpu& g = gpus.at(gid);
        if (!ModelOk(r, g.model)) continue;
        bool fits_idle = g.memory_mib >= memory;
        if (slice && Table(g) != nullptr) {
          RefGpu idle = g;
          idle.partitions.clear();
          fits_idle = PartitionFor(idle, memory, r.compute_percent).has_value();
        }
        if (slice ? fits_idle : !g.mig) ++capable;
      }
      if (capable >= (slice ? 1 : r.gpu_count)) return false;
    }
    return true;
  }

  // What allocation `a` accounts on GPU `g` (memory, compute).
  std::pair<MemoryMib, ComputePercent> PerGpu(const Allocation& a,
                                              GpuId g) const {
    if (a.kind == RequestKind::kWholeGpus) {
      return {gpus.at(g).memory_mib, kFullComputePercent};
    }
    return {a.memory_mib, a.compute_percent};
  }

  void Add(const Allocation& a) {
    for (GpuId g : a.gpus) {
      RefGpu& gpu = gpus.at(g);
      const auto [m, c] = PerGpu(a, g);
      gpu.used_memory_mib += m;
      gpu.used_compute += c;
      gpu.slices.insert(a.id);
      if (a.kind == RequestKind::kWholeGpus) gpu.whole = true;
      if (!a.mig_profile.empty()) {
        // The model's table even with MIG mode off: a partition keeps its
        // slots until released.
        const gpu::MigModelTable* table =
            gpu::FindMigTable(kModels[gpu.model].name, gpu.memory_mib);
        const gpu::MigProfile* profile =
            table ? gpu::FindProfile(*table, a.mig_profile) : nullptr;
        gpu.partitions[a.id] = gpu::MigInstance{
            a.mig_profile, {a.mig_start, profile ? profile->memory_slices : 0}};
      }
    }
    RefNode& n = nodes.at(a.node);
    n.used_cpu += a.cpu_milli;
    n.used_host += a.host_memory_mib;
    live.emplace(a.id, a);
    max_id = std::max(max_id, a.id.value());
  }

  void Remove(SliceId id) {
    const Allocation a = live.at(id);
    for (GpuId g : a.gpus) {
      RefGpu& gpu = gpus.at(g);
      const auto [m, c] = PerGpu(a, g);
      gpu.used_memory_mib -= m;
      gpu.used_compute -= c;
      gpu.slices.erase(a.id);
      gpu.partitions.erase(a.id);
      if (a.kind == RequestKind::kWholeGpus) gpu.whole = false;
    }
    RefNode& n = nodes.at(a.node);
    n.used_cpu -= a.cpu_milli;
    n.used_host -= a.host_memory_mib;
    live.erase(id);
  }

  bool seeded() const { return seeded_; }
  ComputePercent default_compute() const { return default_compute_; }

 private:
  ComputePercent default_compute_;
  bool seeded_;
};

// ---------------------------------------------------------------- counters

struct Counters {
  std::uint64_t ops = 0;
  std::uint64_t sequences = 0;
  std::array<std::uint64_t, kOpKindCount> per_kind{};
  std::uint64_t placed = 0, retry_later = 0, infeasible = 0, invalid = 0;
  std::uint64_t slice_ties = 0;  // Best-Fit had >= 2 equal candidates
  std::uint64_t whole_ties = 0;
  std::uint64_t refused_removals = 0;  // RemoveGpu/RemoveNode while allocated
  std::uint64_t releases = 0;
  std::uint64_t group_shared = 0;    // slice placed next to another tenant
  std::uint64_t mig_partitions = 0;  // slices charged as a MIG partition
  std::uint64_t brief_answers = 0;   // GPU briefs checked against CheckSlice
};
std::map<std::string, Counters>& AllCounters() {
  static auto* counters = new std::map<std::string, Counters>();
  return *counters;
}

class OpCountReporter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::uint64_t total = 0;
    for (const auto& [name, c] : AllCounters()) {
      total += c.ops;
      std::cout << "[ledger property] " << name << ": " << c.ops
                << " operations checked in " << c.sequences
                << " sequences; placed " << c.placed << ", retry-later "
                << c.retry_later << ", infeasible " << c.infeasible
                << ", invalid " << c.invalid << "; Best-Fit ties: slice "
                << c.slice_ties << ", whole " << c.whole_ties
                << "; group-shared placements " << c.group_shared
                << "; MIG partitions " << c.mig_partitions << "; releases "
                << c.releases << "; refused removals " << c.refused_removals
                << "; brief answers checked " << c.brief_answers
                << "\n  by kind:";
      for (std::size_t k = 0; k < kOpKindCount; ++k) {
        std::cout << " " << OpKindName(static_cast<OpKind>(k)) << "="
                  << c.per_kind[k];
      }
      std::cout << "\n";
    }
    std::cout << "[ledger property] total operations checked: " << total
              << std::endl;
  }
};
[[maybe_unused]] ::testing::Environment* const kReporter =
    ::testing::AddGlobalTestEnvironment(new OpCountReporter);

// --------------------------------------------------------------- the runner

#define PROP_CHECK(cond, msg)            \
  do {                                   \
    if (!(cond)) {                       \
      std::ostringstream prop_check_os_; \
      prop_check_os_ << msg;             \
      Fail(#cond, prop_check_os_.str()); \
    }                                    \
  } while (false)

std::string Describe(const PlacementRequest& r) {
  std::ostringstream os;
  os << (r.kind == RequestKind::kSlice ? "slice" : "whole") << "{tenant "
     << r.tenant;
  if (r.kind == RequestKind::kWholeGpus) os << ", gpus " << r.gpu_count;
  if (r.memory_mib) os << ", mem " << *r.memory_mib;
  if (r.compute_percent) os << ", compute " << *r.compute_percent << "%";
  if (r.cpu_milli) os << ", cpu " << r.cpu_milli;
  if (r.host_memory_mib) os << ", host " << r.host_memory_mib;
  if (!r.allowed_models.empty()) {
    os << ", models [";
    for (const std::string& m : r.allowed_models) os << m << " ";
    os << "]";
  }
  return os.str() + "}";
}

std::string Describe(const std::vector<GpuId>& gpus) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < gpus.size(); ++i) os << (i ? "," : "") << gpus[i];
  return os.str() + "]";
}

class Runner {
 public:
  Runner(const Profile& profile, LedgerOptions options, Counters& counters)
      : profile_(profile),
        ref_(options.default_compute_percent, options.tie_break_seed != 0),
        counters_(counters) {
    auto ledger = Ledger::Create(options);
    RC_ASSERT(ledger.ok());
    ledger_ = std::move(ledger).value();
    if (ref_.seeded()) {
      auto probe = Ledger::Create(options);
      RC_ASSERT(probe.ok());
      probe_ = std::move(probe).value();
    }
  }

  void Build(const std::vector<NodeInit>& inventory) {
    step_ = -1;
    for (const NodeInit& n : inventory) {
      std::optional<NodeId> id = AddNode(n.resources, n.resources >> 8);
      if (!id) continue;
      for (std::uint32_t model : n.models) AddGpu(*id, model, std::nullopt);
    }
    Verify();
  }

  void Run(const std::vector<Op>& ops) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      step_ = static_cast<long>(i);
      op_ = ops[i];
      Apply(ops[i]);
      Verify();
      ++counters_.ops;
      ++counters_.per_kind[static_cast<std::size_t>(ops[i].kind)];
    }
    ++counters_.sequences;
  }

 private:
  [[noreturn]] void Fail(const char* cond, const std::string& msg) {
    std::ostringstream os;
    os << "step " << step_;
    if (step_ >= 0) os << " (" << op_ << ")";
    os << ": " << msg << "  [failed: " << cond << "]";
    RC_FAIL(os.str());
  }

  // ---- selectors

  TenantId Tenant(std::uint32_t sel) const {
    return TenantId(1 + sel % static_cast<std::uint32_t>(profile_.tenants));
  }
  GroupId Group(std::uint32_t sel) const {
    return GroupId(1 + sel % static_cast<std::uint32_t>(profile_.groups));
  }
  template <typename Map>
  static std::optional<typename Map::key_type> PickKey(const Map& m,
                                                       std::uint32_t sel) {
    if (m.empty()) return std::nullopt;
    auto it = m.begin();
    std::advance(it, sel % m.size());
    return it->first;
  }

  // Node-level resources: mostly none.
  static void AddNodeResources(PlacementRequest& r, std::uint32_t sel) {
    if (sel % 4 != 3) return;
    r.cpu_milli = 1000 * static_cast<CpuMilli>(1 + (sel / 4) % 16);
    r.host_memory_mib = 1024 * static_cast<MemoryMib>((sel / 64) % 64);
  }

  // Allowed models: mostly any; sometimes one or two names, possibly one
  // not present in the cluster.
  static void AddModels(PlacementRequest& r, std::uint32_t sel) {
    if (sel % 6 != 5) return;
    const std::uint32_t sub = sel / 6;
    const std::uint32_t n = 1 + sub % 2;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t idx = (sub / 2 + i * 3) % (kModelCount + 1);
      r.allowed_models.push_back(idx == kModelCount ? kAbsentModel
                                                    : kModels[idx].name);
    }
  }

  PlacementRequest SliceRequest(const Op& op) const {
    std::optional<MemoryMib> memory;
    const std::uint32_t m = op.b / 8;
    switch (op.b % 8) {
      case 0:
        break;  // no memory field
      case 1:
      case 2:
        memory = 1024 * static_cast<MemoryMib>(1 + m % 16);
        break;
      case 3:
        memory = 1024 * static_cast<MemoryMib>(1 + m % 80);
        break;
      case 4:
        memory = 32 * static_cast<MemoryMib>(1 + m % 400);
        break;
      case 5:
        memory = 32 + static_cast<MemoryMib>(m % 4000);
        break;
      case 6:
        memory = 4096 * static_cast<MemoryMib>(1 + m % 8);
        break;
      default:
        memory = 60000 + static_cast<MemoryMib>(m % 30000);
        break;
    }
    std::optional<ComputePercent> compute;
    const std::uint32_t c = op.c / 4;
    switch (op.c % 4) {
      case 0:
        break;  // no ratio: accounted at the default
      case 1: {
        constexpr ComputePercent kCommon[] = {10, 20, 25, 50, 100};
        compute = kCommon[c % 5];
        break;
      }
      default:
        compute = static_cast<ComputePercent>(1 + c % 100);
        break;
    }
    if (!memory && !compute) memory = kMinSliceMemoryMib;
    PlacementRequest r = PlacementRequest::Slice(Tenant(op.a), memory, compute);
    AddNodeResources(r, op.d);
    AddModels(r, op.e);
    return r;
  }

  PlacementRequest WholeRequest(const Op& op) const {
    const int count = op.b % 16 == 15 ? 8 : static_cast<int>(1 + op.b % 4);
    PlacementRequest r = PlacementRequest::WholeGpus(Tenant(op.a), count);
    AddNodeResources(r, op.d);
    AddModels(r, op.e);
    return r;
  }

  // ---- operations

  void Apply(const Op& op) {
    switch (op.kind) {
      case OpKind::kPlaceSlice:
        Place(SliceRequest(op));
        break;
      case OpKind::kPlaceWhole:
        Place(WholeRequest(op));
        break;
      case OpKind::kRelease:
        ReleaseLive(op);
        break;
      case OpKind::kReleaseUnknown:
        ReleaseUnknown(op);
        break;
      case OpKind::kSetHealth:
        SetHealth(op);
        break;
      case OpKind::kSetMig:
        SetMig(op);
        break;
      case OpKind::kAddGpu:
        AddGpuOp(op);
        break;
      case OpKind::kRemoveGpu:
        RemoveGpu(op);
        break;
      case OpKind::kAddNode:
        if (LiveNodes() < profile_.max_live_nodes) AddNode(op.a, op.b);
        break;
      case OpKind::kRemoveNode:
        RemoveNode(op);
        break;
      case OpKind::kDefineGroup:
        DefineGroup(op);
        break;
      case OpKind::kRemoveGroup:
        RemoveGroup(op);
        break;
      case OpKind::kJoinGroup:
        JoinGroup(op);
        break;
      case OpKind::kLeaveGroup:
        LeaveGroup(op);
        break;
      case OpKind::kApproveSharing:
        ApproveSharing(op);
        break;
      case OpKind::kWithdrawSharing:
        WithdrawSharing(op);
        break;
      case OpKind::kRestore:
        Restore(op);
        break;
      case OpKind::kInvalidRequest:
        Invalid(op);
        break;
      case OpKind::kResize:
        Resize(op);
        break;
      case OpKind::kCount:
        break;
    }
  }

  // Where the node's GPU brief answers CheckSliceBrief, it is CheckSlice's
  // answer (fits or not), on every GPU of every node with the resources.
  void CheckBriefAgrees(const PlacementRequest& r) {
    ledger_->Read([&](const ClusterView& view) {
      const ClusterView::SliceAsk ask = view.AskFor(r);
      for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
        const NodeRecord& node = view.node(NodeId(n));
        if (!node.live || view.CheckNodeResources(node, r)) continue;
        PROP_CHECK(node.gpu_briefs.size() == node.gpus.size(),
                   "node " << n << " briefs " << node.gpu_briefs.size()
                           << " of " << node.gpus.size() << " GPUs");
        for (std::size_t i = 0; i < node.gpus.size(); ++i) {
          const ClusterView::BriefAnswer brief =
              view.CheckSliceBrief(node, i, ask);
          if (brief == ClusterView::BriefAnswer::kUnknown) continue;
          ++counters_.brief_answers;
          const bool fits = !view.CheckSlice(view.gpu(node.gpus[i]), r);
          PROP_CHECK((brief == ClusterView::BriefAnswer::kFits) == fits,
                     Describe(r)
                         << ": the brief of GPU " << node.gpus[i].value()
                         << " says " << (fits ? "no" : "fits")
                         << ", CheckSlice the opposite");
        }
      }
    });
  }

  void Place(const PlacementRequest& r) {
    const bool slice = r.kind == RequestKind::kSlice;
    if (slice) CheckBriefAgrees(r);
    int ties = 0;
    std::optional<std::vector<GpuId>> want;
    if (slice) {
      if (auto g = ref_.ChooseSlice(r, &ties)) want = std::vector<GpuId>{*g};
    } else {
      want = ref_.ChooseWhole(r, &ties);
    }
    const PlacementOutcome want_outcome =
        want ? PlacementOutcome::kPlaced
             : (ref_.Infeasible(r) ? PlacementOutcome::kInfeasible
                                   : PlacementOutcome::kRetryLater);

    const PlacementResult got = ledger_->Place(r, policy_);
    PROP_CHECK(got.outcome == want_outcome,
               Describe(r) << ": outcome " << PlacementOutcomeName(got.outcome)
                           << " (" << got.message << "), reference says "
                           << PlacementOutcomeName(want_outcome)
                           << (want ? " on GPUs " + Describe(*want) : ""));
    if (!got.placed()) {
      CheckExplanation(r, got);
      (want_outcome == PlacementOutcome::kInfeasible ? counters_.infeasible
                                                     : counters_.retry_later)++;
      return;
    }
    ++counters_.placed;
    if (ties >= 2) ++(slice ? counters_.slice_ties : counters_.whole_ties);
    const Allocation& a = got.allocation;
    PROP_CHECK(a.gpus == *want,
               Describe(r) << ": placed on GPUs " << Describe(a.gpus)
                           << ", reference Best-Fit picks " << Describe(*want));
    // Tenancy, checked directly on the state before the placement: the GPUs
    // held only tenants that may share with the requester (whole GPUs: none).
    for (GpuId g : a.gpus) {
      const RefGpu& gpu = ref_.gpus.at(g);
      PROP_CHECK(ref_.TenancyOk(gpu, r.tenant),
                 "tenant " << r.tenant << " placed on GPU " << g
                           << " which holds a tenant outside its group");
      PROP_CHECK(slice || gpu.slices.empty(),
                 "whole GPU " << g << " granted while holding allocations");
      for (SliceId s : gpu.slices) {
        if (!(ref_.live.at(s).tenant == r.tenant)) {
          ++counters_.group_shared;
          break;
        }
      }
    }
    PROP_CHECK(
        a.id.valid() && a.id.value() > ref_.max_id && !ref_.live.contains(a.id),
        "slice id " << a.id << " not fresh (highest so far " << ref_.max_id
                    << ")");
    PROP_CHECK(a.tenant == r.tenant && a.kind == r.kind &&
                   a.node == ref_.gpus.at(a.gpus.front()).node &&
                   a.cpu_milli == r.cpu_milli &&
                   a.host_memory_mib == r.host_memory_mib,
               "allocation fields differ from the request " << Describe(r));
    const RefGpu& first = ref_.gpus.at(a.gpus.front());
    if (slice && Reference::Table(first) != nullptr) {
      // MIG mode: charged as the partition, where it sits.
      const auto p = Reference::PartitionFor(first, r.memory_mib.value_or(0),
                                             r.compute_percent);
      PROP_CHECK(p.has_value() && a.mig_profile == p->instance.profile &&
                     a.mig_start == p->instance.placement.start &&
                     a.memory_mib == p->memory_mib &&
                     a.compute_percent == p->compute && !a.compute_defaulted,
                 "MIG slice charged " << a.mig_profile << "@" << a.mig_start
                                      << " " << a.memory_mib << " MB / "
                                      << a.compute_percent << "% for "
                                      << Describe(r));
      ++counters_.mig_partitions;
    } else if (slice) {
      PROP_CHECK(a.memory_mib == r.memory_mib.value_or(0) &&
                     a.compute_percent == ref_.Accounted(r) &&
                     a.compute_defaulted == !r.compute_percent.has_value() &&
                     a.mig_profile.empty(),
                 "slice accounted " << a.memory_mib << " MB / "
                                    << a.compute_percent << "% for "
                                    << Describe(r));
    } else {
      PROP_CHECK(a.compute_percent == kFullComputePercent,
                 "whole GPUs accounted at " << a.compute_percent << "%");
    }
    ref_.Add(a);
  }

  // Per-reason counts of a failed placement that follow from the rules
  // alone (whatever order the other checks run in).
  void CheckExplanation(const PlacementRequest& r, const PlacementResult& got) {
    PROP_CHECK(!got.message.empty(), "failure without a message");
    PROP_CHECK(got.gpus_considered == static_cast<int>(ref_.LiveGpuCount()),
               "considered " << got.gpus_considered << " GPUs, "
                             << ref_.LiveGpuCount() << " live");
    int lost = 0, tenancy = 0, mig = 0;
    for (const auto& [id, g] : ref_.gpus) {
      if (!g.live) continue;
      if (g.lost) {
        ++lost;
        continue;
      }
      if (r.kind == RequestKind::kSlice) {
        if (Reference::ModelOk(r, g.model) && !ref_.TenancyOk(g, r.tenant)) {
          ++tenancy;
        }
      } else {
        mig += g.mig;
      }
    }
    PROP_CHECK(got.count(RejectReason::kLost) == lost,
               "kLost count " << got.count(RejectReason::kLost) << ", " << lost
                              << " lost GPUs");
    if (r.kind == RequestKind::kSlice) {
      PROP_CHECK(got.count(RejectReason::kTenantConstraint) == tenancy,
                 "tenant-constraint count "
                     << got.count(RejectReason::kTenantConstraint) << ", want "
                     << tenancy);
      if (tenancy > 0 && got.outcome == PlacementOutcome::kRetryLater) {
        PROP_CHECK(
            got.message.find("tenant-sharing constraint") != std::string::npos,
            "message does not name the tenant constraint: " << got.message);
      }
    } else {
      PROP_CHECK(got.count(RejectReason::kMigMode) == mig,
                 "MIG count " << got.count(RejectReason::kMigMode) << ", want "
                              << mig);
    }
  }

  struct Free {
    MemoryMib memory;
    ComputePercent compute;
  };

  void ReleaseLive(const Op& op) {
    auto id = PickKey(ref_.live, op.a);
    if (!id) {
      ReleaseUnknown(op);
      return;
    }
    const Allocation a = ref_.live.at(*id);
    std::vector<Free> before, after;
    CpuMilli cpu_before = 0, cpu_after = 0;
    MemoryMib host_before = 0, host_after = 0;
    auto snapshot = [&](std::vector<Free>& out, CpuMilli& cpu,
                        MemoryMib& host) {
      ledger_->Read([&](const ClusterView& view) {
        for (GpuId g : a.gpus) {
          out.push_back({view.gpu(g).free_memory_mib(),
                         view.gpu(g).free_compute_percent()});
        }
        cpu = view.node(a.node).free_cpu_milli();
        host = view.node(a.node).free_host_memory_mib();
      });
    };
    snapshot(before, cpu_before, host_before);
    const Status s = ledger_->Release(*id);
    PROP_CHECK(s.ok(), "release of live slice " << *id << ": " << s.ToString());
    snapshot(after, cpu_after, host_after);
    for (std::size_t i = 0; i < a.gpus.size(); ++i) {
      const auto [m, c] = ref_.PerGpu(a, a.gpus[i]);
      PROP_CHECK(after[i].memory - before[i].memory == m &&
                     after[i].compute - before[i].compute == c,
                 "release of " << *id << " returned "
                               << after[i].memory - before[i].memory << " MB / "
                               << after[i].compute - before[i].compute
                               << "% on GPU " << a.gpus[i] << ", it took " << m
                               << " MB / " << c << "%");
    }
    PROP_CHECK(cpu_after - cpu_before == a.cpu_milli &&
                   host_after - host_before == a.host_memory_mib,
               "release of " << *id << " returned node resources "
                             << cpu_after - cpu_before << " / "
                             << host_after - host_before);
    ref_.Remove(*id);
    released_.push_back(a);
    if (released_.size() > 64) released_.erase(released_.begin());
    ++counters_.releases;
  }

  void ReleaseUnknown(const Op& op) {
    SliceId id;
    switch (op.a % 3) {
      case 0:
        if (!released_.empty()) {
          id = released_[(op.a / 3) % released_.size()].id;
          if (ref_.live.contains(id)) id = SliceId(ref_.max_id + 1);
        } else {
          id = SliceId(ref_.max_id + 1);
        }
        break;
      case 1:
        id = SliceId(ref_.max_id + 1 + (op.a / 3) % 4);
        break;
      default:
        break;  // the invalid id
    }
    const Status s = ledger_->Release(id);
    PROP_CHECK(s.code() == StatusCode::kNotFound,
               "release of unknown slice " << id << ": " << s.ToString());
  }

  // A GPU id: mostly one the cluster has had, sometimes one it never had.
  GpuId AnyGpu(std::uint32_t sel) const {
    if (sel % 16 == 15 || ref_.gpus.empty()) return GpuId(1u << 20);
    return *PickKey(ref_.gpus, sel / 16);
  }

  void SetHealth(const Op& op) {
    const GpuId g = AnyGpu(op.a);
    const bool lost = op.b % 2 == 0;
    const Status s =
        ledger_->SetGpuHealth(g, lost ? GpuHealth::kLost : GpuHealth::kOk);
    auto it = ref_.gpus.find(g);
    if (it == ref_.gpus.end() || !it->second.live) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    it->second.lost = lost;
  }

  void SetMig(const Op& op) {
    const GpuId g = AnyGpu(op.a);
    const bool mig = op.b % 2 == 1;
    const Status s = ledger_->SetGpuCapabilities(g, mig, op.c % 2 == 1);
    auto it = ref_.gpus.find(g);
    if (it == ref_.gpus.end() || !it->second.live) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    it->second.mig = mig;
  }

  std::size_t LiveNodes() const {
    std::size_t n = 0;
    for (const auto& [id, node] : ref_.nodes) n += node.live;
    return n;
  }

  std::optional<NodeId> AddNode(std::uint32_t cpu_sel, std::uint32_t host_sel) {
    NodeSpec spec;
    spec.name = "node-" + std::to_string(next_node_name_++);
    // Some nodes have no CPU / host memory to give at all.
    spec.cpu_milli =
        cpu_sel % 8 == 0 ? 0 : 8000 * static_cast<CpuMilli>(1 + cpu_sel % 8);
    spec.host_memory_mib =
        host_sel % 8 == 0 ? 0
                          : 65536 * static_cast<MemoryMib>(1 + host_sel % 8);
    const StatusOr<NodeId> id = ledger_->AddNode(spec);
    PROP_CHECK(id.ok(), "AddNode: " << id.status().ToString());
    PROP_CHECK(!ref_.nodes.contains(*id), "AddNode reused node id " << *id);
    RefNode node;
    node.spec = spec;
    ledger_->Read(
        [&](const ClusterView& view) { node.rank = view.node(*id).tie_rank; });
    if (probe_) {
      // The rank is a function of the node id and the seed alone.
      std::uint64_t probe_rank = 0;
      while (probe_nodes_ <= id->value()) {
        PROP_CHECK(probe_->AddNode(NodeSpec{"probe", 0, 0, false}).ok(),
                   "probe AddNode");
        ++probe_nodes_;
      }
      probe_->Read([&](const ClusterView& view) {
        probe_rank = view.node(*id).tie_rank;
      });
      PROP_CHECK(probe_rank == node.rank,
                 "node " << *id << " rank " << node.rank
                         << " differs from a fresh ledger's " << probe_rank);
    }
    ref_.nodes.emplace(*id, std::move(node));
    return *id;
  }

  // Adds a GPU of `model` to `node`; `uuid` overrides the fresh UUID.
  void AddGpu(NodeId node, std::uint32_t model,
              std::optional<std::string> uuid) {
    if (ref_.LiveGpuCount() >= profile_.max_live_gpus) return;
    model %= kModelCount;
    GpuSpec spec;
    spec.uuid = uuid ? *uuid : "GPU-" + std::to_string(next_uuid_++);
    spec.model = kModels[model].name;
    spec.vendor = kModels[model].vendor;
    spec.memory_mib = kModels[model].memory_mib;
    spec.compute_capability_major = 8;
    auto nit = ref_.nodes.find(node);
    spec.index = nit == ref_.nodes.end() ? 0 : nit->second.next_index;
    const StatusOr<GpuId> id = ledger_->AddGpu(node, spec);
    if (nit == ref_.nodes.end() || !nit->second.live) {
      PROP_CHECK(
          id.status().code() == StatusCode::kNotFound,
          "AddGpu to dead node " << node << ": " << id.status().ToString());
      return;
    }
    bool duplicate = false;
    for (const auto& [gid, g] : ref_.gpus) {
      duplicate |= g.live && g.uuid == spec.uuid;
    }
    if (duplicate) {
      PROP_CHECK(id.status().code() == StatusCode::kAlreadyExists,
                 "AddGpu with a live UUID: " << id.status().ToString());
      return;
    }
    PROP_CHECK(id.ok(), "AddGpu: " << id.status().ToString());
    PROP_CHECK(!ref_.gpus.contains(*id), "AddGpu reused GPU id " << *id);
    RefGpu gpu;
    gpu.node = node;
    gpu.uuid = spec.uuid;
    gpu.model = model;
    gpu.memory_mib = spec.memory_mib;
    ref_.gpus.emplace(*id, std::move(gpu));
    ++nit->second.next_index;
    nit->second.gpus.push_back(*id);
    std::sort(nit->second.gpus.begin(), nit->second.gpus.end());
  }

  void AddGpuOp(const Op& op) {
    NodeId node(1u << 20);  // never a node
    if (op.a % 8 != 7 && !ref_.nodes.empty()) {
      node = *PickKey(ref_.nodes, op.a / 8);
    }
    std::optional<std::string> uuid;
    std::vector<const RefGpu*> live, dead;
    for (const auto& [id, g] : ref_.gpus) (g.live ? live : dead).push_back(&g);
    if (op.c % 8 == 7 && !live.empty()) {
      uuid = live[(op.c / 8) % live.size()]->uuid;  // AlreadyExists
    } else if (op.c % 8 == 6 && !dead.empty()) {
      uuid = dead[(op.c / 8) % dead.size()]->uuid;  // a removed GPU returns
    }
    AddGpu(node, op.b, uuid);
  }

  void RemoveGpu(const Op& op) {
    GpuId g = AnyGpu(op.a);
    if (op.b % 2 == 0) {  // prefer a GPU that holds allocations
      std::vector<GpuId> busy;
      for (const auto& [id, gpu] : ref_.gpus) {
        if (gpu.live && !gpu.slices.empty()) busy.push_back(id);
      }
      if (!busy.empty()) g = busy[(op.b / 2) % busy.size()];
    }
    const Status s = ledger_->RemoveGpu(g);
    auto it = ref_.gpus.find(g);
    if (it == ref_.gpus.end() || !it->second.live) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    if (!it->second.slices.empty()) {
      PROP_CHECK(s.code() == StatusCode::kFailedPrecondition,
                 "RemoveGpu of allocated GPU " << g << ": " << s.ToString());
      ++counters_.refused_removals;
      return;
    }
    PROP_CHECK(s.ok(), "RemoveGpu of empty GPU " << g << ": " << s.ToString());
    it->second.live = false;
    auto& gpus = ref_.nodes.at(it->second.node).gpus;
    gpus.erase(std::find(gpus.begin(), gpus.end(), g));
  }

  void RemoveNode(const Op& op) {
    NodeId n(1u << 20);
    if (op.a % 8 != 7 && !ref_.nodes.empty())
      n = *PickKey(ref_.nodes, op.a / 8);
    const Status s = ledger_->RemoveNode(n);
    auto it = ref_.nodes.find(n);
    if (it == ref_.nodes.end() || !it->second.live) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    bool busy = false;
    for (GpuId g : it->second.gpus) busy |= !ref_.gpus.at(g).slices.empty();
    if (busy) {
      PROP_CHECK(s.code() == StatusCode::kFailedPrecondition,
                 "RemoveNode with allocations: " << s.ToString());
      ++counters_.refused_removals;
      return;
    }
    PROP_CHECK(s.ok(), "RemoveNode: " << s.ToString());
    for (GpuId g : it->second.gpus) ref_.gpus.at(g).live = false;
    it->second.gpus.clear();
    it->second.live = false;
  }

  void DefineGroup(const Op& op) {
    const GroupId g = Group(op.a);
    const Status s = ledger_->DefineGroup(g);
    if (ref_.groups.contains(g)) {
      PROP_CHECK(s.code() == StatusCode::kAlreadyExists, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    ref_.groups.insert(g);
  }

  // Members of a removed group share with nobody (and are no longer
  // members if the group is defined again).
  void RemoveGroup(const Op& op) {
    const GroupId g = Group(op.a);
    const Status s = ledger_->RemoveGroup(g);
    if (!ref_.groups.contains(g)) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    ref_.groups.erase(g);
    std::erase_if(ref_.member, [&](const auto& m) { return m.second == g; });
  }

  void JoinGroup(const Op& op) {
    const TenantId t = Tenant(op.a);
    const GroupId g = Group(op.b);
    const Status s = ledger_->SetTenantGroup(t, g);
    if (!ref_.groups.contains(g)) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    ref_.member[t] = g;
  }

  void LeaveGroup(const Op& op) {
    const TenantId t = Tenant(op.a);
    const Status s = ledger_->SetTenantGroup(t, std::nullopt);
    PROP_CHECK(s.ok(), s.ToString());
    ref_.member.erase(t);
  }

  // Admin approvals between two tenants, counted (docs/CONTRACT.md section 7).
  void ApproveSharing(const Op& op) {
    const TenantId x = Tenant(op.a);
    const TenantId y = Tenant(op.b);
    const Status s = ledger_->ApproveSharing(x, y);
    if (x == y) {
      PROP_CHECK(s.code() == StatusCode::kInvalidArgument, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    ++ref_.approvals[y < x ? std::make_pair(y, x) : std::make_pair(x, y)];
  }

  void WithdrawSharing(const Op& op) {
    std::pair<TenantId, TenantId> pair{Tenant(op.a), Tenant(op.b)};
    if (auto picked = PickKey(ref_.approvals, op.c); picked && op.d % 4 != 3) {
      pair = *picked;  // mostly withdraw one that exists
    }
    const Status s = ledger_->WithdrawSharing(pair.second, pair.first);
    auto it = ref_.approvals.find(pair.second < pair.first
                                      ? std::make_pair(pair.second, pair.first)
                                      : pair);
    if (it == ref_.approvals.end()) {
      PROP_CHECK(s.code() == StatusCode::kNotFound, s.ToString());
      return;
    }
    PROP_CHECK(s.ok(), s.ToString());
    if (--it->second == 0) ref_.approvals.erase(it);
  }

  // Restores a released allocation (the compensation / recovery path):
  // capacity and tenancy are checked, health and models are not.
  void Restore(const Op& op) {
    if (op.a % 4 == 3 && !ref_.live.empty()) {
      const Allocation a = ref_.live.at(*PickKey(ref_.live, op.a / 4));
      const StatusOr<Allocation> got = ledger_->Restore(a);
      PROP_CHECK(
          got.status().code() == StatusCode::kAlreadyExists,
          "Restore of live slice " << a.id << ": " << got.status().ToString());
      return;
    }
    if (released_.empty()) return;
    const std::size_t index = (op.a / 4) % released_.size();
    Allocation a = released_[index];
    if (op.b % 4 == 3) a.id = SliceId(ref_.max_id + 1 + (op.b / 4) % 3);

    bool dead = false, conflict = false;
    std::optional<NodeId> node;
    for (GpuId g : a.gpus) {
      const RefGpu& gpu = ref_.gpus.at(g);
      if (!gpu.live) {
        dead = true;
        continue;
      }
      node = gpu.node;
      if (!ref_.TenancyOk(gpu, a.tenant)) conflict = true;
      if (a.kind == RequestKind::kWholeGpus) {
        conflict |= !gpu.slices.empty();
      } else {
        conflict |= gpu.whole || a.memory_mib > gpu.free_memory() ||
                    gpu.used_compute + a.compute_percent > kFullComputePercent;
      }
    }
    // On a GPU in MIG mode a slice comes back as a partition: the one it
    // was (it must not overlap a partition placed since) or, recorded
    // without one, the one it would get now.
    Allocation want = a;
    if (!dead && !conflict && a.kind == RequestKind::kSlice) {
      const RefGpu& gpu = ref_.gpus.at(a.gpus.front());
      // A partition keeps its slots even with MIG mode off; without one,
      // a slice on a GPU in MIG mode gets the partition it would get now.
      const gpu::MigModelTable* table =
          a.mig_profile.empty()
              ? Reference::Table(gpu)
              : gpu::FindMigTable(kModels[gpu.model].name, gpu.memory_mib);
      if (table != nullptr) {
        std::optional<Reference::Partition> p;
        if (!a.mig_profile.empty()) {
          const gpu::MigProfile* profile =
              gpu::FindProfile(*table, a.mig_profile);
          const gpu::MigInstance instance{
              a.mig_profile, {a.mig_start, profile->memory_slices}};
          bool overlaps = false;
          for (const auto& [id, other] : gpu.partitions) {
            overlaps |= other.placement.Overlaps(instance.placement);
          }
          if (!overlaps) p = Reference::Charge(*table, gpu, instance);
        } else {
          std::optional<ComputePercent> compute;
          if (!a.compute_defaulted) compute = a.compute_percent;
          p = Reference::PartitionFor(gpu, a.memory_mib, compute);
        }
        if (!p || p->memory_mib > gpu.free_memory() ||
            gpu.used_compute + p->compute > kFullComputePercent) {
          conflict = true;
        } else {
          want.mig_profile = p->instance.profile;
          want.mig_start = p->instance.placement.start;
          want.memory_mib = p->memory_mib;
          want.compute_percent = p->compute;
          want.compute_defaulted = false;
        }
      }
    }
    if (!dead) {
      const RefNode& n = ref_.nodes.at(*node);
      conflict |=
          a.cpu_milli > n.free_cpu() || a.host_memory_mib > n.free_host();
    }
    const StatusOr<Allocation> got = ledger_->Restore(a);
    if (dead || conflict) {
      const StatusCode code = got.status().code();
      const bool ok_code =
          (dead && code == StatusCode::kNotFound) ||
          (conflict && code == StatusCode::kFailedPrecondition);
      PROP_CHECK(ok_code, "Restore of " << a.id << " (dead GPU " << dead
                                        << ", conflict " << conflict
                                        << "): " << got.status().ToString());
      return;
    }
    PROP_CHECK(got.ok(), "Restore of " << a.id << " on " << Describe(a.gpus)
                                       << ": " << got.status().ToString());
    PROP_CHECK(got->id == a.id && got->gpus == a.gpus &&
                   got->tenant == a.tenant && got->node == a.node &&
                   got->cpu_milli == a.cpu_milli &&
                   got->host_memory_mib == a.host_memory_mib &&
                   got->compute_percent == want.compute_percent &&
                   got->mig_profile == want.mig_profile &&
                   got->mig_start == want.mig_start &&
                   (a.kind == RequestKind::kWholeGpus ||
                    got->memory_mib == want.memory_mib),
               "restored allocation differs from the one given");
    ref_.Add(*got);
    released_.erase(released_.begin() + static_cast<long>(index));
  }

  // Changes a live slice's memory (dynamic quota, docs/CONTRACT.md section 13):
  // lowering always works; raising needs a healthy GPU, the 90% rule and
  // the difference free on the GPU; whole GPUs and unknown ids are refused;
  // a refusal changes nothing.
  void Resize(const Op& op) {
    std::optional<SliceId> id = PickKey(ref_.live, op.a);
    if (!id || op.a % 16 == 15) id = SliceId(ref_.max_id + 1 + op.a % 3);
    MemoryMib memory = 0;
    const std::uint32_t m = op.b / 8;
    std::optional<Allocation> a;
    if (auto it = ref_.live.find(*id); it != ref_.live.end()) a = it->second;
    const MemoryMib current = a ? a->memory_mib : 1024;
    switch (op.b % 8) {
      case 0:
        memory = static_cast<MemoryMib>(m % kMinSliceMemoryMib);  // invalid
        break;
      case 1:
      case 2:  // lower
        memory = std::max<MemoryMib>(kMinSliceMemoryMib,
                                     current - 32 * (1 + m % 64));
        break;
      case 3:  // the same
        memory = std::max<MemoryMib>(kMinSliceMemoryMib, current);
        break;
      case 4:
      case 5:  // raise a little
        memory = current + 32 * static_cast<MemoryMib>(1 + m % 128);
        break;
      case 6:  // raise a lot
        memory = current + 1024 * static_cast<MemoryMib>(1 + m % 64);
        break;
      default:  // anything
        memory = 32 + static_cast<MemoryMib>(m % 90000);
        break;
    }
    const StatusOr<Allocation> got = ledger_->ResizeSlice(*id, memory);
    if (memory < kMinSliceMemoryMib) {
      PROP_CHECK(got.status().code() == StatusCode::kInvalidArgument &&
                     got.status().field() == "memory_mb",
                 "resize of " << *id << " to " << memory
                              << " MB: " << got.status().ToString());
      return;
    }
    if (!a) {
      PROP_CHECK(
          got.status().code() == StatusCode::kNotFound,
          "resize of unknown slice " << *id << ": " << got.status().ToString());
      return;
    }
    if (a->kind != RequestKind::kSlice) {
      PROP_CHECK(got.status().code() == StatusCode::kFailedPrecondition,
                 "resize of whole-GPU grant " << *id << ": "
                                              << got.status().ToString());
      return;
    }
    if (!a->mig_profile.empty()) {
      // A partition's memory is the hardware's: never resized.
      PROP_CHECK(
          got.status().code() == StatusCode::kFailedPrecondition,
          "resize of MIG partition " << *id << ": " << got.status().ToString());
      return;
    }
    RefGpu& gpu = ref_.gpus.at(a->gpus.front());
    const MemoryMib more = memory - a->memory_mib;
    const bool fits =
        more <= 0 || (!gpu.lost && memory * 10 <= ref_.Largest() * 9 &&
                      more <= gpu.free_memory());
    if (!fits) {
      PROP_CHECK(got.status().code() == StatusCode::kFailedPrecondition,
                 "resize of " << *id << " from " << a->memory_mib << " to "
                              << memory << " MB (GPU free " << gpu.free_memory()
                              << ", lost " << gpu.lost
                              << "): " << got.status().ToString());
      return;
    }
    PROP_CHECK(got.ok(), "resize of " << *id << " from " << a->memory_mib
                                      << " to " << memory << " MB (GPU free "
                                      << gpu.free_memory()
                                      << "): " << got.status().ToString());
    Allocation want = *a;
    want.memory_mib = memory;
    PROP_CHECK(*got == want, "resized allocation " << *id << " differs");
    gpu.used_memory_mib += more;
    ref_.live.at(*id).memory_mib = memory;
  }

  void Invalid(const Op& op) {
    PlacementRequest r = PlacementRequest::Slice(Tenant(op.b), 1024, 50);
    switch (op.a % 10) {
      case 0:
        r.memory_mib = static_cast<MemoryMib>(op.c % kMinSliceMemoryMib);
        break;
      case 1:
        r.compute_percent = 0;
        break;
      case 2:
        r.compute_percent = 101 + static_cast<ComputePercent>(op.c % 100);
        break;
      case 3:
        r.memory_mib.reset();
        r.compute_percent.reset();
        break;
      case 4:
        r = PlacementRequest::WholeGpus(Tenant(op.b), 0);
        break;
      case 5:
        r = PlacementRequest::WholeGpus(Tenant(op.b), 1);
        r.memory_mib = 1024;
        break;
      case 6:
        r.cpu_milli = -1 - static_cast<CpuMilli>(op.c % 1000);
        break;
      case 7:
        r.tenant = TenantId();
        break;
      case 8:
        r.allowed_models = {kModels[0].name, ""};
        break;
      default:
        r.gpu_count = 1;
        break;  // slice fields and gpu_required
    }
    const PlacementResult got = ledger_->Place(r, policy_);
    PROP_CHECK(got.outcome == PlacementOutcome::kInvalid &&
                   got.status.code() == StatusCode::kInvalidArgument &&
                   !got.status.field().empty(),
               "malformed " << Describe(r) << ": "
                            << PlacementOutcomeName(got.outcome) << " "
                            << got.status.ToString());
    ++counters_.invalid;
  }

  // ---- the per-step audit

  void Verify() {
    const Status inv = ledger_->CheckInvariants();
    PROP_CHECK(inv.ok(), "CheckInvariants: " << inv.ToString());

    // Live allocations: the same as the reference's, and their sums per GPU
    // and node.
    const std::vector<Allocation> allocs = ledger_->Allocations();
    PROP_CHECK(allocs.size() == ref_.live.size() &&
                   ledger_->allocation_count() == ref_.live.size(),
               "ledger has " << allocs.size() << " allocations, reference "
                             << ref_.live.size());
    std::map<GpuId, std::pair<MemoryMib, ComputePercent>> gpu_sum;
    std::map<NodeId, std::pair<CpuMilli, MemoryMib>> node_sum;
    for (std::size_t i = 0; i < allocs.size(); ++i) {
      const Allocation& a = allocs[i];
      PROP_CHECK(i == 0 || allocs[i - 1].id < a.id, "Allocations() unsorted");
      auto it = ref_.live.find(a.id);
      PROP_CHECK(it != ref_.live.end(), "unexpected allocation " << a.id);
      const Allocation& w = it->second;
      PROP_CHECK(a.tenant == w.tenant && a.kind == w.kind && a.node == w.node &&
                     a.gpus == w.gpus &&
                     a.compute_percent == w.compute_percent &&
                     a.cpu_milli == w.cpu_milli &&
                     a.host_memory_mib == w.host_memory_mib &&
                     (a.kind == RequestKind::kWholeGpus ||
                      (a.memory_mib == w.memory_mib &&
                       a.compute_defaulted == w.compute_defaulted)),
                 "allocation " << a.id << " changed");
      for (GpuId g : a.gpus) {
        const auto [m, c] = ref_.PerGpu(a, g);
        gpu_sum[g].first += m;
        gpu_sum[g].second += c;
      }
      node_sum[a.node].first += a.cpu_milli;
      node_sum[a.node].second += a.host_memory_mib;
    }

    std::string error;
    ledger_->Read([&](const ClusterView& view) {
      error = AuditView(view, gpu_sum, node_sum);
    });
    PROP_CHECK(error.empty(), error);
  }

  // Compares the view with the reference; returns the first difference.
  std::string AuditView(
      const ClusterView& view,
      std::map<GpuId, std::pair<MemoryMib, ComputePercent>>& gpu_sum,
      std::map<NodeId, std::pair<CpuMilli, MemoryMib>>& node_sum) const {
    std::ostringstream err;
    std::size_t live = 0;
    for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
      const GpuId id(i);
      const GpuRecord& g = view.gpu(id);
      auto it = ref_.gpus.find(id);
      const bool ref_live = it != ref_.gpus.end() && it->second.live;
      if (g.live != ref_live || view.HasGpu(id) != ref_live) {
        err << "GPU " << id << " live " << g.live << ", reference " << ref_live;
        return err.str();
      }
      if (!g.live) continue;
      ++live;
      const RefGpu& r = it->second;
      const auto [sum_mem, sum_compute] = gpu_sum[id];
      if (g.used_memory_mib > g.spec.memory_mib || g.used_memory_mib < 0 ||
          g.used_compute_percent > kFullComputePercent ||
          g.used_compute_percent < 0) {
        err << "GPU " << id << " oversold: " << g.used_memory_mib << " of "
            << g.spec.memory_mib << " MB, " << g.used_compute_percent << "%";
        return err.str();
      }
      if (g.used_memory_mib != sum_mem ||
          g.used_compute_percent != sum_compute ||
          g.used_memory_mib != r.used_memory_mib ||
          g.used_compute_percent != r.used_compute) {
        err << "GPU " << id << " accounts " << g.used_memory_mib << " MB / "
            << g.used_compute_percent << "%, allocations sum to " << sum_mem
            << " MB / " << sum_compute << "%, reference " << r.used_memory_mib
            << " MB / " << r.used_compute << "%";
        return err.str();
      }
      if (!(g.node == r.node) || g.spec.memory_mib != r.memory_mib ||
          g.spec.model != kModels[r.model].name || g.healthy() == r.lost ||
          g.spec.mig_capable != r.mig ||
          g.allocation_count != static_cast<int>(r.slices.size()) ||
          g.empty() != r.slices.empty() || g.whole_owned != r.whole) {
        err << "GPU " << id << " record differs from the reference";
        return err.str();
      }
      std::map<TenantId, int> want_tenants, got_tenants;
      for (SliceId s : r.slices) ++want_tenants[ref_.live.at(s).tenant];
      for (const auto& [t, n] : g.tenants) got_tenants[t] += n;
      if (want_tenants != got_tenants) {
        err << "GPU " << id << " tenant list differs";
        return err.str();
      }
    }
    if (live != ref_.LiveGpuCount() || view.live_gpu_count() != live) {
      err << "live GPU count " << view.live_gpu_count() << ", reference "
          << ref_.LiveGpuCount();
      return err.str();
    }
    if (view.largest_gpu_memory_mib() != ref_.Largest()) {
      err << "largest GPU " << view.largest_gpu_memory_mib() << ", reference "
          << ref_.Largest();
      return err.str();
    }
    if (view.default_compute_percent() != ref_.default_compute()) {
      return "default compute differs";
    }
    for (std::size_t i = 0; i < view.node_slot_count(); ++i) {
      const NodeId id(i);
      const NodeRecord& n = view.node(id);
      auto it = ref_.nodes.find(id);
      const bool ref_live = it != ref_.nodes.end() && it->second.live;
      if (n.live != ref_live || view.HasNode(id) != ref_live) {
        err << "node " << id << " live " << n.live << ", reference "
            << ref_live;
        return err.str();
      }
      if (!n.live) continue;
      const RefNode& r = it->second;
      const auto [cpu, host] = node_sum[id];
      if (n.used_cpu_milli != cpu || n.used_host_memory_mib != host ||
          n.used_cpu_milli != r.used_cpu ||
          n.used_host_memory_mib != r.used_host || n.free_cpu_milli() < 0 ||
          n.free_host_memory_mib() < 0) {
        err << "node " << id << " accounts " << n.used_cpu_milli << " mCPU / "
            << n.used_host_memory_mib << " MB host, allocations sum to " << cpu
            << " / " << host;
        return err.str();
      }
      if (n.tie_rank != r.rank || n.gpus != r.gpus) {
        err << "node " << id << " rank or GPU list changed";
        return err.str();
      }
    }
    return {};
  }

  const Profile& profile_;
  Reference ref_;
  Counters& counters_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Ledger> probe_;  // same seed, for the tie-rank check
  std::uint64_t probe_nodes_ = 0;
  scheduler::BestFitPolicy policy_;
  std::vector<Allocation> released_;  // recent releases, for Restore
  int next_node_name_ = 0;
  int next_uuid_ = 0;
  long step_ = -1;
  Op op_;
};

void RunProperty(const std::string& name, const Profile& profile,
                 LedgerOptions options) {
  const auto inventory = *GenInventory(profile);
  const auto ops =
      *rc::gen::resize(static_cast<int>(profile.max_ops),
                       rc::gen::container<std::vector<Op>>(GenOp(profile)));
  Runner runner(profile, options, AllCounters()[name]);
  runner.Build(inventory);
  runner.Run(ops);
}

// Seed 0: ties go to the lowest node id; slices without a ratio count 50%.
RC_GTEST_PROP(LedgerPropertyTest, MatchesReferenceModel, ()) {
  RunProperty("MatchesReferenceModel", MixedProfile(), LedgerOptions{});
}

// A nonzero tie-break seed (ties follow the ledger's per-node rank) and a
// random default compute share.
RC_GTEST_PROP(LedgerPropertyTest, MatchesReferenceModelWithTieBreakSeed, ()) {
  LedgerOptions options;
  options.tie_break_seed =
      *rc::gen::resize(100, rc::gen::inRange<std::uint64_t>(
                                1, std::numeric_limits<std::uint64_t>::max()));
  options.default_compute_percent =
      static_cast<ComputePercent>(*Uniform(1, 101));
  RunProperty("MatchesReferenceModelWithTieBreakSeed", MixedProfile(), options);
}

// A small cluster with many tenants and constant group churn.
RC_GTEST_PROP(LedgerPropertyTest, MatchesReferenceModelUnderContention, ()) {
  LedgerOptions options;
  constexpr std::uint64_t kSeeds[] = {0, 7, 0xC0FFEE};
  options.tie_break_seed = kSeeds[*Uniform(0, std::size(kSeeds))];
  RunProperty("MatchesReferenceModelUnderContention", ContendedProfile(),
              options);
}

}  // namespace
}  // namespace hf::ledger
