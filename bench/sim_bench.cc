// Simulator benchmark: decisions per second of every placement policy on
// the openb default trace (the experiment of src/sim/experiment.h, two
// seeds per policy), plus where each policy lands (unallocated GPU % at
// x = 100). Reads the openb trace (cluster-trace-gpu-v2023/csv/ of
// github.com/alibaba/clusterdata) from the directory in HF_OPENB_DIR
// (`make bench OPENB_DIR=...`); without it the benchmark reports an error
// and skips.
//
// One iteration = one seed's whole run; `decisions_per_second` counts
// placement attempts per second spent inside Ledger::Place.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "scheduler/policy/artifact.h"
#include "scheduler/policy/registry.h"
#include "sim/experiment.h"
#include "sim/sim_cluster.h"
#include "sim/trace.h"

namespace hf::sim {
namespace {

struct Trace {
  std::vector<TraceNode> nodes;
  std::vector<TracePod> pods;
  scheduler::TargetWorkload workload;
  std::string error;
};

const Trace& LoadTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    const char* env = std::getenv("HF_OPENB_DIR");
    if (env == nullptr || *env == '\0') {
      t->error = "HF_OPENB_DIR is not set: the directory of the openb trace";
      return t;
    }
    const std::string dir = env;
    auto nodes = ReadNodeCsv(dir + "/openb_node_list_gpu_node.csv");
    auto pods = ReadPodCsv(dir + "/openb_pod_list_default.csv");
    if (!nodes.ok() || !pods.ok()) {
      t->error = "openb trace not found (set HF_OPENB_DIR): " +
                 (nodes.ok() ? pods.status() : nodes.status()).message();
      return t;
    }
    t->nodes = std::move(nodes).value();
    t->pods = std::move(pods).value();
    std::vector<scheduler::TaskClass> classes;
    for (const TracePod& p : t->pods) classes.push_back(ToTaskClass(p));
    t->workload = scheduler::TargetWorkload::FromTasks(classes);
    return t;
  }();
  return *trace;
}

void BM_Policy(benchmark::State& state, const std::string& policy) {
  const Trace& trace = LoadTrace();
  if (!trace.error.empty()) {
    state.SkipWithError(trace.error.c_str());
    return;
  }
  std::uint64_t seed = 42;
  double seconds = 0, attempts = 0, unallocated = 0;
  int runs = 0;
  for (auto _ : state) {
    auto run = RunSeed(trace.nodes, trace.pods, policy, seed++, trace.workload,
                       ExperimentOptions{});
    if (!run.ok()) {
      state.SkipWithError(run.status().ToString().c_str());
      return;
    }
    seconds += run->placement_seconds;
    attempts += run->placed + run->failed;
    const auto points =
        Aggregate({*run}, CapacityMilli(trace.nodes), /*max_x=*/100);
    unallocated += points.back().unallocated_pct.median;
    ++runs;
  }
  state.counters["decisions_per_second"] = seconds > 0 ? attempts / seconds : 0;
  state.counters["unallocated_pct_at_100"] = runs > 0 ? unallocated / runs : 0;
}

void RegisterAll() {
  for (const std::string& name : scheduler::SimPolicyNames()) {
    benchmark::RegisterBenchmark(("BM_Sim/" + name).c_str(), BM_Policy, name)
        ->Iterations(2)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace hf::sim

int main(int argc, char** argv) {
  hf::sim::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
