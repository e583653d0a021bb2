// hf-demo: plays a scripted cluster through the real ledger and Best-Fit
// policy and prints every decision — where each request went, the QoS tier it
// would get, or why it waits ("retry later") or can never run ("infeasible").
//
// It is what `make run` starts until the server exists (issue 4); the file
// format is documented in configs/demo-cluster.json and in --help.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/main_guard.h"
#include "common/quantity.h"
#include "ledger/ledger.h"
#include "scheduler/policy/registry.h"
#include "scheduler/qos.h"

namespace {

using nlohmann::json;
using namespace hf;
using namespace hf::ledger;

struct DemoError {
  std::string message;
};

// Rejects fields a person may have misspelt: nothing is silently ignored.
void CheckFields(const json& obj, const std::string& where,
                 const std::set<std::string>& allowed) {
  if (!obj.is_object()) throw DemoError{where + ": must be an object"};
  for (const auto& [key, value] : obj.items()) {
    if (!allowed.contains(key) && key.rfind('_', 0) != 0) {
      // NOLINTNEXTLINE(performance-inefficient-string-concatenation)
      throw DemoError{where + "." + key + ": unknown field"};
    }
  }
}

template <typename T>
T Get(const json& obj, const std::string& where, const std::string& key) {
  if (!obj.contains(key)) throw DemoError{where + "." + key + ": is required"};
  try {
    return obj.at(key).get<T>();
  } catch (const json::exception& e) {
    throw DemoError{where + "." + key + ": wrong type (" + e.what() + ")"};
  }
}

template <typename T>
T GetOr(const json& obj, const std::string& where, const std::string& key,
        T fallback) {
  return obj.contains(key) ? Get<T>(obj, where, key) : fallback;
}

class Demo {
 public:
  Demo(const json& config, bool audit_each_step)
      : audit_each_step_(audit_each_step) {
    CheckFields(config, "cluster",
                {"default_compute_percent", "tie_break_seed", "groups",
                 "tenants", "nodes", "steps"});
    LedgerOptions options;
    options.default_compute_percent =
        GetOr<int>(config, "cluster", "default_compute_percent", 50);
    auto ledger = Ledger::Create(options);
    if (!ledger.ok()) throw DemoError{ledger.status().ToString()};
    ledger_ = std::move(ledger).value();
    auto made = scheduler::MakePolicy(scheduler::kDefaultPolicyName);
    if (!made.ok()) throw DemoError{made.status().ToString()};
    policy_ = std::move(made->policy);
    observer_ = made->observer;

    for (const auto& name :
         GetOr<json>(config, "cluster", "groups", json::array())) {
      const GroupId id(groups_.size() + 1);
      groups_[name.get<std::string>()] = id;
      Must(ledger_->DefineGroup(id), "groups");
    }
    int t = 0;
    for (const auto& tenant :
         GetOr<json>(config, "cluster", "tenants", json::array())) {
      const std::string where = "tenants[" + std::to_string(t++) + "]";
      CheckFields(tenant, where, {"name", "group"});
      const TenantId id(tenants_.size() + 1);
      const auto name = Get<std::string>(tenant, where, "name");
      tenants_[name] = id;
      tenant_names_[id] = name;
      if (tenant.contains("group")) {
        const auto group = Get<std::string>(tenant, where, "group");
        if (!groups_.contains(group)) {
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation)
          throw DemoError{where + ".group: undefined group " + group};
        }
        Must(ledger_->SetTenantGroup(id, groups_[group]), where);
      }
    }
    int n = 0;
    for (const auto& node : Get<json>(config, "cluster", "nodes")) {
      AddNode(node, "nodes[" + std::to_string(n++) + "]");
    }
    steps_ = GetOr<json>(config, "cluster", "steps", json::array());
  }

  void Run() {
    std::printf("HeteroFlow ledger demo: %zu GPUs on %zu nodes, policy %s\n\n",
                gpu_names_.size(), nodes_.size(),
                std::string(policy_->name()).c_str());
    int i = 0;
    for (const auto& step : steps_) {
      Step(step, "steps[" + std::to_string(i++) + "]");
      if (audit_each_step_) {
        std::printf("        audit: %s\n",
                    ledger_->CheckInvariants().ToString().c_str());
      }
    }
    PrintGpus();
  }

 private:
  static void Must(const Status& s, const std::string& where) {
    if (!s.ok()) throw DemoError{where + ": " + s.ToString()};
  }

  void AddNode(const json& node, const std::string& where) {
    CheckFields(
        node, where,
        {"name", "cpu_milli", "host_memory_mib", "containerized", "gpus"});
    NodeSpec spec;
    spec.name = Get<std::string>(node, where, "name");
    spec.cpu_milli = GetOr<std::int64_t>(node, where, "cpu_milli", 0);
    spec.host_memory_mib =
        GetOr<std::int64_t>(node, where, "host_memory_mib", 0);
    spec.containerized = GetOr<bool>(node, where, "containerized", false);
    auto id = ledger_->AddNode(spec);
    if (!id.ok()) throw DemoError{where + ": " + id.status().ToString()};
    nodes_[*id] = spec;
    int g = 0;
    for (const auto& gpu : Get<json>(node, where, "gpus")) {
      const std::string gw = where + ".gpus[" + std::to_string(g++) + "]";
      CheckFields(gpu, gw,
                  {"uuid", "index", "vendor", "model", "memory_mib",
                   "compute_capability", "mig_capable", "mps_capable"});
      GpuSpec s;
      s.uuid = Get<std::string>(gpu, gw, "uuid");
      s.index = Get<int>(gpu, gw, "index");
      s.vendor = GetOr<std::string>(gpu, gw, "vendor", "nvidia");
      s.model = Get<std::string>(gpu, gw, "model");
      s.memory_mib = Get<std::int64_t>(gpu, gw, "memory_mib");
      const auto cc = GetOr<std::string>(gpu, gw, "compute_capability", "0.0");
      if (std::sscanf(cc.c_str(), "%d.%d", &s.compute_capability_major,
                      &s.compute_capability_minor) != 2) {
        throw DemoError{gw + ".compute_capability: expected \"MAJOR.MINOR\""};
      }
      s.mig_capable = GetOr<bool>(gpu, gw, "mig_capable", false);
      s.mps_capable = GetOr<bool>(gpu, gw, "mps_capable", false);
      auto gid = ledger_->AddGpu(*id, s);
      if (!gid.ok()) throw DemoError{gw + ": " + gid.status().ToString()};
      gpu_names_[*gid] = s.uuid;
      gpu_by_uuid_[s.uuid] = *gid;
    }
  }

  GpuId GpuByUuid(const std::string& uuid, const std::string& where) {
    auto it = gpu_by_uuid_.find(uuid);
    if (it == gpu_by_uuid_.end())
      throw DemoError{where + ": unknown GPU " + uuid};
    return it->second;
  }

  void Step(const json& step, const std::string& where) {
    CheckFields(step, where,
                {"place", "tenant", "gpu_memory_mb", "gpu_compute_ratio",
                 "gpu_required", "gpu_models", "cpu_milli", "release",
                 "mark_lost", "mark_healthy"});
    if (step.contains("release")) {
      const auto name = Get<std::string>(step, where, "release");
      auto it = placed_.find(name);
      if (it == placed_.end())
        throw DemoError{where + ".release: " + name + " was not placed"};
      Must(ledger_->Release(it->second), where);
      std::printf("release %-15s returned its quota\n", name.c_str());
      placed_.erase(it);
      return;
    }
    if (step.contains("mark_lost") || step.contains("mark_healthy")) {
      const bool lost = step.contains("mark_lost");
      const auto uuid =
          Get<std::string>(step, where, lost ? "mark_lost" : "mark_healthy");
      Must(ledger_->SetGpuHealth(GpuByUuid(uuid, where),
                                 lost ? GpuHealth::kLost : GpuHealth::kOk),
           where);
      std::printf("%-23s %s\n", lost ? "GPU lost" : "GPU healthy again",
                  uuid.c_str());
      return;
    }
    const auto name = Get<std::string>(step, where, "place");
    const auto tenant_name = Get<std::string>(step, where, "tenant");
    auto tenant = tenants_.find(tenant_name);
    if (tenant == tenants_.end())
      throw DemoError{where + ".tenant: unknown tenant " + tenant_name};
    PlacementRequest request;
    request.tenant = tenant->second;
    if (step.contains("gpu_required")) {
      request.kind = RequestKind::kWholeGpus;
      request.gpu_count = Get<int>(step, where, "gpu_required");
    }
    if (step.contains("gpu_memory_mb")) {
      request.memory_mib = Get<std::int64_t>(step, where, "gpu_memory_mb");
    }
    if (step.contains("gpu_compute_ratio")) {
      auto percent =
          RatioToPercent(Get<double>(step, where, "gpu_compute_ratio"));
      if (!percent.ok())
        throw DemoError{where + ": " + percent.status().ToString()};
      request.compute_percent = *percent;
    }
    request.cpu_milli = GetOr<std::int64_t>(step, where, "cpu_milli", 0);
    request.allowed_models =
        GetOr<std::vector<std::string>>(step, where, "gpu_models", {});

    // As the server does: the policy learns of every task it places.
    if (observer_ != nullptr) observer_->Observe(request);
    const PlacementResult result = ledger_->Place(request, *policy_);
    std::printf("place   %-15s %-8s ", name.c_str(), tenant_name.c_str());
    if (!result.placed()) {
      std::printf("-> %s: %s\n", PlacementOutcomeName(result.outcome),
                  result.message.c_str());
      return;
    }
    placed_[name] = result.allocation.id;
    const Allocation& a = result.allocation;
    std::string gpus;
    for (GpuId g : a.gpus) gpus += (gpus.empty() ? "" : ",") + gpu_names_[g];
    if (a.kind == RequestKind::kWholeGpus) {
      std::printf("-> slice %llu: whole GPUs %s on %s\n",
                  static_cast<unsigned long long>(a.id.value()), gpus.c_str(),
                  nodes_[a.node].name.c_str());
      return;
    }
    ledger_->Read([&](const ClusterView& view) {
      const auto qos = scheduler::DeriveQos(
          view.gpu(a.gpus[0]).spec, view.node(a.node).spec.containerized,
          /*hook_available=*/false);
      std::printf(
          "-> slice %llu: %s on %s, %lld MB, %d%% compute%s, qos %s\n"
          "        %s\n",
          static_cast<unsigned long long>(a.id.value()), gpus.c_str(),
          nodes_[a.node].name.c_str(), static_cast<long long>(a.memory_mib),
          a.compute_percent, a.compute_defaulted ? " (default)" : "",
          std::string(scheduler::QosLevelName(qos.level)).c_str(),
          qos.explanation.c_str());
    });
  }

  void PrintGpus() {
    std::printf("\n%-12s %-16s %-6s %12s %9s  %s\n", "GPU", "model", "health",
                "memory (MB)", "compute", "tenants");
    ledger_->Read([&](const ClusterView& view) {
      for (std::size_t i = 0; i < view.gpu_slot_count(); ++i) {
        const GpuRecord& g = view.gpu(GpuId(i));
        if (!g.live) continue;
        std::string tenants;
        for (const auto& [t, count] : g.tenants) {
          tenants += (tenants.empty() ? "" : ",") + tenant_names_[t];
        }
        std::printf("%-12s %-16s %-6s %5lld/%-6lld %8d%%  %s\n",
                    g.spec.uuid.c_str(), g.spec.model.c_str(),
                    g.healthy() ? "ok" : "lost",
                    static_cast<long long>(g.used_memory_mib),
                    static_cast<long long>(g.spec.memory_mib),
                    g.used_compute_percent, tenants.c_str());
      }
    });
    const Status audit = ledger_->CheckInvariants();
    std::printf("\nledger audit: %s\n", audit.ok()
                                            ? "consistent, nothing oversold"
                                            : audit.ToString().c_str());
  }

  bool audit_each_step_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<ledger::PlacementPolicy> policy_;
  scheduler::WorkloadObserver* observer_ = nullptr;
  std::map<std::string, GroupId> groups_;
  std::map<std::string, TenantId> tenants_;
  std::map<TenantId, std::string> tenant_names_;
  std::map<NodeId, NodeSpec> nodes_;
  std::map<GpuId, std::string> gpu_names_;
  std::map<std::string, GpuId> gpu_by_uuid_;
  std::map<std::string, SliceId> placed_;
  json steps_;
};

}  // namespace

static int Main(int argc, char** argv) {
  CLI::App app{
      "hf-demo: play a scripted cluster through HeteroFlow's slice ledger and "
      "Best-Fit placement, printing each decision, its QoS tier, or why it "
      "waits or can never run."};
  std::string cluster_file = "configs/demo-cluster.json";
  app.add_option("--cluster", cluster_file,
                 "JSON file with groups, tenants, nodes (with GPUs) and steps "
                 "(place / release / mark_lost / mark_healthy); see "
                 "configs/demo-cluster.json")
      ->capture_default_str();
  bool audit = false;
  app.add_flag("--audit", audit,
               "check every ledger invariant after each step and print it");
  CLI11_PARSE(app, argc, argv);

  std::ifstream in(cluster_file);
  if (!in) {
    std::fprintf(stderr, "hf-demo: cannot open %s\n", cluster_file.c_str());
    return 2;
  }
  try {
    const json config = json::parse(in);
    Demo demo(config, audit);
    demo.Run();
  } catch (const json::exception& e) {
    // Syntax, a number out of range (1e400) or a field of the wrong type.
    std::fprintf(stderr, "hf-demo: %s: invalid cluster file: %s\n",
                 cluster_file.c_str(), e.what());
    return 2;
  } catch (const DemoError& e) {
    std::fprintf(stderr, "hf-demo: %s: %s\n", cluster_file.c_str(),
                 e.message.c_str());
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  return hf::RunMain("hf-demo", [&] { return Main(argc, argv); });
}
