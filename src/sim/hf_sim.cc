// hf-sim: replays a cluster trace through the ledger and a placement policy
// and reports how much of the cluster can be filled before requests stop
// fitting (the experiment of experiment.h). Command line (a contract):
//   hf-sim --nodes NODES.csv --pods PODS.csv --policy NAME [--seeds 42-51]
//          [--inflate 1.3] --json OUT.json [--plot OUT.svg]
//          [--gpuspec-share 0.2] [--cpu-only-scale 2.5] [--variant-seed 1]
//          [--write-pods OUT.csv]
//   hf-sim --replay --nodes NODES.csv --pods PODS.csv --policy NAME
//          [--load 0.9] [--defrag simple|moves|consolidate] [--be-preemptible
//          true] [--hold-after S] [--max-holds N]
//          --json OUT.json
//   hf-sim --policy list
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/main_guard.h"
#include "scheduler/policy/artifact.h"
#include "scheduler/policy/registry.h"
#include "sim/experiment.h"
#include "sim/replay.h"
#include "sim/report.h"
#include "sim/sim_cluster.h"
#include "sim/trace.h"
#include "sim/trace_variant.h"

namespace {

using namespace hf;
using namespace hf::sim;

// "42-51", "42,45,50" or "7".
StatusOr<std::vector<std::uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<std::uint64_t> seeds;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t dash = part.find('-');
    try {
      std::size_t used = 0;
      if (dash == std::string::npos) {
        seeds.push_back(std::stoull(part, &used));
        if (used != part.size()) throw std::invalid_argument(part);
      } else {
        const std::string a = part.substr(0, dash), b = part.substr(dash + 1);
        std::size_t ua = 0, ub = 0;
        const auto lo = std::stoull(a, &ua), hi = std::stoull(b, &ub);
        if (ua != a.size() || ub != b.size() || lo > hi || hi - lo > 10000) {
          throw std::invalid_argument(part);
        }
        for (auto s = lo; s <= hi; ++s) seeds.push_back(s);
      }
    } catch (const std::exception&) {
      return Status::InvalidArgument(
          "'" + part + "' is not a seed or a range like 42-51", "--seeds");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (seeds.empty()) return Status::InvalidArgument("is empty", "--seeds");
  return seeds;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out.flush());
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "hf-sim: %s\n", message.c_str());
  return 2;
}

}  // namespace

static int Main(int argc, char** argv) {
  CLI::App app{
      "hf-sim: replay a GPU cluster trace (Alibaba openb CSV format) through "
      "HeteroFlow's ledger and a placement policy, and report unallocated "
      "GPU and fragmentation against the arrived GPU request, as median and "
      "25-75% range over seeds (the experiment of Weng et al., ATC'23)."};
  std::string nodes_file, pods_file, policy, seeds_text = "42-51", json_file,
                                             plot_file;
  ExperimentOptions options;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  app.add_option("--nodes", nodes_file,
                 "node list CSV: sn,cpu_milli,memory_mib,gpu,model (nodes "
                 "without GPUs are left out)");
  app.add_option("--pods", pods_file,
                 "task list CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli"
                 "[,gpu_spec]");
  app.add_option("--policy", policy,
                 "placement policy; 'list' prints them, the server's default "
                 "marked with *")
      ->required();
  app.add_option("--max-scored-nodes", options.max_scored_nodes,
                 "hf-frag: nodes scored per decision (0 = every node; the "
                 "default is the server's)")
      ->capture_default_str();
  app.add_option("--seeds", seeds_text,
                 "seeds: a range 42-51, a list 42,45 or one seed")
      ->capture_default_str();
  app.add_option("--inflate", options.inflate,
                 "grow the task list by drawing tasks with replacement until "
                 "the GPU request would exceed this x capacity")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--coverage", options.coverage,
                 "share of tasks the target workload of the fragmentation "
                 "measure covers (most popular classes first)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--max-x", options.max_x, "last arrived-% point reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--json", json_file, "write the results here (JSON)");
  app.add_option("--plot", plot_file, "write a plot here (SVG)");
  app.add_option("--threads", threads, "seeds run in parallel")
      ->capture_default_str()
      ->check(CLI::Range(1u, 256u));
  VariantOptions variant;
  std::string write_pods_file;
  app.add_option("--gpuspec-share", variant.gpuspec_share,
                 "variant: constrain this share of the GPU tasks to GPU "
                 "models of the node list (0.2 = gpuspec20)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cpu-only-scale", variant.cpu_only_scale,
                 "variant: scale the CPU-only tasks' total CPU by this "
                 "(2.5 = cpu250), by dropping or cloning CPU-only tasks")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--variant-seed", variant.seed,
                 "seed of the variant's draws (the same seed gives the same "
                 "variant)")
      ->capture_default_str();
  std::string mig_models, mig_table = "A100-80GB";
  app.add_option("--mig", mig_models,
                 "MIG variant: GPU models of the node list put in MIG mode, "
                 "comma-separated (e.g. G2,G3); the ledger charges a sharing "
                 "task there the smallest MIG profile that covers it, at a "
                 "free placement");
  app.add_option("--mig-table", mig_table,
                 "MIG variant: the profile table of those GPUs")
      ->capture_default_str();
  double node_share = 1;
  app.add_option("--node-share", node_share,
                 "keep this share of the nodes, the same mix of node types "
                 "(seeded by --variant-seed)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--write-pods", write_pods_file,
                 "write the (variant) task list here as CSV");
  bool replay = false;
  ReplayOptions replay_options;
  std::string defrag;
  double defrag_rate = 1.0;
  app.add_flag("--replay", replay,
               "time replay: tasks arrive at creation_time, leave after "
               "(deletion - creation) seconds of running; FIFO with "
               "backfill; the first seed sets the node tie-breaks");
  app.add_option("--load", replay_options.load,
                 "replay: scale arrival times so the peak GPU demand is "
                 "this x capacity (0 = times as recorded)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--be-preemptible", replay_options.be_preemptible,
                 "replay: tasks of qos BE may be evicted by the defragmenter")
      ->capture_default_str();
  app.add_option("--defrag", defrag,
                 "replay: defragmenter called when tasks wait ('simple': "
                 "evictions; 'moves': planned moves; 'consolidate': moves "
                 "planned for the queue, CPU included)");
  app.add_option("--defrag-evictions-per-100", defrag_rate,
                 "replay: the defragmenter's eviction budget per 100 tasks")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--hold-after", replay_options.hold_after_s,
                 "replay: seconds a task waits for room before GPUs are held "
                 "for it, as the server's --hold-after (0 = no holds)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-holds", replay_options.max_holds,
                 "replay: tasks with GPUs held at once, as the server's "
                 "--max-holds")
      ->check(CLI::Range(1, 100000));
  app.add_option("--sample-every", replay_options.sample_every_s,
                 "replay: seconds between samples (0 = 200 samples)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (policy == "list") {
    const std::string server_default = scheduler::SimServerDefaultPolicy();
    for (const std::string& name : scheduler::SimPolicyNames()) {
      std::printf("%s%s\n", name.c_str(), name == server_default ? " *" : "");
    }
    return 0;
  }
  if (nodes_file.empty()) return Fail("--nodes is required");
  if (pods_file.empty()) return Fail("--pods is required");
  if (json_file.empty()) return Fail("--json is required");
  auto seeds = ParseSeeds(seeds_text);
  if (!seeds.ok()) return Fail(seeds.status().ToString());
  options.seeds = *seeds;

  auto nodes = ReadNodeCsv(nodes_file);
  if (!nodes.ok()) return Fail(nodes.status().message());
  auto pods = ReadPodCsv(pods_file);
  if (!pods.ok()) return Fail(pods.status().message());
  if (variant.gpuspec_share > 0 || variant.cpu_only_scale != 1) {
    auto made = MakeVariant(*nodes, *pods, variant);
    if (!made.ok()) return Fail(made.status().ToString());
    *pods = std::move(made).value();
  }
  if (!write_pods_file.empty() && !WriteFile(write_pods_file, PodCsv(*pods))) {
    return Fail("cannot write " + write_pods_file);
  }
  if (node_share < 1) *nodes = SubsetNodes(*nodes, node_share, variant.seed);
  const std::int64_t capacity = CapacityMilli(*nodes);
  if (capacity == 0) return Fail(nodes_file + ": no node has a GPU");
  if (!mig_models.empty()) {
    options.mig.table = gpu::MigTableByKey(mig_table);
    if (options.mig.table == nullptr) {
      return Fail("--mig-table: no MIG table '" + mig_table + "'");
    }
    std::set<std::string> chosen, present;
    std::stringstream in(mig_models);
    for (std::string m; std::getline(in, m, ',');) {
      if (!m.empty()) chosen.insert(m);
    }
    for (const TraceNode& n : *nodes) {
      if (n.gpu_count > 0) present.insert(n.model);
    }
    for (const std::string& m : chosen) {
      if (present.count(m) == 0) {
        return Fail("--mig: no GPU node of model '" + m + "'");
      }
      options.mig.models.push_back(m);
    }
    for (const std::string& m : present) {
      if (chosen.count(m) == 0) options.mig.plain_models.push_back(m);
    }
  }
  {  // Fail fast on an unknown policy, before any work.
    scheduler::TargetWorkload none;
    scheduler::SimPolicyContext probe;
    probe.workload = &none;
    auto made = scheduler::MakeSimPolicy(policy, probe);
    if (!made.ok()) return Fail(made.status().message());
  }

  if (replay) {
    std::unique_ptr<DefragHook> hook;
    if (defrag == "simple") {
      hook = std::make_unique<SimpleDefragmenter>(defrag_rate);
    } else if (defrag == "moves") {
      hook = std::make_unique<MovingDefragmenter>(defrag_rate);
    } else if (defrag == "consolidate") {
      hook = std::make_unique<ConsolidatingDefragmenter>(defrag_rate);
    } else if (!defrag.empty()) {
      return Fail("--defrag: unknown defragmenter '" + defrag +
                  "'; known: simple, moves, consolidate");
    }
    replay_options.seed = options.seeds.front();
    replay_options.max_scored_nodes = options.max_scored_nodes;
    replay_options.coverage = options.coverage;
    if (replay_options.sample_every_s < 0) {
      return Fail("--sample-every must not be negative");
    }
    auto run = RunReplay(*nodes, *pods, policy, replay_options, hook.get());
    if (!run.ok()) return Fail(run.status().ToString());
    if (!WriteFile(json_file, ReplayJson(*run))) {
      return Fail("cannot write " + json_file);
    }
    std::fputs(ReplayTable(*run).c_str(), stdout);
    return 0;
  }

  std::vector<scheduler::TaskClass> classes;
  classes.reserve(pods->size());
  for (const TracePod& p : *pods) classes.push_back(ToTaskClass(p));
  const scheduler::TargetWorkload workload =
      scheduler::TargetWorkload::FromTasks(classes, options.coverage);

  std::vector<SeedRun> runs(options.seeds.size());
  std::vector<Status> errors(options.seeds.size());
  std::mutex next_mu;
  std::size_t next = 0;
  const auto worker = [&]() {
    for (;;) {
      std::size_t i;
      {
        std::lock_guard lock(next_mu);
        if (next >= options.seeds.size()) return;
        i = next++;
      }
      auto run =
          RunSeed(*nodes, *pods, policy, options.seeds[i], workload, options);
      if (run.ok()) {
        runs[i] = std::move(run).value();
      } else {
        errors[i] = run.status();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::min<std::size_t>(threads, options.seeds.size());
       ++t) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) t.join();
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].ok()) {
      return Fail("seed " + std::to_string(options.seeds[i]) + ": " +
                  errors[i].ToString());
    }
  }

  ExperimentResult result;
  result.policy = policy;
  result.nodes_file = nodes_file;
  result.pods_file = pods_file;
  result.seeds = options.seeds;
  result.inflate = options.inflate;
  result.capacity_milli = capacity;
  result.points = Aggregate(runs, capacity, options.max_x);
  double seconds = 0;
  for (const SeedRun& run : runs) {
    result.attempts += run.placed + run.failed;
    result.placed += run.placed;
    seconds += run.placement_seconds;
  }
  result.decisions_per_second =
      seconds > 0 ? static_cast<double>(result.attempts) / seconds : 0;
  if (!WriteFile(json_file, ToJson(result))) {
    return Fail("cannot write " + json_file);
  }
  if (!plot_file.empty() && !WriteFile(plot_file, ToSvg(result))) {
    return Fail("cannot write " + plot_file);
  }
  const Point& at100 =
      result.points[std::min<std::size_t>(100, result.points.size() - 1)];
  std::printf(
      "%s: %zu seeds, %lld attempts, %lld placed, %.0f decisions/s; at x=%d "
      "unallocated %.2f%% (p25 %.2f, p75 %.2f)\n",
      policy.c_str(), options.seeds.size(),
      static_cast<long long>(result.attempts),
      static_cast<long long>(result.placed), result.decisions_per_second,
      at100.x, at100.unallocated_pct.median, at100.unallocated_pct.p25,
      at100.unallocated_pct.p75);
  return 0;
}

int main(int argc, char** argv) {
  return hf::RunMain("hf-sim", [&] { return Main(argc, argv); });
}
