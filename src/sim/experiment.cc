#include "sim/experiment.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "scheduler/policy/artifact.h"
#include "scheduler/policy/registry.h"
#include "sim/sim_cluster.h"

namespace hf::sim {

std::vector<std::size_t> TaskOrder(const std::vector<TracePod>& pods,
                                   std::int64_t capacity_milli, double inflate,
                                   std::mt19937_64& rng) {
  std::vector<std::size_t> by_name(pods.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(), [&](std::size_t a, std::size_t b) {
    return pods[a].name < pods[b].name;
  });
  std::vector<std::size_t> order = by_name;
  std::shuffle(order.begin(), order.end(), rng);
  if (pods.empty()) return order;
  std::int64_t total = 0;
  for (const TracePod& p : pods) total += p.total_gpu_milli();
  const auto limit =
      static_cast<std::int64_t>(inflate * static_cast<double>(capacity_milli));
  if (total >= limit) return order;
  // Draw until the next draw would push the total above the limit. A draw
  // that requests no GPU never stops the loop, so a trace of CPU-only tasks
  // would never end: bound the draws by a generous multiple.
  std::uniform_int_distribution<std::size_t> pick(0, pods.size() - 1);
  const std::size_t max_draws = 100 * pods.size() + 1000000;
  for (std::size_t draws = 0; draws < max_draws; ++draws) {
    const std::size_t i = by_name[pick(rng)];
    const std::int64_t request = pods[i].total_gpu_milli();
    if (total + request > limit) break;
    total += request;
    order.push_back(i);
  }
  return order;
}

StatusOr<SeedRun> RunSeed(const std::vector<TraceNode>& nodes,
                          const std::vector<TracePod>& pods,
                          const std::string& policy_name, std::uint64_t seed,
                          const scheduler::TargetWorkload& workload,
                          const ExperimentOptions& options) {
  auto built = BuildSimLedger(nodes, seed, options.mig);
  if (!built.ok()) return built.status();
  std::unique_ptr<ledger::Ledger> ledger = std::move(built).value();
  scheduler::SimPolicyContext context;
  context.seed = seed;
  context.workload = &workload;
  std::vector<scheduler::TaskClass> tasks;
  tasks.reserve(pods.size());
  for (const TracePod& p : pods) tasks.push_back(ToTaskClass(p));
  context.tasks = &tasks;
  context.max_scored_nodes = options.max_scored_nodes;
  auto made = scheduler::MakeSimPolicy(policy_name, context);
  if (!made.ok()) return made.status();
  const std::unique_ptr<ledger::PlacementPolicy> policy =
      std::move(made).value();

  const std::int64_t capacity = CapacityMilli(nodes);
  std::mt19937_64 rng(seed);
  const std::vector<std::size_t> order =
      TaskOrder(pods, capacity, options.inflate, rng);

  // Fragmentation per node, kept current one node at a time.
  std::vector<double> node_frag;
  double frag = 0;
  ledger->Read([&](const ledger::ClusterView& view) {
    node_frag.assign(view.node_slot_count(), 0.0);
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const ledger::NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      node_frag[n] = scheduler::NodeFragMilli(
          scheduler::NodeStateOf(view, node), workload);
      frag += node_frag[n];
    }
  });

  SeedRun run;
  run.seed = seed;
  run.samples.reserve(order.size());
  // The empty cluster before the first arrival, so every x has a value.
  Sample s;
  s.idle_milli = capacity;
  s.frag_milli = frag;
  run.samples.push_back(s);
  std::chrono::steady_clock::duration placing{};
  for (std::size_t i : order) {
    const TracePod& pod = pods[i];
    s.arrived_milli += pod.total_gpu_milli();
    // The requests to try, in order (one without MIG).
    std::vector<ledger::PlacementRequest> requests;
    if (!options.mig.enabled()) {
      requests.push_back(ToRequest(pod));
    } else {
      std::optional<ledger::PlacementRequest> mig =
          ToMigRequest(pod, options.mig);
      std::optional<ledger::PlacementRequest> plain =
          ToPlainRequest(pod, options.mig);
      if (pod.is_share()) std::swap(mig, plain);  // MIG first
      for (auto* r : {&plain, &mig}) {
        if (r->has_value()) requests.push_back(**r);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    ledger::PlacementResult result;
    std::int64_t charged = 0;
    for (const ledger::PlacementRequest& request : requests) {
      result = ledger->Place(request, *policy);
      if (result.outcome == ledger::PlacementOutcome::kInvalid) break;
      if (result.placed()) {
        // A slice on a GPU in MIG mode is charged its partition.
        charged = request.kind == ledger::RequestKind::kSlice
                      ? result.allocation.memory_mib / kSimMibPerMilli
                      : std::int64_t{request.gpu_count} * kMilliPerGpu;
        if (!options.mig.enabled()) charged = pod.total_gpu_milli();
        break;
      }
    }
    placing += std::chrono::steady_clock::now() - start;
    if (requests.empty())
      result.outcome = ledger::PlacementOutcome::kInfeasible;
    if (result.outcome == ledger::PlacementOutcome::kInvalid) {
      return Status::Internal("task " + pod.name + ": " + result.message);
    }
    if (result.placed()) {
      ++run.placed;
      s.allocated_milli += charged;
      s.idle_milli -= charged;
      const NodeId node = result.allocation.node;
      ledger->Read([&](const ledger::ClusterView& view) {
        const double updated = scheduler::NodeFragMilli(
            scheduler::NodeStateOf(view, view.node(node)), workload);
        frag += updated - node_frag[node.value()];
        node_frag[node.value()] = updated;
      });
    } else {
      ++run.failed;
    }
    s.frag_milli = frag;
    run.samples.push_back(s);
  }
  run.placement_seconds = std::chrono::duration<double>(placing).count();
  return run;
}

Stat Summarise(std::vector<double> values) {
  Stat out;
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, values.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    return values[lo] + (values[hi] - values[lo]) * frac;
  };
  out.median = at(0.5);
  out.p25 = at(0.25);
  out.p75 = at(0.75);
  return out;
}

std::vector<Point> Aggregate(const std::vector<SeedRun>& runs,
                             std::int64_t capacity_milli, int max_x) {
  const double capacity = static_cast<double>(capacity_milli);
  std::vector<std::vector<double>> unallocated, amount, ratio;
  for (const SeedRun& run : runs) {
    unallocated.push_back(
        Discretise(run.samples, capacity_milli, max_x, [&](const Sample& s) {
          return 100.0 * static_cast<double>(s.idle_milli) / capacity;
        }));
    amount.push_back(Discretise(
        run.samples, capacity_milli, max_x,
        [&](const Sample& s) { return 100.0 * s.frag_milli / capacity; }));
    ratio.push_back(
        Discretise(run.samples, capacity_milli, max_x, [&](const Sample& s) {
          return s.idle_milli > 0
                     ? 100.0 * s.frag_milli / static_cast<double>(s.idle_milli)
                     : 0.0;
        }));
  }
  std::vector<Point> points;
  for (int x = 0; x <= max_x; ++x) {
    const auto column = [&](const std::vector<std::vector<double>>& series) {
      std::vector<double> values;
      values.reserve(series.size());
      for (const auto& s : series)
        values.push_back(s[static_cast<std::size_t>(x)]);
      return Summarise(std::move(values));
    };
    Point p;
    p.x = x;
    p.unallocated_pct = column(unallocated);
    p.frag_amount_pct = column(amount);
    p.frag_ratio_pct = column(ratio);
    points.push_back(p);
  }
  return points;
}

}  // namespace hf::sim
