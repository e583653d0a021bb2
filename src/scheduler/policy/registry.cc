// The registry (registry.h): one table of entries, read by the server's and
// the simulator's factories and name lists.
#include "scheduler/policy/registry.h"

#include <array>
#include <optional>
#include <utility>

#include "scheduler/policy/artifact.h"
#include "scheduler/policy/best_fit.h"
#include "scheduler/policy/hf_frag.h"

namespace hf::scheduler {
namespace {

using ledger::ClusterView;
using ledger::PlacementRequest;

// The server's Best-Fit under its simulator name.
class HfBestFitPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "hf-bestfit"; }
  std::optional<std::vector<GpuId>> Choose(
      const ClusterView& view, const PlacementRequest& request) const override {
    return inner_.Choose(view, request);
  }
  std::optional<NodeId> ChooseNode(
      const ClusterView& view, const PlacementRequest& request) const override {
    return inner_.ChooseNode(view, request);
  }

 private:
  BestFitPolicy inner_;
};

using SimPolicy = StatusOr<std::unique_ptr<ledger::PlacementPolicy>>;

struct Entry {
  std::string_view server_name;  // "": not a server policy
  std::string_view sim_name;     // "": not a simulator policy
  MadePolicy (*make_server)(const LearnedOptions&);
  SimPolicy (*make_sim)(const SimPolicyContext&);
};

template <typename P>
std::unique_ptr<ledger::PlacementPolicy> Plain() {
  return std::make_unique<P>();
}

Status NeedsWorkload(std::string_view name) {
  return Status::InvalidArgument(
      "the " + std::string(name) + " policy needs a target workload",
      "workload");
}

// Server default first; the simulator's names in their listed order.
constexpr std::array<Entry, 9> kEntries{{
    {"hf-frag", "hf-frag",
     [](const LearnedOptions& learned) {
       auto policy = std::make_unique<LearnedFragPolicy>(learned);
       MadePolicy made;
       made.observer = policy.get();
       made.policy = std::move(policy);
       return made;
     },
     [](const SimPolicyContext& ctx) -> SimPolicy {
       if (ctx.workload == nullptr) return NeedsWorkload("hf-frag");
       return std::unique_ptr<ledger::PlacementPolicy>(
           std::make_unique<HfFragPolicy>(
               *ctx.workload,
               ctx.tasks == nullptr ? WorkloadDemand{}
                                    : WorkloadDemand::FromTasks(*ctx.tasks),
               ctx.max_scored_nodes));
     }},
    {"best-fit", "hf-bestfit",
     [](const LearnedOptions&) {
       return MadePolicy{Plain<BestFitPolicy>(), nullptr};
     },
     [](const SimPolicyContext&) -> SimPolicy {
       return Plain<HfBestFitPolicy>();
     }},
    {"best-fit-scan", "",
     [](const LearnedOptions&) {
       return MadePolicy{Plain<LinearScanBestFitPolicy>(), nullptr};
     },
     nullptr},
    {"", "random", nullptr,
     [](const SimPolicyContext& ctx) -> SimPolicy {
       return std::unique_ptr<ledger::PlacementPolicy>(
           std::make_unique<RandomPolicy>(ctx.seed));
     }},
    {"", "dotprod", nullptr,
     [](const SimPolicyContext&) -> SimPolicy {
       return Plain<DotProdPolicy>();
     }},
    {"", "gpuclustering", nullptr,
     [](const SimPolicyContext&) -> SimPolicy {
       return Plain<GpuClusteringPolicy>();
     }},
    {"", "gpupacking", nullptr,
     [](const SimPolicyContext&) -> SimPolicy {
       return Plain<GpuPackingPolicy>();
     }},
    {"", "bestfit", nullptr,
     [](const SimPolicyContext&) -> SimPolicy {
       return Plain<ArtifactBestFitPolicy>();
     }},
    {"", "fgd", nullptr,
     [](const SimPolicyContext& ctx) -> SimPolicy {
       if (ctx.workload == nullptr) return NeedsWorkload("fgd");
       return std::unique_ptr<ledger::PlacementPolicy>(
           std::make_unique<FgdPolicy>(*ctx.workload));
     }},
}};

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) {
    if (!e.server_name.empty()) names.emplace_back(e.server_name);
  }
  return names;
}

StatusOr<MadePolicy> MakePolicy(std::string_view name,
                                const LearnedOptions& learned) {
  for (const Entry& e : kEntries) {
    if (!e.server_name.empty() && e.server_name == name) {
      return e.make_server(learned);
    }
  }
  return Status::NotFound("unknown placement policy \"" + std::string(name) +
                          "\"; known: " + Joined(PolicyNames()));
}

std::vector<std::string> SimPolicyNames() {
  // The artifact's six first, then HeteroFlow's, as hf-sim lists them.
  std::vector<std::string> names;
  for (const Entry& e : kEntries) {
    if (e.server_name.empty() && !e.sim_name.empty()) {
      names.emplace_back(e.sim_name);
    }
  }
  for (const std::string_view n : {"hf-bestfit", "hf-frag"}) {
    names.emplace_back(n);
  }
  return names;
}

std::string SimPolicyNameOf(std::string_view server_policy) {
  for (const Entry& e : kEntries) {
    if (!e.server_name.empty() && e.server_name == server_policy) {
      return std::string(e.sim_name);
    }
  }
  for (const Entry& e : kEntries) {
    if (!e.sim_name.empty() && e.sim_name == server_policy) {
      return std::string(e.sim_name);
    }
  }
  return "";
}

std::string SimServerDefaultPolicy() {
  return SimPolicyNameOf(kDefaultPolicyName);
}

StatusOr<std::unique_ptr<ledger::PlacementPolicy>> MakeSimPolicy(
    std::string_view name, const SimPolicyContext& ctx) {
  for (const Entry& e : kEntries) {
    if (!e.sim_name.empty() && e.sim_name == name) return e.make_sim(ctx);
  }
  return Status::NotFound("unknown simulator policy \"" + std::string(name) +
                          "\"; known: " + Joined(SimPolicyNames()));
}

}  // namespace hf::scheduler
