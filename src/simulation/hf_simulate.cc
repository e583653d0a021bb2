// hf-simulate: runs the whole-system simulation (src/simulation) for a range
// of seeds and prints what it found. `make soak` runs it; a failure names
// the seed and step and replays exactly:
//
//   hf-simulate --seed 17 --steps 5000              # one seed
//   hf-simulate --seed 1 --seeds 200 --jobs 2       # seeds 1..200
//   hf-simulate --seed 17 --until 4312              # replay up to a step
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "common/main_guard.h"
#include "simulation/random_run.h"

namespace {

std::filesystem::path ScratchRoot() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec)) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

int Main(int argc, char** argv) {
  CLI::App app{
      "HeteroFlow whole-system simulation: the real control plane "
      "and agents on simulated GPUs, under faults"};
  std::uint64_t seed = 1;
  std::int64_t seeds = 1;
  std::int64_t steps = 5000;
  std::optional<std::int64_t> until;
  int nodes = 4;
  int jobs = 1;
  bool no_faults = false;
  bool trace = false;
  bool keep = false;
  std::string log_level = "off";
  app.add_option("--seed", seed, "The first seed");
  app.add_option("--seeds", seeds, "How many seeds, from --seed on")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps,
                 "Steps with faults per seed (settling steps come on top)")
      ->check(CLI::PositiveNumber);
  app.add_option("--until", until,
                 "Stop at this step and print the events that led there");
  app.add_option("--nodes", nodes, "Nodes per run")->check(CLI::Range(1, 16));
  app.add_option("--jobs", jobs, "Seeds run at once")->check(CLI::Range(1, 64));
  app.add_flag("--no-faults", no_faults, "The workload only");
  app.add_flag("--trace", trace, "Print the last events of every run");
  app.add_flag("--keep", keep,
               "Keep each run's scratch directory (the server's SQLite "
               "database, the agents' state)");
  app.add_option("--log", log_level,
                 "The components' own log level (off, error, warn, info)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> total_steps{0};
  std::atomic<int> failures{0};
  std::mutex out_mu;
  const auto start = std::chrono::steady_clock::now();
  const auto worker = [&] {
    for (;;) {
      const std::int64_t i = next.fetch_add(1);
      if (i >= seeds) return;
      hf::simulation::RandomRunOptions o;
      o.seed = seed + static_cast<std::uint64_t>(i);
      o.steps = steps;
      o.until = until;
      o.nodes = nodes;
      o.faults = !no_faults;
      o.keep_dir = keep;
      o.dir = ScratchRoot() / ("hf-simulate-" + std::to_string(getpid()) + "-" +
                               std::to_string(o.seed));
      const hf::simulation::RandomRunResult r = hf::simulation::RunRandom(o);
      total_steps.fetch_add(r.steps);
      std::lock_guard lock(out_mu);
      if (!r.ok) {
        ++failures;
        std::printf("seed %llu: FAILED at step %lld: %s\n",
                    static_cast<unsigned long long>(o.seed),
                    static_cast<long long>(r.violation_step),
                    r.violation.c_str());
        std::printf(
            "  replay: hf-simulate --seed %llu --steps %lld --until %lld\n",
            static_cast<unsigned long long>(o.seed),
            static_cast<long long>(steps),
            static_cast<long long>(r.violation_step));
      } else {
        std::printf(
            "seed %llu: ok, %lld steps, %.1f simulated minutes (%lld server "
            "crashes, %lld agent crashes, %lld messages lost, %lld delayed, "
            "%lld duplicated)\n",
            static_cast<unsigned long long>(o.seed),
            static_cast<long long>(r.steps), r.simulated_ms / 60000.0,
            static_cast<long long>(r.counters.server_crashes),
            static_cast<long long>(r.counters.agent_crashes),
            static_cast<long long>(r.counters.dropped),
            static_cast<long long>(r.counters.delayed),
            static_cast<long long>(r.counters.duplicated));
      }
      if (keep) std::printf("  kept %s\n", o.dir.c_str());
      if (!r.ok || trace || until) {
        for (const std::string& line : r.trace) {
          std::printf("    %s\n", line.c_str());
        }
      }
      std::fflush(stdout);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(jobs));
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "{\"seeds\": %lld, \"failures\": %d, \"steps\": %lld, \"seconds\": %.1f, "
      "\"steps_per_second\": %.0f}\n",
      static_cast<long long>(seeds), failures.load(),
      static_cast<long long>(total_steps.load()), seconds,
      total_steps.load() / std::max(seconds, 1e-9));
  return failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hf::RunMain("hf-simulate", [&] { return Main(argc, argv); });
}
